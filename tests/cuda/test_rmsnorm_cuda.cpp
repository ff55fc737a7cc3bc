// RMSNorm CUDA kernels vs the CPU reference: y/rstd written; dx and dgamma accumulated (+=),
// dgamma deterministic (bitwise identical on a second run) and skippable (null, frozen gamma); the
// vectorized (columns a multiple of the 16-byte pack) and the scalar path; wide rows (fewer warps
// per block for the shared-memory dgamma accumulators).
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "kernels/norm/rmsnorm.cuh"
#include "ref/rmsnorm_ref.h"

namespace attnlab {
namespace {

using namespace test;

template <typename T>
void check_rmsnorm(int64_t rows, int C, uint32_t seed) {
  const auto x = to_precision<T>(random_vector(size_t(rows * C), seed, -2.f, 3.f));
  const auto gamma = to_precision<T>(random_vector(size_t(C), seed + 1, 0.5f, 1.5f));
  const auto dy = to_precision<T>(random_vector(size_t(rows * C), seed + 2));
  const auto dx0 = to_precision<T>(random_vector(size_t(rows * C), seed + 3));
  const auto dg0 = to_precision<T>(random_vector(size_t(C), seed + 4));
  std::vector<float> y_ref(x.size()), rstd_ref(rows), dx_ref = dx0, dg_ref = dg0;
  RmsNormParams<float> r;
  r.x = x.data(), r.gamma = gamma.data(), r.y = y_ref.data(), r.rstd = rstd_ref.data();
  r.dy = dy.data(), r.dx = dx_ref.data(), r.dgamma = dg_ref.data(), r.rows = rows, r.cols = C;
  r.eps = 1e-5f;
  rmsnorm_fwd_ref(r);
  rmsnorm_bwd_ref(r);

  DeviceArray<T> dx_in(x), dgam(gamma), ddy(dy), y(x.size()), dx(dx0), dg(dg0);
  DeviceArray<float> rstd{size_t(rows)};
  y.poison();
  rstd.poison();
  RmsNormParams<T> p;
  p.x = dx_in.ptr(), p.gamma = dgam.ptr(), p.y = y.ptr(), p.rstd = rstd.ptr();
  p.dy = ddy.ptr(), p.dx = dx.ptr(), p.dgamma = dg.ptr(), p.rows = rows, p.cols = C;
  p.eps = 1e-5f;
  {
    PoisonScratch poison;  // the dgamma partials must all be written before they are summed
    launch_rmsnorm_fwd<T>(p, nullptr);
    launch_rmsnorm_bwd<T>(p, nullptr);
  }
  const auto name = strformat("rmsnorm %s %lldx%d", type_name<T>(), (long long)rows, C);
  const auto check = [&](const char* what, const std::vector<float>& got,
                         const std::vector<float>& ref, double tol) {
    EXPECT_LT(report((name + " " + what).c_str(), max_rel_error(got, ref)), tol)
        << name << " " << what;
  };
  check("y", y.download(), y_ref, same_precision_tolerance<T>(y_ref));
  check("rstd", rstd.download(), rstd_ref, kFp32Tolerance);  // fp32 in both
  check("dx", dx.download(), dx_ref, same_precision_tolerance<T>(dx_ref));
  const double dg_tol = same_precision_tolerance<T>(dg_ref);
  check("dgamma", dg.download(), dg_ref, dg_tol);

  // Deterministic dgamma without dx; then dx alone (frozen gamma) leaves dgamma untouched.
  const auto first = dg.raw();
  dg.upload(dg0);
  p.dx = nullptr;
  launch_rmsnorm_bwd<T>(p, nullptr);
  EXPECT_TRUE(bitwise_equal(first, dg.raw())) << name;
  dx.upload(dx0);
  p.dx = dx.ptr();
  p.dgamma = nullptr;
  launch_rmsnorm_bwd<T>(p, nullptr);
  check("dx (frozen gamma)", dx.download(), dx_ref, same_precision_tolerance<T>(dx_ref));
  EXPECT_TRUE(bitwise_equal(first, dg.raw())) << name;
}

TEST(RmsNormCuda, MatchesReferenceF32) {
  CUDA_TEST_PREAMBLE();
  check_rmsnorm<float>(1, 8, 1);
  check_rmsnorm<float>(1, 7, 2);  // scalar path
  check_rmsnorm<float>(7, 768, 3);
  check_rmsnorm<float>(3, 4097, 4);
  check_rmsnorm<float>(4099, 64, 5);
  check_rmsnorm<float>(2050, 768, 6);  // many blocks of the fused backward
}

TEST(RmsNormCuda, MatchesReferenceBF16) {
  CUDA_TEST_PREAMBLE();
  check_rmsnorm<bf16>(1, 8, 11);
  check_rmsnorm<bf16>(5, 33, 12);  // scalar path
  check_rmsnorm<bf16>(7, 768, 13);
  check_rmsnorm<bf16>(3, 4097, 14);
  check_rmsnorm<bf16>(4099, 64, 15);
  check_rmsnorm<bf16>(2050, 4096, 16);
  check_rmsnorm<bf16>(5, 20000, 17);  // wide rows: fewer warps per block (shared memory)
}

}  // namespace
}  // namespace attnlab
