// The index math of the wgmma Focus kernels (kernels/focus/focus_wgmma_layout.h) on the CPU: every
// thread of a warpgroup is emulated with the functions the kernels call. Checks that the gate's
// chunk loop covers each accumulator element of a tile exactly once and at the (row, column)
// the wgmma accumulator holds there, that the g fragment offsets give the mma.sync m16n8k16
// operands of the PTX ISA (spelled out here independently), and that a whole gated tile (the
// affinity by emulated mma.sync on the split g, the gate) equals the direct formula, and the
// movmatrix transpose. The backward's dg products: test_focus_wgmma_fused_layout.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/focus/focus_wgmma_layout.h"
#include "ops/focus_wgmma_emulate.h"

namespace attnlab {
namespace {

using namespace focus_wgmma;
using namespace focus_wgmma_emulate;

TEST(FocusWgmmaLayout, FragmentsMatchPtx) {
  for (int lane = 0; lane < kLanes; ++lane) {
    for (int x = 0; x < 4; ++x) {
      for (int h = 0; h < 2; ++h) {
        EXPECT_EQ(mma_a_coord(x, h, lane).row, ptx_a(x, h, lane).row);
        EXPECT_EQ(mma_a_coord(x, h, lane).col, ptx_a(x, h, lane).col);
        if (x < 2) {
          EXPECT_EQ(mma_b_coord(x, h, lane).row, ptx_b(x, h, lane).row);
          EXPECT_EQ(mma_b_coord(x, h, lane).col, ptx_b(x, h, lane).col);
        }
      }
    }
    for (int c = 0; c < 4; ++c) {
      EXPECT_EQ(mma_c_coord(c, lane).row, ptx_c(c, lane).row);
      EXPECT_EQ(mma_c_coord(c, lane).col, ptx_c(c, lane).col);
    }
  }
}

// The chunk loop (as gate_chunk runs it) covers each of a thread's N / 2 accumulator elements
// once, each element of the 64 x N tile is held by exactly one thread, and the element a chunk
// value stands for is where the mma.sync C fragment of the chunk puts it.
template <int N>
void check_cover() {
  std::vector<int> tile(64 * N, 0);
  for (int warp = 0; warp < kWarps; ++warp) {
    for (int lane = 0; lane < kLanes; ++lane) {
      std::vector<int> seen(N / 2, 0);
      for (int chunk = 0; chunk < N / 16; ++chunk) {
        for (int n = 0; n < 2; ++n) {
          for (int c = 0; c < 4; ++c) {
            const int i = chunk_acc_index(chunk, n, c);
            ASSERT_GE(i, 0);
            ASSERT_LT(i, N / 2);
            ++seen[size_t(i)];
            const Coord a = acc_coord(i, warp, lane);
            const Rc m = ptx_c(c, lane);
            EXPECT_EQ(a.row, 16 * warp + m.row);
            EXPECT_EQ(a.col, 16 * chunk + 8 * n + m.col);
          }
        }
      }
      for (int i = 0; i < N / 2; ++i) EXPECT_EQ(seen[size_t(i)], 1) << "element " << i;
      for (int i = 0; i < N / 2; ++i) {
        const Coord a = acc_coord(i, warp, lane);
        ASSERT_TRUE(a.row >= 0 && a.row < 64 && a.col >= 0 && a.col < N);
        ++tile[size_t(a.row * N + a.col)];
      }
    }
  }
  for (int e = 0; e < 64 * N; ++e) EXPECT_EQ(tile[size_t(e)], 1) << "tile element " << e;
}

TEST(FocusWgmmaLayout, ChunksCoverTheAccumulatorOnce64) { check_cover<64>(); }
TEST(FocusWgmmaLayout, ChunksCoverTheAccumulatorOnce128) { check_cover<128>(); }

// The A-fragment packing of a chunk (a_pack_tile / a_pack_value) is the A operand layout: the
// value packed into register x, half h, sits at the A coordinate of (x, h).
TEST(FocusWgmmaLayout, ChunkAsAOperand) {
  for (int lane = 0; lane < kLanes; ++lane) {
    for (int x = 0; x < 4; ++x) {
      for (int h = 0; h < 2; ++h) {
        const int n = a_pack_tile(x), c = a_pack_value(x, h);
        const Rc cc = ptx_c(c, lane);
        const Rc aa = ptx_a(x, h, lane);
        EXPECT_EQ(cc.row, aa.row);
        EXPECT_EQ(8 * n + cc.col, aa.col);
      }
    }
  }
}

TEST(FocusWgmmaLayout, GTileLeadingDimensionIsBankConflictFree) {
  EXPECT_EQ(padded_groups(1), 8);
  EXPECT_EQ(padded_groups(8), 8);
  EXPECT_EQ(padded_groups(9), 16);
  EXPECT_EQ(padded_groups(16), 16);
  EXPECT_EQ(padded_groups(17), 32);
  EXPECT_EQ(padded_groups(32), 32);
  for (int KP : {8, 16, 32}) {
    for (const int ld : {g_ld(KP), focus_wgmma::gq_ld(KP)}) {
      // 32-bit loads of g_b_offset by the 32 lanes (register 0): 32 distinct banks.
      std::vector<int> banks(32, 0);
      for (int lane = 0; lane < kLanes; ++lane) {
        ++banks[size_t((g_b_offset(0, 0, 0, lane, ld) * 2 / 4) % 32)];
      }
      for (int b = 0; b < 32; ++b) EXPECT_EQ(banks[size_t(b)], 1) << "KP " << KP << " bank " << b;
      EXPECT_EQ(ld * 2 % 16, 0);  // 16-byte rows for cp.async and ldmatrix
      // ldmatrix: the 8 row addresses of one 8 x 8 matrix on distinct 16-byte bank groups
      std::vector<int> groups(8, 0);
      for (int r = 0; r < 8; ++r) ++groups[size_t((r * ld * 2 / 16) % 8)];
      for (int q = 0; q < 8; ++q) EXPECT_EQ(groups[size_t(q)], 1) << "KP " << KP << " ld " << ld;
    }
  }
}

// ---- a whole tile, emulated ----------------------------------------------------------------

std::vector<float> softmax_rows(int T, int K, uint32_t seed) {  // a softmax of random scores
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> g(size_t(T) * K);
  for (int t = 0; t < T; ++t) {
    double z = 0;
    std::vector<double> e(static_cast<size_t>(K));
    for (int c = 0; c < K; ++c) z += (e[size_t(c)] = std::exp(2.0 * nd(rng)));
    for (int c = 0; c < K; ++c) g[size_t(t) * K + c] = float(e[size_t(c)] / z);
  }
  return g;
}

// The forward's gate on one 64-row x 128-key tile (rows = queries q0.., keys k0..): the fp16
// wgmma's accumulator is the sum over the k16 steps of the split g's fp16 columns (zero past K
// and, at KP = 8, in the step's upper half, as load_g_affinity_tile writes them), at the
// (row, column) acc_coord gives each thread's element; every thread's s starts at 1 (an
// exponential) and gate_acc applies the affinity. The result must be (a + eps) on distant pairs,
// a = g_i . g_j in double, to fp16's rounding of both operands (2^-10 relative), and 1 elsewhere.
// One thread's affinity accumulator of a 64 x N forward tile (queries from q0, keys from k0):
// element i the sum over the first `width` operand columns of operand(query, c) operand(key, c),
// in double, at acc_coord's (row, column).
template <int N, typename Operand>
void affinity_acc(float (&a)[N / 2], int warp, int lane, int q0, int k0, int width,
                  Operand operand) {
  for (int i = 0; i < N / 2; ++i) {
    const Coord c = acc_coord(i, warp, lane);
    double acc = 0;
    for (int k = 0; k < width; ++k) acc += double(operand(q0 + c.row, k)) * operand(k0 + c.col, k);
    a[i] = float(acc);
  }
}

// halves: the affinity as two m64n64 accumulators (keys k0 .., k0 + 64 ..) gating the halves of
// s (acc_half), as the ping-pong forward does at D 128.
void check_forward_tile(int K, int q0, int k0, int w, uint32_t seed, bool halves = false) {
  constexpr int N = 128;
  const int T = std::max(q0 + 64, k0 + N);
  const std::vector<float> g = softmax_rows(T, K, seed);
  const int KP = padded_groups(K), width = 16 * affinity_ksteps(KP);
  auto operand = [&](int t, int c) {  // the forward tile's column c of token t
    return c < K ? affinity_operand_of(g[size_t(t) * K + c]) : 0.f;
  };
  const float eps = 1e-6f;
  std::vector<float> out(size_t(64) * N, -1.f);
  for (int warp = 0; warp < kWarps; ++warp) {
    for (int lane = 0; lane < kLanes; ++lane) {
      float s[N / 2], a[N / 2];
      for (int i = 0; i < N / 2; ++i) s[i] = 1.f;
      const int row0 = q0 + 16 * warp + lane / 4, col0 = k0 + 2 * (lane % 4);
      if (halves) {
        for (int h = 0; h < 2; ++h) {
          float ah[N / 4];
          affinity_acc<N / 2>(ah, warp, lane, q0, k0 + h * N / 2, width, operand);
          gate_acc(acc_half<N>(s, h), ah, row0, col0 + h * N / 2, w, eps);
        }
      } else {
        affinity_acc<N>(a, warp, lane, q0, k0, width, operand);
        gate_acc(s, a, row0, col0, w, eps);
      }
      for (int i = 0; i < N / 2; ++i) {
        const Coord c = acc_coord(i, warp, lane);
        out[size_t(c.row) * N + c.col] = s[i];
      }
    }
  }
  int gated = 0;
  for (int r = 0; r < 64; ++r) {
    for (int j = 0; j < N; ++j) {
      const int qi = q0 + r, key = k0 + j;
      double want = 1.0, tol = 0.0;
      if (qi - key > w) {
        double a = 0;
        for (int c = 0; c < K; ++c) a += double(g[size_t(qi) * K + c]) * g[size_t(key) * K + c];
        want = a + eps;
        tol = 1.1e-3 * a + 1e-9;  // 2 x 2^-11 per product (fp16 operands), the fp32 rounding
        ++gated;
      }
      ASSERT_NEAR(out[size_t(r) * N + j], want, tol + 1e-7 * want)
          << "query " << qi << " key " << key << " K " << K;
    }
  }
  if (q0 + 63 - k0 > w) {
    EXPECT_GT(gated, 0);
  }
}

TEST(FocusWgmmaLayout, ForwardTileGateMatchesDirect) {
  for (int K : {1, 4, 8, 9, 16, 17, 32}) {
    check_forward_tile(K, 512, 0, 128, 1u + K);   // every pair distant
    check_forward_tile(K, 192, 128, 40, 7u + K);  // a diagonal tile cut by the window
    check_forward_tile(K, 128, 128, 0, 11u + K);  // w = 0 on the diagonal
    check_forward_tile(K, 64, 0, 1000, 13u + K);  // nothing distant
  }
}

// The same with the affinity in two 64-key halves (the ping-pong forward at D 128): the second
// half's accumulator is the whole tile's upper elements (acc_half), at columns k0 + 64 ...
TEST(FocusWgmmaLayout, ForwardTileGateInHalvesMatchesDirect) {
  for (int K : {1, 8, 9, 32}) {
    check_forward_tile(K, 512, 0, 128, 1u + K, true);
    check_forward_tile(K, 192, 128, 40, 7u + K, true);  // the window cuts both halves' rows
    check_forward_tile(K, 128, 64, 0, 11u + K, true);   // diagonal in the second half
    check_forward_tile(K, 64, 0, 1000, 13u + K, true);
  }
}

// gate_acc exactly, with a = 0 (distant pairs become eps): strict distance (i - j > w), each
// element's row and column as the accumulator layout holds them.
TEST(FocusWgmmaLayout, ForwardGateDistanceIsStrict) {
  float s[64], a[64];
  for (int i = 0; i < 64; ++i) s[i] = 1.f, a[i] = 0.f;  // a = 0: distant pairs become eps
  const int w = 3, row0 = 10, col0 = 0;  // lane 0 of warp 0: row 10 (+ 8), columns 0, 1, 8, ..
  gate_acc(s, a, row0, col0, w, 0.5f);
  for (int i = 0; i < 64; ++i) {
    const int row = row0 + 8 * ((i >> 1) & 1), col = col0 + 8 * (i >> 2) + (i & 1);
    EXPECT_EQ(s[i], row - col > w ? 0.5f : 1.f) << "row " << row << " col " << col;
  }
}

// tile_all_distant on a warpgroup's 64 x 128 forward tile holds exactly when every element is
// distant, and there gate_acc_all gives gate_acc's values for every lane of every warp.
TEST(FocusWgmmaLayout, AllDistantTileGatesAsThePerElementTest) {
  int all = 0, some = 0;
  for (int wq0 : {0, 64, 128, 192, 256, 320, 448, 1024})
    for (int k0 : {0, 128, 256, 384})
      for (int w : {0, 1, 37, 63, 64, 127, 128, 129, 200}) {
        bool every = true;
        for (int row = wq0; row < wq0 + 64; ++row)
          for (int col = k0; col < k0 + 128; ++col) every = every && row - col > w;
        const bool fast = focus_wgmma::tile_all_distant(wq0, k0 + 127, w);
        ASSERT_EQ(fast, every) << "wq0 " << wq0 << " k0 " << k0 << " w " << w;
        if (!fast) {
          ++some;
          continue;
        }
        ++all;
        for (int warp = 0; warp < 4; ++warp)
          for (int lane = 0; lane < 32; ++lane) {
            float s1[64], s2[64], a[64];
            for (int i = 0; i < 64; ++i) {  // scattered nonzero values
              s1[i] = s2[i] = 0.1f + float((i * 37 + lane) % 64) / 16.f;
              a[i] = float((i * 53 + warp) % 61 + 1) * 2.5e5f;
            }
            gate_acc(s1, a, wq0 + 16 * warp + lane / 4, k0 + 2 * (lane % 4), w, 1e-3f);
            focus_wgmma::gate_acc_all(s2, a, 1e-3f);
            for (int i = 0; i < 64; ++i) ASSERT_EQ(s1[i], s2[i]) << "element " << i;
          }
      }
  EXPECT_GT(all, 10);  // both kinds of tile met
  EXPECT_GT(some, 10);
}

// The forward with eps folded into the affinity (K <= 8, KP 8: column 8 of both operands holds
// eps_fold_operand, as fill_g_upper_half writes it): on an all-distant tile s enters as
// exp2(x - m - kAffinityLog2Scale) and gate_acc_all_folded multiplies it by the accumulator; on
// other tiles gate_acc runs with eps 0 (a holds it). Either way the gated element must equal
// exp2(x - m) (a + eps) as check_forward_tile's, to fp16's rounding, eps within 2^-10.
void check_forward_tile_folded(int K, int q0, int k0, int w, float eps, uint32_t seed) {
  constexpr int N = 128;
  ASSERT_LE(K, 8);
  ASSERT_TRUE(eps_foldable(eps));
  const int T = std::max(q0 + 64, k0 + N);
  const std::vector<float> g = softmax_rows(T, K, seed);
  const float e = eps_fold_operand(eps);
  auto operand = [&](int t, int c) {  // columns 0 .. 16 of the KP 8 tile
    return c < K ? affinity_operand_of(g[size_t(t) * K + c]) : c == 8 ? e : 0.f;
  };
  const bool all = tile_all_distant(q0, k0 + N - 1, w);
  const float x = 0.75f;  // the exponent x - m of every element (any value <= 0 .. slack)
  std::vector<float> out(size_t(64) * N, -1.f);
  for (int warp = 0; warp < kWarps; ++warp) {
    for (int lane = 0; lane < kLanes; ++lane) {
      float s[N / 2], a[N / 2];
      affinity_acc<N>(a, warp, lane, q0, k0, 16, operand);
      for (int i = 0; i < N / 2; ++i) s[i] = std::exp2(all ? x - kAffinityLog2Scale : x);
      if (all)
        gate_acc_all_folded(s, a);
      else
        gate_acc(s, a, q0 + 16 * warp + lane / 4, k0 + 2 * (lane % 4), w, 0.f);
      for (int i = 0; i < N / 2; ++i) {
        const Coord c = acc_coord(i, warp, lane);
        out[size_t(c.row) * N + c.col] = s[i];
      }
    }
  }
  const double base = std::exp2(double(x));
  for (int r = 0; r < 64; ++r) {
    for (int j = 0; j < N; ++j) {
      const int qi = q0 + r, key = k0 + j;
      double want = base, tol = 1e-6 * base;
      if (qi - key > w) {
        double a = 0;
        for (int c = 0; c < K; ++c) a += double(g[size_t(qi) * K + c]) * g[size_t(key) * K + c];
        want = base * (a + eps);
        // fp16 operands (2 x 2^-11 per product), eps' within 2^-10 of eps, fp32 rounding
        tol = base * (1.1e-3 * a + 1e-3 * eps + 1e-9) + 1e-6 * want;
      }
      ASSERT_NEAR(out[size_t(r) * N + j], want, tol)
          << "query " << qi << " key " << key << " K " << K << " eps " << eps;
    }
  }
}

TEST(FocusWgmmaLayout, ForwardTileFoldedEpsMatchesDirect) {
  for (int K : {1, 4, 7, 8}) {
    for (float eps : {1e-6f, 1e-3f, 1e-12f, 0.5f}) {
      check_forward_tile_folded(K, 512, 0, 128, eps, 1u + K);   // every pair distant
      check_forward_tile_folded(K, 192, 128, 40, eps, 7u + K);  // a diagonal tile cut by w
      check_forward_tile_folded(K, 64, 0, 1000, eps, 13u + K);  // nothing distant
    }
  }
}

// The fold's operand: fp16 rounding as the kernel's __float2half_rn (round_to_f16 against the
// fp16 type over the normal range), eps' = e^2 2^-24 within 2^-10 of eps where foldable, and
// the range: eps whose operand would leave fp16's normal numbers keeps the unfolded gate.
TEST(FocusWgmmaLayout, FoldedEpsOperandIsFp16AndClose) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> ex(-14.f, 15.5f);  // (x 1.3 stays below 65504)
  for (int i = 0; i < 20000; ++i) {
    const float v = std::exp2(ex(rng)) * (i % 2 ? 1.f : 1.3f);
    ASSERT_EQ(round_to_f16(v), __half2float(__float2half_rn(v))) << v;
  }
  for (float eps : {2.3e-16f, 1e-12f, 1e-9f, 1e-6f, 1e-3f, 0.1f, 1.f, 100.f, 255.f}) {
    ASSERT_TRUE(eps_foldable(eps)) << eps;
    EXPECT_NEAR(eps_folded(eps), eps, eps * 0x1p-10f) << eps;
  }
  for (float eps : {1e-17f, 1e-20f, 300.f, 1e6f}) EXPECT_FALSE(eps_foldable(eps)) << eps;
}

// The backward's affinity of one 16 x 16 chunk (load_g_a, affinity_chunk): the fp16 operands
// converted from the hi and lo tile words in registers (at KP = 8 the registers of groups 8 ..
// 15 zero: the tile's padding is not), emulated mma.sync per k16 step and n-tile, unscaled; the
// tile's padding columns hold NaN here, as uninitialised shared memory may.
void check_backward_chunk(int K, uint32_t seed) {
  const int rows = 64, T = 128;
  const std::vector<float> g = softmax_rows(T, K, seed);
  const GTile gk = split_rows(g, 0, rows, K, T), gq = split_rows(g, 64, rows, K, T, true);
  const int KP = gk.KP, ld = gk.ld, qld = gq.ld;
  const bool q_f16 = focus_wgmma::gq_has_f16(KP);
  std::vector<float> tk = gk.tile, tq = gq.tile;
  for (int r = 0; r < rows; ++r) {
    for (int c = 2 * KP; c < ld; ++c) tk[size_t(r * ld + c)] = NAN;
    for (int c = q_f16 ? 2 * KP + KP : 2 * KP; c < qld; ++c) tq[size_t(r * qld + c)] = NAN;
  }
  for (int warp = 0; warp < kWarps; ++warp) {
    for (int chunk = 0; chunk < 4; ++chunk) {
      float a[kLanes][2][4] = {};
      for (int kc = 0; kc < affinity_ksteps(KP); ++kc) {
        for (int n = 0; n < 2; ++n) {
          float af[kLanes][4][2], bf[kLanes][2][2], c[kLanes][4];
          for (int lane = 0; lane < kLanes; ++lane) {
            for (int x = 0; x < 4; ++x) {
              const int off = g_a_offset(16 * warp, kc, x, lane, ld);
              for (int h = 0; h < 2; ++h) {
                af[lane][x][h] = KP < 16 && x >= 2 ? 0.f
                                                   : affinity_operand(tk[size_t(off + h)],
                                                                      tk[size_t(off + h + KP)]);
              }
            }
            for (int x = 0; x < 2; ++x) {  // affinity_chunk's b_word
              const int off = g_b_offset(16 * chunk + 8 * n, kc, x, lane, qld);
              for (int h = 0; h < 2; ++h) {
                const size_t o = size_t(off + h);
                bf[lane][x][h] = KP < 16 && x >= 1 ? 0.f
                                 : q_f16           ? tq[o + 2 * size_t(KP)]
                                                   : affinity_operand(tq[o], tq[o + size_t(KP)]);
              }
            }
            for (int v = 0; v < 4; ++v) c[lane][v] = a[lane][n][v];
          }
          emulate_mma(c, af, bf);
          for (int lane = 0; lane < kLanes; ++lane)
            for (int v = 0; v < 4; ++v) a[lane][n][v] = c[lane][v];
        }
      }
      for (int lane = 0; lane < kLanes; ++lane) {
        for (int n = 0; n < 2; ++n) {
          for (int v = 0; v < 4; ++v) {
            const Rc cc = ptx_c(v, lane);
            const int key = 16 * warp + cc.row, q = 64 + 16 * chunk + 8 * n + cc.col;
            double want = 0;
            for (int c = 0; c < K; ++c)
              want += double(g[size_t(key) * K + c]) * g[size_t(q) * K + c];
            const float got = a[lane][n][v] * kAffinityUnscale;
            ASSERT_NEAR(got, want, 1.1e-3 * want + 1e-9)
                << "K " << K << " key " << key << " q " << q;
          }
        }
      }
    }
  }
}

TEST(FocusWgmmaLayout, BackwardAffinityChunkMatchesDirect) {
  for (int K : {1, 4, 8, 9, 16, 17, 32}) check_backward_chunk(K, 5u + K);
}

// split_g's fp16 operand equals the backward's conversion of hi + lo (the forward's and the
// backward's gate see the same operands), and keeps g to fp16's relative precision down to the
// scale's subnormal bound.
TEST(FocusWgmmaLayout, AffinityOperandPrecision) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> ex(-26.f, 0.f);
  for (int i = 0; i < 10000; ++i) {
    const float x = std::exp2(ex(rng));
    const float op = affinity_operand_of(x) / kAffinityScale;
    // fp16's half ulp (2^-11 relative) after the hi + lo split's own (below 2^-16)
    EXPECT_NEAR(op, x, x * (1.0 / 2048 + 1.0 / 65536) + 1.0 / (4096.0 * 16777216.0)) << x;
  }
  EXPECT_EQ(affinity_operand_of(1.f), kAffinityScale);
  EXPECT_EQ(affinity_operand_of(0.f), 0.f);
}

