// Matmul (cuBLASLt) vs the CPU reference: fwd with and without bias; bwd dx written or accumulated,
// dw and dbias accumulated, null outputs skipped. fp32 runs without TF32, hence the tight bound.
// The fused epilogues (residual add, GELU with the pre-activation as aux output, DGELU backward)
// against the reference composition, on shapes that take the epilogue and on unaligned ones that
// take the separate-kernel fallback.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "kernels/matmul/matmul.cuh"
#include "ref/matmul_ref.h"

namespace attnlab {
namespace {

using namespace test;

template <typename T>
void check_matmul(const ExecContext& ctx, int64_t N, int in, int out, bool bias, bool acc_dx,
                  uint32_t seed) {
  const auto x = to_precision<T>(random_vector(size_t(N * in), seed));
  const auto w = to_precision<T>(random_vector(size_t(out) * in, seed + 1));
  const auto b = to_precision<T>(random_vector(size_t(out), seed + 2));
  const auto dy = to_precision<T>(random_vector(size_t(N * out), seed + 3));
  const auto dx0 = to_precision<T>(random_vector(size_t(N * in), seed + 4));
  const auto dw0 = to_precision<T>(random_vector(size_t(out) * in, seed + 5));
  const auto db0 = to_precision<T>(random_vector(size_t(out), seed + 6));
  std::vector<float> y_ref(size_t(N * out)), dx_ref = dx0, dw_ref = dw0, db_ref = db0;
  MatmulParams<float> r;
  r.x = x.data(), r.w = w.data(), r.bias = bias ? b.data() : nullptr, r.y = y_ref.data();
  r.dy = dy.data(), r.dx = dx_ref.data(), r.dw = dw_ref.data();
  r.dbias = bias ? db_ref.data() : nullptr;
  r.N = N, r.in = in, r.out = out, r.accumulate_dx = acc_dx;
  matmul_fwd_ref(r);
  matmul_bwd_ref(r);

  DeviceArray<T> dx_in(x), dw_in(w), db_in(b), ddy(dy), y(y_ref.size()), dx(dx0), dw(dw0), db(db0);
  y.poison();
  if (!acc_dx) dx.poison();
  MatmulParams<T> p;
  p.x = dx_in.ptr(), p.w = dw_in.ptr(), p.bias = bias ? db_in.ptr() : nullptr, p.y = y.ptr();
  p.dy = ddy.ptr(), p.dx = dx.ptr(), p.dw = dw.ptr(), p.dbias = bias ? db.ptr() : nullptr;
  p.N = N, p.in = in, p.out = out, p.accumulate_dx = acc_dx;
  p.cublaslt = ctx.cublaslt, p.workspace = ctx.workspace, p.workspace_bytes = ctx.workspace_bytes;
  launch_matmul_fwd<T>(p, ctx.stream);
  launch_matmul_bwd<T>(p, ctx.stream);
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-2;
  const auto name = strformat("matmul %s N=%lld in=%d out=%d%s%s", type_name<T>(), (long long)N, in,
                              out, bias ? " bias" : "", acc_dx ? " acc_dx" : "");
  EXPECT_LT(report((name + " y").c_str(), max_rel_error(y.download(), y_ref)), tol);
  EXPECT_LT(report((name + " dx").c_str(), max_rel_error(dx.download(), dx_ref)), tol);
  EXPECT_LT(report((name + " dw").c_str(), max_rel_error(dw.download(), dw_ref)), tol);
  if (bias) {
    EXPECT_LT(report((name + " dbias").c_str(), max_rel_error(db.download(), db_ref)), tol);
  }

  // Frozen weight: dw == nullptr leaves nothing else changed; dbias still accumulates.
  if (bias) {
    db.upload(db0);
    p.dx = nullptr;
    p.dw = nullptr;
    launch_matmul_bwd<T>(p, ctx.stream);
    EXPECT_LT(max_rel_error(db.download(), db_ref), tol) << name;
  }
}

TEST(MatmulCuda, MatchesReferenceF32) {
  CUDA_TEST_PREAMBLE();
  auto ctx = ExecContext::make_cuda(0);
  check_matmul<float>(*ctx, 1, 1, 1, true, false, 1);
  check_matmul<float>(*ctx, 5, 7, 3, true, true, 2);
  check_matmul<float>(*ctx, 33, 129, 65, false, false, 3);
  check_matmul<float>(*ctx, 256, 768, 2304, true, true, 4);
}

TEST(MatmulCuda, MatchesReferenceBF16) {
  CUDA_TEST_PREAMBLE();
  auto ctx = ExecContext::make_cuda(0);
  check_matmul<bf16>(*ctx, 1, 8, 8, true, false, 11);
  check_matmul<bf16>(*ctx, 5, 7, 3, true, true, 12);
  check_matmul<bf16>(*ctx, 33, 129, 65, false, false, 13);
  check_matmul<bf16>(*ctx, 256, 768, 2304, true, true, 14);
}

template <typename T>
void check_matmul_fused(const ExecContext& ctx, int64_t N, int in, int out, uint32_t seed) {
  const auto x = to_precision<T>(random_vector(size_t(N * in), seed));
  const auto w = to_precision<T>(random_vector(size_t(out) * in, seed + 1, -2.f, 2.f));
  const auto b = to_precision<T>(random_vector(size_t(out), seed + 2));
  const auto res = to_precision<T>(random_vector(size_t(N * out), seed + 3));
  const auto pre_in = to_precision<T>(random_vector(size_t(N * in), seed + 4, -3.f, 3.f));
  const auto dy = to_precision<T>(random_vector(size_t(N * out), seed + 5));
  const auto dw0 = to_precision<T>(random_vector(size_t(out) * in, seed + 6));
  const auto db0 = to_precision<T>(random_vector(size_t(out), seed + 7));
  std::vector<float> yres_ref(size_t(N * out)), ygelu_ref(yres_ref.size()),
      pre_ref(yres_ref.size());
  std::vector<float> dx_ref(size_t(N * in)), dw_ref = dw0, db_ref = db0;
  MatmulParams<float> r;
  r.x = x.data(), r.w = w.data(), r.bias = b.data(), r.N = N, r.in = in, r.out = out;
  r.residual = res.data(), r.y = yres_ref.data();
  matmul_fwd_ref(r);
  r.residual = nullptr, r.y = ygelu_ref.data(), r.gelu_pre = pre_ref.data();
  matmul_fwd_ref(r);
  // Backward of a layer whose input x = gelu(pre_in).
  r.gelu_pre = const_cast<float*>(pre_in.data());
  r.dy = dy.data(), r.dx = dx_ref.data(), r.dw = dw_ref.data(), r.dbias = db_ref.data();
  matmul_bwd_ref(r);

  DeviceArray<T> dx_in(x), dw_in(w), db_in(b), dres(res), dpre_in(pre_in), ddy(dy);
  DeviceArray<T> yres(yres_ref.size()), ygelu(yres_ref.size()), pre(yres_ref.size());
  DeviceArray<T> dx(dx_ref.size()), dw(dw0), db(db0);
  yres.poison();
  ygelu.poison();
  pre.poison();
  dx.poison();
  MatmulParams<T> p;
  p.x = dx_in.ptr(), p.w = dw_in.ptr(), p.bias = db_in.ptr(), p.N = N, p.in = in, p.out = out;
  p.cublaslt = ctx.cublaslt, p.workspace = ctx.workspace, p.workspace_bytes = ctx.workspace_bytes;
  p.residual = dres.ptr(), p.y = yres.ptr();
  launch_matmul_fwd<T>(p, ctx.stream);
  p.residual = nullptr, p.y = ygelu.ptr(), p.gelu_pre = pre.ptr();
  launch_matmul_fwd<T>(p, ctx.stream);
  p.gelu_pre = dpre_in.ptr();
  p.dy = ddy.ptr(), p.dx = dx.ptr(), p.dw = dw.ptr(), p.dbias = db.ptr();
  launch_matmul_bwd<T>(p, ctx.stream);
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-2;
  const auto name =
      strformat("matmul fused %s N=%lld in=%d out=%d", type_name<T>(), (long long)N, in, out);
  EXPECT_LT(report((name + " y+residual").c_str(), max_rel_error(yres.download(), yres_ref)), tol);
  EXPECT_LT(report((name + " gelu pre").c_str(), max_rel_error(pre.download(), pre_ref)), tol);
  EXPECT_LT(report((name + " gelu y").c_str(), max_rel_error(ygelu.download(), ygelu_ref)), tol);
  EXPECT_LT(report((name + " dgelu dx").c_str(), max_rel_error(dx.download(), dx_ref)), tol);
  EXPECT_LT(report((name + " dw").c_str(), max_rel_error(dw.download(), dw_ref)), tol);
  EXPECT_LT(report((name + " dbias").c_str(), max_rel_error(db.download(), db_ref)), tol);
}

TEST(MatmulCuda, FusedEpiloguesF32) {
  CUDA_TEST_PREAMBLE();
  auto ctx = ExecContext::make_cuda(0);
  check_matmul_fused<float>(*ctx, 5, 7, 3, 21);  // unaligned: separate GELU kernels
  check_matmul_fused<float>(*ctx, 128, 256, 1024, 22);
}

TEST(MatmulCuda, FusedEpiloguesBF16) {
  CUDA_TEST_PREAMBLE();
  auto ctx = ExecContext::make_cuda(0);
  check_matmul_fused<bf16>(*ctx, 33, 129, 65, 31);  // unaligned: separate GELU kernels
  check_matmul_fused<bf16>(*ctx, 256, 768, 3072, 32);
  check_matmul_fused<bf16>(*ctx, 256, 3072, 768, 33);
}

}  // namespace
}  // namespace attnlab
