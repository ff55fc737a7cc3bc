// Sparse Feature Attention (docs/sfa.md): each head's q and k keep their k largest-magnitude
// coordinates (ties: lower index), and attention is dense causal softmax(Q~ K~^T / sqrt(D)) V on
// those sparse vectors; V stays dense. Backward straight-through: dq, dk on the selected
// coordinates only (the mask is locally constant), dv dense. No parameters.
// Training and eval paths (attention.sfa.kernel, sfa_use_flash): masked_dense, the reference path
// (ops/sfa_ops.h: q, k sparsified into a copy of qkv, then the dense attention kernels; saved: the
// sparsified copy and lse), or flash (FlashSFA: the sparse form q/k idx + val and lse saved).
// Distillation (attention.sfa.distill = lambda > 0, train mode only): the dense teacher's output O
// on the same q, k, v (no gradient through it) and the lambda * mean over layers and heads
// (and tokens) of ||O~_h - O_h||^2: each layer adds (lambda D / n_layer) * mean((O~ - O)^2) over
// the elements of its [B, T, n_head * D] output to the AuxLossSink (scale given at forward); the
// backward adds scale * (lambda D / n_layer) * 2 (O~ - O) / n to dO~.
// Decode: SfaKVCache holds k~ as values + indices and dense V.
#pragma once
#include "nn/attention.h"

namespace attnlab {

// attention.sfa.k resolved for a head dim: 0 -> (head_dim + 7) / 8; throws unless 1 <= k <= D.
int sfa_resolve_k(const SfaOptions& o, int head_dim);

// attention.sfa.kernel auto is the masked-dense path at every length: on the H200 FlashSFA was
// 1.9-7x slower forward+backward than it at T = 4K-64K (docs/performance_variants.md), so flash
// runs only when asked for.

// Whether a forward of T tokens runs FlashSFA; kernel flash where it does not run (CUDA other than
// bf16 with head dim 64 or 128) is an error naming the key.
bool sfa_use_flash(SfaOptions::Kernel kernel, const ExecContext& ctx, DType dtype, int head_dim);

class SfaAttention final : public AttentionModule {
 public:
  explicit SfaAttention(const AttentionOptions& opts);
  std::string name() const override { return "sfa"; }
  void allocate(const ExecContext& ctx, const AttentionShape& s, DType dtype) override;
  void forward(const ExecContext& ctx, const AttentionInputs& in, const Tensor& out) override;
  void backward(const ExecContext& ctx, const AttentionInputs& in, const Tensor& out,
                const Tensor& dout, const Tensor& dqkv, const Tensor& dh) override;
  std::unique_ptr<AttentionCache> make_cache(const ExecContext& ctx, int B, int max_T,
                                             const QKVLayout& layout, DType dtype) const override;
  size_t decode_scratch_bytes(const ExecContext& ctx, int B, int T, int pos,
                              const QKVLayout& layout, DType dtype) const override;
  size_t saved_bytes(const AttentionShape& s, DType dtype) const override;
  // "sfa k 2 of 16 (masked-dense path)": the resolved k and the path (attention.sfa.kernel).
  std::string eval_mode() const override;
  // Head dim past the KV cache's one-byte coordinates: trains and evaluates, cannot generate.
  std::vector<std::string> config_warnings(int64_t T) const override;
  // The weight of this layer's mean((O~ - O)^2) over elements (the class comment); after allocate.
  float distill_weight() const {
    return opts_.distill * float(shape_.layout.head_dim) / float(n_layer_);
  }

 private:
  struct Views;  // the saved state of a [B, T] forward
  Views views(const Buffer* buf, const QKVLayout& l, DType dt, int64_t B, int64_t T, bool flash,
              size_t* used) const;
  size_t state_bytes(const AttentionShape& s, DType dtype) const;
  bool distills() const { return opts_.distill > 0.f; }

  SfaOptions opts_;
  int n_layer_ = 1;
  int k_ = 0;
  AttentionShape shape_;
  DType dtype_ = DType::f32;
  Buffer buf_;
  int64_t last_B_ = 0, last_T_ = 0;
  bool last_distilled_ = false;
  bool last_flash_ = false;  // the last forward ran FlashSFA  // the last forward computed the
                             // teacher (train, lambda > 0)
};

// Decode state: k~ of the cached positions as k_idx (u8) + k_val, and dense v, all
// [B, n_kv_head, max_T, *]. A chunk's q~ (and a prefill's masked q~, k~, v) go in the layers'
// shared scratch (decode_scratch_bytes).
class SfaKVCache final : public AttentionCache {
 public:
  SfaKVCache(const ExecContext& ctx, int B, int max_T, const QKVLayout& layout, DType dtype, int k);
  size_t bytes() const override { return buf_.bytes(); }
  std::string decode_mode() const override;
  // Cache bytes per token and layer (k~ indices and values, dense v; not the chunk scratch):
  // n_kv_head * (k * (1 + dtype size) + D * dtype size), vs n_kv_head * 2 D * dtype size dense
  // (the indices are one byte: head dim <= 256).
  size_t bytes_per_token() const { return bytes_per_token_; }
  int k = 0;
  Tensor k_idx, k_val, v;  // [B, n_kv_head, max_T, k | k | D]; k_idx u8

 private:
  Buffer buf_;
  size_t bytes_per_token_ = 0;
};

}  // namespace attnlab
