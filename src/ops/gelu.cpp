#include "kernels/activation/gelu.cuh"

#include "core/nvtx.h"
#include "ops/op_checks.h"
#include "ops/ops.h"
#include "ref/gelu_ref.h"

namespace attnlab::ops {

using namespace detail;

namespace {
constexpr const char* kOp = "gelu";
}

void gelu_fwd(const ExecContext& ctx, const Tensor& y, const Tensor& x) {
  NvtxRange range("gelu_fwd");
  const DType dt = require_activation(kOp, "x", x, ctx);
  require_tensor(kOp, "y", y, dt, x.shape, ctx);
  auto make = [&]<typename T>() {
    GeluParams<T> p;
    p.x = static_cast<const T*>(x.data);
    p.y = static_cast<T*>(y.data);
    p.n = x.numel();
    return p;
  };
  run_op(ctx, dt, make, gelu_fwd_ref, launch_gelu_fwd<float>, launch_gelu_fwd<bf16>);
}

// dx is written and may be the dy tensor itself.
void gelu_bwd(const ExecContext& ctx, const Tensor& dx, const Tensor& dy, const Tensor& x) {
  NvtxRange range("gelu_bwd");
  const DType dt = require_activation(kOp, "x", x, ctx);
  require_tensor(kOp, "dy", dy, dt, x.shape, ctx);
  require_tensor(kOp, "dx", dx, dt, x.shape, ctx);
  auto make = [&]<typename T>() {
    GeluParams<T> p;
    p.x = static_cast<const T*>(x.data);
    p.dy = static_cast<const T*>(dy.data);
    p.dx = static_cast<T*>(dx.data);
    p.n = x.numel();
    return p;
  };
  run_op(ctx, dt, make, gelu_bwd_ref, launch_gelu_bwd<float>, launch_gelu_bwd<bf16>);
}

}  // namespace attnlab::ops