// The backward orientation (rows keys, columns queries): distant iff query - key > w, and the
// same element count as the forward's predicate on the transposed pair.
TEST(FocusWgmmaLayout, BackwardDistantIsTheTransposedForward) {
  for (int w : {0, 5, 128}) {
    for (int lane = 0; lane < kLanes; ++lane) {
      for (int chunk = 0; chunk < 8; ++chunk) {
        for (int n = 0; n < 2; ++n) {
          for (int c = 0; c < 4; ++c) {
            const int key0 = 100 + lane / 4, q0 = 90 + 2 * (lane % 4);
            const int key = key0 + 8 * (c >> 1), q = q0 + 16 * chunk + 8 * n + (c & 1);
            EXPECT_EQ(chunk_distant(chunk, n, c, key0, q0, w), q - key > w);
          }
        }
      }
    }
  }
}

// movmatrix.trans on the C fragments of an 8 x 8 block (keys x queries) gives the B fragment of
// the transposed product (k = keys, n = queries): the dg kernel's dg_query = G_k^T dA^T.
TEST(FocusWgmmaLayout, MovmatrixTransposeFeedsB) {
  float m[8][8];
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 8; ++c) m[r][c] = float(8 * r + c);
  // Before: lane holds row lane / 4, columns 2 (lane % 4) + h (C values c = 2 x + h of a block
  // with x = the 8-key half). After (PTX movmatrix .trans): row lane / 4 of m^T.
  for (int x = 0; x < 2; ++x) {
    for (int lane = 0; lane < kLanes; ++lane) {
      for (int h = 0; h < 2; ++h) {
        const float after = m[2 * (lane % 4) + h][lane / 4];  // m^T[lane / 4][2 (lane % 4) + h]
        const Rc b = ptx_b(x, h, lane);                       // k = key 8 x + .., n = query
        EXPECT_EQ(b.row - 8 * x, 2 * (lane % 4) + h);
        EXPECT_EQ(after, m[b.row - 8 * x][b.col]);
      }
    }
  }
}

}  // namespace
}  // namespace attnlab
