// The fused dg step of the wgmma Focus backward (kFusedDg in kernels/focus/focus_wgmma_bwd.cu) on
// the CPU: every thread of a warpgroup is emulated with the functions the kernel calls
// (gate_chunk_da, and dg_key_products' / dg_query_products' fragment offsets, packing and
// movmatrix transpose over the emulated ldmatrix / mma.sync of tests/ops/focus_wgmma_emulate.h;
// at KP 8 the dA^T tile's fragment mapping and reduce_dgq's lane exchange around a plain product
// for the dg_query wgmma) on one tile of 64 keys x kQ queries. Checks that the gated P^T is the
// unfused gate's, that dg_key and dg_query equal the direct sums of dA g over the distant pairs (dA
// = P (dP - delta) from the ungated P) with the operands the kernel rounds (bf16 dA; g as its bf16
// hi + lo parts), and how far the two bf16 products (bf16 dA times g hi, plus times g lo) lie from
// the exact sums: the precision that replaces the dg pass's three split products.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/focus/focus_wgmma_layout.h"
#include "ops/focus_wgmma_emulate.h"

namespace attnlab {
namespace {

using namespace focus_wgmma;
using namespace focus_wgmma_emulate;

struct FusedTile {
  int K, q0, k0, w;
  int top_k = 0;  // 0: the additive gate; >= 1: the hard gate's groups per token
};

// g as the kernel's two products see it: its bf16 hi part plus its bf16 lo part (split_rows).
double split_value(float x) {
  const float hi = bf16_round(x);
  return double(hi) + double(bf16_round(x - hi));
}

// max |a - b| over max |b| (as test::max_rel_error), 0 when b is all zero and a equals it.
double rel_max(const std::vector<double>& a, const std::vector<double>& b) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::fabs(a[i] - b[i]));
    scale = std::max(scale, std::fabs(b[i]));
  }
  return scale > 0 ? err / scale : err;
}

