// GradientSync: reduces the flat gradient buffer of a ParameterStore across the ranks of a
// Communicator, so that after finish() every rank holds (ZeRO 0) or its shard holds (ZeRO 1) the
// sum over ranks of the gradients. The trainer scales the loss by 1 / (valid targets of the whole
// step over all ranks), so the sum is the gradient of the global mean loss.
//
// ZeRO 0: the trainable range is cut into buckets of bucket_elems (a multiple of 64; the last one
// shorter), each an all-reduce on a view of the flat buffer. Buckets are launched from the top of
// the buffer down as the backward finishes layers (layer_done, called by GPT's backward hook): a
// bucket is launched once every gradient in it is final. Parameters are laid out in declaration
// order (wte, wpe, h.0 ... h.L-1, ln_f, lm_head), and the backward runs from the head down, so
// after layer l every trainable tensor at or above layer l's lowest offset is final; this is
// checked from the store's names at construction (a layer for which it does not hold launches
// nothing early). finish() launches what is left. On the GPU the buckets run on the
// communicator's stream while the backward continues; on the CPU (mpi) each blocks.
// ZeRO 1: finish() runs one reduce-scatter of the whole range into this rank's shard.
#pragma once
#include <cstdint>
#include <vector>

#include "core/parameters.h"
#include "dist/communicator.h"

namespace attnlab {

class GradientSync {
 public:
  GradientSync(Communicator& comm, const ParameterStore& store, int64_t bucket_elems, int zero);

  // Arms the hook for the step's last micro-batch (earlier micro-batches only accumulate).
  void begin_last_backward();
  void layer_done(int layer);  // from GPT's backward hook; no-op unless armed
  void finish();               // the rest; the compute stream then waits for every collective

  int num_buckets() const { return int(buckets_.size()); }
  int buckets_launched_early() const { return launched_early_; }  // tests: the overlap happened

 private:
  void launch_down_to(int64_t ready_from);

  Communicator& comm_;
  const ParameterStore& store_;
  int zero_;
  struct Bucket {
    int64_t offset, numel;
  };
  std::vector<Bucket> buckets_;       // ascending offsets
  std::vector<int64_t> layer_ready_;  // per layer: lowest final offset after it; -1: none
  int next_ = 0;                      // buckets_[next_..] not launched yet, from the top: count
  bool armed_ = false;
  int launched_early_ = 0;
};

}  // namespace attnlab
