// Dense causal attention (optionally sliding-window): softmax(q k^T / sqrt(D)) v per head.
// Saves the per-row log-sum-exp [B, H, T] for the backward; no T x T tensor on any device.
#pragma once
#include "nn/attention.h"

namespace attnlab {

class DenseAttention final : public AttentionModule {
 public:
  explicit DenseAttention(const AttentionOptions& opts);
  std::string name() const override { return "dense"; }
  void allocate(const ExecContext& ctx, const AttentionShape& s, DType dtype) override;
  void forward(const ExecContext& ctx, const ParameterStore& store, const Tensor& h,
               const Tensor& qkv, const Tensor& out, AttentionMode mode) override;
  void backward(const ExecContext& ctx, const ParameterStore& store, const Tensor& h,
                const Tensor& qkv, const Tensor& out, const Tensor& dout, const Tensor& dqkv,
                const Tensor& dh) override;
  void decode(const ExecContext& ctx, const ParameterStore& store, const Tensor& h,
              const Tensor& qkv, const KVCacheView& cache, int pos, const Tensor& out) override;
  size_t saved_bytes(const AttentionShape& s, DType dtype) const override;

 private:
  AttentionShape shape_;
  Buffer lse_buf_;
  Tensor lse_;  // [B, H, T] f32 of the last forward (its B, T may be below the allocated ones)
};

}  // namespace attnlab
