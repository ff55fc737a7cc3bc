// LoRA (docs/retrofit.md): a low-rank update of a frozen linear layer y = x W^T + b,
//   y = x W^T + b + s (x A^T) B^T,   s = alpha / r,
// with A [r, in] and B [out, r] of role `adapter`. A is drawn from N(0, 1 / (3 in)), the variance
// of PEFT's default kaiming_uniform(a = sqrt 5) init of lora_A (a normal draw instead of a
// uniform one: the store's initialisers are normal, zeros and ones); B is zero, so at step 0 the
// model is the base model exactly. Dropout is 0 (none is implemented).
// Saved for the backward: u = x A^T [N, r]. With dy = dL/dy:
//   dB += s dy^T u        du = s dy B        dA += du^T x        dx += du A
// Every product goes through ops::matmul_scaled_* (cuBLASLt on CUDA, the CPU reference else).
// The frozen W's weight-gradient product is the block's (skipped when W is frozen).
// Merged: W' = W + s B A gives the same y (lora_merge); the merged model has no LoRA tensors.
#pragma once
#include <string>

#include "core/context.h"
#include "core/parameters.h"

namespace attnlab {

struct LoraOptions {
  int rank = 0;  // 0: no LoRA
  float alpha = 16.f;
  bool enabled() const { return rank > 0; }
  float scale() const { return alpha / float(rank); }
};

// One LoRA on the linear layer named `linear` ("h.3.attn.c_attn"): tensors <linear>.lora_a and
// <linear>.lora_b.
class LoraBranch {
 public:
  LoraBranch(const LoraOptions& o, std::string linear, int64_t in, int64_t out);
  static std::string a_name(const std::string& linear) { return linear + ".lora_a"; }
  static std::string b_name(const std::string& linear) { return linear + ".lora_b"; }
  // Whether `name` is one of a branch's tensors (a_name or b_name of some linear layer).
  static bool is_tensor_name(const std::string& name) {
    return name.ends_with(".lora_a") || name.ends_with(".lora_b");
  }

  void declare_params(ParameterStore& store) const;
  void bind(const ParameterStore& store);
  bool trainable() const { return !da_.empty() || !db_.empty(); }

  // x [N, in], y [N, out] holding x W^T + b; u [N, r] (the block's activation, saved for the
  // backward): u = x A^T (written), y += s u B^T.
  void forward(const ExecContext& ctx, const Tensor& y, const Tensor& x, const Tensor& u) const;
  // dy [N, out]; x, u from forward; du scratch. dB, dA accumulated when trainable; dx [N, in]
  // accumulated (+=) when not empty (the block's input gradient through the branch).
  void backward(const ExecContext& ctx, const Tensor& dx, const Tensor& dy, const Tensor& x,
                const Tensor& u, const Tensor& du) const;

 private:
  LoraOptions o_;
  std::string linear_;
  int64_t in_, out_;
  Tensor a_, b_, da_, db_;
};

// The GPT-2 layers' LoRA targets and the names of their linear layers: "h.<l>.attn.c_attn" for
// the target "c_attn" (the only one).
std::string lora_linear_name(int layer, const std::string& target);

// W += sign * (alpha / r) * B A for the LoRA of `linear` in `store` (any device and dtype; on
// the host in double, rounded once to the store's dtype): sign +1 merges, -1 unmerges.
void lora_merge(const ParameterStore& store, const std::string& linear, const LoraOptions& o,
                float sign = 1.f);

}  // namespace attnlab
