// SwiGLU CPU reference: the formula (saturated gates included), gradients vs finite differences,
// dpre written (=) rather than accumulated; the host op's argument checks.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/ops.h"
#include "ref/swiglu_ref.h"
#include "test_util.h"

namespace attnlab {
namespace {

using test::cpu_tensor;
using test::expect_error;
using test::max_rel_error;
using test::random_vector;

SwiGluParams<float> swiglu_params(std::vector<float>& pre, std::vector<float>& y, int64_t rows,
                                  int64_t F) {
  SwiGluParams<float> p;
  p.pre = pre.data();
  p.y = y.data();
  p.rows = rows;
  p.f = F;
  return p;
}

double silu(double g) { return g / (1.0 + std::exp(-g)); }

TEST(SwiGluRef, ForwardMatchesFormula) {
  for (auto [rows, F] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {2, 4097}, {16, 64}}) {
    auto pre = random_vector(size_t(rows * 2 * F), uint32_t(rows * F), -6.f, 6.f);
    const bool saturate = F > 1;  // (with one output, the ~0 of a saturated gate is the scale)
    if (saturate) {
      pre[0] = -120.f;  // saturated gates: silu -> 0 and silu -> g, never NaN
      pre[1] = 95.f;
    }
    std::vector<float> y(size_t(rows * F), NAN);
    swiglu_fwd_ref(swiglu_params(pre, y, rows, F));
    std::vector<double> expect(y.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < F; ++c)
        expect[r * F + c] = silu(pre[r * 2 * F + c]) * pre[r * 2 * F + F + c];
    EXPECT_LT(max_rel_error(y, expect), 1e-7) << rows << "x" << F;
    if (saturate) EXPECT_EQ(std::fabs(y[0]), 0.f);
  }
}

TEST(SwiGluRef, BackwardMatchesFiniteDifferences) {
  for (auto [rows, F] : {std::pair<int64_t, int64_t>{5, 7}, {1, 1}, {2, 33}}) {
    auto pre = random_vector(size_t(rows * 2 * F), 2, -4.f, 4.f);
    const auto dy = random_vector(size_t(rows * F), 3);
    std::vector<float> y(size_t(rows * F));
    auto loss = [&] {
      swiglu_fwd_ref(swiglu_params(pre, y, rows, F));
      return test::weighted_sum(dy, y);
    };
    const auto fd = test::finite_difference(pre.data(), pre.size(), loss, 1e-3f);
    std::vector<float> dpre(pre.size(), 7.f);  // written (=): the 7s must not survive
    SwiGluParams<float> p = swiglu_params(pre, y, rows, F);
    p.dy = dy.data();
    p.dpre = dpre.data();
    swiglu_bwd_ref(p);
    EXPECT_LT(max_rel_error(dpre, fd), 5e-4) << rows << "x" << F;
    // A second backward writes the same values (nothing is accumulated).
    const auto first = dpre;
    swiglu_bwd_ref(p);
    EXPECT_EQ(dpre, first);
  }
}

// silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))) at a few points, against a symmetric difference
// in double (independent of the float finite differences above).
TEST(SwiGluRef, BackwardMatchesDerivativeFormula) {
  std::vector<float> pre = {-3.f, 0.f, 0.5f, 2.f, 1.5f, -2.f, 0.25f, 3.f};  // F = 4: gate | up
  const std::vector<float> dy = {1.f, -1.f, 0.5f, 2.f};
  std::vector<float> y(4), dpre(8, NAN);
  SwiGluParams<float> p = swiglu_params(pre, y, 1, 4);
  p.dy = dy.data();
  p.dpre = dpre.data();
  swiglu_bwd_ref(p);
  for (int c = 0; c < 4; ++c) {
    const double g = pre[c], u = pre[4 + c], h = 1e-6;
    const double dsilu = (silu(g + h) - silu(g - h)) / (2 * h);
    EXPECT_NEAR(dpre[c], dy[c] * u * dsilu, 1e-6) << c;
    EXPECT_NEAR(dpre[4 + c], dy[c] * silu(g), 1e-6) << c;
  }
}

TEST(SwiGluOp, RunsOnCpuAndChecksArguments) {
  auto ctx = ExecContext::make_cpu();
  auto pre = random_vector(2 * 3 * 10, 4, -3.f, 3.f);
  const auto dy = random_vector(2 * 3 * 5, 5);
  std::vector<float> y(30), y_ref(30), dpre(60), dpre_ref(60), dy_v = dy, small(12);
  ops::swiglu_fwd(*ctx, cpu_tensor(y, {2, 3, 5}), cpu_tensor(pre, {2, 3, 10}));
  swiglu_fwd_ref(swiglu_params(pre, y_ref, 6, 5));
  EXPECT_EQ(y, y_ref);
  ops::swiglu_bwd(*ctx, cpu_tensor(dpre, {2, 3, 10}), cpu_tensor(dy_v, {2, 3, 5}),
                  cpu_tensor(pre, {2, 3, 10}));
  SwiGluParams<float> p = swiglu_params(pre, y_ref, 6, 5);
  p.dy = dy.data();
  p.dpre = dpre_ref.data();
  swiglu_bwd_ref(p);
  EXPECT_EQ(dpre, dpre_ref);
  EXPECT_NE(dpre, std::vector<float>(60, 0.f));

  expect_error(
      [&] {
        ops::swiglu_fwd(*ctx, cpu_tensor(small, {3, 4}), cpu_tensor(pre, {6, 10}));
      },
      "swiglu: y must be f32[6, 5] on cpu, got f32[3, 4] on cpu");
  expect_error(
      [&] {
        ops::swiglu_fwd(*ctx, cpu_tensor(y, {6, 5}), cpu_tensor(pre, {4, 15}));
      },
      "swiglu: pre's last dimension must be even and non-zero (gate | up halves), got "
      "f32[4, 15] on cpu");
  expect_error(
      [&] {
        ops::swiglu_bwd(*ctx, cpu_tensor(dpre, {6, 10}), cpu_tensor(small, {6, 2}),
                        cpu_tensor(pre, {6, 10}));
      },
      "swiglu: dy must be f32[6, 5] on cpu, got f32[6, 2] on cpu");
  expect_error(
      [&] {
        ops::swiglu_bwd(*ctx, cpu_tensor(dpre, {6, 5, 2}), cpu_tensor(dy_v, {6, 5}),
                        cpu_tensor(pre, {6, 10}));
      },
      "swiglu: dpre must be f32[6, 10] on cpu, got f32[6, 5, 2] on cpu");
  expect_error(
      [&] {
        ops::swiglu_bwd(*ctx, cpu_tensor(pre, {6, 10}), cpu_tensor(dy_v, {6, 5}),
                        cpu_tensor(pre, {6, 10}));
      },
      "swiglu: dpre must not be pre");
  expect_error(
      [&] {
        ops::swiglu_fwd(*ctx, cpu_tensor(y, {6, 5}), Tensor());
      },
      "swiglu: pre is required");
}

}  // namespace
}  // namespace attnlab
