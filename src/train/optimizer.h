// AdamW over the trainable range of a ParameterStore (kernels/optim/adamw.cuh has the update).
// State: fp32 first and second moments m, v over the trainable range [0, num_trainable), and an
// fp32 master copy of the trainable weights when the store holds bf16 (the update is applied to
// the master and rounded into the bf16 weights). Frozen tensors get no state and are never
// touched. Weight decay applies only to entries whose ParamSpec has weight_decay set.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/context.h"
#include "core/parameters.h"
#include "ops/ops.h"

namespace attnlab {

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
  AdamW(const ExecContext& ctx, ParameterStore& store, const AdamWConfig& config);

  // One update with learning rate `lr` at 1-based optimizer step `step` (bias correction).
  // Global norm from one sum of squares over store.grads() (synchronizes on CUDA), clip factor
  // grad_clip / max(norm, grad_clip), then AdamW over each contiguous run of trainable tensors
  // that share the weight-decay flag (on CUDA all runs in one launch, from a range table built
  // at construction). A non-finite norm skips the update (see StepStats).
  StepStats step(float lr, int step);

  const AdamWConfig& config() const { return config_; }

  // Checkpoint state: "adamw.m", "adamw.v" and, for bf16 stores, "adamw.master"; each f32
  // [num_trainable] on the store's device (views of the optimizer's own memory).
  std::vector<std::pair<std::string, Tensor>> state_tensors() const;
  // Copies state from tensors on any device (checked by name, dtype and element count). "adamw.m"
  // and "adamw.v" are required; a missing "adamw.master" is rebuilt from the current weights.
  void load_state(const std::vector<std::pair<std::string, Tensor>>& state);
  // Rebuilds the master copy from the weights; call after the weights change outside step()
  // (e.g. loading a checkpoint without optimizer state). No-op for f32 stores.
  void sync_master_from_params();

 private:
  void copy_state(const Tensor& dst, const Tensor& src) const;

  const ExecContext& ctx_;
  ParameterStore& store_;
  AdamWConfig config_;
  ops::AdamWRangeTable ranges_;  // runs of trainable tensors with one weight-decay flag
  Buffer m_, v_, master_;
};

}  // namespace attnlab
