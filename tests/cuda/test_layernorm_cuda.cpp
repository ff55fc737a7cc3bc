// LayerNorm CUDA kernels vs the CPU reference: y/mean/rstd written; dx, dgamma, dbeta accumulated
// (+=), dgamma/dbeta deterministic (bitwise identical on a second run) and skippable (null).
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "kernels/norm/layernorm.cuh"
#include "ref/layernorm_ref.h"

namespace attnlab {
namespace {

using namespace test;

template <typename T>
void check_layernorm(int64_t rows, int C, uint32_t seed) {
  const auto x = to_precision<T>(random_vector(size_t(rows * C), seed, -2.f, 3.f));
  const auto gamma = to_precision<T>(random_vector(size_t(C), seed + 1, 0.5f, 1.5f));
  const auto beta = to_precision<T>(random_vector(size_t(C), seed + 2));
  const auto dy = to_precision<T>(random_vector(size_t(rows * C), seed + 3));
  const auto dx0 = to_precision<T>(random_vector(size_t(rows * C), seed + 4));
  const auto dg0 = to_precision<T>(random_vector(size_t(C), seed + 5));
  const auto db0 = to_precision<T>(random_vector(size_t(C), seed + 6));
  std::vector<float> y_ref(x.size()), mean_ref(rows), rstd_ref(rows), dx_ref = dx0, dg_ref = dg0,
                                                                      db_ref = db0;
  LayerNormParams<float> r;
  r.x = x.data(), r.gamma = gamma.data(), r.beta = beta.data(), r.y = y_ref.data();
  r.mean = mean_ref.data(), r.rstd = rstd_ref.data(), r.dy = dy.data(), r.dx = dx_ref.data();
  r.dgamma = dg_ref.data(), r.dbeta = db_ref.data(), r.rows = rows, r.cols = C;
  layernorm_fwd_ref(r);
  layernorm_bwd_ref(r);

  DeviceArray<T> dx_in(x), dgam(gamma), dbet(beta), ddy(dy), y(x.size()), dx(dx0), dg(dg0), db(db0);
  DeviceArray<float> mean{size_t(rows)}, rstd{size_t(rows)};
  y.poison();
  mean.poison();
  rstd.poison();
  LayerNormParams<T> p;
  p.x = dx_in.ptr(), p.gamma = dgam.ptr(), p.beta = dbet.ptr(), p.y = y.ptr();
  p.mean = mean.ptr(), p.rstd = rstd.ptr(), p.dy = ddy.ptr(), p.dx = dx.ptr();
  p.dgamma = dg.ptr(), p.dbeta = db.ptr(), p.rows = rows, p.cols = C;
  launch_layernorm_fwd<T>(p, nullptr);
  launch_layernorm_bwd<T>(p, nullptr);
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-2;
  const auto name = strformat("layernorm %s %lldx%d", type_name<T>(), (long long)rows, C);
  EXPECT_LT(report((name + " y").c_str(), max_rel_error(y.download(), y_ref)), tol);
  EXPECT_LT(report((name + " mean").c_str(), max_rel_error(mean.download(), mean_ref)), 1e-5);
  EXPECT_LT(report((name + " rstd").c_str(), max_rel_error(rstd.download(), rstd_ref)), 1e-5);
  EXPECT_LT(report((name + " dx").c_str(), max_rel_error(dx.download(), dx_ref)), tol);
  EXPECT_LT(report((name + " dgamma").c_str(), max_rel_error(dg.download(), dg_ref)), tol);
  EXPECT_LT(report((name + " dbeta").c_str(), max_rel_error(db.download(), db_ref)), tol);

  // Deterministic parameter gradients; null outputs are skipped.
  const auto first = dg.raw();
  dg.upload(dg0);
  db.upload(db0);
  p.dx = nullptr;
  launch_layernorm_bwd<T>(p, nullptr);
  EXPECT_TRUE(bitwise_equal(first, dg.raw())) << name;
  db.upload(db0);
  p.dgamma = nullptr;
  launch_layernorm_bwd<T>(p, nullptr);
  EXPECT_LT(max_rel_error(db.download(), db_ref), tol) << name;
}

TEST(LayerNormCuda, MatchesReferenceF32) {
  CUDA_TEST_PREAMBLE();
  check_layernorm<float>(1, 8, 1);
  check_layernorm<float>(7, 768, 2);
  check_layernorm<float>(3, 4097, 3);
  check_layernorm<float>(4099, 64, 4);
}

TEST(LayerNormCuda, MatchesReferenceBF16) {
  CUDA_TEST_PREAMBLE();
  check_layernorm<bf16>(1, 8, 11);
  check_layernorm<bf16>(7, 768, 12);
  check_layernorm<bf16>(3, 4097, 13);
  check_layernorm<bf16>(4099, 64, 14);
}

// bf16 activations with fp32 parameters (gamma_f32/beta_f32: the optimizer's master copy). The
// parameters sit within a bf16 ulp of 1 and 0, so reading them rounded to bf16 would be visible:
// the kernel must match the reference on the unrounded values, and moving gamma by a fraction of a
// bf16 ulp must move the output.
TEST(LayerNormCuda, BF16WithFp32Parameters) {
  CUDA_TEST_PREAMBLE();
  const int64_t rows = 257;
  const int C = 768;
  const auto x = to_precision<bf16>(random_vector(size_t(rows * C), 21, -2.f, 3.f));
  auto gamma = random_vector(size_t(C), 22, 0.995f, 1.005f);
  const auto beta = random_vector(size_t(C), 23, -2e-3f, 2e-3f);
  const auto dy = to_precision<bf16>(random_vector(size_t(rows * C), 24));
  const auto dx0 = to_precision<bf16>(random_vector(size_t(rows * C), 25));
  std::vector<float> y_ref(x.size()), mean_ref(rows), rstd_ref(rows), dx_ref = dx0;
  LayerNormParams<float> r;
  r.x = x.data(), r.gamma = gamma.data(), r.beta = beta.data(), r.y = y_ref.data();
  r.mean = mean_ref.data(), r.rstd = rstd_ref.data(), r.dy = dy.data(), r.dx = dx_ref.data();
  r.rows = rows, r.cols = C;
  layernorm_fwd_ref(r);
  layernorm_bwd_ref(r);

  DeviceArray<bf16> dxin(x), ddy(dy), y(x.size()), dx(dx0);
  DeviceArray<float> g32(gamma), b32(beta), mean{size_t(rows)}, rstd{size_t(rows)};
  LayerNormParams<bf16> p;
  p.x = dxin.ptr(), p.gamma_f32 = g32.ptr(), p.beta_f32 = b32.ptr(), p.y = y.ptr();
  p.mean = mean.ptr(), p.rstd = rstd.ptr(), p.dy = ddy.ptr(), p.dx = dx.ptr();
  p.rows = rows, p.cols = C;
  launch_layernorm_fwd<bf16>(p, nullptr);
  launch_layernorm_bwd<bf16>(p, nullptr);
  EXPECT_LT(report("layernorm bf16/f32-params y", max_rel_error(y.download(), y_ref)), 1e-2);
  EXPECT_LT(report("layernorm bf16/f32-params dx", max_rel_error(dx.download(), dx_ref)), 1e-2);

  const auto y1 = y.raw();
  for (auto& g : gamma) g += 1.5e-3f;  // < one bf16 ulp at 1.0 (2^-7 above, 2^-8 below)
  g32.upload(gamma);
  launch_layernorm_fwd<bf16>(p, nullptr);
  const auto y2 = y.raw();
  size_t changed = 0;
  for (size_t i = 0; i < y1.size(); ++i) changed += std::memcmp(&y1[i], &y2[i], sizeof(bf16)) != 0;
  EXPECT_GT(changed, y1.size() / 10) << "the kernel did not read the fp32 gamma";
}

}  // namespace
}  // namespace attnlab
