// Residual CUDA kernels vs the CPU reference; backward accumulates (+=) and skips null outputs.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "kernels/activation/residual.cuh"
#include "ref/residual_ref.h"

namespace attnlab {
namespace {

using namespace test;

template <typename T>
void check_residual(int64_t n, bool with_db, uint32_t seed) {
  const auto a = to_precision<T>(random_vector(size_t(n), seed));
  const auto b = to_precision<T>(random_vector(size_t(n), seed + 1));
  const auto dy = to_precision<T>(random_vector(size_t(n), seed + 2));
  const auto da0 = to_precision<T>(random_vector(size_t(n), seed + 3));
  const auto db0 = to_precision<T>(random_vector(size_t(n), seed + 4));
  std::vector<float> y_ref(n), da_ref = da0, db_ref = db0;
  ResidualParams<float> r;
  r.a = a.data(), r.b = b.data(), r.y = y_ref.data(), r.dy = dy.data(), r.da = da_ref.data();
  r.db = with_db ? db_ref.data() : nullptr;
  r.n = n;
  residual_fwd_ref(r);
  residual_bwd_ref(r);

  DeviceArray<T> da_(a), db_(b), dy_(dy), y{size_t(n)}, dda(da0), ddb(db0);
  y.poison();
  ResidualParams<T> p;
  p.a = da_.ptr(), p.b = db_.ptr(), p.y = y.ptr(), p.dy = dy_.ptr(), p.da = dda.ptr();
  p.db = with_db ? ddb.ptr() : nullptr;
  p.n = n;
  launch_residual_fwd<T>(p, nullptr);
  launch_residual_bwd<T>(p, nullptr);
  const double tol = std::is_same_v<T, float> ? 1e-6 : 1e-2;
  const auto name = strformat("residual %s n=%lld", type_name<T>(), (long long)n);
  EXPECT_LT(report((name + " fwd").c_str(), max_rel_error(y.download(), y_ref)), tol);
  EXPECT_LT(report((name + " da").c_str(), max_rel_error(dda.download(), da_ref)), tol);
  // Without db the buffer must be left alone.
  EXPECT_LT(max_rel_error(ddb.download(), with_db ? db_ref : db0), tol);
}

TEST(ResidualCuda, MatchesReferenceF32) {
  CUDA_TEST_PREAMBLE();
  for (int64_t n : {1, 13, 4096, 100003}) check_residual<float>(n, n % 2 == 0, uint32_t(n));
}

TEST(ResidualCuda, MatchesReferenceBF16) {
  CUDA_TEST_PREAMBLE();
  for (int64_t n : {1, 13, 4096, 100003}) check_residual<bf16>(n, n % 2 == 1, uint32_t(n) + 7);
}

}  // namespace
}  // namespace attnlab
