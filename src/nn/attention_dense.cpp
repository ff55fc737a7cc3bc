#include "nn/attention_dense.h"

#include "ops/ops.h"

namespace attnlab {

DenseAttention::DenseAttention(const AttentionOptions& opts) : window_(opts.window) {
  ATTN_REQUIRE(opts.window >= 0, "attention.window must be >= 0, got %d", opts.window);
}

void DenseAttention::allocate(const ExecContext& ctx, const AttentionShape& s, DType /*dtype*/) {
  shape_ = s;
  lse_buf_ = Buffer(ctx.device, size_t(s.B) * s.layout.n_head * s.T * sizeof(float));
  lse_ = lse_buf_.as(DType::f32, Shape{s.B, s.layout.n_head, s.T});
}

void DenseAttention::forward(const ExecContext& ctx, const AttentionInputs& in, const Tensor& out) {
  if (in.mode == AttentionMode::generate) {
    ATTN_REQUIRE(in.cache != nullptr, "dense attention: generate mode needs a decode cache");
    ATTN_ASSERT(in.scratch != nullptr);  // every chunk, as Focus and SFA: not only where it is used
    auto& cache = dynamic_cast<DenseKVCache&>(*in.cache);
    ops::kv_cache_write(ctx, cache.k, cache.v, in.qkv, in.pos, in.layout);
    const int B = int(in.qkv.dim(0)), T = int(in.qkv.dim(1));
    const size_t lse_bytes = decode_scratch_bytes(ctx, B, T, in.pos, in.layout, in.qkv.dtype);
    if (lse_bytes > 0) {  // a prefill on the forward's kernel (tensor cores on CUDA)
      const Tensor lse =
          in.scratch->at_least(lse_bytes).as(DType::f32, Shape{B, in.layout.n_head, T});
      ops::attention_fwd(ctx, out, lse, in.qkv, in.layout, window_);
    } else {  // the new rows against every cached position
      ops::attention_decode(ctx, out, in.qkv, cache.k, cache.v, in.pos, in.layout, 0, window_);
    }
    return;
  }
  // A micro-batch may be shorter than the allocated [B, T] (eval, the last batch): the saved
  // statistics take its shape, and the backward reads the same view.
  ATTN_ASSERT(in.pos == 0 && in.qkv.dim(0) <= shape_.B && in.qkv.dim(1) <= shape_.T);
  lse_ = lse_buf_.as(DType::f32, Shape{in.qkv.dim(0), in.layout.n_head, in.qkv.dim(1)});
  ops::attention_fwd(ctx, out, lse_, in.qkv, in.layout, window_);
}

void DenseAttention::backward(const ExecContext& ctx, const AttentionInputs& in, const Tensor& out,
                              const Tensor& dout, const Tensor& dqkv, const Tensor& /*dh*/) {
  ops::attention_bwd(ctx, dqkv, dout, in.qkv, out, lse_, in.layout, window_);
}

std::unique_ptr<AttentionCache> DenseAttention::make_cache(const ExecContext& ctx, int B, int max_T,
                                                           const QKVLayout& layout,
                                                           DType dtype) const {
  return std::make_unique<DenseKVCache>(ctx, B, max_T, layout, dtype);
}

size_t DenseAttention::decode_scratch_bytes(const ExecContext& ctx, int B, int T, int pos,
                                            const QKVLayout& layout, DType dtype) const {
  if (pos != 0 || T <= 1 || !prefill_on_forward(ctx.device, dtype, layout.head_dim)) return 0;
  return size_t(B) * layout.n_head * T * sizeof(float);
}

size_t DenseAttention::saved_bytes(const AttentionShape& s, DType /*dtype*/) const {
  return size_t(s.B) * s.layout.n_head * s.T * sizeof(float);
}

DenseKVCache::DenseKVCache(const ExecContext& ctx, int B, int max_T, const QKVLayout& layout,
                           DType dtype) {
  ATTN_REQUIRE(B >= 1 && max_T >= 1, "KV cache: batch and length must be >= 1 (got %d, %d)", B,
               max_T);
  const Shape s{B, layout.n_kv_head, max_T, layout.head_dim};
  const size_t per = size_t(s.numel()) * dtype_size(dtype);
  buf_ = Buffer(ctx.device, 2 * per);
  k = buf_.as(dtype, s, 0);
  v = buf_.as(dtype, s, per);
}

}  // namespace attnlab
