#include "kernels/norm/rmsnorm.cuh"

#include "core/nvtx.h"
#include "ops/op_checks.h"
#include "ops/ops.h"
#include "ref/rmsnorm_ref.h"

namespace attnlab::ops {

using namespace detail;

namespace {
constexpr const char* kOp = "rmsnorm";

// Checks gamma (per column) and rstd (per row); returns the number of rows (leading dims of x
// flattened).
int64_t check_common(const ExecContext& ctx, DType dt, const Tensor& x, const Tensor& gamma,
                     const Tensor& rstd) {
  const int64_t C = x.dim(-1);
  ATTN_REQUIRE(C > 0, "rmsnorm: x must have a non-empty last dimension, got %s", x.str().c_str());
  const int64_t rows = x.numel() / C;
  require_tensor(kOp, "gamma", gamma, dt, Shape{C}, ctx);
  require_numel(kOp, "rstd", rstd, DType::f32, rows, ctx);
  return rows;
}
}  // namespace

void rmsnorm_fwd(const ExecContext& ctx, const Tensor& y, const Tensor& rstd, const Tensor& x,
                 const Tensor& gamma, float eps) {
  NvtxRange range("rmsnorm_fwd");
  const DType dt = require_activation(kOp, "x", x, ctx);
  const int64_t rows = check_common(ctx, dt, x, gamma, rstd);
  require_tensor(kOp, "y", y, dt, x.shape, ctx);
  ATTN_REQUIRE(eps > 0.f, "rmsnorm: eps must be > 0, got %g", double(eps));
  auto make = [&]<typename T>() {
    RmsNormParams<T> p;
    p.x = static_cast<const T*>(x.data);
    p.gamma = static_cast<const T*>(gamma.data);
    p.y = static_cast<T*>(y.data);
    p.rstd = static_cast<float*>(rstd.data);
    p.rows = rows;
    p.cols = int(x.dim(-1));
    p.eps = eps;
    return p;
  };
  run_op(ctx, dt, make, rmsnorm_fwd_ref, launch_rmsnorm_fwd<float>, launch_rmsnorm_fwd<bf16>);
}

// dx and dgamma are accumulated (+=); an empty dgamma (frozen gamma) is skipped.
void rmsnorm_bwd(const ExecContext& ctx, const Tensor& dx, const Tensor& dgamma, const Tensor& dy,
                 const Tensor& x, const Tensor& gamma, const Tensor& rstd) {
  NvtxRange range("rmsnorm_bwd");
  const DType dt = require_activation(kOp, "x", x, ctx);
  const int64_t rows = check_common(ctx, dt, x, gamma, rstd);
  require_tensor(kOp, "dy", dy, dt, x.shape, ctx);
  require_tensor(kOp, "dx", dx, dt, x.shape, ctx);
  if (!dgamma.empty()) require_tensor(kOp, "dgamma", dgamma, dt, gamma.shape, ctx);
  auto make = [&]<typename T>() {
    RmsNormParams<T> p;
    p.x = static_cast<const T*>(x.data);
    p.gamma = static_cast<const T*>(gamma.data);
    p.rstd = static_cast<float*>(rstd.data);
    p.dy = static_cast<const T*>(dy.data);
    p.dx = static_cast<T*>(dx.data);
    p.dgamma = data_or_null<T>(dgamma);
    p.rows = rows;
    p.cols = int(x.dim(-1));
    return p;
  };
  run_op(ctx, dt, make, rmsnorm_bwd_ref, launch_rmsnorm_bwd<float>, launch_rmsnorm_bwd<bf16>);
}

}  // namespace attnlab::ops