// One warpgroup (keys k0 .. k0 + 63 as rows, queries q0 .. q0 + kQ - 1 as columns) through the
// fused chunk loop. *fused_err: the error of its dg (key and query sides, of the largest
// |dg|) against the exact sums; *dense_err: the same for the dense backward's arithmetic on the
// same terms (as dK = dS^T Q: a bf16 dS operand times an exact operand, bf16 output), the
// same-precision reference of the bound.
template <int kQ>
void check_fused_tile(const FusedTile& f, uint32_t seed, double* fused_err, double* dense_err) {
  const int K = f.K, KP = padded_groups(K), ld = g_ld(KP), dld = dgq_ld(KP);
  const int T = std::max(f.q0 + kQ, f.k0 + 64);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::uniform_real_distribution<float> ud(0.f, 1.f);
  std::vector<float> g(size_t(T) * K);
  for (int t = 0; t < T; ++t) {  // a softmax of random scores, as the model's g
    double z = 0;
    std::vector<double> e(static_cast<size_t>(K));
    for (int c = 0; c < K; ++c) z += (e[size_t(c)] = std::exp(2.0 * nd(rng)));
    for (int c = 0; c < K; ++c) g[size_t(t) * K + c] = float(e[size_t(c)] / z);
  }
  // P (ungated, zero where the key does not see the query), dP, delta per query: [64][kQ]. For
  // the hard gate up to 3: a masked pair's exp(s - lse) is no probability and may pass 1 (its
  // straight-through weight is bounded by 1).
  const float p_max = f.top_k > 0 ? 3.f : 1.f;
  std::vector<float> p(size_t(64) * kQ), dp(p.size()), delta(static_cast<size_t>(kQ));
  for (int r = 0; r < 64; ++r)
    for (int j = 0; j < kQ; ++j) {
      p[size_t(r) * kQ + j] = f.q0 + j >= f.k0 + r ? p_max * ud(rng) : 0.f;
      dp[size_t(r) * kQ + j] = nd(rng);
    }
  for (float& x : delta) x = 0.5f * nd(rng);
  const GTile gq = split_rows(g, f.q0, kQ, K, T, true), gk = split_rows(g, f.k0, 64, K, T);
  const float eps = 1e-6f;
  // The hard gate: each token's top_k groups drawn at random (repeats allowed, as a set), the
  // group sets the kernel reads (bit x: group x); a pair is attended iff the sets meet.
  const bool hard = f.top_k > 0;
  std::vector<unsigned> set(static_cast<size_t>(T), 0u);
  std::uniform_int_distribution<int> pick(0, K - 1);
  for (unsigned& m : set)
    for (int x = 0; x < f.top_k; ++x) m |= 1u << pick(rng);
  auto shares = [&](int key, int q) { return (set[size_t(key)] & set[size_t(q)]) != 0u; };
  auto affinity = [&](int key, int q) {
    double a = 0;
    for (int c = 0; c < K; ++c) a += double(g[size_t(q) * K + c]) * g[size_t(key) * K + c];
    return float(a);
  };

  std::vector<float> gated(p.size(), -1.f);
  std::vector<double> dgk(size_t(64) * KP, 0.0);
  std::vector<float> dgq_tile(static_cast<size_t>(kQ * dld), 0.f);
  // KP 8 (wgmma_dgq): each chunk's bf16 dA^T fragment lands in the [64 keys][kQ] tile, every
  // element exactly once per tile (counted); dg_query is then the tile's product with g.
  std::vector<float> dat(size_t(64) * kQ, 0.f);
  std::vector<int> writes(dat.size(), 0);
  for (int warp = 0; warp < kWarps; ++warp) {
    static float s[kLanes][kQ / 2], dpr[kLanes][kQ / 2];
    float dgk_w[kLanes][4][4] = {};  // dgk_tiles(KP) <= 4 used
    for (int l = 0; l < kLanes; ++l)
      for (int i = 0; i < kQ / 2; ++i) {
        const Coord c = acc_coord(i, warp, l);
        s[l][i] = p[size_t(c.row) * kQ + c.col];
        dpr[l][i] = dp[size_t(c.row) * kQ + c.col];
      }
    for (int chunk = 0; chunk < kQ / 16; ++chunk) {
      float da[kLanes][2][4];
      for (int l = 0; l < kLanes; ++l) {
        const int row0 = f.k0 + 16 * warp + l / 4, col0 = f.q0 + 2 * (l % 4);
        float a[2][4], dl[2][2];
        unsigned mq[2][2];
        const unsigned mk[2] = {set[size_t(row0)], set[size_t(row0 + 8)]};  // the kernel's key0
        for (int n = 0; n < 2; ++n) {
          for (int v = 0; v < 4; ++v) {
            const Rc cc = ptx_c(v, l);
            a[n][v] = affinity(f.k0 + 16 * warp + cc.row, f.q0 + 16 * chunk + 8 * n + cc.col);
          }
          for (int e = 0; e < 2; ++e) {
            const int q = 16 * chunk + 8 * n + 2 * (l % 4) + e;  // the kernel's mask tile index
            dl[n][e] = delta[size_t(q)];
            mq[n][e] = set[size_t(f.q0 + q)];
          }
        }
        if (hard) {
          float plain[kQ / 2];  // the kernel without dg: gate_chunk_hard alone
          std::copy(s[l], s[l] + kQ / 2, plain);
          gate_chunk_hard(plain, mk, mq, chunk, row0, col0, f.w);
          gate_chunk_hard_da(s[l], da[l], dpr[l], mk, mq, dl, chunk, row0, col0, f.w);
          for (int i = 0; i < kQ / 2; ++i) ASSERT_EQ(plain[i], s[l][i]) << "lane " << l;
        } else {
          gate_chunk_da(s[l], da[l], dpr[l], a, dl, chunk, row0, col0, f.w, eps);
        }
      }
      // pack_da: A = da packed to bf16 (a_pack_tile / a_pack_value).
      float af[kLanes][4][2];
      for (int l = 0; l < kLanes; ++l)
        for (int x = 0; x < 4; ++x)
          for (int h = 0; h < 2; ++h)
            af[l][x][h] = bf16_round(da[l][a_pack_tile(x)][a_pack_value(x, h)]);
      // dg_key += dA^T G_q: 16 columns of the g tile per ldmatrix (KP = 8: hi | lo, into two
      // accumulator tiles; else hi, then lo, of 16 groups, into the same two).
      const int n_loads = KP == 8 ? 1 : 2 * (KP / 16);
      for (int nb = 0; nb < n_loads; ++nb) {
        const int part = KP == 8 ? 0 : nb / (KP / 16), nbp = KP == 8 ? 0 : nb % (KP / 16);
        int off[kLanes];
        for (int l = 0; l < kLanes; ++l)
          off[l] = ldsm_t_b_offset(16 * chunk, part * KP + 16 * nbp, l, gq.ld);
        float b[kLanes][4][2];
        emulate_ldsm_t(b, gq.tile, off);
        for (int t = 0; t < 2; ++t) {
          float bt[kLanes][2][2], c[kLanes][4];
          for (int l = 0; l < kLanes; ++l) {
            for (int x = 0; x < 2; ++x)
              for (int h = 0; h < 2; ++h) bt[l][x][h] = b[l][2 * t + x][h];
            for (int v = 0; v < 4; ++v) c[l][v] = dgk_w[l][2 * nbp + t][v];
          }
          emulate_mma(c, af, bt);
          for (int l = 0; l < kLanes; ++l)
            for (int v = 0; v < 4; ++v) dgk_w[l][2 * nbp + t][v] = c[l][v];
        }
      }
      if (wgmma_dgq(KP)) {  // store_ds_chunk: register x, half h = accumulator 8 chunk + 2 x + h
        for (int l = 0; l < kLanes; ++l)
          for (int x = 0; x < 4; ++x)
            for (int h = 0; h < 2; ++h) {
              const Coord c = acc_coord(8 * chunk + 2 * x + h, warp, l);
              dat[size_t(c.row) * kQ + c.col] = af[l][x][h];
              ++writes[size_t(c.row) * kQ + c.col];
            }
      }
      for (int n = 0; n < 2 && !wgmma_dgq(KP); ++n) {  // dg_query^T = G_k^T (hi + lo) dA^T
        float b[kLanes][2][2];
        for (int x = 0; x < 2; ++x) {
          float in[kLanes][2], out[kLanes][2];
          for (int l = 0; l < kLanes; ++l)
            for (int h = 0; h < 2; ++h) in[l][h] = af[l][2 * n + x][h];
          emulate_movmatrix(out, in);
          for (int l = 0; l < kLanes; ++l)
            for (int h = 0; h < 2; ++h) b[l][x][h] = out[l][h];
        }
        for (int mt = 0; mt < KP / 16; ++mt) {
          float c[kLanes][4] = {};
          for (int part = 0; part < 2; ++part) {
            int off[kLanes];
            for (int l = 0; l < kLanes; ++l)
              off[l] = ldsm_t_a_offset(16 * warp, part * KP + 16 * mt, l, ld);
            float gt[kLanes][4][2];
            emulate_ldsm_t(gt, gk.tile, off);
            emulate_mma(c, gt, b);
          }
          for (int l = 0; l < kLanes; ++l)
            for (int v = 0; v < 4; ++v) {
              const Coord cc = mma_c_coord(v, l);
              dgq_tile[size_t((16 * chunk + 8 * n + cc.col) * dld + 16 * mt + cc.row)] += c[l][v];
            }
        }
      }
    }
    for (int l = 0; l < kLanes; ++l) {
      for (int i = 0; i < kQ / 2; ++i) {
        const Coord c = acc_coord(i, warp, l);
        gated[size_t(c.row) * kQ + c.col] = s[l][i];
      }
      if (KP == 8) {  // the hi and lo tiles summed, as the kernel does before its atomics
        for (int v = 0; v < 4; ++v) dgk_w[l][0][v] += dgk_w[l][1][v];
      }
      for (int nt = 0; nt < KP / 8; ++nt)
        for (int v = 0; v < 4; ++v) {
          const Coord cc = mma_c_coord(v, l);
          dgk[size_t(16 * warp + cc.row) * KP + 8 * nt + cc.col] += dgk_w[l][nt][v];
        }
    }
  }

  // Direct: the gate, and dg over the distant pairs, with the kernel's bf16 operands and exact.
  std::vector<double> rk(dgk.size(), 0.0), rq(static_cast<size_t>(kQ * KP), 0.0), xk(rk), xq(rq),
      dk(rk), dq(rq), scale_k(rk), scale_q(rq);
  int distant = 0;
  for (int r = 0; r < 64; ++r) {
    for (int j = 0; j < kQ; ++j) {
      const int key = f.k0 + r, q = f.q0 + j;
      const float p0 = p[size_t(r) * kQ + j];
      const bool far = q - key > f.w;
      const float want = !far   ? p0
                         : hard ? (shares(key, q) ? p0 : 0.f)
                                : p0 * (affinity(key, q) + eps);
      ASSERT_EQ(gated[size_t(r) * kQ + j], want) << "key " << key << " query " << q;
      if (!far) continue;
      ++distant;
      const float da =
          (hard ? std::min(p0, 1.f) : p0) * (dp[size_t(r) * kQ + j] - delta[size_t(j)]);
      for (int c = 0; c < K; ++c) {
        const double gqc = g[size_t(q) * K + c], gkc = g[size_t(key) * K + c];
        const double db = bf16_round(da);
        rk[size_t(r) * KP + c] += db * split_value(float(gqc));
        rq[size_t(j) * KP + c] += db * split_value(float(gkc));
        xk[size_t(r) * KP + c] += double(da) * gqc;
        xq[size_t(j) * KP + c] += double(da) * gkc;
        dk[size_t(r) * KP + c] += db * gqc;
        dq[size_t(j) * KP + c] += db * gkc;
        scale_k[size_t(r) * KP + c] += std::fabs(db * gqc);
        scale_q[size_t(j) * KP + c] += std::fabs(db * gkc);
      }
    }
  }
  if (f.q0 + kQ - 1 - f.k0 > f.w) {
    EXPECT_GT(distant, 0);
  }
  if (wgmma_dgq(KP)) {
    // issue_dgq: dA (the tile, transposed) times the keys' g hi (columns 0 .. 7 of the m64n16
    // accumulator) and lo (8 .. 15), fp32 sums; then reduce_dgq's per-lane sums and lane-pair
    // exchange, each (query, group) of the 4-group rows written exactly once.
    const bool ran = f.q0 + kQ - 1 - f.k0 > f.w;  // the kernel gates (and stores) only then
    for (size_t at = 0; at < writes.size(); ++at) ASSERT_EQ(writes[at], 1) << "dA^T " << at;
    std::vector<float> acc(static_cast<size_t>(kQ * 16), 0.f);
    for (int j = 0; j < kQ; ++j)
      for (int col = 0; col < 16; ++col) {
        float sum = 0.f;
        for (int r = 0; r < 64; ++r) {
          const float x = col % 8 < K ? g[size_t(f.k0 + r) * K + col % 8] : 0.f;
          const float hi = bf16_round(x), part = col < 8 ? hi : bf16_round(x - hi);
          sum += dat[size_t(r) * kQ + j] * part;
        }
        acc[size_t(j) * 16 + col] = sum;
      }
    std::vector<int> red(static_cast<size_t>(kQ * KP), 0);
    for (int qb = 0; qb < kQ / 64; ++qb)
      for (int warp = 0; warp < kWarps; ++warp) {
        float h[kLanes][2][2], send[kLanes][2];
        for (int l = 0; l < kLanes; ++l) {
          float d[8];
          for (int i = 0; i < 8; ++i) {
            const Coord c = acc_coord(i, warp, l);
            d[i] = acc[size_t(64 * qb + c.row) * 16 + c.col];
          }
          for (int r = 0; r < 2; ++r)
            for (int e = 0; e < 2; ++e) h[l][r][e] = d[2 * r + e] + d[4 + 2 * r + e];
          for (int e = 0; e < 2; ++e) send[l][e] = h[l][dgq_v4_send_row(l)][e];
        }
        for (int l = 0; l < kLanes; ++l) {
          const float recv[2] = {send[l ^ 1][0], send[l ^ 1][1]};
          float v[4];
          dgq_v4_assemble(h[l], recv, l, v);
          const int q = 64 * qb + 16 * warp + l / 4 + 8 * dgq_v4_row(l), c0 = dgq_v4_group0(l);
          for (int e = 0; e < 4; ++e) {
            ++red[size_t(q) * KP + c0 + e];
            if (ran) dgq_tile[size_t(q) * dld + c0 + e] = v[e];
          }
        }
      }
    for (size_t at = 0; at < red.size(); ++at) ASSERT_EQ(red[at], 1) << "dg_query " << at;
  }
  std::vector<double> dgq(rq.size());
  for (int j = 0; j < kQ; ++j) {
    for (int c = 0; c < dld; ++c) {
      const float v = dgq_tile[size_t(j) * dld + c];
      if (c < KP) {
        dgq[size_t(j) * KP + c] = v;
      } else {
        EXPECT_EQ(v, 0.f) << "padding column " << c;
      }
    }
  }
  // Same operands: equal up to the fp32 accumulation (a mapping error moves whole terms).
  for (size_t i = 0; i < rk.size(); ++i) {
    ASSERT_NEAR(dgk[i], rk[i], 2e-6 * scale_k[i] + 1e-12) << "dg_key " << i << " K " << K;
  }
  for (size_t i = 0; i < rq.size(); ++i) {
    ASSERT_NEAR(dgq[i], rq[i], 2e-6 * scale_q[i] + 1e-12) << "dg_query " << i << " K " << K;
  }
  *fused_err = std::max(rel_max(dgk, xk), rel_max(dgq, xq));
  for (double& x : dk) x = bf16_round(float(x));
  for (double& x : dq) x = bf16_round(float(x));
  *dense_err = std::max(rel_max(dk, xk), rel_max(dq, xq));
}

