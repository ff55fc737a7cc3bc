// KVCache: the keys and values of every layer for incremental decoding, plus the activations of
// the decoding forward (GPT::prefill / GPT::decode_step in model/gpt_decode.cpp).
//
// Per layer: k, v [B, n_kv_head, max_T, D] on the context's device in the model dtype. length()
// tokens of each sequence are cached (all B sequences advance together). When the cache is full
// (length() == max_T, normally model.block_size) decode_step refuses; the caller slides the
// context by re-prefilling a shorter suffix (generate() keeps the last max_T / 2 tokens).
#pragma once
#include <vector>

#include "core/context.h"
#include "core/tensor.h"
#include "nn/attention.h"

namespace attnlab {

class KVCache {
 public:
  KVCache() = default;
  // Allocates the caches and `scratch_bytes` of decoding activations (GPT::make_kv_cache sizes it).
  KVCache(const ExecContext& ctx, int n_layer, int B, int n_kv_head, int max_T, int head_dim,
          DType dtype, size_t scratch_bytes);

  KVCacheView layer(int l) const;
  int n_layer() const { return n_layer_; }
  int batch() const { return B_; }
  int max_len() const { return max_T_; }
  int length() const { return length_; }
  int free_positions() const { return max_T_ - length_; }
  DType dtype() const { return dtype_; }
  Device device() const { return cache_.device(); }
  bool empty() const { return n_layer_ == 0; }
  // Forgets the cached tokens (memory is kept; nothing is zeroed).
  void reset() { length_ = 0; }
  void set_length(int n);
  // Bytes of the K/V caches (excluding scratch).
  size_t cache_bytes() const { return cache_.bytes(); }
  const Buffer& scratch() const { return scratch_; }

 private:
  int n_layer_ = 0, B_ = 0, n_kv_head_ = 0, max_T_ = 0, D_ = 0, length_ = 0;
  DType dtype_ = DType::f32;
  Buffer cache_;    // [n_layer][k|v][B, n_kv_head, max_T, D]
  Buffer scratch_;  // decoding activations, carved by gpt_decode.cpp
};

}  // namespace attnlab
