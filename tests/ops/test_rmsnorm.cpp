// RMSNorm CPU reference: the double formula, gradients vs finite differences, the += contract of
// dx and dgamma, frozen gamma, determinism across thread counts; the host op's argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "ops/ops.h"
#include "ref/rmsnorm_ref.h"
#include "test_util.h"

namespace attnlab {
namespace {

using test::cpu_tensor;
using test::expect_error;
using test::max_rel_error;
using test::random_vector;

struct RmsNormCase {
  int64_t rows;
  int cols;
  std::vector<float> x, gamma, y, rstd;

  RmsNormCase(int64_t r, int c, uint32_t seed)
      : rows(r),
        cols(c),
        x(random_vector(size_t(r * c), seed, -2.f, 3.f)),
        gamma(random_vector(size_t(c), seed + 1, 0.5f, 1.5f)),
        y(size_t(r * c)),
        rstd(size_t(r)) {}

  RmsNormParams<float> params() {
    RmsNormParams<float> p;
    p.x = x.data();
    p.gamma = gamma.data();
    p.y = y.data();
    p.rstd = rstd.data();
    p.rows = rows;
    p.cols = cols;
    p.eps = 1e-5f;
    return p;
  }
  // params() with the gradient buffers (a null one is skipped by the backward).
  RmsNormParams<float> bwd_params(const float* dy, float* dx, float* dgamma) {
    RmsNormParams<float> p = params();
    p.dy = dy;
    p.dx = dx;
    p.dgamma = dgamma;
    return p;
  }
};

TEST(RmsNormRef, ForwardMatchesDoubleFormula) {
  for (auto [rows, cols] : {std::pair<int64_t, int>{1, 8}, {1, 1}, {7, 33}, {3, 768}, {2, 4097}}) {
    RmsNormCase c(rows, cols, 11);
    rmsnorm_fwd_ref(c.params());
    std::vector<double> expect(c.y.size());
    for (int64_t r = 0; r < rows; ++r) {
      double ms = 0;
      for (int j = 0; j < cols; ++j) ms += double(c.x[r * cols + j]) * c.x[r * cols + j];
      const double rs = 1.0 / std::sqrt(ms / cols + 1e-5);
      EXPECT_NEAR(c.rstd[r], rs, 1e-6 * rs);
      for (int j = 0; j < cols; ++j) expect[r * cols + j] = c.x[r * cols + j] * rs * c.gamma[j];
    }
    EXPECT_LT(max_rel_error(c.y, expect), 1e-6) << rows << "x" << cols;
  }
}

TEST(RmsNormRef, BackwardMatchesFiniteDifferences) {
  for (auto [rows, cols] : {std::pair<int64_t, int>{7, 33}, {1, 7}, {2, 64}}) {
    RmsNormCase c(rows, cols, 21);
    const auto dy = random_vector(c.y.size(), 22);
    auto loss = [&] {
      rmsnorm_fwd_ref(c.params());
      return test::weighted_sum(dy, c.y);
    };
    const auto fd_x = test::finite_difference(c.x.data(), c.x.size(), loss);
    const auto fd_gamma = test::finite_difference(c.gamma.data(), c.gamma.size(), loss);

    rmsnorm_fwd_ref(c.params());
    std::vector<float> dx(c.x.size(), 0.f), dgamma(size_t(cols), 0.f);
    rmsnorm_bwd_ref(c.bwd_params(dy.data(), dx.data(), dgamma.data()));
    EXPECT_LT(max_rel_error(dx, fd_x), 2e-4) << rows << "x" << cols;
    EXPECT_LT(max_rel_error(dgamma, fd_gamma), 2e-4) << rows << "x" << cols;
  }
}

// dx and dgamma are both accumulated: a second backward adds the same amount again.
TEST(RmsNormRef, BackwardAccumulates) {
  RmsNormCase c(5, 40, 31);
  rmsnorm_fwd_ref(c.params());
  const auto dy = random_vector(c.y.size(), 32);
  const auto dx0 = random_vector(c.x.size(), 33);
  const auto dg0 = random_vector(size_t(c.cols), 34);
  std::vector<float> dx = dx0, dgamma = dg0;
  const RmsNormParams<float> p = c.bwd_params(dy.data(), dx.data(), dgamma.data());
  rmsnorm_bwd_ref(p);
  const auto dx1 = dx, dg1 = dgamma;
  rmsnorm_bwd_ref(p);
  for (size_t i = 0; i < dx.size(); ++i) {
    EXPECT_NEAR(dx[i] - dx0[i], 2 * (dx1[i] - dx0[i]), 1e-5);
    EXPECT_GT(std::fabs(dx1[i] - dx0[i]), 0.f);
  }
  for (int j = 0; j < c.cols; ++j) {
    EXPECT_NEAR(dgamma[j] - dg0[j], 2 * (dg1[j] - dg0[j]), 1e-5);
    EXPECT_GT(std::fabs(dg1[j] - dg0[j]), 0.f);
  }
}

// A null dgamma (frozen gamma) leaves dx unchanged; a null dx still gives dgamma.
TEST(RmsNormRef, NullGradientsAreSkipped) {
  RmsNormCase c(6, 24, 35);
  rmsnorm_fwd_ref(c.params());
  const auto dy = random_vector(c.y.size(), 36);
  std::vector<float> dx(c.x.size(), 0.f), dgamma(size_t(c.cols), 0.f);
  rmsnorm_bwd_ref(c.bwd_params(dy.data(), dx.data(), dgamma.data()));
  std::vector<float> dx_only(c.x.size(), 0.f), dgamma_only(size_t(c.cols), 0.f);
  rmsnorm_bwd_ref(c.bwd_params(dy.data(), dx_only.data(), nullptr));
  rmsnorm_bwd_ref(c.bwd_params(dy.data(), nullptr, dgamma_only.data()));
  EXPECT_EQ(dx_only, dx);
  EXPECT_EQ(dgamma_only, dgamma);
}

TEST(RmsNormRef, SameBitsForAnyThreadCount) {
  RmsNormCase c(64, 1031, 37);
  const auto dy = random_vector(c.y.size(), 38);
  auto run = [&] {
    rmsnorm_fwd_ref(c.params());
    std::vector<float> dx(c.x.size(), 0.5f), dgamma(size_t(c.cols), 0.25f);
    rmsnorm_bwd_ref(c.bwd_params(dy.data(), dx.data(), dgamma.data()));
    std::vector<float> all = c.y;
    all.insert(all.end(), dx.begin(), dx.end());
    all.insert(all.end(), dgamma.begin(), dgamma.end());
    return all;
  };
  std::vector<float> one;
  {
    test::ScopedOmpThreads threads(1);
    one = run();
  }
  const auto many = run();
  ASSERT_EQ(one.size(), many.size());
  EXPECT_EQ(std::memcmp(one.data(), many.data(), one.size() * sizeof(float)), 0);
}

TEST(RmsNormOp, RunsOnCpuAndChecksArguments) {
  auto ctx = ExecContext::make_cpu();
  RmsNormCase c(6, 16, 41);
  std::vector<float> y(c.y.size()), rstd(6);
  ops::rmsnorm_fwd(*ctx, cpu_tensor(y, {2, 3, 16}), cpu_tensor(rstd, {2, 3}),
                   cpu_tensor(c.x, {2, 3, 16}), cpu_tensor(c.gamma, {16}), 1e-5f);
  rmsnorm_fwd_ref(c.params());
  EXPECT_EQ(y, c.y);
  EXPECT_EQ(rstd, c.rstd);

  const auto dy = random_vector(c.y.size(), 42);
  const auto dx0 = random_vector(c.x.size(), 43);
  std::vector<float> dy_v = dy, dx = dx0, dgamma(16, 0.5f), dx_ref = dx0, dgamma_ref = dgamma;
  ops::rmsnorm_bwd(*ctx, cpu_tensor(dx, {6, 16}), cpu_tensor(dgamma, {16}),
                   cpu_tensor(dy_v, {6, 16}), cpu_tensor(c.x, {6, 16}), cpu_tensor(c.gamma, {16}),
                   cpu_tensor(rstd, {6}));
  rmsnorm_bwd_ref(c.bwd_params(dy.data(), dx_ref.data(), dgamma_ref.data()));
  EXPECT_EQ(dx, dx_ref);
  EXPECT_EQ(dgamma, dgamma_ref);
  EXPECT_NE(dgamma, std::vector<float>(16, 0.5f));
  // Frozen gamma: an empty dgamma is skipped; dx accumulates a second time.
  ops::rmsnorm_bwd(*ctx, cpu_tensor(dx, {6, 16}), Tensor(), cpu_tensor(dy_v, {6, 16}),
                   cpu_tensor(c.x, {6, 16}), cpu_tensor(c.gamma, {16}), cpu_tensor(rstd, {6}));
  rmsnorm_bwd_ref(c.bwd_params(dy.data(), dx_ref.data(), nullptr));
  EXPECT_EQ(dx, dx_ref);

  std::vector<float> wrong(12, 1.f), bf(96);
  auto fwd = [&](const Tensor& yt, const Tensor& rt, const Tensor& xt, const Tensor& gt,
                 float eps) { ops::rmsnorm_fwd(*ctx, yt, rt, xt, gt, eps); };
  EXPECT_EQ(test::thrown_message([&] {
              fwd(cpu_tensor(y, {6, 16}), cpu_tensor(rstd, {6}), cpu_tensor(c.x, {6, 16}),
                  cpu_tensor(wrong, {12}), 1e-5f);
            }),
            "rmsnorm: gamma must be f32[16] on cpu, got f32[12] on cpu");
  expect_error(
      [&] {
        fwd(cpu_tensor(y, {6, 16}), cpu_tensor(wrong, {12}), cpu_tensor(c.x, {6, 16}),
            cpu_tensor(c.gamma, {16}), 1e-5f);
      },
      "rmsnorm: rstd must be f32 with 6 elements on cpu, got f32[12] on cpu");
  expect_error(
      [&] {
        fwd(cpu_tensor(y, {16, 6}), cpu_tensor(rstd, {6}), cpu_tensor(c.x, {6, 16}),
            cpu_tensor(c.gamma, {16}), 1e-5f);
      },
      "rmsnorm: y must be f32[6, 16] on cpu, got f32[16, 6] on cpu");
  expect_error(
      [&] {
        fwd(cpu_tensor(y, {6, 16}), cpu_tensor(rstd, {6}),
            Tensor(bf.data(), DType::bf16, Device::cpu, {6, 16}), cpu_tensor(c.gamma, {16}), 1e-5f);
      },
      "rmsnorm: x must be f32 on cpu, got bf16[6, 16] on cpu");
  expect_error(
      [&] {
        fwd(cpu_tensor(y, {6, 16}), cpu_tensor(rstd, {6}), cpu_tensor(c.x, {6, 16}),
            cpu_tensor(c.gamma, {16}), 0.f);
      },
      "rmsnorm: eps must be > 0, got 0");
  expect_error(
      [&] {
        ops::rmsnorm_bwd(*ctx, Tensor(), Tensor(), cpu_tensor(dy_v, {6, 16}),
                         cpu_tensor(c.x, {6, 16}), cpu_tensor(c.gamma, {16}),
                         cpu_tensor(rstd, {6}));
      },
      "rmsnorm: dx is required");
  expect_error(
      [&] {
        ops::rmsnorm_bwd(*ctx, cpu_tensor(dx, {6, 16}), cpu_tensor(wrong, {12}),
                         cpu_tensor(dy_v, {6, 16}), cpu_tensor(c.x, {6, 16}),
                         cpu_tensor(c.gamma, {16}), cpu_tensor(rstd, {6}));
      },
      "rmsnorm: dgamma must be f32[16] on cpu, got f32[12] on cpu");
  expect_error(
      [&] {
        ops::rmsnorm_bwd(*ctx, cpu_tensor(dx, {6, 16}), Tensor(), cpu_tensor(dy_v, {96}),
                         cpu_tensor(c.x, {6, 16}), cpu_tensor(c.gamma, {16}),
                         cpu_tensor(rstd, {6}));
      },
      "rmsnorm: dy must be f32[6, 16] on cpu, got f32[96] on cpu");
}

}  // namespace
}  // namespace attnlab
