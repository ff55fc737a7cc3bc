#include "kernels/position/rope.cuh"

#include <cmath>
#include <cstdint>

#include "core/nvtx.h"
#include "ops/op_checks.h"
#include "ops/ops.h"
#include "ref/rope_ref.h"

namespace attnlab::ops {

using namespace detail;

namespace {
constexpr const char* kOp = "rope";

// Checks the packed qkv (named `name`: "qkv" or "dqkv"), the layout, pos, theta and the scaling;
// returns the activation dtype.
DType check_rope(const ExecContext& ctx, const char* name, const Tensor& qkv, const QKVLayout& l,
                 int pos, float theta, const RopeScaling& sc) {
  // (the head dim's own requirements first: an odd one also makes the width a wrong guess)
  const int D = l.head_dim;
  ATTN_REQUIRE(D <= 0 || D % 2 == 0,
               "rope: head dim must be even (dims i and i + D/2 rotate together), got %d", D);
  ATTN_REQUIRE(ctx.device == Device::cpu || D <= kRopeMaxHeadDim,
               "rope: head dim must be <= %d on CUDA, got %d", kRopeMaxHeadDim, D);
  const DType dt = require_packed_qkv(kOp, name, qkv, l, ctx);
  ATTN_REQUIRE(qkv.dim(1) <= INT32_MAX, "rope: %s has %lld positions; at most %d are supported",
               name, static_cast<long long>(qkv.dim(1)), INT32_MAX);
  ATTN_REQUIRE(pos >= 0, "rope: pos must be >= 0, got %d", pos);
  ATTN_REQUIRE(theta > 0.f && std::isfinite(theta), "rope: theta must be finite and > 0, got %g",
               double(theta));
  if (sc.type != RopeScalingType::none)
    ATTN_REQUIRE(std::isfinite(sc.factor) && sc.factor > 0.f,
                 "rope: the scaling factor must be finite and > 0, got %g", double(sc.factor));
  if (sc.type == RopeScalingType::llama3)
    ATTN_REQUIRE(sc.original_context > 0 && std::isfinite(sc.low_freq_factor) &&
                     std::isfinite(sc.high_freq_factor) && sc.low_freq_factor > 0.f &&
                     sc.high_freq_factor > sc.low_freq_factor,
                 "rope: llama3 scaling needs original_context > 0 and 0 < low_freq_factor < "
                 "high_freq_factor, got %d, %g, %g",
                 sc.original_context, double(sc.low_freq_factor), double(sc.high_freq_factor));
  return dt;
}

void run_rope(const ExecContext& ctx, DType dt, const Tensor& qkv, const QKVLayout& l, int pos,
              float theta, const RopeScaling& scaling, bool inverse) {
  auto make = [&]<typename T>() {
    RopeParams<T> p;
    p.qkv = static_cast<T*>(qkv.data);
    p.tokens = qkv.dim(0) * qkv.dim(1);
    p.seq_len = int(qkv.dim(1));
    p.width = l.width();
    p.heads = l.n_head + l.n_kv_head;
    p.head_dim = l.head_dim;
    p.pos = pos;
    p.theta = theta;
    p.scaling = scaling;
    return p;
  };
  if (inverse) {
    run_op(ctx, dt, make, rope_bwd_ref, launch_rope_bwd<float>, launch_rope_bwd<bf16>);
  } else {
    run_op(ctx, dt, make, rope_fwd_ref, launch_rope_fwd<float>, launch_rope_fwd<bf16>);
  }
}
}  // namespace

void rope_fwd(const ExecContext& ctx, const Tensor& qkv, const QKVLayout& layout, int pos,
              float theta, const RopeScaling& scaling) {
  NvtxRange range("rope_fwd");
  const DType dt = check_rope(ctx, "qkv", qkv, layout, pos, theta, scaling);
  run_rope(ctx, dt, qkv, layout, pos, theta, scaling, false);
}

// The gradient through a rotation is the inverse rotation, applied to dq and dk in place.
void rope_bwd(const ExecContext& ctx, const Tensor& dqkv, const QKVLayout& layout, int pos,
              float theta, const RopeScaling& scaling) {
  NvtxRange range("rope_bwd");
  const DType dt = check_rope(ctx, "dqkv", dqkv, layout, pos, theta, scaling);
  run_rope(ctx, dt, dqkv, layout, pos, theta, scaling, true);
}

}  // namespace attnlab::ops
