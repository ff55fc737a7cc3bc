// GELU CUDA kernels vs the CPU reference (fp32 and bf16; vector and scalar paths).
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "kernels/activation/gelu.cuh"
#include "ref/gelu_ref.h"

namespace attnlab {
namespace {

using namespace test;

template <typename T>
void check_gelu(int64_t n, bool alias_dx_dy, uint32_t seed) {
  const auto x = to_precision<T>(random_vector(size_t(n), seed, -4.f, 4.f));
  const auto dy = to_precision<T>(random_vector(size_t(n), seed + 1));
  std::vector<float> y_ref(n), dx_ref(n);
  GeluParams<float> r;
  r.x = x.data(), r.y = y_ref.data(), r.dy = dy.data(), r.dx = dx_ref.data(), r.n = n;
  gelu_fwd_ref(r);
  gelu_bwd_ref(r);

  DeviceArray<T> dx_(x), ddy(dy), dy_out{size_t(n)}, ddx{size_t(n)};
  dy_out.poison();
  ddx.poison();
  GeluParams<T> p;
  p.x = dx_.ptr(), p.y = dy_out.ptr(), p.dy = ddy.ptr(), p.dx = alias_dx_dy ? ddy.ptr() : ddx.ptr();
  p.n = n;
  launch_gelu_fwd<T>(p, nullptr);
  launch_gelu_bwd<T>(p, nullptr);
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-2;
  const auto name = strformat("gelu %s n=%lld", type_name<T>(), (long long)n);
  EXPECT_LT(report((name + " fwd").c_str(), max_rel_error(dy_out.download(), y_ref)), tol);
  const auto dx = alias_dx_dy ? ddy.download() : ddx.download();
  EXPECT_LT(report((name + " bwd").c_str(), max_rel_error(dx, dx_ref)), tol);
}

TEST(GeluCuda, MatchesReferenceF32) {
  CUDA_TEST_PREAMBLE();
  for (int64_t n : {1, 7, 4099, 1 << 16}) check_gelu<float>(n, false, 11 + uint32_t(n));
  check_gelu<float>(1003, true, 5);
}

TEST(GeluCuda, MatchesReferenceBF16) {
  CUDA_TEST_PREAMBLE();
  for (int64_t n : {1, 7, 4099, 1 << 16}) check_gelu<bf16>(n, false, 21 + uint32_t(n));
  check_gelu<bf16>(4096, true, 6);
}

}  // namespace
}  // namespace attnlab
