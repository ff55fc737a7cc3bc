// Dense causal attention (optionally sliding-window): softmax(q k^T / sqrt(D)) v per head, with
// grouped-query attention when n_kv_head < n_head. Saves the per-row log-sum-exp [B, H, T] for the
// backward; no T x T tensor on any device. Its decode cache holds K and V of the cached positions;
// a prefill (a chunk of several tokens at position 0) runs the training forward's kernel.
#pragma once
#include "nn/attention.h"

namespace attnlab {

class DenseAttention final : public AttentionModule {
 public:
  explicit DenseAttention(const AttentionOptions& opts);
  std::string name() const override { return "dense"; }
  void allocate(const ExecContext& ctx, const AttentionShape& s, DType dtype) override;
  void forward(const ExecContext& ctx, const AttentionInputs& in, const Tensor& out) override;
  void backward(const ExecContext& ctx, const AttentionInputs& in, const Tensor& out,
                const Tensor& dout, const Tensor& dqkv, const Tensor& dh) override;
  std::unique_ptr<AttentionCache> make_cache(const ExecContext& ctx, int B, int max_T,
                                             const QKVLayout& layout, DType dtype) const override;
  // A prefill on the forward's kernel writes its lse [B, n_head, T] f32 there (unused after).
  size_t decode_scratch_bytes(const ExecContext& ctx, int B, int T, int pos,
                              const QKVLayout& layout, DType dtype) const override;
  size_t saved_bytes(const AttentionShape& s, DType dtype) const override;

 private:
  int window_ = 0;
  AttentionShape shape_;
  Buffer lse_buf_;
  Tensor lse_;  // [B, H, T] f32 of the last forward (its B, T may be below the allocated ones)
};

// Keys and values of the cached positions: k, v [B, n_kv_head, max_T, D].
class DenseKVCache final : public AttentionCache {
 public:
  DenseKVCache(const ExecContext& ctx, int B, int max_T, const QKVLayout& layout, DType dtype);
  size_t bytes() const override { return buf_.bytes(); }
  Tensor k, v;

 private:
  Buffer buf_;
};

}  // namespace attnlab
