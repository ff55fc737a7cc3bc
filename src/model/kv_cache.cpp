#include "model/kv_cache.h"

#include "core/error.h"

namespace attnlab {

KVCache::KVCache(const ExecContext& ctx, int n_layer, int B, int n_kv_head, int max_T, int head_dim,
                 DType dtype, size_t scratch_bytes)
    : n_layer_(n_layer), B_(B), n_kv_head_(n_kv_head), max_T_(max_T), D_(head_dim), dtype_(dtype) {
  ATTN_REQUIRE(n_layer >= 1 && B >= 1 && n_kv_head >= 1 && max_T >= 1 && head_dim >= 1,
               "KV cache: layers, batch, heads, length and head dim must be >= 1 (got %d, %d, %d, "
               "%d, %d)",
               n_layer, B, n_kv_head, max_T, head_dim);
  const size_t per = size_t(B) * n_kv_head * max_T * head_dim * dtype_size(dtype);
  cache_ = Buffer(ctx.device, 2 * per * size_t(n_layer));
  scratch_ = Buffer(ctx.device, scratch_bytes);
}

KVCacheView KVCache::layer(int l) const {
  ATTN_ASSERT(l >= 0 && l < n_layer_);
  const Shape s{B_, n_kv_head_, max_T_, D_};
  const size_t per = size_t(s.numel()) * dtype_size(dtype_);
  return {cache_.as(dtype_, s, (2 * size_t(l)) * per),
          cache_.as(dtype_, s, (2 * size_t(l) + 1) * per)};
}

void KVCache::set_length(int n) {
  ATTN_REQUIRE(n >= 0 && n <= max_T_, "KV cache: length %d outside [0, %d]", n, max_T_);
  length_ = n;
}

}  // namespace attnlab
