#include <gtest/gtest.h>

#include "ops/ops.h"
#include "ref/gelu_ref.h"
#include "ref/matmul_ref.h"
#include "test_util.h"

namespace attnlab {
namespace {

using test::cpu_tensor;
using test::max_rel_error;
using test::random_vector;

struct MatmulCase {
  int64_t N;
  int in, out;
  std::vector<float> x, w, bias, y;
  MatmulCase(int64_t n, int i, int o, uint32_t seed)
      : N(n),
        in(i),
        out(o),
        x(random_vector(size_t(n * i), seed)),
        w(random_vector(size_t(o) * i, seed + 1)),
        bias(random_vector(size_t(o), seed + 2)),
        y(size_t(n * o)) {}
  MatmulParams<float> params() {
    MatmulParams<float> p;
    p.x = x.data();
    p.w = w.data();
    p.bias = bias.data();
    p.y = y.data();
    p.N = N;
    p.in = in;
    p.out = out;
    return p;
  }
  // params() with the gradient buffers (a null one is skipped by the backward).
  MatmulParams<float> bwd_params(const float* dy, float* dx, float* dw, float* dbias) {
    MatmulParams<float> p = params();
    p.dy = dy;
    p.dx = dx;
    p.dw = dw;
    p.dbias = dbias;
    return p;
  }
};

std::vector<double> naive_fwd(const MatmulCase& c) {
  std::vector<double> y(size_t(c.N) * c.out);
  for (int64_t n = 0; n < c.N; ++n)
    for (int o = 0; o < c.out; ++o) {
      double s = c.bias[o];
      for (int i = 0; i < c.in; ++i) s += double(c.x[n * c.in + i]) * c.w[size_t(o) * c.in + i];
      y[n * c.out + o] = s;
    }
  return y;
}

// Shapes that hit every tile edge of the blocked GEMM (micro-tile, MC/NC/KC blocks), plus the
// degenerate ones.
TEST(MatmulRef, ForwardMatchesNaive) {
  const int shapes[][3] = {{1, 1, 1}, {7, 33, 19}, {130, 300, 70}, {97, 257, 260}, {5, 513, 3}};
  for (const auto& s : shapes) {
    MatmulCase c(s[0], s[1], s[2], 7);
    matmul_fwd_ref(c.params());
    EXPECT_LT(max_rel_error(c.y, naive_fwd(c)), 2e-6) << s[0] << "x" << s[1] << "x" << s[2];
  }
}

TEST(MatmulRef, BackwardMatchesNaive) {
  MatmulCase c(131, 270, 45, 17);
  const auto dy = random_vector(c.y.size(), 18);
  const auto dw0 = random_vector(c.w.size(), 19);
  const auto db0 = random_vector(c.bias.size(), 20);
  std::vector<float> dx(c.x.size(), 123.f), dw = dw0, dbias = db0;
  matmul_bwd_ref(c.bwd_params(dy.data(), dx.data(), dw.data(), dbias.data()));
  std::vector<double> edx(dx.size()), edw(dw.size()), edb(dbias.size());
  for (int64_t n = 0; n < c.N; ++n)
    for (int o = 0; o < c.out; ++o) {
      const double g = dy[n * c.out + o];
      edb[o] += g;
      for (int i = 0; i < c.in; ++i) {
        edx[n * c.in + i] += g * c.w[size_t(o) * c.in + i];
        edw[size_t(o) * c.in + i] += g * c.x[n * c.in + i];
      }
    }
  for (size_t i = 0; i < edw.size(); ++i) edw[i] += dw0[i];
  for (size_t i = 0; i < edb.size(); ++i) edb[i] += db0[i];
  EXPECT_LT(max_rel_error(dx, edx), 2e-6);
  EXPECT_LT(max_rel_error(dw, edw), 2e-6);
  EXPECT_LT(max_rel_error(dbias, edb), 2e-6);
}

TEST(MatmulRef, BackwardMatchesFiniteDifferences) {
  MatmulCase c(5, 9, 6, 27);
  const auto dy = random_vector(c.y.size(), 28);
  auto loss = [&] {
    matmul_fwd_ref(c.params());
    return test::weighted_sum(dy, c.y);
  };
  const auto fd_x = test::finite_difference(c.x.data(), c.x.size(), loss);
  const auto fd_w = test::finite_difference(c.w.data(), c.w.size(), loss);
  const auto fd_b = test::finite_difference(c.bias.data(), c.bias.size(), loss);
  std::vector<float> dx(c.x.size()), dw(c.w.size(), 0.f), dbias(c.bias.size(), 0.f);
  matmul_bwd_ref(c.bwd_params(dy.data(), dx.data(), dw.data(), dbias.data()));
  EXPECT_LT(max_rel_error(dx, fd_x), 1e-4);
  EXPECT_LT(max_rel_error(dw, fd_w), 1e-4);
  EXPECT_LT(max_rel_error(dbias, fd_b), 1e-4);
}

// dx is written unless accumulate_dx; dw and dbias always accumulate; null outputs are skipped.
TEST(MatmulRef, BackwardWriteAndAccumulateContract) {
  MatmulCase c(9, 20, 11, 37);
  const auto dy = random_vector(c.y.size(), 38);
  std::vector<float> dx(c.x.size(), 5.f), dw(c.w.size(), 0.f), dbias(c.bias.size(), 0.f);
  MatmulParams<float> p = c.bwd_params(dy.data(), dx.data(), dw.data(), dbias.data());
  matmul_bwd_ref(p);
  const auto dx1 = dx, dw1 = dw, db1 = dbias;
  matmul_bwd_ref(p);
  EXPECT_EQ(dx, dx1);  // written: the same again
  for (size_t i = 0; i < dw.size(); ++i) EXPECT_NEAR(dw[i], 2 * dw1[i], 1e-5);
  for (size_t i = 0; i < dbias.size(); ++i) EXPECT_NEAR(dbias[i], 2 * db1[i], 1e-5);
  p.accumulate_dx = true;
  p.dw = nullptr;
  p.dbias = nullptr;
  matmul_bwd_ref(p);
  for (size_t i = 0; i < dx.size(); ++i) EXPECT_NEAR(dx[i], 2 * dx1[i], 1e-5);
  EXPECT_EQ(dbias[0], 2 * db1[0]);  // untouched by the call without dbias
}

// Bit-identical for any thread count (resume bit-exactness depends on it).
TEST(MatmulRef, DeterministicAcrossThreadCounts) {
  MatmulCase c(200, 300, 260, 47);
  const auto dy = random_vector(c.y.size(), 48);
  auto run = [&](int threads) {
    const test::ScopedOmpThreads limit(threads);
    std::vector<float> dx(c.x.size()), dw(c.w.size(), 0.f);
    matmul_fwd_ref(c.params());
    matmul_bwd_ref(c.bwd_params(dy.data(), dx.data(), dw.data(), nullptr));
    std::vector<float> all = c.y;
    all.insert(all.end(), dx.begin(), dx.end());
    all.insert(all.end(), dw.begin(), dw.end());
    return all;
  };
  const auto one = run(1);
  EXPECT_EQ(one, run(2));
  EXPECT_EQ(one, run(3));
}

TEST(MatmulOp, FlattensLeadingDimsAndChecksArguments) {
  auto ctx = ExecContext::make_cpu();
  MatmulCase c(6, 8, 5, 57);
  std::vector<float> y(c.y.size());
  ops::matmul_fwd(*ctx, cpu_tensor(y, {2, 3, 5}), cpu_tensor(c.x, {2, 3, 8}),
                  cpu_tensor(c.w, {5, 8}), cpu_tensor(c.bias, {5}));
  matmul_fwd_ref(c.params());
  EXPECT_EQ(y, c.y);
  ops::matmul_fwd(*ctx, cpu_tensor(y, {6, 5}), cpu_tensor(c.x, {6, 8}), cpu_tensor(c.w, {5, 8}),
                  Tensor());
  EXPECT_NEAR(y[0] + c.bias[0], c.y[0], 1e-6);

  EXPECT_EQ(test::thrown_message([&] {
              ops::matmul_fwd(*ctx, cpu_tensor(y, {6, 5}), cpu_tensor(c.x, {6, 8}),
                              cpu_tensor(c.w, {8, 5}), Tensor());
            }),
            "matmul: w must be f32[out, 8] on cpu (in = last dim of x f32[6, 8] on cpu), got "
            "f32[8, 5] on cpu");
  EXPECT_EQ(test::thrown_message([&] {
              ops::matmul_fwd(*ctx, cpu_tensor(y, {5, 6}), cpu_tensor(c.x, {6, 8}),
                              cpu_tensor(c.w, {5, 8}), Tensor());
            }),
            "matmul: y must be f32[6, 5] on cpu, got f32[5, 6] on cpu");
  std::vector<float> dy(c.y.size(), 1.f), dw(c.w.size());
  Tensor dw_cuda(dw.data(), DType::f32, Device::cuda, {5, 8});
  EXPECT_EQ(test::thrown_message([&] {
              ops::matmul_bwd(*ctx, Tensor(), dw_cuda, Tensor(), cpu_tensor(dy, {6, 5}),
                              cpu_tensor(c.x, {6, 8}), cpu_tensor(c.w, {5, 8}));
            }),
            "matmul: dw must be f32[5, 8] on cpu, got f32[5, 8] on cuda");
}

// The fused epilogues (residual add, GELU forward, GELU backward) give exactly the bits of the
// separate ops they replace: the model's CPU results do not depend on the fusion.
TEST(MatmulFused, EqualsTheSeparateOpsBitwise) {
  auto ctx = ExecContext::make_cpu();
  MatmulCase c(13, 24, 40, 61);
  auto res = random_vector(c.y.size(), 62);
  const Shape xs{13, 24}, ws{40, 24}, ys{13, 40};
  // y = x @ w^T + b + residual.
  std::vector<float> fused(c.y.size()), sep(c.y.size());
  ops::matmul_fwd(*ctx, cpu_tensor(fused, ys), cpu_tensor(c.x, xs), cpu_tensor(c.w, ws),
                  cpu_tensor(c.bias, {40}), cpu_tensor(res, ys));
  ops::matmul_fwd(*ctx, cpu_tensor(sep, ys), cpu_tensor(c.x, xs), cpu_tensor(c.w, ws),
                  cpu_tensor(c.bias, {40}));
  ops::residual_fwd(*ctx, cpu_tensor(sep, ys), cpu_tensor(sep, ys), cpu_tensor(res, ys));
  EXPECT_EQ(fused, sep);
  // pre = x @ w^T + b, y = gelu(pre).
  std::vector<float> pre(c.y.size()), y(c.y.size()), pre2(c.y.size()), y2(c.y.size());
  ops::matmul_gelu_fwd(*ctx, cpu_tensor(y, ys), cpu_tensor(pre, ys), cpu_tensor(c.x, xs),
                       cpu_tensor(c.w, ws), cpu_tensor(c.bias, {40}));
  ops::matmul_fwd(*ctx, cpu_tensor(pre2, ys), cpu_tensor(c.x, xs), cpu_tensor(c.w, ws),
                  cpu_tensor(c.bias, {40}));
  ops::gelu_fwd(*ctx, cpu_tensor(y2, ys), cpu_tensor(pre2, ys));
  EXPECT_EQ(pre, pre2);
  EXPECT_EQ(y, y2);
  // The next layer, v = y @ u^T + d, backward through the GELU: d(pre) = (dv @ u) * gelu'(pre).
  auto u = random_vector(size_t(24) * 40, 63), dv = random_vector(size_t(13) * 24, 64);
  std::vector<float> dpre(y.size()), dpre2(y.size()), du(u.size(), 0.f), du2(u.size(), 0.f),
      dd(24, 0.f), dd2(24, 0.f);
  ops::matmul_dgelu_bwd(*ctx, cpu_tensor(dpre, ys), cpu_tensor(du, {24, 40}), cpu_tensor(dd, {24}),
                        cpu_tensor(dv, xs), cpu_tensor(y, ys), cpu_tensor(u, {24, 40}),
                        cpu_tensor(pre, ys));
  ops::matmul_bwd(*ctx, cpu_tensor(dpre2, ys), cpu_tensor(du2, {24, 40}), cpu_tensor(dd2, {24}),
                  cpu_tensor(dv, xs), cpu_tensor(y, ys), cpu_tensor(u, {24, 40}));
  ops::gelu_bwd(*ctx, cpu_tensor(dpre2, ys), cpu_tensor(dpre2, ys), cpu_tensor(pre, ys));
  EXPECT_EQ(dpre, dpre2);
  EXPECT_EQ(du, du2);
  EXPECT_EQ(dd, dd2);
  EXPECT_EQ(test::thrown_message([&] {
              ops::matmul_fwd(*ctx, cpu_tensor(sep, ys), cpu_tensor(c.x, xs), cpu_tensor(c.w, ws),
                              Tensor(), cpu_tensor(sep, ys));
            }),
            "matmul: residual must not be the output y (f32[13, 40] on cpu)");
  EXPECT_EQ(test::thrown_message([&] {
              ops::matmul_gelu_fwd(*ctx, cpu_tensor(y, ys), cpu_tensor(pre, {40, 13}),
                                   cpu_tensor(c.x, xs), cpu_tensor(c.w, ws), Tensor());
            }),
            "matmul: pre must be f32[13, 40] on cpu, got f32[40, 13] on cpu");
}

// Finite differences through the fused pair: L = sum(dv * (gelu(x @ w^T + b) @ u^T)); the
// gradient of pre from matmul_dgelu_bwd, then x, w, b through matmul_bwd.
TEST(MatmulFused, GeluBackwardMatchesFiniteDifferences) {
  MatmulCase c(4, 7, 10, 71);
  auto u = random_vector(size_t(5) * 10, 72);
  const auto dv = random_vector(size_t(4) * 5, 73, -1.f, 1.f);
  std::vector<float> pre(c.y.size()), v(dv.size());
  for (auto& w : c.w) w *= 2.f;  // pre-activations in [-3, 3]: the curved part of GELU
  auto forward = [&] {
    MatmulParams<float> p = c.params();
    p.gelu_pre = pre.data();
    matmul_fwd_ref(p);
    MatmulParams<float> q;
    q.x = c.y.data(), q.w = u.data(), q.y = v.data(), q.N = 4, q.in = 10, q.out = 5;
    matmul_fwd_ref(q);
    return test::weighted_sum(dv, v);
  };
  const auto fd_x = test::finite_difference(c.x.data(), c.x.size(), forward, 3e-3f);
  const auto fd_w = test::finite_difference(c.w.data(), c.w.size(), forward, 3e-3f);
  const auto fd_b = test::finite_difference(c.bias.data(), c.bias.size(), forward, 3e-3f);
  const auto fd_u = test::finite_difference(u.data(), u.size(), forward, 3e-3f);
  forward();
  std::vector<float> dpre(pre.size()), du(u.size(), 0.f);
  MatmulParams<float> q;
  q.x = c.y.data(), q.w = u.data(), q.dy = dv.data(), q.dx = dpre.data(), q.dw = du.data();
  q.gelu_pre = pre.data(), q.N = 4, q.in = 10, q.out = 5;
  matmul_bwd_ref(q);
  std::vector<float> dx(c.x.size()), dw(c.w.size(), 0.f), db(c.bias.size(), 0.f);
  matmul_bwd_ref(c.bwd_params(dpre.data(), dx.data(), dw.data(), db.data()));
  // h = 3e-3: float rounding of the loss over 2h is ~3e-5 relative, the O(h^2) term smaller.
  EXPECT_LT(max_rel_error(du, fd_u), 5e-4);
  EXPECT_LT(max_rel_error(dx, fd_x), 5e-4);
  EXPECT_LT(max_rel_error(dw, fd_w), 5e-4);
  EXPECT_LT(max_rel_error(db, fd_b), 5e-4);
}

}  // namespace
}  // namespace attnlab
