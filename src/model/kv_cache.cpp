#include "model/kv_cache.h"

#include "core/error.h"

namespace attnlab {

KVCache::KVCache(const ExecContext& ctx, std::vector<std::unique_ptr<AttentionCache>> layers, int B,
                 int max_T, DType dtype)
    : layers_(std::move(layers)),
      B_(B),
      max_T_(max_T),
      dtype_(dtype),
      scratch_(ctx.device),
      attention_scratch_(ctx.device) {
  ATTN_REQUIRE(!layers_.empty() && B >= 1 && max_T >= 1,
               "KV cache: layers, batch and length must be >= 1 (got %d, %d, %d)",
               int(layers_.size()), B, max_T);
}

AttentionCache& KVCache::layer(int l) const {
  ATTN_ASSERT(l >= 0 && l < n_layer());
  return *layers_[size_t(l)];
}

size_t KVCache::cache_bytes() const {
  size_t n = 0;
  for (auto& l : layers_) n += l->bytes();
  return n;
}

void KVCache::set_length(int n) {
  ATTN_REQUIRE(n >= 0 && n <= max_T_, "KV cache: length %d outside [0, %d]", n, max_T_);
  length_ = n;
}

}  // namespace attnlab
