// Focus two-level attention (kernels/focus/focus_attention.cuh) on the CPU: finite differences of
// both soft gates through q, k, v and g; equality with dense attention where the gate cannot act
// (w >= T, K = 1); hard routing against a dense reference with the explicit mask (GQA, top_k 2,
// unbalanced and empty groups, odd lengths); the straight-through backward and its bf16-dA
// reference; decoding against the full forward.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "core/context.h"
#include "focus_ref_params.h"
#include "ops/focus_ops.h"
#include "ops/ops.h"
#include "test_util.h"

namespace attnlab {
namespace {

using test::cpu_tensor;

struct Case {
  int B, T, H, Hkv, D, K, top_k;
  QKVLayout layout;
  std::vector<float> qkv, g, out, lse;
  std::vector<int32_t> groups;
  std::unique_ptr<ExecContext> ctx = ExecContext::make_cpu();
  Case(int B_, int T_, int H_, int Hkv_, int D_, int K_, int top_k_, uint32_t seed = 1)
      : B(B_), T(T_), H(H_), Hkv(Hkv_), D(D_), K(K_), top_k(top_k_) {
    layout = {H, Hkv, D};
    qkv = test::random_vector(size_t(B) * T * layout.width(), seed, -1.5f, 1.5f);
    g = test::random_vector(size_t(B) * T * K, seed + 1, 0.f, 1.f);
    for (size_t r = 0; r < size_t(B) * T; ++r) {  // rows of a distribution
      double s = 0;
      for (int k = 0; k < K; ++k) s += g[r * K + k];
      for (int k = 0; k < K; ++k) g[r * K + k] = float(g[r * K + k] / s);
    }
    groups.resize(size_t(B) * T * top_k);
    ops::focus_route_topk(*ctx, groups_t(), g_t());
    out.resize(size_t(B) * T * layout.q_width());
    lse.resize(size_t(B) * H * T);
  }
  Tensor qkv_t() { return cpu_tensor(qkv, {B, T, layout.width()}); }
  Tensor g_t() { return cpu_tensor(g, {B, T, K}); }
  Tensor groups_t() { return cpu_tensor(groups, {B, T, top_k}); }
  Tensor out_t() { return cpu_tensor(out, {B, T, layout.q_width()}); }
  Tensor lse_t() { return cpu_tensor(lse, {B, H, T}); }
  void forward(const FocusGateParams& gate) {
    ops::focus_attention_fwd(*ctx, out_t(), lse_t(), qkv_t(), layout, g_t(), groups_t(), gate);
  }
  // dqkv, dg for the objective sum(w * out).
  std::pair<std::vector<float>, std::vector<float>> backward(const FocusGateParams& gate,
                                                             std::vector<float> w) {
    forward(gate);
    std::vector<float> dqkv(qkv.size()), dg(g.size());
    ops::focus_attention_bwd(*ctx, cpu_tensor(dqkv, {B, T, layout.width()}),
                             cpu_tensor(dg, {B, T, K}), cpu_tensor(w, {B, T, layout.q_width()}),
                             qkv_t(), out_t(), lse_t(), layout, g_t(), groups_t(), gate);
    return {dqkv, dg};
  }
  std::vector<float> dense() {
    std::vector<float> o(out.size()), l(lse.size());
    ops::attention_fwd(*ctx, cpu_tensor(o, {B, T, layout.q_width()}), cpu_tensor(l, {B, H, T}),
                       qkv_t(), layout);
    return o;
  }
  // Dense softmax attention with an explicit mask visible(b, i, j), in double.
  std::vector<float> masked_dense(const std::function<bool(int, int, int)>& visible) {
    return direct([&](int b, int i, int j, double s) { return visible(b, i, j) ? s : -INFINITY; });
  }
  // The gate a_ij = g_i . g_j of two tokens of sequence b, in double.
  double affinity(int b, int i, int j) const {
    double a = 0;
    for (int k = 0; k < K; ++k)
      a += double(g[(size_t(b) * T + i) * K + k]) * g[(size_t(b) * T + j) * K + k];
    return a;
  }
  // Causal softmax attention in double whose pair (i, j) has the logit logit(b, i, j, s) for its
  // scaled score s = q_i . k_j / sqrt(D) (-inf: not attended), written out pair by pair.
  std::vector<float> direct(const std::function<double(int, int, int, double)>& logit) {
    std::vector<float> o(out.size());
    const int64_t W = layout.width(), Q = layout.q_width();
    const double scale = 1.0 / std::sqrt(double(D));
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (int i = 0; i < T; ++i) {
          const int hk = h / (H / Hkv);
          const float* q = qkv.data() + (int64_t(b) * T + i) * W + h * D;
          std::vector<double> e(size_t(i) + 1, 0.0);
          double mx = -INFINITY, sum = 0;
          for (int j = 0; j <= i; ++j) {
            const float* k = qkv.data() + (int64_t(b) * T + j) * W + layout.k_offset() + hk * D;
            double s = 0;
            for (int d = 0; d < D; ++d) s += double(q[d]) * k[d];
            e[size_t(j)] = logit(b, i, j, s * scale);
            mx = std::max(mx, e[size_t(j)]);
          }
          std::vector<double> acc(size_t(D), 0.0);
          for (int j = 0; j <= i; ++j) {
            if (e[size_t(j)] == -INFINITY) continue;
            const double p = std::exp(e[size_t(j)] - mx);
            sum += p;
            const float* v = qkv.data() + (int64_t(b) * T + j) * W + layout.v_offset() + hk * D;
            for (int d = 0; d < D; ++d) acc[size_t(d)] += p * v[d];
          }
          for (int d = 0; d < D; ++d)
            o[(int64_t(b) * T + i) * Q + h * D + d] = float(acc[size_t(d)] / sum);
        }
    return o;
  }
  bool share(int b, int i, int j) const {
    for (int x = 0; x < top_k; ++x)
      for (int y = 0; y < top_k; ++y)
        if (groups[(size_t(b) * T + i) * top_k + x] == groups[(size_t(b) * T + j) * top_k + y])
          return true;
    return false;
  }
};

FocusGateParams gate_of(FocusGateKind kind, int w) {
  FocusGateParams g;
  g.kind = kind;
  g.local_window = w;
  g.eps = 1e-3f;  // large enough that FD sees the additive gate's log(a + eps) smoothly
  return g;
}

TEST(FocusAttention, SoftGatesMatchFiniteDifferencesThroughQKVAndG) {
  for (FocusGateKind kind : {FocusGateKind::additive, FocusGateKind::multiplicative}) {
    SCOPED_TRACE(kind == FocusGateKind::additive ? "additive" : "multiplicative");
    Case c(2, 7, 4, 2, 3, 3, 1);
    const FocusGateParams gate = gate_of(kind, 2);
    const std::vector<float> w = test::random_vector(c.out.size(), 5);
    auto [dqkv, dg] = c.backward(gate, w);
    auto f = [&] {
      c.forward(gate);
      return test::weighted_sum(w, c.out);
    };
    EXPECT_LT(test::max_rel_error(dqkv, test::finite_difference(c.qkv.data(), c.qkv.size(), f)),
              2e-3);
    EXPECT_LT(test::max_rel_error(dg, test::finite_difference(c.g.data(), c.g.size(), f, 1e-3f)),
              2e-3);
  }
}

// Where the gate cannot act, Focus is dense attention: every pair local (w >= T - 1) for any gate,
// and K = 1 (a = 1 for every pair): hard routing exactly, the additive gate up to its eps.
TEST(FocusAttention, EqualsDenseWhereTheGateCannotAct) {
  for (FocusGateKind kind :
       {FocusGateKind::additive, FocusGateKind::multiplicative, FocusGateKind::hard}) {
    // K 6, top_k 2: many pairs share no group, so only the window makes this dense.
    Case c(2, 9, 4, 2, 8, 6, 2);
    c.forward(gate_of(kind, 8));
    EXPECT_LT(test::max_rel_error(c.out, c.dense()), 1e-6);
  }
  Case one(2, 9, 2, 2, 8, 1, 1);
  one.forward(gate_of(FocusGateKind::hard, 0));
  EXPECT_LT(test::max_rel_error(one.out, one.dense()), 1e-6);
  FocusGateParams additive = gate_of(FocusGateKind::additive, 0);
  additive.eps = 1e-6f;
  one.forward(additive);
  EXPECT_LT(test::max_rel_error(one.out, one.dense()), 1e-5);
}

// The soft gates' forward, pair by pair from the formulas (distant pairs i - j > w only):
// additive logit s + log(a + eps), multiplicative s sigmoid(lambda a + b), a = g_i . g_j < 1.
TEST(FocusAttention, SoftGatesEqualTheirFormulasPairByPair) {
  Case c(2, 40, 4, 2, 8, 4, 1, 7);
  const int w = 5;
  FocusGateParams additive = gate_of(FocusGateKind::additive, w);
  c.forward(additive);
  EXPECT_LT(test::max_rel_error(c.out, c.direct([&](int b, int i, int j, double s) {
              return i - j <= w ? s : s + std::log(c.affinity(b, i, j) + additive.eps);
            })),
            2e-6);
  FocusGateParams mult = gate_of(FocusGateKind::multiplicative, w);
  mult.scale = 6.f;
  mult.bias = -2.f;
  c.forward(mult);
  EXPECT_LT(test::max_rel_error(c.out, c.direct([&](int b, int i, int j, double s) {
              return i - j <= w
                         ? s
                         : s / (1.0 + std::exp(-(mult.scale * c.affinity(b, i, j) + mult.bias)));
            })),
            2e-6);
  // The gates act here: the result is not the dense one.
  EXPECT_GT(test::max_rel_error(c.out, c.dense()), 1e-2);
}

// Hard routing is the dense softmax under the mask {i - j <= w or a shared group}: GQA, top_k 2,
// groups far from balanced (a first group 0 or 1 for most tokens, 2 for every 7th; a second of
// 3 .. 5, or the largest random one for every 5th token), odd lengths. About a third of the
// distant pairs share no group (checked: a gate that ignored the groups would fail).
TEST(FocusAttention, HardRoutingEqualsTheMaskedDenseReference) {
  for (int T : {1, 127, 129, 1000}) {
    SCOPED_TRACE(T);
    const bool big = T == 1000;
    Case c(big ? 1 : 2, T, big ? 2 : 4, big ? 1 : 2, big ? 4 : 8, 6, 2, uint32_t(T));
    for (size_t r = 0; r < size_t(c.B) * T; ++r) {
      c.g[r * 6 + (r % 7 == 0 ? 2 : r % 2)] += 3.f;
      if (r % 5 != 0) c.g[r * 6 + 3 + r % 3] += 2.f;
    }
    ops::focus_route_topk(*c.ctx, c.groups_t(), c.g_t());
    const int w = 5;
    c.forward(gate_of(FocusGateKind::hard, w));
    auto visible = [&](int b, int i, int j) { return i - j <= w || c.share(b, i, j); };
    EXPECT_LT(test::max_rel_error(c.out, c.masked_dense(visible)), 2e-6);
    int64_t distant = 0, masked = 0;
    for (int b = 0; b < c.B; ++b)
      for (int i = 0; i < T; ++i)
        for (int j = 0; j + w < i; ++j) {
          ++distant;
          masked += !c.share(b, i, j);
        }
    if (T > 1) {
      EXPECT_GT(double(masked), 0.2 * double(distant)) << masked << " of " << distant;
      EXPECT_GT(test::max_rel_error(c.out, c.dense()), 1e-2);  // the mask acts
    }
  }
}

// route_training hard: the forward is the masked one; its dqkv is exact (finite differences with
// the routing fixed); dg is the straight-through estimate (finite, and nonzero).
TEST(FocusAttention, HardGateBackwardIsExactForQKVAndStraightThroughForG) {
  Case c(2, 8, 2, 1, 4, 3, 1);
  const FocusGateParams gate = gate_of(FocusGateKind::hard, 1);
  const std::vector<float> w = test::random_vector(c.out.size(), 4);
  auto [dqkv, dg] = c.backward(gate, w);
  auto f = [&] {
    c.forward(gate);
    return test::weighted_sum(w, c.out);
  };
  EXPECT_LT(test::max_rel_error(dqkv, test::finite_difference(c.qkv.data(), c.qkv.size(), f)),
            2e-3);
  double norm = 0;
  for (float x : dg) {
    ASSERT_TRUE(std::isfinite(x));
    norm += std::fabs(x);
  }
  EXPECT_GT(norm, 1e-3);
}

// The straight-through gradient of the hard gate, recomputed here pair by pair: each distant pair
// (i - j > w) gives da = min(exp(s - lse_i), 1) (dP - delta_i) to g_i . g_j, lse and delta over
// the attended pairs. Large scores, so that some masked pair's exp(s - lse) passes 1 (without the
// bound, the gradient of such a pair grows with it: unstable training, docs/focus.md).
TEST(FocusAttention, HardGateStraightThroughWeightIsBoundedByOne) {
  Case c(1, 24, 1, 1, 4, 4, 1, 7);
  for (float& x : c.qkv) x *= 3.f;
  const FocusGateParams gate = gate_of(FocusGateKind::hard, 2);
  const std::vector<float> w = test::random_vector(c.out.size(), 5);
  const std::vector<float> dg = c.backward(gate, w).second;
  const int T = c.T, D = c.D, K = c.K, W = int(c.layout.width());
  const float* q = c.qkv.data();
  const float* k = q + c.layout.k_offset();
  const float* v = q + c.layout.v_offset();
  auto dot = [&](const float* a, const float* b) {
    double r = 0;
    for (int d = 0; d < D; ++d) r += double(a[d]) * b[d];
    return r;
  };
  std::vector<double> want(dg.size(), 0.0);
  int above_one = 0;
  for (int i = 0; i < T; ++i) {
    auto score = [&](int j) { return dot(q + i * W, k + j * W) / std::sqrt(double(D)); };
    auto kept = [&](int j) { return i - j <= 2 || c.share(0, i, j); };
    double mx = -INFINITY, sum = 0, delta = 0;
    for (int j = 0; j <= i; ++j)
      if (kept(j)) mx = std::max(mx, score(j));
    for (int j = 0; j <= i; ++j)
      if (kept(j)) sum += std::exp(score(j) - mx);
    const double lse = mx + std::log(sum);
    for (int j = 0; j <= i; ++j)
      if (kept(j)) delta += std::exp(score(j) - lse) * dot(w.data() + i * D, v + j * W);
    for (int j = 0; j + 2 < i; ++j) {
      const double e = std::exp(score(j) - lse);
      above_one += e > 1 ? 1 : 0;
      const double da = std::min(e, 1.0) * (dot(w.data() + i * D, v + j * W) - delta);
      for (int x = 0; x < K; ++x) {
        want[size_t(i) * K + x] += da * c.g[size_t(j) * K + x];
        want[size_t(j) * K + x] += da * c.g[size_t(i) * K + x];
      }
    }
  }
  EXPECT_GT(above_one, 0);  // the bound acts in this case
  EXPECT_LT(test::max_rel_error(dg, std::vector<float>(want.begin(), want.end())), 1e-5);
}

// The wgmma dg's same-precision reference (focus_attention_bwd_bf16_da_ref): dg from bf16-rounded
// dA differs from the exact reference's, by about the bf16 rounding; additive and hard gates.
TEST(FocusAttention, Bf16DaReferenceRoundsDg) {
  for (FocusGateKind kind : {FocusGateKind::additive, FocusGateKind::hard}) {
    SCOPED_TRACE(int(kind));
    Case c(2, 40, 2, 1, 8, 4, 2);
    const FocusGateParams gate = gate_of(kind, 3);
    const std::vector<float> w = test::random_vector(c.out.size(), 5);
    const std::vector<float> dg = c.backward(gate, w).second;
    const std::vector<float> dg16 = test::focus_dg_bf16_da(
        c.qkv, w, c.out, c.lse, c.layout, c.B, c.T, c.g, c.K, gate, c.groups.data(), c.top_k);
    const double err = test::max_rel_error(dg16, dg);
    EXPECT_GT(err, 1e-5);  // rounded
    EXPECT_LT(err, 1e-2);  // about 2^-9 per product
  }
}

// Decoding a chunk at a time against a cache equals the rows of the full forward, every gate.
TEST(FocusAttention, DecodeEqualsTheFullForward) {
  for (FocusGateKind kind :
       {FocusGateKind::additive, FocusGateKind::multiplicative, FocusGateKind::hard}) {
    Case c(2, 11, 4, 2, 4, 4, 2);
    const FocusGateParams gate = gate_of(kind, 2);
    c.forward(gate);
    const int max_T = 16, B = c.B, Hkv = c.Hkv, D = c.D, K = c.K, tk = c.top_k;
    std::vector<float> kc(size_t(B) * Hkv * max_T * D), vc(kc.size()), gc(size_t(B) * max_T * K);
    std::vector<int32_t> grc(size_t(B) * max_T * tk);
    std::vector<float> decoded(c.out.size());
    const int64_t W = c.layout.width(), Q = c.layout.q_width();
    for (int t0 = 0; t0 < c.T;) {
      const int n = std::min(t0 == 0 ? 5 : 1 + t0 % 3, c.T - t0);
      std::vector<float> chunk(size_t(B) * n * W), o(size_t(B) * n * Q);
      for (int b = 0; b < B; ++b) {
        std::copy_n(c.qkv.data() + (size_t(b) * c.T + t0) * W, size_t(n) * W,
                    chunk.data() + size_t(b) * n * W);
        std::copy_n(c.g.data() + (size_t(b) * c.T + t0) * K, size_t(n) * K,
                    gc.data() + (size_t(b) * max_T + t0) * K);
        std::copy_n(c.groups.data() + (size_t(b) * c.T + t0) * tk, size_t(n) * tk,
                    grc.data() + (size_t(b) * max_T + t0) * tk);
      }
      Tensor kt = cpu_tensor(kc, {B, Hkv, max_T, D}), vt = cpu_tensor(vc, {B, Hkv, max_T, D});
      Tensor ch = cpu_tensor(chunk, {B, n, W});
      ops::kv_cache_write(*c.ctx, kt, vt, ch, t0, c.layout);
      ops::focus_attention_decode(*c.ctx, cpu_tensor(o, {B, n, Q}), ch, kt, vt,
                                  cpu_tensor(gc, {B, max_T, K}), cpu_tensor(grc, {B, max_T, tk}),
                                  t0, c.layout, gate);
      for (int b = 0; b < B; ++b)
        std::copy_n(o.data() + size_t(b) * n * Q, size_t(n) * Q,
                    decoded.data() + (size_t(b) * c.T + t0) * Q);
      t0 += n;
    }
    EXPECT_LT(test::max_rel_error(decoded, c.out), 1e-6);
  }
}

TEST(FocusAttention, ArgumentChecks) {
  Case c(1, 4, 2, 2, 4, 3, 1);
  test::expect_error(
      [&] {
        ops::focus_attention_fwd(*c.ctx, c.out_t(), c.lse_t(), c.qkv_t(), c.layout, Tensor(),
                                 Tensor(), gate_of(FocusGateKind::additive, 1));
      },
      {"focus_attention: the soft gates need the assignment g"});
  test::expect_error(
      [&] {
        ops::focus_attention_fwd(*c.ctx, c.out_t(), c.lse_t(), c.qkv_t(), c.layout, c.g_t(),
                                 Tensor(), gate_of(FocusGateKind::hard, 1));
      },
      {"groups (the hard gate's group ids) is required"});
  // Ids outside [0, K) name no group: refused, not compared as values (the CUDA kernels would
  // read them as no group or not at all).
  ops::focus_route_topk(*c.ctx, c.groups_t(), c.g_t());
  for (int32_t bad : {-1, 3}) {
    c.groups[2] = bad;
    test::expect_error(
        [&] {
          ops::focus_attention_fwd(*c.ctx, c.out_t(), c.lse_t(), c.qkv_t(), c.layout, c.g_t(),
                                   c.groups_t(), gate_of(FocusGateKind::hard, 1));
        },
        {"group ids must be in [0, 3), got " + std::to_string(bad), "token 2"});
  }
  // qkv of exactly three dimensions (a fourth passed with n times the elements), and head
  // counts that group, on the decode path too.
  test::expect_error(
      [&] {
        ops::focus_attention_fwd(*c.ctx, c.out_t(), c.lse_t(),
                                 cpu_tensor(c.qkv, {c.B, c.T, c.layout.width(), 1}), c.layout,
                                 c.g_t(), Tensor(), gate_of(FocusGateKind::additive, 1));
      },
      {"focus_attention: qkv must be [B, T, W]"});
  QKVLayout odd = c.layout;
  odd.n_kv_head = 3;  // does not divide 2
  test::expect_error(
      [&] {
        ops::focus_attention_decode(*c.ctx, c.out_t(), c.qkv_t(), Tensor(), Tensor(), Tensor(),
                                    Tensor(), 0, odd, gate_of(FocusGateKind::additive, 1));
      },
      {"focus_attention: n_kv_head (3) must divide n_head (2)"});
}

}  // namespace
}  // namespace attnlab
