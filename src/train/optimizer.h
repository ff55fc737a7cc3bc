// AdamW over the trainable range of a ParameterStore (kernels/optim/adamw.cuh has the update).
// State: fp32 first and second moments m, v over the trainable range
// [0, store.trainable_buffer_numel()) at the store's element offsets, and an fp32 master copy of
// the trainable weights when the store holds bf16 (the update is applied to the master and rounded
// into the bf16 weights). Only the trainable tensors are updated: frozen tensors get no state and
// the alignment padding is never touched. Weight decay applies only to entries whose ParamSpec
// has weight_decay set.
//
// ZeRO-1 (docs/distributed.md): constructed with a communicator of W ranks and a ZeroShardMap,
// the state covers this rank's shard only: the concatenation of its slice of every gradient
// bucket (m, v and the master copy are [shard numel], in the map's local offsets). step() expects
// those slices' gradients reduced over the ranks (a reduce-scatter per bucket, dist/grad_sync.h);
// the gradient norm is the square root of the all-reduced sums of squares of the shards (exact:
// the same terms, summed per slice, then over slices and ranks), each slice is updated, and the
// trainable weights are all-gathered bucket by bucket so every rank holds all of them.
// Checkpoints hold the whole state in flat order (gathered_state(), a collective) and load_state
// takes the whole state and keeps this rank's slices, so files do not depend on the bucket size
// and a run resumes on any number of ranks.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/context.h"
#include "core/parameters.h"
#include "dist/shard_map.h"
#include "ops/ops.h"

namespace attnlab {

class Communicator;

struct AdamWConfig {
  float lr = 6e-4f;  // peak lr: the base of the schedule; step() takes the scheduled value
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float weight_decay = 0.1f;  // decoupled; only on tensors with ParamSpec::weight_decay
  float grad_clip = 1.0f;     // clip the global gradient L2 norm to this; <= 0 disables clipping
  void validate() const;      // throws naming the field
};

struct StepStats {
  double grad_norm = 0.0;  // global L2 norm of the gradients before clipping
  float clip_scale = 1.f;  // factor applied to the gradients (1 when not clipped)
  bool finite = true;      // false when grad_norm is NaN/Inf: nothing was updated, clip_scale = 0
};

class AdamW {
 public:
  // The store must be finalized and live on ctx's device; m and v start at zero and the master
  // copy (bf16 stores) from the current weights.
  // zero1: the communicator to shard over (nullptr: the whole trainable range on this rank), with
  // `shards`, the map of this rank's slices (required when zero1 has several ranks; the same map
  // as the GradientSync's).
  AdamW(const ExecContext& ctx, ParameterStore& store, const AdamWConfig& config,
        Communicator* zero1 = nullptr, const ZeroShardMap* shards = nullptr);

  // One update with learning rate `lr` at 1-based optimizer step `step` (bias correction).
  // Global norm from one sum of squares over store.grads() (synchronizes on CUDA), clip factor
  // grad_clip / max(norm, grad_clip), then AdamW over each contiguous run of trainable tensors
  // that share the weight-decay flag (on CUDA all runs in one launch, from a range table built
  // at construction). A non-finite norm skips the update (see StepStats).
  StepStats step(float lr, int step);

  const AdamWConfig& config() const { return config_; }

  // Checkpoint state: "adamw.m", "adamw.v" and, for bf16 stores, "adamw.master"; each f32
  // [store.trainable_buffer_numel()] on the store's device (views of the optimizer's own memory),
  // laid out as state_layout() says. Under ZeRO-1: this rank's shards, [shard numel] each.
  std::vector<std::pair<std::string, Tensor>> state_tensors() const;
  // The whole state as state_tensors() describes it without ZeRO-1: views of the optimizer's
  // memory, or under ZeRO-1 all-gathered, bucket by bucket, into host memory in `storage` on
  // rank 0 (every rank must call it; the other ranks get an empty list).
  std::vector<std::pair<std::string, Tensor>> gathered_state(std::vector<Buffer>& storage) const;
  ParamLayout state_layout() const { return store_.trainable_layout(); }
  // Copies the whole state from tensors on any device (checked by name and dtype); under ZeRO-1
  // this rank keeps its shard. "adamw.m" and "adamw.v"
  // are required; a missing "adamw.master" is rebuilt from the current weights.
  // - This overload: state laid out as state_tensors() (same store layout), checked by length.
  void load_state(const std::vector<std::pair<std::string, Tensor>>& state);
  // - State saved with its layout (a checkpoint): refused, naming `source` and the first tensor
  //   that differs, unless layout_difference(saved, state_layout()) is empty. Only the tensors are
  //   copied, so a range that differs by its shard padding alone loads.
  void load_state(const std::vector<std::pair<std::string, Tensor>>& state,
                  const ParamLayout& saved, const std::string& source);
  // - State written before layouts were saved: packed, each trainable tensor right after the
  //   previous one in this store's order. Only the element count can be checked (the model
  //   weights, loaded strictly, check names and shapes); see docs/checkpoints.md.
  void load_packed_state(const std::vector<std::pair<std::string, Tensor>>& state,
                         const std::string& source);
  // Rebuilds the master copy from the weights; call after the weights change outside step()
  // (e.g. loading a checkpoint without optimizer state). No-op for f32 stores.
  void sync_master_from_params();
  // The master copy from f32 values of the whole trainable range (host, trainable_buffer_numel()
  // elements: finer than the bf16 weights, e.g. train.init_from's f32 source). No-op for f32
  // stores.
  void set_master(const std::vector<float>& trainable);

 private:
  struct SpanCopy {
    int64_t src = 0, dst = 0, numel = 0;  // f32 elements
  };
  void copy_state(const Tensor& dst, const Tensor& src) const;
  void copy_spans(const Tensor& dst, const Tensor& src, const std::vector<SpanCopy>& spans) const;
  // The checks common to the load_state variants, then per tensor present the copy of `spans`
  // (source elements -> the whole trainable range; under ZeRO-1 this rank's shard of them).
  void load_each(const std::vector<std::pair<std::string, Tensor>>& state,
                 const std::string& source, int64_t expected_numel,
                 const std::vector<SpanCopy>& spans);

  const ExecContext& ctx_;
  ParameterStore& store_;
  AdamWConfig config_;
  Communicator* zero1_ = nullptr;
  // The pieces of the trainable range this rank updates (one piece, all of it, without ZeRO-1).
  ZeroShardMap map_;
  // Per piece: the runs of trainable tensors with one weight-decay flag, and the tensors (padding
  // excluded: the gradient norm), clipped to the piece, offsets relative to it.
  std::vector<ops::AdamWRangeTable> piece_ranges_;
  std::vector<std::vector<ops::FlatSpan>> piece_spans_;
  std::vector<ops::FlatSpan> spans_;  // the trainable tensors, padding excluded
  // Flat range -> this rank's state (copies of its pieces).
  std::vector<SpanCopy> shard_copies() const;
  // Copies into the flat range (`spans`) composed with shard_copies(): source -> this rank's state.
  std::vector<SpanCopy> shard_of(const std::vector<SpanCopy>& spans) const;
  Buffer m_, v_, master_;
};

}  // namespace attnlab
