#include <gtest/gtest.h>

#include "ops/ops.h"
#include "ref/residual_ref.h"
#include "test_util.h"

namespace attnlab {
namespace {

using test::cpu_tensor;
using test::random_vector;

ResidualParams<float> fwd_params(std::vector<float>& a, std::vector<float>& b,
                                 std::vector<float>& y) {
  ResidualParams<float> p;
  p.a = a.data();
  p.b = b.data();
  p.y = y.data();
  p.n = int64_t(y.size());
  return p;
}

TEST(ResidualRef, ForwardAddsAndMayAlias) {
  auto a = random_vector(37, 1), b = random_vector(37, 2);
  std::vector<float> y(37);
  ResidualParams<float> p = fwd_params(a, b, y);
  residual_fwd_ref(p);
  for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y[i], a[i] + b[i]);
  p.y = a.data();  // in place into a
  residual_fwd_ref(p);
  EXPECT_EQ(a, y);
}

// Both gradients accumulate (+=); a null one is skipped. Linear op, so the finite difference of
// sum(dy * (a + b)) is dy exactly for both inputs.
TEST(ResidualRef, BackwardAccumulatesAndMatchesFiniteDifferences) {
  auto a = random_vector(29, 3), b = random_vector(29, 4);
  const auto dy = random_vector(29, 5);
  std::vector<float> y(29);
  const ResidualParams<float> fp = fwd_params(a, b, y);
  auto loss = [&] {
    residual_fwd_ref(fp);
    return test::weighted_sum(dy, y);
  };
  const auto fd_a = test::finite_difference(a.data(), a.size(), loss);
  const auto fd_b = test::finite_difference(b.data(), b.size(), loss);
  const auto da0 = random_vector(29, 6);
  std::vector<float> da = da0, db(29, 0.f);
  ResidualParams<float> p;
  p.dy = dy.data();
  p.da = da.data();
  p.db = db.data();
  p.n = 29;
  residual_bwd_ref(p);
  for (size_t i = 0; i < da.size(); ++i) {
    EXPECT_NEAR(da[i] - da0[i], fd_a[i], 1e-5);
    EXPECT_NEAR(db[i], fd_b[i], 1e-5);
  }
  p.da = nullptr;
  residual_bwd_ref(p);
  for (size_t i = 0; i < db.size(); ++i) EXPECT_EQ(db[i], dy[i] + dy[i]);
}

TEST(ResidualOp, RunsAndChecksShapes) {
  auto ctx = ExecContext::make_cpu();
  auto a = random_vector(12, 7), b = random_vector(12, 8);
  std::vector<float> y(12), da(12, 0.f);
  ops::residual_fwd(*ctx, cpu_tensor(y, {3, 4}), cpu_tensor(a, {3, 4}), cpu_tensor(b, {3, 4}));
  EXPECT_EQ(y[5], a[5] + b[5]);
  ops::residual_bwd(*ctx, cpu_tensor(da, {3, 4}), Tensor(), cpu_tensor(b, {3, 4}));
  EXPECT_EQ(da, b);
  EXPECT_EQ(test::thrown_message([&] {
              ops::residual_fwd(*ctx, cpu_tensor(y, {3, 4}), cpu_tensor(a, {3, 4}),
                                cpu_tensor(b, {4, 3}));
            }),
            "residual: b must be f32[3, 4] on cpu, got f32[4, 3] on cpu");
}

}  // namespace
}  // namespace attnlab
