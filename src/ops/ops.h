// Host ops: the user-facing entry points the model calls. Each op checks its tensors (device,
// dtype, shape) with a clear message, builds the kernel params struct (kernels/<family>/<op>.cuh)
// and runs the CPU reference (src/ref/) or the CUDA kernel. CPU supports f32; CUDA f32 and bf16.
// Contracts (what is written = and what is accumulated +=) are those of the kernel headers.
// An empty Tensor (data == nullptr) marks an optional output that is skipped.
#pragma once
#include <vector>

#include "core/context.h"
#include "core/tensor.h"
#include "kernels/position/rope_scaling.h"
#include "ops/qkv_layout.h"

namespace attnlab::ops {

// tokens [B,T] i32; wte [Vp,C]; wpe [maxT,C]; out [B,T,C]
void embedding_fwd(const ExecContext& ctx, const Tensor& out, const Tensor& tokens,
                   const Tensor& wte, const Tensor& wpe);
void embedding_bwd(const ExecContext& ctx, const Tensor& dwte, const Tensor& dwpe,
                   const Tensor& dout, const Tensor& tokens);

// x, y [N,C]; gamma, beta [C]; mean, rstd [N] f32. beta may be empty (no bias): the backward
// never reads beta, and an empty dbeta is skipped.
void layernorm_fwd(const ExecContext& ctx, const Tensor& y, const Tensor& mean, const Tensor& rstd,
                   const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps = 1e-5f);
void layernorm_bwd(const ExecContext& ctx, const Tensor& dx, const Tensor& dgamma,
                   const Tensor& dbeta, const Tensor& dy, const Tensor& x, const Tensor& gamma,
                   const Tensor& mean, const Tensor& rstd);

// RMSNorm (LLaMA; kernels/norm/rmsnorm.cuh): y = x * rstd * gamma, rstd = 1 / sqrt(mean_c(x^2) +
// eps). x, y, dy, dx [N,C]; gamma [C]; rstd [N] f32 (written, the backward's input). Backward: dx
// accumulated (+=, the residual stream's gradient, as layernorm_bwd); dgamma accumulated (+=),
// empty = frozen.
void rmsnorm_fwd(const ExecContext& ctx, const Tensor& y, const Tensor& rstd, const Tensor& x,
                 const Tensor& gamma, float eps);
void rmsnorm_bwd(const ExecContext& ctx, const Tensor& dx, const Tensor& dgamma, const Tensor& dy,
                 const Tensor& x, const Tensor& gamma, const Tensor& rstd);

// SwiGLU (LLaMA's MLP; kernels/activation/swiglu.cuh): pre [N,2F] holds the gate projection in
// columns [0,F) and the up projection in [F,2F); y [N,F] = silu(gate) * up (written). Backward:
// dpre [N,2F] written (=) from dy [N,F] and pre.
void swiglu_fwd(const ExecContext& ctx, const Tensor& y, const Tensor& pre);
void swiglu_bwd(const ExecContext& ctx, const Tensor& dpre, const Tensor& dy, const Tensor& pre);

// Rotary position embedding (kernels/position/rope.cuh), in place on the q and k heads of a
// packed qkv [B, T, layout.width()] (v untouched), Hugging Face's rotate_half convention: within
// each head, dims i and i + D/2 (i < D/2) are rotated by the angle (pos + t) * theta^(-2i/D)
// (fp32 angle, as transformers computes it; the frequency scaled by `scaling`). rope_bwd applies
// the inverse rotation to the q and k parts of dqkv in place (the gradient through the rotation).
void rope_fwd(const ExecContext& ctx, const Tensor& qkv, const QKVLayout& layout, int pos,
              float theta, const RopeScaling& scaling = {});
void rope_bwd(const ExecContext& ctx, const Tensor& dqkv, const QKVLayout& layout, int pos,
              float theta, const RopeScaling& scaling = {});

// y [N,out] = x [N,in] @ w[out,in]^T + bias[out] (+ residual [N,out], which must not be y)
// (leading dims of x/y are flattened)
void matmul_fwd(const ExecContext& ctx, const Tensor& y, const Tensor& x, const Tensor& w,
                const Tensor& bias, const Tensor& residual = Tensor());
void matmul_bwd(const ExecContext& ctx, const Tensor& dx, const Tensor& dw, const Tensor& dbias,
                const Tensor& dy, const Tensor& x, const Tensor& w, bool accumulate_dx = false);
// Linear + GELU: pre = x @ w^T + bias, y = gelu(pre); both written (pre is the backward's input).
void matmul_gelu_fwd(const ExecContext& ctx, const Tensor& y, const Tensor& pre, const Tensor& x,
                     const Tensor& w, const Tensor& bias);
// matmul_bwd of a linear layer whose input x = gelu(pre): dx = (dy @ w) * gelu'(pre) is the
// gradient of pre (written); dw, dbias accumulated as in matmul_bwd. dx may be empty (skipped).
void matmul_dgelu_bwd(const ExecContext& ctx, const Tensor& dx, const Tensor& dw,
                      const Tensor& dbias, const Tensor& dy, const Tensor& x, const Tensor& w,
                      const Tensor& pre);

// Scaled products without bias (LoRA's low-rank branch, nn/lora.h): y [N,out] (=, or += with
// accumulate) scale * x [N,in] @ w[out,in]^T. Backward: dx (=, or += with accumulate_dx) scale *
// dy @ w; dw += scale * dy^T @ x; dx or dw may be empty (skipped).
void matmul_scaled_fwd(const ExecContext& ctx, const Tensor& y, const Tensor& x, const Tensor& w,
                       float scale, bool accumulate);
void matmul_scaled_bwd(const ExecContext& ctx, const Tensor& dx, const Tensor& dw, const Tensor& dy,
                       const Tensor& x, const Tensor& w, float scale, bool accumulate_dx);

void gelu_fwd(const ExecContext& ctx, const Tensor& y, const Tensor& x);
void gelu_bwd(const ExecContext& ctx, const Tensor& dx, const Tensor& dy, const Tensor& x);

void residual_fwd(const ExecContext& ctx, const Tensor& y, const Tensor& a, const Tensor& b);
void residual_bwd(const ExecContext& ctx, const Tensor& da, const Tensor& db, const Tensor& dy);

// Dense causal attention (kernels/attention/attention.cuh).
// qkv [B, T, layout.width()] packed per QKVLayout; out [B, T, n_head*D]; lse [B, n_head, T] f32.
// window: 0 = full causal, else key s visible from query t iff t - window < s <= t.
void attention_fwd(const ExecContext& ctx, const Tensor& out, const Tensor& lse, const Tensor& qkv,
                   const QKVLayout& layout, int window = 0);
// dqkv [B, T, layout.width()] written (=) in the layout of qkv; out, lse from attention_fwd.
void attention_bwd(const ExecContext& ctx, const Tensor& dqkv, const Tensor& dout,
                   const Tensor& qkv, const Tensor& out, const Tensor& lse, const QKVLayout& layout,
                   int window = 0);

// logits [N,Vp]; targets [N] i32; losses [N] f32. V = real vocab (columns >= V masked).
void crossentropy_fwd(const ExecContext& ctx, const Tensor& losses, const Tensor& logits,
                      const Tensor& targets, int V, int ignore_index);
// Writes losses and dlogits (dlogits may be the logits tensor itself).
void crossentropy_fwd_bwd(const ExecContext& ctx, const Tensor& losses, const Tensor& dlogits,
                          const Tensor& logits, const Tensor& targets, int V, int ignore_index,
                          float dloss);
// Loss totals without a host synchronisation: totals (2 doubles in ctx's device memory) +=
// {sum of losses over rows whose target != ignore_index, number of those rows}; deterministic.
void crossentropy_loss_sum(const ExecContext& ctx, double* totals, const Tensor& losses,
                           const Tensor& targets, int ignore_index);

struct AdamWStep {
  float lr = 0.f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.f;
  float grad_scale = 1.f;
  int step = 1;
  uint32_t seed = 0;
};
// param/grad same dtype; master f32 or empty; m, v f32; all the same numel.
void adamw_update(const ExecContext& ctx, const Tensor& param, const Tensor& master,
                  const Tensor& grad, const Tensor& m, const Tensor& v, const AdamWStep& s);
// Sum of squares of a gradient tensor, deterministic, returned to the host (synchronizes on CUDA).
double sum_of_squares(const ExecContext& ctx, const Tensor& grad);
// Elements [offset, offset + numel) of a flat buffer.
struct FlatSpan {
  int64_t offset = 0, numel = 0;
};
// Sum of squares over the spans (ascending, disjoint) of a flat gradient buffer, without what lies
// between them (the parameter store's alignment padding). The CPU takes its fixed-size partial
// sums over the spans' concatenation, so the result is bit-identical to sum_of_squares of the
// packed elements wherever the spans lie. CUDA sums [first offset, last end) in one launch, so
// the elements between the spans must be zero (the store's padding is).
double sum_of_squares(const ExecContext& ctx, const Tensor& grad,
                      const std::vector<FlatSpan>& spans);

// Ranges of flat parameter buffers for the multi-tensor AdamW (one launch for all ranges on
// CUDA). Built once: the table is uploaded to the context's device at construction.
struct AdamWRangeSpec {
  int64_t offset = 0, numel = 0;  // elements into the flat buffers; numel > 0
  bool decay = false;             // apply AdamWStep::weight_decay (else 0)
  uint32_t seed = 0;              // this range's stochastic-rounding seed is AdamWStep::seed ^ seed
};
class AdamWRangeTable {
 public:
  AdamWRangeTable() = default;
  // Ranges must be disjoint; checked against the buffers' sizes at each update.
  AdamWRangeTable(const ExecContext& ctx, std::vector<AdamWRangeSpec> ranges);
  const std::vector<AdamWRangeSpec>& ranges() const { return ranges_; }
  int64_t end() const { return end_; }  // max(offset + numel): the buffers need this many elements

