// KVCache: the decode state of every layer for incremental decoding, plus the activations of the
// decoding forward (GPT::prefill / GPT::decode_step in model/gpt_decode.cpp).
//
// Each layer's state is made by its attention module (AttentionModule::make_cache: dense keeps K/V
// [B, n_kv_head, max_T, D]; other variants keep what they need) on the context's device in the
// model dtype. length() tokens of each sequence are cached (all B sequences advance together).
// When the cache is full (length() == max_T) decode_step refuses; the caller slides the context by
// re-prefilling a shorter suffix (generate() keeps the last block_size / 2 tokens).
//
// The decoding activations (scratch, and the attention modules' chunk scratch shared by every
// layer) are sized for the largest chunk run or reserved so far (GPT::reserve_decode), not for
// max_T: a prefill of T tokens takes B x T rows, a decode step B. A cache made for a long context
// (a 128K model) costs its K/V, not 128K rows of activations, until a prompt that long.
#pragma once
#include <memory>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"
#include "nn/attention.h"

namespace attnlab {

class KVCache {
 public:
  KVCache() = default;
  // Takes the layers' states; the decoding activations are allocated by scratch_for.
  KVCache(const ExecContext& ctx, std::vector<std::unique_ptr<AttentionCache>> layers, int B,
          int max_T, DType dtype);

  AttentionCache& layer(int l) const;
  int n_layer() const { return int(layers_.size()); }
  int batch() const { return B_; }
  int max_len() const { return max_T_; }
  int length() const { return length_; }
  int free_positions() const { return max_T_ - length_; }
  DType dtype() const { return dtype_; }
  Device device() const { return scratch_.device(); }
  bool empty() const { return layers_.empty(); }
  // Forgets the cached tokens (memory is kept; nothing is zeroed).
  void reset() { length_ = 0; }
  void set_length(int n);
  // Bytes of the layers' decode states (excluding scratch).
  size_t cache_bytes() const;
  // The decoding activations, at least `bytes` (the model carves a chunk's; GrowingBuffer).
  const Buffer& scratch_for(size_t bytes) { return scratch_.at_least(bytes); }
  size_t scratch_bytes() const { return scratch_.bytes(); }
  // The attention modules' chunk scratch (AttentionInputs::scratch), one for every layer.
  GrowingBuffer& attention_scratch() { return attention_scratch_; }
  size_t attention_scratch_bytes() const { return attention_scratch_.bytes(); }

 private:
  std::vector<std::unique_ptr<AttentionCache>> layers_;
  int B_ = 0, max_T_ = 0, length_ = 0;
  DType dtype_ = DType::f32;
  GrowingBuffer scratch_;  // decoding activations of the largest chunk so far, carved by the model
  GrowingBuffer attention_scratch_;  // the attention modules' (decode_scratch_bytes)
};

}  // namespace attnlab
