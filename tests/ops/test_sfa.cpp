// SFA ops (kernels/sfa/*.cuh, ops/sfa_ops.h) on the CPU: the selection rule (ties to the lower
// index, all-zero vectors), k = D equal to dense attention, the op equal to the dense op on q, k
// sparsified by the reference selection and to the feature-overlap form (GQA, T = 1, 129, 1000),
// the straight-through gradients by finite differences away from ties, chunked decoding from the
// sparse cache equal to the full forward, the distillation term and its gradient, bad arguments.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/context.h"
#include "ops/ops.h"
#include "ops/sfa_ops.h"
#include "ref/sfa_ref.h"
#include "test_util.h"

namespace attnlab {
namespace {

using test::cpu_tensor;

struct Case {
  int B, T, H, Hkv, D, k;
  QKVLayout layout;
  std::vector<float> qkv, sparse, out, lse;
  std::unique_ptr<ExecContext> ctx = ExecContext::make_cpu();
  Case(int B_, int T_, int H_, int Hkv_, int D_, int k_, uint32_t seed = 1)
      : B(B_), T(T_), H(H_), Hkv(Hkv_), D(D_), k(k_) {
    layout = {H, Hkv, D};
    qkv = test::random_vector(size_t(B) * T * layout.width(), seed, -1.5f, 1.5f);
    // Ties of magnitude in every third q/k head vector (coordinates 0, D/2 and D - 1), so that the
    // lower-index rule decides some selections (the finite differences skip them).
    const int64_t W = layout.width();
    for (int64_t r = 0; r < int64_t(B) * T; ++r)
      for (int hv = 0; hv < H + Hkv; ++hv)
        if ((r + hv) % 3 == 0 && D >= 3) {
          float* x = qkv.data() + r * W + int64_t(hv) * D;
          x[D / 2] = -x[0];
          x[D - 1] = x[0];
        }
    sparse.resize(qkv.size());
    out.resize(size_t(B) * T * layout.q_width());
    lse.resize(size_t(B) * H * T);
  }
  Shape qkv_shape() const { return {B, T, layout.width()}; }
  Tensor qkv_t() { return cpu_tensor(qkv, qkv_shape()); }
  Tensor sparse_t() { return cpu_tensor(sparse, qkv_shape()); }
  Tensor out_t() { return cpu_tensor(out, {B, T, layout.q_width()}); }
  Tensor lse_t() { return cpu_tensor(lse, {B, H, T}); }
  void forward() { ops::sfa_attention_fwd(*ctx, out_t(), lse_t(), sparse_t(), qkv_t(), layout, k); }
  // dqkv of the objective sum(w * out).
  std::vector<float> backward(std::vector<float>& w) {
    forward();
    std::vector<float> dqkv(qkv.size());
    ops::sfa_attention_bwd(*ctx, cpu_tensor(dqkv, qkv_shape()),
                           cpu_tensor(w, {B, T, layout.q_width()}), sparse_t(), out_t(), lse_t(),
                           qkv_t(), layout, k);
    return dqkv;
  }
  // Whether coordinate c of the row's head vector starting at `off` is a q/k coordinate that is
  // not selected, and the margin of a selected one to the (k+1)-th magnitude.
  struct Coord {
    bool qk, selected;
    float margin;
  };
  Coord coord(size_t i) const {
    const int64_t W = layout.width(), col = int64_t(i) % W;
    if (col >= layout.v_offset()) return {false, true, INFINITY};
    const float* x = qkv.data() + (int64_t(i) - col) + col / D * D;
    std::vector<float> a(static_cast<size_t>(D));
    for (int c = 0; c < D; ++c) a[size_t(c)] = std::fabs(x[c]);
    std::vector<float> s = a;
    std::sort(s.begin(), s.end(), std::greater<float>());
    const float me = a[size_t(col % D)];
    std::vector<int32_t> idx(static_cast<size_t>(k));
    sfa_select_coords(x, D, k, idx.data());
    const bool sel = std::find(idx.begin(), idx.end(), int32_t(col % D)) != idx.end();
    return {true, sel, k < D ? me - s[size_t(k)] : INFINITY};
  }
};

// The masked copy by the selection rule itself, written here without the implementation's
// selection: coordinate c stays iff fewer than k coordinates rank before it (a larger magnitude,
// or the same magnitude at a lower index).
std::vector<float> sparsified_by_hand(const Case& c) {
  std::vector<float> s = c.qkv;
  const int64_t W = c.layout.width();
  for (int64_t r = 0; r < int64_t(c.B) * c.T; ++r)
    for (int hv = 0; hv < c.H + c.Hkv; ++hv) {
      float* x = s.data() + r * W + int64_t(hv) * c.D;
      std::vector<float> keep(static_cast<size_t>(c.D), 0.f);
      for (int i = 0; i < c.D; ++i) {
        int before = 0;
        for (int j = 0; j < c.D; ++j)
          before +=
              std::fabs(x[j]) > std::fabs(x[i]) || (std::fabs(x[j]) == std::fabs(x[i]) && j < i);
        if (before < c.k) keep[size_t(i)] = x[i];
      }
      std::copy(keep.begin(), keep.end(), x);
    }
  return s;
}

TEST(SfaSelect, LargestMagnitudesTiesToTheLowerIndexAndZeros) {
  // One token, one q head and one kv head of D = 8; k = 3.
  Case c(1, 1, 1, 1, 8, 3);
  const std::vector<float> q = {1, -3, 3, 0, 2, -2, 0, 0}, z(8, 0.f);
  std::copy(q.begin(), q.end(), c.qkv.begin());
  std::copy(z.begin(), z.end(), c.qkv.begin() + 8);
  std::vector<int32_t> qi(3), ki(3);
  std::vector<float> qv(3), kv(3);
  ops::sfa_select(*c.ctx, c.qkv_t(), c.layout, 3, cpu_tensor(qi, {1, 1, 1, 3}),
                  cpu_tensor(qv, {1, 1, 1, 3}), cpu_tensor(ki, {1, 1, 1, 3}),
                  cpu_tensor(kv, {1, 1, 1, 3}));
  EXPECT_EQ(qi, (std::vector<int32_t>{1, 2, 4}));  // |-3| = |3| > |2| = |-2|: 4 before 5
  EXPECT_EQ(qv, (std::vector<float>{-3, 3, 2}));
  EXPECT_EQ(ki, (std::vector<int32_t>{0, 1, 2}));  // all zero: the first k
  EXPECT_EQ(kv, (std::vector<float>{0, 0, 0}));
  ops::sfa_sparsify(*c.ctx, c.sparse_t(), c.qkv_t(), c.qkv_t(), c.layout, 3);
  const std::vector<float> q_masked = {0, -3, 3, 0, 2, 0, 0, 0};
  EXPECT_TRUE(std::equal(q_masked.begin(), q_masked.end(), c.sparse.begin()));
  EXPECT_TRUE(std::equal(c.qkv.begin() + 16, c.qkv.end(), c.sparse.begin() + 16));  // v copied
  // In place on another tensor: the selection of qkv masks it (the backward's use).
  std::vector<float> g(c.qkv.size(), 1.f);
  ops::sfa_sparsify(*c.ctx, cpu_tensor(g, c.qkv_shape()), cpu_tensor(g, c.qkv_shape()), c.qkv_t(),
                    c.layout, 3);
  const std::vector<float> g_want = {0, 1, 1, 0, 1, 0, 0, 0, 1, 1, 1, 0,
                                     0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
  EXPECT_EQ(g, g_want);
}

TEST(SfaAttention, KEqualToTheHeadDimIsDenseAttention) {
  Case c(2, 9, 4, 2, 8, 8);
  c.forward();
  std::vector<float> out(c.out.size()), lse(c.lse.size());
  ops::attention_fwd(*c.ctx, cpu_tensor(out, {c.B, c.T, c.layout.q_width()}),
                     cpu_tensor(lse, {c.B, c.H, c.T}), c.qkv_t(), c.layout);
  EXPECT_EQ(c.out, out);
  EXPECT_EQ(c.lse, lse);
  std::vector<float> w = test::random_vector(c.out.size(), 9);
  const std::vector<float> d = c.backward(w);
  std::vector<float> dd(c.qkv.size());
  ops::attention_bwd(*c.ctx, cpu_tensor(dd, c.qkv_shape()),
                     cpu_tensor(w, {c.B, c.T, c.layout.q_width()}), c.qkv_t(),
                     cpu_tensor(out, {c.B, c.T, c.layout.q_width()}),
                     cpu_tensor(lse, {c.B, c.H, c.T}), c.layout);
  EXPECT_EQ(d, dd);
}

// The op = dense attention on the hand-sparsified q, k = the feature-overlap form (through the
// sparse cache at pos 0), for MHA and GQA and odd lengths.
TEST(SfaAttention, EqualsDenseOnSparsifiedQKAndTheOverlapForm) {
  struct S {
    int B, T, H, Hkv, D, k;
  };
  for (const S s : {S{2, 1, 2, 2, 16, 4}, S{1, 129, 4, 2, 16, 3}, S{2, 33, 3, 1, 64, 8},
                    S{1, 1000, 2, 1, 8, 2}}) {
    Case c(s.B, s.T, s.H, s.Hkv, s.D, s.k, uint32_t(s.T));
    c.forward();
    EXPECT_EQ(c.sparse, sparsified_by_hand(c)) << "T " << s.T;
    std::vector<float> dense_in = sparsified_by_hand(c), out(c.out.size()), lse(c.lse.size());
    ops::attention_fwd(*c.ctx, cpu_tensor(out, {c.B, c.T, c.layout.q_width()}),
                       cpu_tensor(lse, {c.B, c.H, c.T}), cpu_tensor(dense_in, c.qkv_shape()),
                       c.layout);
    EXPECT_LT(test::max_rel_error(c.out, out), 1e-6) << "T " << s.T;

    const Shape qs{c.B, c.T, c.H, c.k}, ks{c.B, c.Hkv, c.T, c.k};
    std::vector<int32_t> qi(size_t(qs.numel()));
    std::vector<uint8_t> ki(size_t(ks.numel()));
    std::vector<float> qv(qi.size()), kv(ki.size()), v(size_t(c.B) * c.Hkv * c.T * c.D);
    std::vector<float> o2(c.out.size()), lse2(c.lse.size());
    ops::sfa_cache_write(*c.ctx, cpu_tensor(qi, qs), cpu_tensor(qv, qs), cpu_tensor(ki, ks),
                         cpu_tensor(kv, ks), cpu_tensor(v, {c.B, c.Hkv, c.T, c.D}), c.qkv_t(), 0,
                         c.layout);
    ops::sfa_attention_decode(*c.ctx, cpu_tensor(o2, {c.B, c.T, c.layout.q_width()}),
                              cpu_tensor(lse2, {c.B, c.H, c.T}), cpu_tensor(qi, qs),
                              cpu_tensor(qv, qs), cpu_tensor(ki, ks), cpu_tensor(kv, ks),
                              cpu_tensor(v, {c.B, c.Hkv, c.T, c.D}), 0, c.layout);
    EXPECT_LT(test::max_rel_error(o2, c.out), 1e-6) << "T " << s.T;
    EXPECT_LT(test::max_rel_error(lse2, c.lse), 1e-6) << "T " << s.T;
  }
}

// Straight-through: dq, dk are zero off the selection; on it (perturbed by less than the margin
// to the (k+1)-th magnitude, so the selection holds) and on v they match central differences.
TEST(SfaAttention, StraightThroughGradientsByFiniteDifferences) {
  for (const auto& [Hkv, k] : {std::pair{2, 3}, std::pair{1, 2}}) {
    Case c(2, 6, 2, Hkv, 8, k, 7);
    std::vector<float> w = test::random_vector(c.out.size(), 11);
    const std::vector<float> d = c.backward(w);
    const float h = 2e-3f;
    int checked = 0, zero = 0;
    for (size_t i = 0; i < c.qkv.size(); ++i) {
      const Case::Coord co = c.coord(i);
      if (co.qk && !co.selected) {
        EXPECT_EQ(d[i], 0.f) << i;
        ++zero;
        continue;
      }
      if (co.margin < 4 * h) continue;  // too close to a tie for a central difference
      std::vector<double> fd = test::finite_difference(
          &c.qkv[i], 1,
          [&] {
            c.forward();
            return test::weighted_sum(w, c.out);
          },
          h);
      EXPECT_NEAR(d[i], fd[0], 2e-3 + 1e-2 * std::fabs(fd[0])) << "coordinate " << i;
      ++checked;
    }
    EXPECT_GT(checked, int(c.qkv.size()) / 3);
    EXPECT_GT(zero, 0);
  }
}

// Chunked decoding through the sparse cache equals the rows of the full forward.
TEST(SfaAttention, DecodeFromTheSparseCacheEqualsTheForward) {
  Case c(2, 13, 4, 2, 16, 4, 5);
  c.forward();
  const int max_T = 16, W = int(c.layout.width());
  const Shape ks{c.B, c.Hkv, max_T, c.k}, vs{c.B, c.Hkv, max_T, c.D};
  std::vector<uint8_t> ki(size_t(ks.numel()));
  std::vector<float> kv(ki.size()), v(size_t(vs.numel()));
  int pos = 0;
  for (int n : {5, 1, 7}) {
    std::vector<float> chunk;
    for (int b = 0; b < c.B; ++b)
      chunk.insert(chunk.end(), c.qkv.begin() + (int64_t(b) * c.T + pos) * W,
                   c.qkv.begin() + (int64_t(b) * c.T + pos + n) * W);
    const Shape qs{c.B, n, c.H, c.k};
    std::vector<int32_t> qi(size_t(qs.numel()));
    std::vector<float> qv(qi.size()), o(size_t(c.B) * n * c.layout.q_width());
    ops::sfa_cache_write(*c.ctx, cpu_tensor(qi, qs), cpu_tensor(qv, qs), cpu_tensor(ki, ks),
                         cpu_tensor(kv, ks), cpu_tensor(v, vs), cpu_tensor(chunk, {c.B, n, W}), pos,
                         c.layout);
    ops::sfa_attention_decode(*c.ctx, cpu_tensor(o, {c.B, n, c.layout.q_width()}), Tensor(),
                              cpu_tensor(qi, qs), cpu_tensor(qv, qs), cpu_tensor(ki, ks),
                              cpu_tensor(kv, ks), cpu_tensor(v, vs), pos, c.layout);
    const int64_t Q = c.layout.q_width();
    for (int b = 0; b < c.B; ++b)
      EXPECT_LT(test::max_rel_error(o.data() + int64_t(b) * n * Q,
                                    c.out.data() + (int64_t(b) * c.T + pos) * Q, size_t(n * Q)),
                1e-6)
          << "chunk at " << pos;
    pos += n;
  }
}

TEST(SfaDistill, ValueAndGradient) {
  auto ctx = ExecContext::make_cpu();
  std::vector<float> s = test::random_vector(30, 1), t = test::random_vector(30, 2);
  std::vector<float> dout = test::random_vector(30, 3), ds(30);
  double total = 0.25, want = 0.0;
  for (size_t i = 0; i < 30; ++i) want += (double(s[i]) - t[i]) * (double(s[i]) - t[i]);
  ops::sfa_distill_fwd(*ctx, &total, cpu_tensor(s, {30}), cpu_tensor(t, {30}), 0.7f);
  EXPECT_NEAR(total, 0.25 + double(0.7f) * want / 30, 1e-12);  // accumulated (+=)
  ops::sfa_distill_bwd(*ctx, cpu_tensor(ds, {30}), cpu_tensor(dout, {30}), cpu_tensor(s, {30}),
                       cpu_tensor(t, {30}), 0.7f);
  const std::vector<double> fd = test::finite_difference(s.data(), s.size(), [&] {
    double tot = 0.0;
    ops::sfa_distill_fwd(*ctx, &tot, cpu_tensor(s, {30}), cpu_tensor(t, {30}), 0.7f);
    return tot + test::weighted_sum(dout, s);
  });
  for (size_t i = 0; i < 30; ++i) EXPECT_NEAR(ds[i], fd[i], 1e-4) << i;
}

TEST(SfaAttention, BadArgumentsNameTheProblem) {
  Case c(1, 3, 2, 2, 8, 3);
  test::expect_error(
      [&] { ops::sfa_sparsify(*c.ctx, c.sparse_t(), c.qkv_t(), c.qkv_t(), c.layout, 9); },
      "sfa_sparsify: k (attention.sfa.k) must be in [1, head dim 8], got 9");
  test::expect_error(
      [&] { ops::sfa_sparsify(*c.ctx, c.sparse_t(), c.qkv_t(), c.qkv_t(), c.layout, 0); },
      "must be in [1, head dim 8], got 0");
  QKVLayout bad{3, 2, 8};
  test::expect_error([&] { ops::sfa_sparsify(*c.ctx, c.sparse_t(), c.qkv_t(), c.qkv_t(), bad, 3); },
                     "n_kv_head (2) must divide n_head (3)");
  // The decode cache's key indices are one byte: an i32 cache and head dims above 256 are refused.
  const Shape qs{c.B, c.T, c.H, c.k}, ks{c.B, c.Hkv, c.T, c.k};
  std::vector<int32_t> qi(size_t(qs.numel())), ki32(size_t(ks.numel()));
  std::vector<float> qv(qi.size()), kv(ki32.size()), v(size_t(c.B) * c.Hkv * c.T * c.D);
  test::expect_error(
      [&] {
        ops::sfa_cache_write(*c.ctx, cpu_tensor(qi, qs), cpu_tensor(qv, qs), cpu_tensor(ki32, ks),
                             cpu_tensor(kv, ks), cpu_tensor(v, {c.B, c.Hkv, c.T, c.D}), c.qkv_t(),
                             0, c.layout);
      },
      "k_idx_cache");
  const QKVLayout wide{1, 1, 512};
  const Shape ws{1, 1, c.T, c.k};  // [B, T, n_head, k] and [B, n_kv_head, T, k] alike here
  std::vector<int32_t> wqi(size_t(ws.numel()));
  std::vector<uint8_t> wki(wqi.size());
  std::vector<float> wqv(wqi.size()), wkv(wqi.size()), wqkv(size_t(c.T) * 3 * 512),
      wv(size_t(c.T) * 512);
  test::expect_error(
      [&] {
        ops::sfa_cache_write(*c.ctx, cpu_tensor(wqi, {1, c.T, 1, c.k}),
                             cpu_tensor(wqv, {1, c.T, 1, c.k}), cpu_tensor(wki, ws),
                             cpu_tensor(wkv, ws), cpu_tensor(wv, {1, 1, c.T, 512}),
                             cpu_tensor(wqkv, {1, c.T, 3 * 512}), 0, wide);
      },
      "sfa_cache_write: the sparse KV cache stores key coordinates in one byte, so head dim must "
      "be <= 256, got 512");
}

}  // namespace
}  // namespace attnlab
