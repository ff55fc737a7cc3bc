#include "kernels/norm/layernorm.cuh"

#include "core/nvtx.h"
#include "ops/op_checks.h"
#include "ops/ops.h"
#include "ref/layernorm_ref.h"

namespace attnlab::ops {

using namespace detail;

namespace {
constexpr const char* kOp = "layernorm";

// Checks the per-row statistics and the per-column parameters; returns the number of rows.
int64_t check_common(const ExecContext& ctx, DType dt, const Tensor& x, const Tensor& gamma,
                     const Tensor& mean, const Tensor& rstd) {
  const int64_t C = x.dim(-1);
  ATTN_REQUIRE(C > 0, "layernorm: x must have a non-empty last dimension, got %s", x.str().c_str());
  const int64_t rows = x.numel() / C;
  require_tensor(kOp, "gamma", gamma, dt, Shape{C}, ctx);
  require_numel(kOp, "mean", mean, DType::f32, rows, ctx);
  require_numel(kOp, "rstd", rstd, DType::f32, rows, ctx);
  return rows;
}
}  // namespace

void layernorm_fwd(const ExecContext& ctx, const Tensor& y, const Tensor& mean, const Tensor& rstd,
                   const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps) {
  NvtxRange range("layernorm_fwd");
  const DType dt = require_activation(kOp, "x", x, ctx);
  const int64_t rows = check_common(ctx, dt, x, gamma, mean, rstd);
  if (!beta.empty()) require_tensor(kOp, "beta", beta, dt, gamma.shape, ctx);  // empty: no bias
  require_tensor(kOp, "y", y, dt, x.shape, ctx);
  ATTN_REQUIRE(eps > 0.f, "layernorm: eps must be > 0, got %g", double(eps));
  auto make = [&]<typename T>() {
    LayerNormParams<T> p;
    p.x = static_cast<const T*>(x.data);
    p.gamma = static_cast<const T*>(gamma.data);
    p.beta = data_or_null<const T>(beta);
    p.y = static_cast<T*>(y.data);
    p.mean = static_cast<float*>(mean.data);
    p.rstd = static_cast<float*>(rstd.data);
    p.rows = rows;
    p.cols = int(x.dim(-1));
    p.eps = eps;
    return p;
  };
  run_op(ctx, dt, make, layernorm_fwd_ref, launch_layernorm_fwd<float>, launch_layernorm_fwd<bf16>);
}

void layernorm_bwd(const ExecContext& ctx, const Tensor& dx, const Tensor& dgamma,
                   const Tensor& dbeta, const Tensor& dy, const Tensor& x, const Tensor& gamma,
                   const Tensor& mean, const Tensor& rstd) {
  NvtxRange range("layernorm_bwd");
  const DType dt = require_activation(kOp, "x", x, ctx);
  const int64_t rows = check_common(ctx, dt, x, gamma, mean, rstd);
  require_tensor(kOp, "dy", dy, dt, x.shape, ctx);
  require_tensor(kOp, "dx", dx, dt, x.shape, ctx);
  if (!dgamma.empty()) require_tensor(kOp, "dgamma", dgamma, dt, gamma.shape, ctx);
  if (!dbeta.empty()) require_tensor(kOp, "dbeta", dbeta, dt, gamma.shape, ctx);
  auto make = [&]<typename T>() {
    LayerNormParams<T> p;
    p.x = static_cast<const T*>(x.data);
    p.gamma = static_cast<const T*>(gamma.data);
    p.mean = static_cast<float*>(mean.data);
    p.rstd = static_cast<float*>(rstd.data);
    p.dy = static_cast<const T*>(dy.data);
    p.dx = static_cast<T*>(dx.data);
    p.dgamma = data_or_null<T>(dgamma);
    p.dbeta = data_or_null<T>(dbeta);
    p.rows = rows;
    p.cols = int(x.dim(-1));
    return p;
  };
  run_op(ctx, dt, make, layernorm_bwd_ref, launch_layernorm_bwd<float>, launch_layernorm_bwd<bf16>);
}

}  // namespace attnlab::ops