 private:
  friend void adamw_update_multi(const ExecContext&, const Tensor&, const Tensor&, const Tensor&,
                                 const Tensor&, const Tensor&, const AdamWRangeTable&,
                                 const AdamWStep&);
  std::vector<AdamWRangeSpec> ranges_;
  int64_t end_ = 0, num_blocks_ = 0;
  Buffer device_table_;  // AdamWRange[] (CUDA only)
};
// AdamW over every range of the table in flat buffers param/grad (same dtype), master (f32 or
// empty), m, v (f32): range r gets exactly what adamw_update on its sub-tensors would give with
// weight_decay = decay ? s.weight_decay : 0 and seed = s.seed ^ r.seed (bitwise).
void adamw_update_multi(const ExecContext& ctx, const Tensor& param, const Tensor& master,
                        const Tensor& grad, const Tensor& m, const Tensor& v,
                        const AdamWRangeTable& table, const AdamWStep& s);

}  // namespace attnlab::ops

// ---- Attention against a KV cache (kernels/attention/attention_decode.cuh) ----
namespace attnlab::ops {

// Copies the keys/values of the Tq tokens of a packed qkv [B, Tq, layout.width()] into cache
// positions pos .. pos+Tq-1 of k_cache, v_cache [B, n_kv_head, max_T, D] (same dtype as qkv).
void kv_cache_write(const ExecContext& ctx, const Tensor& k_cache, const Tensor& v_cache,
                    const Tensor& qkv, int pos, const QKVLayout& layout);
// out [B, Tq, n_head*D]: query i of qkv [B, Tq, layout.width()] (at position t = pos + i) attends
// to the cache positions s with s <= t (and t - window < s when window > 0), the rows of
// attention_fwd; the new tokens' K/V must already be in the cache (kv_cache_write).
// n_splits: split-K chunks on CUDA (0 = automatic; the CPU ignores it).
void attention_decode(const ExecContext& ctx, const Tensor& out, const Tensor& qkv,
                      const Tensor& k_cache, const Tensor& v_cache, int pos,
                      const QKVLayout& layout, int n_splits = 0, int window = 0);

}  // namespace attnlab::ops
