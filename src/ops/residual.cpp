#include "kernels/activation/residual.cuh"

#include "core/nvtx.h"
#include "ops/op_checks.h"
#include "ops/ops.h"
#include "ref/residual_ref.h"

namespace attnlab::ops {

using namespace detail;

namespace {
constexpr const char* kOp = "residual";
}

// y = a + b; y may be a or b itself.
void residual_fwd(const ExecContext& ctx, const Tensor& y, const Tensor& a, const Tensor& b) {
  NvtxRange range("residual_fwd");
  const DType dt = require_activation(kOp, "a", a, ctx);
  require_tensor(kOp, "b", b, dt, a.shape, ctx);
  require_tensor(kOp, "y", y, dt, a.shape, ctx);
  auto make = [&]<typename T>() {
    ResidualParams<T> p;
    p.a = static_cast<const T*>(a.data);
    p.b = static_cast<const T*>(b.data);
    p.y = static_cast<T*>(y.data);
    p.n = a.numel();
    return p;
  };
  run_op(ctx, dt, make, residual_fwd_ref, launch_residual_fwd<float>, launch_residual_fwd<bf16>);
}

// da += dy; db += dy; either may be empty.
void residual_bwd(const ExecContext& ctx, const Tensor& da, const Tensor& db, const Tensor& dy) {
  NvtxRange range("residual_bwd");
  const DType dt = require_activation(kOp, "dy", dy, ctx);
  if (!da.empty()) require_tensor(kOp, "da", da, dt, dy.shape, ctx);
  if (!db.empty()) require_tensor(kOp, "db", db, dt, dy.shape, ctx);
  if (da.empty() && db.empty()) return;
  auto make = [&]<typename T>() {
    ResidualParams<T> p;
    p.dy = static_cast<const T*>(dy.data);
    p.da = data_or_null<T>(da);
    p.db = data_or_null<T>(db);
    p.n = dy.numel();
    return p;
  };
  run_op(ctx, dt, make, residual_bwd_ref, launch_residual_bwd<float>, launch_residual_bwd<bf16>);
}

}  // namespace attnlab::ops
