// GradientSync: reduces the flat gradient buffer of a ParameterStore across the ranks of a
// Communicator, so that after finish() every rank holds (ZeRO 0) or its shard holds (ZeRO 1) the
// sum over ranks of the gradients. The trainer scales the loss by 1 / (valid targets of the whole
// step over all ranks), so the sum is the gradient of the global mean loss.
//
// The trainable range is cut into the buckets of a ZeroShardMap (dist/shard_map.h). ZeRO 0: each
// bucket is an all-reduce on a view of the flat buffer. ZeRO 1: each bucket is a reduce-scatter
// into this rank's slice of it (in place), and the rank's shard is the concatenation of its
// slices, as the map says (the same map the sharded AdamW uses). Buckets are launched from the
// top of the buffer down as the backward finishes layers (layer_done, called by GPT's backward
// hook): a bucket is launched once every gradient in it is final. Parameters are laid out in
// declaration order (wte, wpe, h.0 ... h.L-1, ln_f, lm_head), and the backward runs from the head
// down, so after layer l every trainable tensor at or above layer l's lowest offset is final;
// this is checked from the store's names at construction (a layer for which it does not hold
// launches nothing early). finish() launches what is left. On the GPU the buckets run on the
// communicator's stream while the backward continues; on the CPU (mpi) each blocks.
//
// Overlap (docs/distributed.md): with several ranks each step records the buckets' start and end
// on the stream they run on, when the backward's last kernel finished and when the optimizer could
// start (Communicator::begin_timeline); overlap() reads them after the optimizer step.
#pragma once
#include <cstdint>
#include <vector>

#include "core/parameters.h"
#include "dist/communicator.h"
#include "dist/shard_map.h"

namespace attnlab {

// One step's gradient communication, in milliseconds.
struct OverlapReport {
  bool valid = false;             // false: nothing was communicated (one rank)
  std::vector<double> bucket_ms;  // each bucket's collective, in launch order (top down)
  double comm_ms = 0.0;           // their sum
  // Communication not hidden behind the backward: from the backward's last kernel to when the
  // optimizer could start (every bucket done); for blocking backends (mpi) all of comm_ms, since
  // each bucket stalled the backward.
  double exposed_ms = 0.0;
  double backward_end_ms = 0.0, optimizer_ready_ms = 0.0;  // from the last micro-batch's start
};

class GradientSync {
 public:
  // map: the buckets (and under ZeRO 1 this rank's shard); built for comm's world size and rank.
  GradientSync(Communicator& comm, const ParameterStore& store, const ZeroShardMap& map, int zero);

  // Arms the hook for the step's last micro-batch (earlier micro-batches only accumulate) and,
  // with several ranks, starts the step's timeline.
  void begin_last_backward();
  void layer_done(int layer);  // from GPT's backward hook; no-op unless armed
  void finish();               // the rest; the compute stream then waits for every collective
  // The timeline of the step since begin_last_backward(); call after the work finished (after the
  // optimizer step, which synchronises).
  OverlapReport overlap();

  int num_buckets() const { return int(map_.buckets().size()); }
  int buckets_launched_early() const { return launched_early_; }  // tests: the overlap happened

 private:
  void launch_down_to(int64_t ready_from);

  Communicator& comm_;
  const ParameterStore& store_;
  ZeroShardMap map_;
  int zero_;
  std::vector<int64_t> layer_ready_;  // per layer: lowest final offset after it; -1: none
  int next_ = 0;                      // buckets [next_..] launched; from the top: count down
  bool armed_ = false, timing_ = false;
  int launched_early_ = 0;
};

}  // namespace attnlab
