#include <gtest/gtest.h>

#include <cmath>

#include "ops/ops.h"
#include "ref/gelu_ref.h"
#include "test_util.h"

namespace attnlab {
namespace {

using test::cpu_tensor;
using test::max_rel_error;
using test::random_vector;

GeluParams<float> gelu_params(std::vector<float>& x, std::vector<float>& y) {
  GeluParams<float> p;
  p.x = x.data();
  p.y = y.data();
  p.n = int64_t(x.size());
  return p;
}

TEST(GeluRef, ForwardMatchesFormula) {
  auto x = random_vector(1000, 1, -6.f, 6.f);
  std::vector<float> y(x.size());
  gelu_fwd_ref(gelu_params(x, y));
  std::vector<double> expect(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    expect[i] = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  }
  EXPECT_LT(max_rel_error(y, expect), 1e-7);
  EXPECT_NEAR(y[0], expect[0], 1e-6);
}

TEST(GeluRef, BackwardMatchesFiniteDifferences) {
  auto x = random_vector(133, 2, -4.f, 4.f);
  const auto dy = random_vector(x.size(), 3);
  std::vector<float> y(x.size());
  auto loss = [&] {
    gelu_fwd_ref(gelu_params(x, y));
    return test::weighted_sum(dy, y);
  };
  const auto fd = test::finite_difference(x.data(), x.size(), loss, 1e-3f);
  std::vector<float> dx(x.size(), 7.f);
  GeluParams<float> p = gelu_params(x, y);
  p.dy = dy.data();
  p.dx = dx.data();
  gelu_bwd_ref(p);
  EXPECT_LT(max_rel_error(dx, fd), 5e-4);
  // dx is written (=), and may alias dy.
  std::vector<float> inplace = dy;
  p.dy = inplace.data();
  p.dx = inplace.data();
  gelu_bwd_ref(p);
  EXPECT_EQ(inplace, dx);
}

TEST(GeluOp, RunsAndChecksShapes) {
  auto ctx = ExecContext::make_cpu();
  auto x = random_vector(24, 4);
  std::vector<float> y(24), y_ref(24), small(12);
  ops::gelu_fwd(*ctx, cpu_tensor(y, {2, 3, 4}), cpu_tensor(x, {2, 3, 4}));
  gelu_fwd_ref(gelu_params(x, y_ref));
  EXPECT_EQ(y, y_ref);
  EXPECT_EQ(test::thrown_message([&] {
              ops::gelu_fwd(*ctx, cpu_tensor(small, {3, 4}), cpu_tensor(x, {2, 3, 4}));
            }),
            "gelu: y must be f32[2, 3, 4] on cpu, got f32[3, 4] on cpu");
}

}  // namespace
}  // namespace attnlab
