// LayerNorm CUDA kernels vs the CPU reference: y/mean/rstd written; dx, dgamma, dbeta accumulated
// (+=), dgamma/dbeta deterministic (bitwise identical on a second run) and skippable (null);
// without bias (null beta and dbeta) on both the vectorized and the scalar (odd columns) path.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "kernels/norm/layernorm.cuh"
#include "ref/layernorm_ref.h"

namespace attnlab {
namespace {

using namespace test;

template <typename T>
void check_layernorm(int64_t rows, int C, uint32_t seed, bool bias = true) {
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
  if (!bias) r.beta = nullptr, r.dbeta = nullptr;
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
  if (!bias) p.beta = nullptr, p.dbeta = nullptr;
  launch_layernorm_fwd<T>(p, nullptr);
  launch_layernorm_bwd<T>(p, nullptr);
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-2;
  const auto name = strformat("layernorm %s %lldx%d%s", type_name<T>(), (long long)rows, C,
                              bias ? "" : " no bias");
  EXPECT_LT(report((name + " y").c_str(), max_rel_error(y.download(), y_ref)), tol);
  EXPECT_LT(report((name + " mean").c_str(), max_rel_error(mean.download(), mean_ref)), 1e-5);
  EXPECT_LT(report((name + " rstd").c_str(), max_rel_error(rstd.download(), rstd_ref)), 1e-5);
  EXPECT_LT(report((name + " dx").c_str(), max_rel_error(dx.download(), dx_ref)), tol);
  EXPECT_LT(report((name + " dgamma").c_str(), max_rel_error(dg.download(), dg_ref)), tol);
  if (bias) {
    EXPECT_LT(report((name + " dbeta").c_str(), max_rel_error(db.download(), db_ref)), tol);
  }

  // Deterministic parameter gradients; null outputs are skipped.
  const auto first = dg.raw();
  dg.upload(dg0);
  db.upload(db0);
  p.dx = nullptr;
  launch_layernorm_bwd<T>(p, nullptr);
  EXPECT_TRUE(bitwise_equal(first, dg.raw())) << name;
  if (!bias) return;
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
  check_layernorm<float>(2050, 768, 5);  // many blocks of the fused backward
}

TEST(LayerNormCuda, MatchesReferenceBF16) {
  CUDA_TEST_PREAMBLE();
  check_layernorm<bf16>(1, 8, 11);
  check_layernorm<bf16>(7, 768, 12);
  check_layernorm<bf16>(3, 4097, 13);
  check_layernorm<bf16>(4099, 64, 14);
  check_layernorm<bf16>(2050, 768, 15);
  check_layernorm<bf16>(5, 20000, 16);  // wide rows: fewer warps per block (shared memory)
}

// bias=False: y = (x - mean) * rstd * gamma. 768 and 64 columns take the 16-byte path, 33 and
// 4097 the scalar one.
TEST(LayerNormCuda, NoBiasMatchesReferenceF32) {
  CUDA_TEST_PREAMBLE();
  check_layernorm<float>(1, 8, 21, false);
  check_layernorm<float>(7, 768, 22, false);
  check_layernorm<float>(5, 33, 23, false);
  check_layernorm<float>(3, 4097, 24, false);
  check_layernorm<float>(4099, 64, 25, false);
}

TEST(LayerNormCuda, NoBiasMatchesReferenceBF16) {
  CUDA_TEST_PREAMBLE();
  check_layernorm<bf16>(1, 8, 31, false);
  check_layernorm<bf16>(7, 768, 32, false);
  check_layernorm<bf16>(5, 33, 33, false);
  check_layernorm<bf16>(3, 4097, 34, false);
  check_layernorm<bf16>(2050, 768, 35, false);
}

}  // namespace
}  // namespace attnlab
