#include "kernels/matmul/matmul.cuh"

#include <cmath>

#include "core/nvtx.h"
#include "ops/op_checks.h"
#include "ops/ops.h"
#include "ref/matmul_ref.h"

namespace attnlab::ops {

using namespace detail;

namespace {
constexpr const char* kOp = "matmul";

// w must be [out, in] with in = the last dimension of x; returns N (rows of x).
int64_t check_weight(const ExecContext& ctx, DType dt, const Tensor& x, const Tensor& w) {
  require_present(kOp, "w", w);
  ATTN_REQUIRE(w.ndim() == 2 && w.dtype == dt && w.device == ctx.device && w.dim(1) == x.dim(-1),
               "matmul: w must be %s[out, %lld] on %s (in = last dim of x %s), got %s",
               dtype_name(dt), static_cast<long long>(x.dim(-1)), device_name(ctx.device),
               x.str().c_str(), w.str().c_str());
  ATTN_REQUIRE(w.dim(0) > 0 && w.dim(1) > 0, "matmul: w must be non-empty, got %s",
               w.str().c_str());
  return x.numel() / x.dim(-1);
}

template <typename T>
MatmulParams<T> base_params(const ExecContext& ctx, const Tensor& x, const Tensor& w, int64_t N) {
  MatmulParams<T> p;
  p.x = static_cast<const T*>(x.data);
  p.w = static_cast<const T*>(w.data);
  p.N = N;
  p.in = int(w.dim(1));
  p.out = int(w.dim(0));
  p.cublaslt = ctx.cublaslt;
  p.workspace = ctx.workspace;
  p.workspace_bytes = ctx.workspace_bytes;
  return p;
}
}  // namespace

void matmul_fwd(const ExecContext& ctx, const Tensor& y, const Tensor& x, const Tensor& w,
                const Tensor& bias, const Tensor& residual) {
  NvtxRange range("matmul_fwd");
  const DType dt = require_activation(kOp, "x", x, ctx);
  const int64_t N = check_weight(ctx, dt, x, w);
  const int64_t out = w.dim(0);
  if (!bias.empty()) require_tensor(kOp, "bias", bias, dt, Shape{out}, ctx);
  require_tensor(kOp, "y", y, dt, with_last_dim(x.shape, out), ctx);
  if (!residual.empty()) {
    require_numel(kOp, "residual", residual, dt, y.numel(), ctx);
    ATTN_REQUIRE(residual.data != y.data, "matmul: residual must not be the output y (%s)",
                 y.str().c_str());
  }
  auto make = [&]<typename T>() {
    MatmulParams<T> p = base_params<T>(ctx, x, w, N);
    p.bias = data_or_null<const T>(bias);
    p.residual = data_or_null<const T>(residual);
    p.y = static_cast<T*>(y.data);
    return p;
  };
  run_op(ctx, dt, make, matmul_fwd_ref, launch_matmul_fwd<float>, launch_matmul_fwd<bf16>);
}

void matmul_gelu_fwd(const ExecContext& ctx, const Tensor& y, const Tensor& pre, const Tensor& x,
                     const Tensor& w, const Tensor& bias) {
  NvtxRange range("matmul_gelu_fwd");
  const DType dt = require_activation(kOp, "x", x, ctx);
  const int64_t N = check_weight(ctx, dt, x, w);
  const int64_t out = w.dim(0);
  if (!bias.empty()) require_tensor(kOp, "bias", bias, dt, Shape{out}, ctx);
  require_tensor(kOp, "y", y, dt, with_last_dim(x.shape, out), ctx);
  require_tensor(kOp, "pre", pre, dt, y.shape, ctx);
  ATTN_REQUIRE(pre.data != y.data, "matmul_gelu: pre and y must be different buffers, got %s",
               y.str().c_str());
  auto make = [&]<typename T>() {
    MatmulParams<T> p = base_params<T>(ctx, x, w, N);
    p.bias = data_or_null<const T>(bias);
    p.y = static_cast<T*>(y.data);
    p.gelu_pre = static_cast<T*>(pre.data);
    return p;
  };
  run_op(ctx, dt, make, matmul_fwd_ref, launch_matmul_fwd<float>, launch_matmul_fwd<bf16>);
}

void matmul_scaled_fwd(const ExecContext& ctx, const Tensor& y, const Tensor& x, const Tensor& w,
                       float scale, bool accumulate) {
  NvtxRange range("matmul_scaled_fwd");
  const DType dt = require_activation(kOp, "x", x, ctx);
  const int64_t N = check_weight(ctx, dt, x, w);
  require_tensor(kOp, "y", y, dt, with_last_dim(x.shape, w.dim(0)), ctx);
  ATTN_REQUIRE(std::isfinite(scale), "matmul: scale must be finite, got %g", double(scale));
  auto make = [&]<typename T>() {
    MatmulParams<T> p = base_params<T>(ctx, x, w, N);
    p.y = static_cast<T*>(y.data);
    p.scale = scale;
    p.accumulate_y = accumulate;
    return p;
  };
  run_op(ctx, dt, make, matmul_fwd_ref, launch_matmul_fwd<float>, launch_matmul_fwd<bf16>);
}

namespace {
// Shared by matmul_bwd, matmul_dgelu_bwd and matmul_scaled_bwd; pre empty = no GELU.
void run_matmul_bwd(const ExecContext& ctx, const Tensor& dx, const Tensor& dw, const Tensor& dbias,
                    const Tensor& dy, const Tensor& x, const Tensor& w, bool accumulate_dx,
                    const Tensor& pre, float scale = 1.f) {
  const DType dt = require_activation(kOp, "x", x, ctx);
  const int64_t N = check_weight(ctx, dt, x, w);
  const int64_t out = w.dim(0);
  require_tensor(kOp, "dy", dy, dt, with_last_dim(x.shape, out), ctx);
  if (!dx.empty()) require_tensor(kOp, "dx", dx, dt, x.shape, ctx);
  if (!dw.empty()) require_tensor(kOp, "dw", dw, dt, w.shape, ctx);
  if (!dbias.empty()) require_tensor(kOp, "dbias", dbias, dt, Shape{out}, ctx);
  if (!pre.empty()) require_tensor(kOp, "pre", pre, dt, x.shape, ctx);
  if (dx.empty() && dw.empty() && dbias.empty()) return;
  if (ctx.matmul_counts) {
    ctx.matmul_counts->weight_grad += !dw.empty() || !dbias.empty();
    ctx.matmul_counts->data_grad += !dx.empty();
  }
  auto make = [&]<typename T>() {
    MatmulParams<T> p = base_params<T>(ctx, x, w, N);
    p.dy = static_cast<const T*>(dy.data);
    p.dx = data_or_null<T>(dx);
    p.dw = data_or_null<T>(dw);
    p.dbias = data_or_null<T>(dbias);
    p.accumulate_dx = accumulate_dx;
    p.gelu_pre = data_or_null<T>(pre);
    p.scale = scale;
    return p;
  };
  run_op(ctx, dt, make, matmul_bwd_ref, launch_matmul_bwd<float>, launch_matmul_bwd<bf16>);
}
}  // namespace

void matmul_bwd(const ExecContext& ctx, const Tensor& dx, const Tensor& dw, const Tensor& dbias,
                const Tensor& dy, const Tensor& x, const Tensor& w, bool accumulate_dx) {
  NvtxRange range("matmul_bwd");
  run_matmul_bwd(ctx, dx, dw, dbias, dy, x, w, accumulate_dx, Tensor());
}

void matmul_dgelu_bwd(const ExecContext& ctx, const Tensor& dx, const Tensor& dw,
                      const Tensor& dbias, const Tensor& dy, const Tensor& x, const Tensor& w,
                      const Tensor& pre) {
  NvtxRange range("matmul_dgelu_bwd");
  require_present(kOp, "pre", pre);
  run_matmul_bwd(ctx, dx, dw, dbias, dy, x, w, false, pre);
}

void matmul_scaled_bwd(const ExecContext& ctx, const Tensor& dx, const Tensor& dw, const Tensor& dy,
                       const Tensor& x, const Tensor& w, float scale, bool accumulate_dx) {
  NvtxRange range("matmul_scaled_bwd");
  ATTN_REQUIRE(std::isfinite(scale), "matmul: scale must be finite, got %g", double(scale));
  run_matmul_bwd(ctx, dx, dw, Tensor(), dy, x, w, accumulate_dx, Tensor(), scale);
}

}  // namespace attnlab::ops