const std::vector<FusedTile> kTiles = {
    {0, 512, 0, 128},   // every pair distant
    {0, 192, 128, 40},  // a diagonal tile cut by the window and the causal mask
    {0, 128, 128, 0},   // w = 0 on the diagonal
    {0, 64, 0, 1000},   // nothing distant: dg = 0, P unchanged
};

// top_k 0: the additive gate; >= 1: the hard gate with that many groups per token.
template <int kQ>
void check_all(int top_k = 0) {
  double worst = 0, worst_ratio = 0, dense_worst = 0;
  for (int K : {1, 4, 8, 16, 17, 32}) {
    for (size_t t = 0; t < kTiles.size(); ++t) {
      FusedTile f = kTiles[t];
      f.K = K;
      f.top_k = top_k;
      SCOPED_TRACE(testing::Message() << "kQ " << kQ << " K " << K << " q0 " << f.q0 << " k0 "
                                      << f.k0 << " w " << f.w << " top_k " << top_k);
      double e = 1.0, d = 1.0;
      check_fused_tile<kQ>(f, uint32_t(31 * K + t), &e, &d);
      worst = std::max(worst, e);
      dense_worst = std::max(dense_worst, d);
      if (d > 0) worst_ratio = std::max(worst_ratio, e / d);
      // Within 2x the same-precision reference (STYLE.md), as the GPU test's dg bound (2x the
      // dense bf16 kernels' error, at least 2^-8).
      EXPECT_LE(e, std::max(2 * d, 1.0 / 256));
    }
  }
  std::printf(
      "  [fused dg] kQ %d top_k %d: bf16 dA x (g hi + lo) error vs exact %.2e of max |dg| "
      "(dense-style bf16 %.2e, worst ratio %.2f)\n",
      kQ, top_k, worst, dense_worst, worst_ratio);
}

