#include "kernels/activation/swiglu.cuh"

#include "core/nvtx.h"
#include "ops/op_checks.h"
#include "ops/ops.h"
#include "ref/swiglu_ref.h"

namespace attnlab::ops {

using namespace detail;

namespace {
constexpr const char* kOp = "swiglu";

// pre [..., 2F] (leading dims flattened into rows); returns F.
int64_t check_pre(const Tensor& pre) {
  const int64_t two_f = pre.dim(-1);
  ATTN_REQUIRE(two_f > 0 && two_f % 2 == 0,
               "swiglu: pre's last dimension must be even and non-zero (gate | up halves), got %s",
               pre.str().c_str());
  return two_f / 2;
}
}  // namespace

void swiglu_fwd(const ExecContext& ctx, const Tensor& y, const Tensor& pre) {
  NvtxRange range("swiglu_fwd");
  const DType dt = require_activation(kOp, "pre", pre, ctx);
  const int64_t F = check_pre(pre);
  require_tensor(kOp, "y", y, dt, with_last_dim(pre.shape, F), ctx);
  auto make = [&]<typename T>() {
    SwiGluParams<T> p;
    p.pre = static_cast<const T*>(pre.data);
    p.y = static_cast<T*>(y.data);
    p.rows = pre.numel() / (2 * F);
    p.f = F;
    return p;
  };
  run_op(ctx, dt, make, swiglu_fwd_ref, launch_swiglu_fwd<float>, launch_swiglu_fwd<bf16>);
}

// dpre is written (=), both halves.
void swiglu_bwd(const ExecContext& ctx, const Tensor& dpre, const Tensor& dy, const Tensor& pre) {
  NvtxRange range("swiglu_bwd");
  const DType dt = require_activation(kOp, "pre", pre, ctx);
  const int64_t F = check_pre(pre);
  require_tensor(kOp, "dy", dy, dt, with_last_dim(pre.shape, F), ctx);
  require_tensor(kOp, "dpre", dpre, dt, pre.shape, ctx);
  ATTN_REQUIRE(dpre.data != pre.data, "swiglu: dpre must not be pre (the backward reads pre)");
  auto make = [&]<typename T>() {
    SwiGluParams<T> p;
    p.pre = static_cast<const T*>(pre.data);
    p.dy = static_cast<const T*>(dy.data);
    p.dpre = static_cast<T*>(dpre.data);
    p.rows = pre.numel() / (2 * F);
    p.f = F;
    return p;
  };
  run_op(ctx, dt, make, swiglu_bwd_ref, launch_swiglu_bwd<float>, launch_swiglu_bwd<bf16>);
}

}  // namespace attnlab::ops
