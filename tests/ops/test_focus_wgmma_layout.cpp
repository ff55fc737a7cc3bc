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
  for (int KP : {16, 32}) {
    EXPECT_EQ(padded_groups(KP == 16 ? 5 : 17), KP);
    const int ld = g_ld(KP);
    // 32-bit loads of g_b_offset by the 32 lanes (register 0): 32 distinct banks.
    std::vector<int> banks(32, 0);
    for (int lane = 0; lane < kLanes; ++lane) {
      ++banks[size_t((g_b_offset(0, 0, 0, lane, ld) * 2 / 4) % 32)];
    }
    for (int b = 0; b < 32; ++b) EXPECT_EQ(banks[size_t(b)], 1) << "KP " << KP << " bank " << b;
    EXPECT_EQ(ld * 2 % 16, 0);  // 16-byte rows for cp.async and ldmatrix
  }
}

// ---- a whole tile, emulated ----------------------------------------------------------------

// The forward's gate on one 64-row x 128-key tile (rows = queries q0.., keys k0..): every thread's
// s starts at 1 (an exponential), the affinity of each chunk comes from the emulated split
// mma.sync with the fragment offsets of the header, gate_chunk applies it; the result must be
// (a + eps) on distant pairs and 1 elsewhere, a = g_i . g_j in double.
void check_forward_tile(int K, int q0, int k0, int w, uint32_t seed) {
  constexpr int N = 128;
  const int T = std::max(q0 + 64, k0 + N);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> g(size_t(T) * K);
  for (int t = 0; t < T; ++t) {  // a softmax of random scores, as the model's g
    double z = 0;
    std::vector<double> e(static_cast<size_t>(K));
    for (int c = 0; c < K; ++c) z += (e[size_t(c)] = std::exp(2.0 * nd(rng)));
    for (int c = 0; c < K; ++c) g[size_t(t) * K + c] = float(e[size_t(c)] / z);
  }
  const GTile gq = split_rows(g, q0, 64, K, T), gk = split_rows(g, k0, N, K, T);
  const int KP = gq.KP, ld = g_ld(KP);
  const float eps = 1e-6f;
  std::vector<float> out(size_t(64) * N, -1.f);
  for (int warp = 0; warp < kWarps; ++warp) {
    float s[kLanes][N / 2];
    for (auto& row : s)
      for (float& x : row) x = 1.f;
    for (int chunk = 0; chunk < N / 16; ++chunk) {
      float a[kLanes][2][4] = {};
      for (int n = 0; n < 2; ++n) {
        for (int kc = 0; kc < KP / 16; ++kc) {
          for (int part = 0; part < 3; ++part) {  // hi.hi, hi.lo, lo.hi
            const int ao = part == 2 ? KP : 0, bo = part == 1 ? KP : 0;
            float af[kLanes][4][2], bf[kLanes][2][2], c[kLanes][4];
            for (int lane = 0; lane < kLanes; ++lane) {
              for (int x = 0; x < 4; ++x) {
                const int off = g_a_offset(16 * warp, kc, x, lane, ld) + ao;
                af[lane][x][0] = gq.tile[size_t(off)];
                af[lane][x][1] = gq.tile[size_t(off + 1)];
              }
              for (int x = 0; x < 2; ++x) {
                const int off = g_b_offset(16 * chunk + 8 * n, kc, x, lane, ld) + bo;
                bf[lane][x][0] = gk.tile[size_t(off)];
                bf[lane][x][1] = gk.tile[size_t(off + 1)];
              }
              for (int v = 0; v < 4; ++v) c[lane][v] = 0.f;
            }
            emulate_mma(c, af, bf);
            for (int lane = 0; lane < kLanes; ++lane)
              for (int v = 0; v < 4; ++v) a[lane][n][v] += c[lane][v];
          }
        }
      }
      for (int lane = 0; lane < kLanes; ++lane) {
        const int row0 = q0 + 16 * warp + lane / 4, col0 = k0 + 2 * (lane % 4);
        gate_chunk<true>(s[lane], a[lane], chunk, row0, col0, w, eps);
      }
    }
    for (int lane = 0; lane < kLanes; ++lane) {
      for (int i = 0; i < N / 2; ++i) {
        const Coord c = acc_coord(i, warp, lane);
        out[size_t(c.row) * N + c.col] = s[lane][i];
      }
    }
  }
  int gated = 0;
  for (int r = 0; r < 64; ++r) {
    for (int j = 0; j < N; ++j) {
      const int qi = q0 + r, key = k0 + j;
      double want = 1.0;
      if (qi - key > w) {
        double a = 0;
        for (int c = 0; c < K; ++c) a += double(g[size_t(qi) * K + c]) * g[size_t(key) * K + c];
        want = a + eps;
        ++gated;
      }
      ASSERT_NEAR(out[size_t(r) * N + j], want, 3e-5 * want + 1e-7)
          << "query " << qi << " key " << key << " K " << K;
    }
  }
  if (q0 + 63 - k0 > w) {
    EXPECT_GT(gated, 0);
  }
}

TEST(FocusWgmmaLayout, ForwardTileGateMatchesDirect) {
  for (int K : {1, 4, 8, 16, 17, 32}) {
    check_forward_tile(K, 512, 0, 128, 1u + K);   // every pair distant
    check_forward_tile(K, 192, 128, 40, 7u + K);  // a diagonal tile cut by the window
    check_forward_tile(K, 128, 128, 0, 11u + K);  // w = 0 on the diagonal
    check_forward_tile(K, 64, 0, 1000, 13u + K);  // nothing distant
  }
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
            EXPECT_EQ(chunk_distant<false>(chunk, n, c, key0, q0, w), q - key > w);
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