TEST(FocusWgmmaFusedLayout, TileDgMatchesDirectQ128) { check_all<128>(); }
TEST(FocusWgmmaFusedLayout, TileDgMatchesDirectQ64) { check_all<64>(); }
// The hard gate (route_training: hard's backward): P^T kept where the pair is local or shares a
// group, 0 elsewhere; dA (the straight-through gradient, its weight min(P, 1)) on every distant
// pair, as the additive gate's; the same dg products. gate_chunk_hard (no dg) gates as
// gate_chunk_hard_da.
TEST(FocusWgmmaFusedLayout, HardGateTileMatchesDirectQ128) {
  check_all<128>(1);
  check_all<128>(2);
}
TEST(FocusWgmmaFusedLayout, HardGateTileMatchesDirectQ64) {
  check_all<64>(1);
  check_all<64>(2);
}

// dgq_ld (KP 16, 32): the 32 lanes' red.shared of one C value land on 32 distinct banks.
TEST(FocusWgmmaFusedLayout, DgQueryTileIsBankConflictFree) {
  for (int KP : {16, 32}) {
    for (int v = 0; v < 4; ++v) {
      std::vector<int> banks(32, 0);
      for (int l = 0; l < kLanes; ++l) {
        const Coord cc = mma_c_coord(v, l);  // row = group, column = query
        ++banks[size_t((cc.col * dgq_ld(KP) + cc.row) % 32)];
      }
      for (int b = 0; b < 32; ++b) EXPECT_EQ(banks[size_t(b)], 1) << "KP " << KP << " v " << v;
    }
  }
}

}  // namespace
}  // namespace attnlab
