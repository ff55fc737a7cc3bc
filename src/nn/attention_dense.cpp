#include "nn/attention_dense.h"

#include "ops/ops.h"

namespace attnlab {

DenseAttention::DenseAttention(const AttentionOptions& opts) {
  // The kernels support sliding windows (AttentionParams::window); the host op does not expose
  // them yet, so refuse rather than silently attend to everything.
  ATTN_REQUIRE(opts.window == 0,
               "attention.window = %d: sliding windows are not supported by "
               "'dense' yet (use 0)",
               opts.window);
}

void DenseAttention::allocate(const ExecContext& ctx, const AttentionShape& s, DType /*dtype*/) {
  shape_ = s;
  lse_buf_ = Buffer(ctx.device, size_t(s.B) * s.n_head * s.T * sizeof(float));
  lse_ = lse_buf_.as(DType::f32, Shape{s.B, s.n_head, s.T});
}

void DenseAttention::forward(const ExecContext& ctx, const ParameterStore& /*store*/,
                             const Tensor& /*h*/, const Tensor& qkv, const Tensor& out,
                             AttentionMode /*mode*/) {
  // A micro-batch may be shorter than the allocated [B, T] (eval, the last batch, generation):
  // the saved statistics take its shape, and the backward reads the same view.
  ATTN_ASSERT(qkv.dim(0) <= shape_.B && qkv.dim(1) <= shape_.T);
  lse_ = lse_buf_.as(DType::f32, Shape{qkv.dim(0), shape_.n_head, qkv.dim(1)});
  ops::attention_fwd(ctx, out, lse_, qkv, QKVLayout{shape_.n_head, shape_.n_head, shape_.head_dim});
}

void DenseAttention::backward(const ExecContext& ctx, const ParameterStore& /*store*/,
                              const Tensor& /*h*/, const Tensor& qkv, const Tensor& out,
                              const Tensor& dout, const Tensor& dqkv, const Tensor& /*dh*/) {
  ops::attention_bwd(ctx, dqkv, dout, qkv, out, lse_,
                     QKVLayout{shape_.n_head, shape_.n_head, shape_.head_dim});
}

void DenseAttention::decode(const ExecContext& ctx, const ParameterStore& /*store*/,
                            const Tensor& /*h*/, const Tensor& qkv, const KVCacheView& cache,
                            int pos, const Tensor& out) {
  // The packed qkv has as many kv heads as query heads: the cache's head count is n_head (and
  // decode does not need allocate(), which sizes the training state).
  const int n_head = int(cache.k.dim(1));
  const QKVLayout layout{n_head, n_head, int(cache.k.dim(3))};
  ops::kv_cache_write(ctx, cache.k, cache.v, qkv, pos, layout);
  ops::attention_decode(ctx, out, qkv, cache.k, cache.v, pos, layout);
}

size_t DenseAttention::saved_bytes(const AttentionShape& s, DType /*dtype*/) const {
  return size_t(s.B) * s.n_head * s.T * sizeof(float);
}

}  // namespace attnlab
