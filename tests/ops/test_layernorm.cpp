#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/ops.h"
#include "ref/layernorm_ref.h"
#include "test_util.h"

namespace attnlab {
namespace {

using test::cpu_tensor;
using test::max_rel_error;
using test::random_vector;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct LayerNormCase {
  int64_t rows;
  int cols;
  std::vector<float> x, gamma, beta, y, mean, rstd;

  LayerNormCase(int64_t r, int c, uint32_t seed)
      : rows(r),
        cols(c),
        x(random_vector(size_t(r * c), seed, -2.f, 3.f)),
        gamma(random_vector(size_t(c), seed + 1, 0.5f, 1.5f)),
        beta(random_vector(size_t(c), seed + 2)),
        y(size_t(r * c)),
        mean(size_t(r)),
        rstd(size_t(r)) {}

  LayerNormParams<float> params() {
    LayerNormParams<float> p;
    p.x = x.data();
    p.gamma = gamma.data();
    p.beta = beta.data();
    p.y = y.data();
    p.mean = mean.data();
    p.rstd = rstd.data();
    p.rows = rows;
    p.cols = cols;
    return p;
  }
  // params() with the gradient buffers (a null one is skipped by the backward).
  LayerNormParams<float> bwd_params(const float* dy, float* dx, float* dgamma, float* dbeta) {
    LayerNormParams<float> p = params();
    p.dy = dy;
    p.dx = dx;
    p.dgamma = dgamma;
    p.dbeta = dbeta;
    return p;
  }
};

TEST(LayerNormRef, ForwardMatchesDoubleFormula) {
  for (auto [rows, cols] : {std::pair<int64_t, int>{1, 8}, {7, 33}, {3, 768}}) {
    LayerNormCase c(rows, cols, 11);
    layernorm_fwd_ref(c.params());
    std::vector<double> expect(c.y.size());
    for (int64_t r = 0; r < rows; ++r) {
      double m = 0, v = 0;
      for (int j = 0; j < cols; ++j) m += c.x[r * cols + j];
      m /= cols;
      for (int j = 0; j < cols; ++j) v += (c.x[r * cols + j] - m) * (c.x[r * cols + j] - m);
      v /= cols;
      const double rs = 1.0 / std::sqrt(v + 1e-5);
      EXPECT_NEAR(c.mean[r], m, 1e-6 * (1 + std::fabs(m)));
      EXPECT_NEAR(c.rstd[r], rs, 1e-6 * rs);
      for (int j = 0; j < cols; ++j)
        expect[r * cols + j] = (c.x[r * cols + j] - m) * rs * c.gamma[j] + c.beta[j];
    }
    EXPECT_LT(max_rel_error(c.y, expect), 1e-6) << rows << "x" << cols;
  }
}

// bias=False (null beta): the same bits as beta = 0, and the double formula without the shift.
TEST(LayerNormRef, ForwardWithoutBetaIsBetaZero) {
  for (auto [rows, cols] : {std::pair<int64_t, int>{1, 8}, {7, 33}, {3, 768}}) {
    LayerNormCase no_beta(rows, cols, 13), zero_beta(rows, cols, 13);
    std::fill(zero_beta.beta.begin(), zero_beta.beta.end(), 0.f);
    LayerNormParams<float> p = no_beta.params();
    p.beta = nullptr;
    layernorm_fwd_ref(p);
    layernorm_fwd_ref(zero_beta.params());
    EXPECT_TRUE(same_bits(no_beta.y, zero_beta.y)) << rows << "x" << cols;
    EXPECT_TRUE(same_bits(no_beta.mean, zero_beta.mean));
    EXPECT_TRUE(same_bits(no_beta.rstd, zero_beta.rstd));
    std::vector<double> expect(no_beta.y.size());
    for (int64_t r = 0; r < rows; ++r) {
      const float* x = no_beta.x.data() + r * cols;
      double m = 0, v = 0;
      for (int j = 0; j < cols; ++j) m += x[j];
      m /= cols;
      for (int j = 0; j < cols; ++j) v += (x[j] - m) * (x[j] - m);
      const double rs = 1.0 / std::sqrt(v / cols + 1e-5);
      for (int j = 0; j < cols; ++j) expect[r * cols + j] = (x[j] - m) * rs * no_beta.gamma[j];
    }
    EXPECT_LT(max_rel_error(no_beta.y, expect), 1e-6) << rows << "x" << cols;
  }
}

TEST(LayerNormRef, BackwardWithoutBetaMatchesFiniteDifferences) {
  LayerNormCase c(7, 33, 23);
  LayerNormParams<float> fwd = c.params();
  fwd.beta = nullptr;
  const auto dy = random_vector(c.y.size(), 24);
  auto loss = [&] {
    layernorm_fwd_ref(fwd);
    return test::weighted_sum(dy, c.y);
  };
  const auto fd_x = test::finite_difference(c.x.data(), c.x.size(), loss);
  const auto fd_gamma = test::finite_difference(c.gamma.data(), c.gamma.size(), loss);

  layernorm_fwd_ref(fwd);
  std::vector<float> dx(c.x.size(), 0.f), dgamma(c.cols, 0.f);
  LayerNormParams<float> bwd = c.bwd_params(dy.data(), dx.data(), dgamma.data(), nullptr);
  bwd.beta = nullptr;
  layernorm_bwd_ref(bwd);
  EXPECT_LT(max_rel_error(dx, fd_x), 2e-4);
  EXPECT_LT(max_rel_error(dgamma, fd_gamma), 2e-4);
}

TEST(LayerNormRef, BackwardMatchesFiniteDifferences) {
  LayerNormCase c(7, 33, 21);
  const auto dy = random_vector(c.y.size(), 22);
  auto loss = [&] {
    layernorm_fwd_ref(c.params());
    return test::weighted_sum(dy, c.y);
  };
  const auto fd_x = test::finite_difference(c.x.data(), c.x.size(), loss);
  const auto fd_gamma = test::finite_difference(c.gamma.data(), c.gamma.size(), loss);
  const auto fd_beta = test::finite_difference(c.beta.data(), c.beta.size(), loss);

  layernorm_fwd_ref(c.params());
  std::vector<float> dx(c.x.size(), 0.f), dgamma(c.cols, 0.f), dbeta(c.cols, 0.f);
  layernorm_bwd_ref(c.bwd_params(dy.data(), dx.data(), dgamma.data(), dbeta.data()));
  EXPECT_LT(max_rel_error(dx, fd_x), 2e-4);
  EXPECT_LT(max_rel_error(dgamma, fd_gamma), 2e-4);
  EXPECT_LT(max_rel_error(dbeta, fd_beta), 2e-4);
}

// dx, dgamma and dbeta are all accumulated: a second backward adds the same amount again.
TEST(LayerNormRef, BackwardAccumulates) {
  LayerNormCase c(5, 40, 31);
  layernorm_fwd_ref(c.params());
  const auto dy = random_vector(c.y.size(), 32);
  const auto dx0 = random_vector(c.x.size(), 33);
  const auto dg0 = random_vector(size_t(c.cols), 34);
  std::vector<float> dx = dx0, dgamma = dg0, dbeta(size_t(c.cols), 0.f);
  const LayerNormParams<float> p = c.bwd_params(dy.data(), dx.data(), dgamma.data(), dbeta.data());
  layernorm_bwd_ref(p);
  const auto dx1 = dx, dg1 = dgamma, db1 = dbeta;
  layernorm_bwd_ref(p);
  for (size_t i = 0; i < dx.size(); ++i) EXPECT_NEAR(dx[i] - dx0[i], 2 * (dx1[i] - dx0[i]), 1e-5);
  for (int j = 0; j < c.cols; ++j) {
    EXPECT_NEAR(dgamma[j] - dg0[j], 2 * (dg1[j] - dg0[j]), 1e-5);
    EXPECT_NEAR(dbeta[j], 2 * db1[j], 1e-5);
    EXPECT_NE(db1[j], 0.f);
  }
}

TEST(LayerNormOp, RunsOnCpuAndChecksArguments) {
  auto ctx = ExecContext::make_cpu();
  LayerNormCase c(6, 16, 41);
  std::vector<float> y(c.y.size());
  ops::layernorm_fwd(*ctx, cpu_tensor(y, {2, 3, 16}), cpu_tensor(c.mean, {6}),
                     cpu_tensor(c.rstd, {6}), cpu_tensor(c.x, {2, 3, 16}),
                     cpu_tensor(c.gamma, {16}), cpu_tensor(c.beta, {16}));
  layernorm_fwd_ref(c.params());
  EXPECT_EQ(y, c.y);

  std::vector<float> wrong(12, 1.f);
  const std::string msg = test::thrown_message([&] {
    ops::layernorm_fwd(*ctx, cpu_tensor(y, {6, 16}), cpu_tensor(c.mean, {6}),
                       cpu_tensor(c.rstd, {6}), cpu_tensor(c.x, {6, 16}), cpu_tensor(wrong, {12}),
                       cpu_tensor(c.beta, {16}));
  });
  EXPECT_EQ(msg, "layernorm: gamma must be f32[16] on cpu, got f32[12] on cpu");
  std::vector<float> bf(96);
  Tensor as_bf16(bf.data(), DType::bf16, Device::cpu, {6, 16});
  EXPECT_EQ(test::thrown_message([&] {
              ops::layernorm_fwd(*ctx, cpu_tensor(y, {6, 16}), cpu_tensor(c.mean, {6}),
                                 cpu_tensor(c.rstd, {6}), as_bf16, cpu_tensor(c.gamma, {16}),
                                 cpu_tensor(c.beta, {16}));
            }),
            "layernorm: x must be f32 on cpu, got bf16[6, 16] on cpu");
  std::vector<float> dy(c.y.size(), 1.f);
  // Empty beta and dbeta: no bias (the backward never reads beta).
  LayerNormParams<float> no_beta = c.params();
  no_beta.beta = nullptr;
  layernorm_fwd_ref(no_beta);
  ops::layernorm_fwd(*ctx, cpu_tensor(y, {6, 16}), cpu_tensor(c.mean, {6}), cpu_tensor(c.rstd, {6}),
                     cpu_tensor(c.x, {6, 16}), cpu_tensor(c.gamma, {16}), Tensor());
  EXPECT_EQ(y, c.y);
  auto dy_rand = random_vector(c.y.size(), 42);
  std::vector<float> dx(c.x.size(), 0.f), dgamma(16, 0.f), dx_ref = dx, dgamma_ref = dgamma;
  ops::layernorm_bwd(*ctx, cpu_tensor(dx, {6, 16}), cpu_tensor(dgamma, {16}), Tensor(),
                     cpu_tensor(dy_rand, {6, 16}), cpu_tensor(c.x, {6, 16}),
                     cpu_tensor(c.gamma, {16}), cpu_tensor(c.mean, {6}), cpu_tensor(c.rstd, {6}));
  layernorm_bwd_ref(c.bwd_params(dy_rand.data(), dx_ref.data(), dgamma_ref.data(), nullptr));
  EXPECT_EQ(dx, dx_ref);
  EXPECT_EQ(dgamma, dgamma_ref);
  EXPECT_NE(dgamma, std::vector<float>(16, 0.f));
  EXPECT_NE(test::thrown_message([&] {
              ops::layernorm_bwd(*ctx, Tensor(), Tensor(), Tensor(), cpu_tensor(dy, {6, 16}),
                                 cpu_tensor(c.x, {6, 16}), cpu_tensor(c.gamma, {16}),
                                 cpu_tensor(c.mean, {6}), cpu_tensor(c.rstd, {6}));
            }).find("layernorm: dx is required"),
            std::string::npos);
}

}  // namespace
}  // namespace attnlab
