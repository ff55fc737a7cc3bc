// Index math of the wgmma Focus kernels (focus_wgmma.cuh): which element of a 64-row accumulator
// tile each register of a thread holds, the mma.sync m16n8k16 fragments the affinity and the dg
// products use beside it, and the gate's per-element step. Plain C++ (__host__ __device__ under
// nvcc), so that tests/ops/test_focus_wgmma_layout.cpp emulates every thread of a warpgroup with
// the very functions the kernels call and checks that each element is covered exactly once.
//
// Accumulator of a wgmma m64nN (one warpgroup, N / 2 floats per thread): element i = 4 j + 2 r + e
// of lane l in warp w is row 16 w + l / 4 + 8 r, column 8 j + 2 (l % 4) + e (per warp the m16n8 C
// layout repeated along N). The gate works on it in chunks of 16 columns, the C fragments of two
// m16n8 tiles (n = 0, 1; c = 2 r + e): chunk_acc_index. A thread's N / 2 elements are N / 16
// chunks x 2 tiles x 4 values: the loops run over all of them (the lost earlier attempt covered
// N / 8 half-chunks of an N-array, half of the fragment).
#pragma once
#include <cmath>

#include "kernels/focus/focus_attention.cuh"  // hard_straight_through_weight

#if defined(__CUDACC__)
#define ATTN_FWL_FN __host__ __device__ __forceinline__
#else
#define ATTN_FWL_FN inline
#endif
#if defined(__CUDA_ARCH__)
#define ATTN_FWL_UNROLL _Pragma("unroll")
#else
#define ATTN_FWL_UNROLL
#endif

namespace attnlab::focus_wgmma {

constexpr int kMaxGroups = 32;        // K the wgmma kernels take (padded to KP = 8, 16 or 32)
constexpr int kHardFwdMaxGroups = 8;  // K of the hard-masked forward (KP 8 only)

ATTN_FWL_FN int padded_groups(int K) { return K <= 8 ? 8 : K <= 16 ? 16 : 32; }
// k16 steps of the affinity products over the KP groups (KP = 8: one, its upper half zero).
constexpr ATTN_FWL_FN int affinity_ksteps(int KP) { return KP < 16 ? 1 : KP / 16; }
// Accumulator n8 tiles of the backward's dg_key (the warp's keys x groups): KP / 8, except at KP
// = 8, where the hi and lo products land in two tiles (the 16 columns hi | lo of the g tile are
// one B operand) that are summed at the end.
constexpr ATTN_FWL_FN int dgk_tiles(int KP) { return KP == 8 ? 2 : KP / 8; }

// g as the kernels read it (focus_wgmma_fwd.cu, split_g): per token gs_width(KP) = 3 KP 16-bit
// values over the KP (zero-padded) groups: columns 0 .. KP the affinity operand, fp16 of
// kAffinityScale (hi + lo); columns KP .. 2 KP the hi parts bf16(g); columns 2 KP .. 3 KP the lo
// parts bf16(g - hi). The forward's affinity is one fp16 wgmma on the first part (fp16 keeps 11
// bits, 4x bf16's; the scale 2^12 keeps g down to 1.5e-8 out of fp16's subnormals and g up to 15
// below its largest value); the backward reads hi and lo (its dg products and, converted to the
// same fp16 in registers, its affinity). A backward tile of the hi and lo columns in shared
// memory is [rows][g_ld(KP)]: hi at column 0, lo at column KP, 8 elements of padding so that the
// 8 rows a warp's fragment loads touch (row stride 48, 80 or 144 bytes) fall on distinct banks.
// At KP = 8 the 16 columns hi | lo form one 16-wide operand of the dg products.
ATTN_FWL_FN int gs_width(int KP) { return 3 * KP; }
constexpr ATTN_FWL_FN int g_ld(int KP) { return 2 * KP + 8; }
// The backward's query tiles (the B operand of its affinity) also hold the fp16 columns, after hi
// and lo (column 2 KP), where shared memory allows it (KP <= 16; at KP = 32 the affinity converts
// hi + lo in registers, as it always does for the keys' A operand, loaded once per block):
// [rows][gq_ld(KP)], padded so that 32-bit fragment loads and ldmatrix stay conflict-free (row
// stride 80 or 112 bytes).
constexpr ATTN_FWL_FN bool gq_has_f16(int KP) { return KP <= 16; }
constexpr ATTN_FWL_FN int gq_ld(int KP) {
  return !gq_has_f16(KP) ? g_ld(KP) : KP == 8 ? 5 * KP : 3 * KP + 8;
}
constexpr float kAffinityScale = 4096.f;                     // per operand: 2^12
constexpr float kAffinityUnscale = 1.f / (4096.f * 4096.f);  // of a product: 2^-24

struct Coord {
  int row, col;
};

// Row (within the warpgroup's 64) and column of accumulator element i of (warp, lane).
ATTN_FWL_FN Coord acc_coord(int i, int warp, int lane) {
  const int j = i >> 2, r = (i >> 1) & 1, e = i & 1;
  return {16 * warp + (lane >> 2) + 8 * r, 8 * j + 2 * (lane & 3) + e};
}

// Half h (0, 1) of a thread's m64nN accumulator s: elements h N / 4 .. (h + 1) N / 4 - 1, the
// columns h N / 2 .. (h + 1) N / 2 - 1 (acc_coord: element 4 j + .. is column 8 j + ..), laid out
// as the m64n(N / 2) accumulator of those columns (the ping-pong forward's affinity at D 128,
// issued in two halves: focus_wgmma_fwd_pp.cu).
template <int N>
ATTN_FWL_FN float (&acc_half(float (&s)[N / 2], int h))[N / 4] {
  return *reinterpret_cast<float(*)[N / 4]>(&s[h * (N / 4)]);
}

// The accumulator element that value c of m16n8 tile n of 16-column chunk `chunk` is.
ATTN_FWL_FN int chunk_acc_index(int chunk, int n, int c) { return 4 * (2 * chunk + n) + c; }

// mma.sync m16n8k16 fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"), per lane:
//   A (16 x 16, row): register x (0..3), half h: row l/4 + 8 (x & 1), col 2 (l%4) + h + 8 (x >> 1)
//   B (16 x 8, col):  register x (0..1), half h: row (k) 2 (l%4) + h + 8 x, col (n) l / 4
//   C (16 x 8):       value c (0..3): row l / 4 + 8 (c >> 1), col 2 (l % 4) + (c & 1)
ATTN_FWL_FN Coord mma_a_coord(int x, int h, int lane) {
  return {(lane >> 2) + 8 * (x & 1), 2 * (lane & 3) + h + 8 * (x >> 1)};
}
ATTN_FWL_FN Coord mma_b_coord(int x, int h, int lane) {
  return {2 * (lane & 3) + h + 8 * x, lane >> 2};
}
ATTN_FWL_FN Coord mma_c_coord(int c, int lane) {
  return {(lane >> 2) + 8 * (c >> 1), 2 * (lane & 3) + (c & 1)};
}

// Element offsets in a g tile [rows][ld] (bf16; element (row, group); add KP for the lo part) of
// the 32-bit words the fragments read; each word is two bf16 at consecutive groups:
//   A operand of the affinity, rows = the tile's rows row0.., k = groups 16 kc..: register x.
ATTN_FWL_FN int g_a_offset(int row0, int kc, int x, int lane, int ld) {
  const Coord c = mma_a_coord(x, 0, lane);
  return (row0 + c.row) * ld + 16 * kc + c.col;
}
//   B operand of the affinity, n = rows n0 .. n0 + 7 of the tile, k = groups 16 kc..: register x.
ATTN_FWL_FN int g_b_offset(int n0, int kc, int x, int lane, int ld) {
  const Coord c = mma_b_coord(x, 0, lane);
  return (n0 + c.col) * ld + 16 * kc + c.row;
}
// Row addresses (element offsets) lane `lane` gives ldmatrix.x4.trans in the dg products, reading a
// g tile [rows][ld] (element (row, group)) as a transposed operand:
//   B (k = rows k0 .. k0 + 15, n = groups n0 .. n0 + 15): registers 0, 1 = n-tile n0, 2, 3 =
//   n-tile n0 + 8 (the dg_key product's G_q);
ATTN_FWL_FN int ldsm_t_b_offset(int k0, int n0, int lane, int ld) {
  return (k0 + (lane & 15)) * ld + n0 + (lane >> 4) * 8;
}
//   A (m = groups m0 .. m0 + 15, k = rows k0 .. k0 + 15): the dg_query product's G_k^T.
ATTN_FWL_FN int ldsm_t_a_offset(int k0, int m0, int lane, int ld) {
  return (k0 + (lane & 7) + ((lane >> 4) << 3)) * ld + m0 + ((lane >> 3) & 1) * 8;
}

// The accumulator values (c = 2 r + e of tiles n = 0, 1 of a chunk) that register x of an A
// fragment packs (low half first) when the chunk feeds a following mma as its A operand (k =
// the chunk's 16 columns): tile x >> 1, values 2 (x & 1) and 2 (x & 1) + 1.
ATTN_FWL_FN int a_pack_tile(int x) { return x >> 1; }
ATTN_FWL_FN int a_pack_value(int x, int h) { return 2 * (x & 1) + h; }

// Gate of one chunk of the backward's S^T (rows keys, columns queries): value c of tile n is
// distant iff its pair is farther apart than the local window w, col - row > w. Rows are this
// thread's rows row0 + 8 r, columns col0 + 16 chunk + 8 n + e (col0 = the tile's first column + 2
// (lane % 4)).
ATTN_FWL_FN bool chunk_distant(int chunk, int n, int c, int row0, int col0, int w) {
  const int row = row0 + 8 * (c >> 1), col = col0 + 16 * chunk + 8 * n + (c & 1);
  return col - row > w;
}

// f(n, c, i) for each value c of m16n8 tile n of chunk `chunk` (accumulator element i) whose
// pair is distant (chunk_distant): the backward's gates below visit their chunk through it.
template <class F>
ATTN_FWL_FN void for_each_distant(int chunk, int row0, int col0, int w, F f) {
  ATTN_FWL_UNROLL
  for (int n = 0; n < 2; ++n) {
    ATTN_FWL_UNROLL
    for (int c = 0; c < 4; ++c) {
      if (chunk_distant(chunk, n, c, row0, col0, w)) f(n, c, chunk_acc_index(chunk, n, c));
    }
  }
}

// s (a thread's accumulator, N / 2 values, already exp(score - lse)) times (a + eps) on the
// distant pairs of chunk `chunk`, a = its affinity C fragments (the backward without dg).
template <int kVals>
ATTN_FWL_FN void gate_chunk(float (&s)[kVals], const float (&a)[2][4], int chunk, int row0,
                            int col0, int w, float eps) {
  for_each_distant(chunk, row0, col0, w, [&](int n, int c, int i) { s[i] *= a[n][c] + eps; });
}

// The forward's gate on a whole accumulator of S (rows queries, columns keys; focus_wgmma_fwd.cu):
// a is the affinity as the fp16 wgmma left it (scaled by kAffinityScale^2, in the accumulator
// layout of s), element i = 4 j + 2 r + e is row row0 + 8 r, column col0 + 8 j + e (col0 = the
// tile's first column + 2 (lane % 4)); s times (a kAffinityUnscale + eps) where the pair is
// distant, row - col > w.
template <int kVals>
ATTN_FWL_FN void gate_acc(float (&s)[kVals], const float (&a)[kVals], int row0, int col0, int w,
                          float eps) {
  ATTN_FWL_UNROLL
  for (int i = 0; i < kVals; ++i) {
    const int row = row0 + 8 * ((i >> 1) & 1), col = col0 + 8 * (i >> 2) + (i & 1);
    if (row - col > w) s[i] *= a[i] * kAffinityUnscale + eps;
  }
}

// The additive gate's eps folded into the forward's affinity (KP = 8, i.e. K <= 8, the default:
// the k16 step's upper half, columns 8 .. 16, holds no group). Column 8 of both operands holds
// e = fp16(sqrt(eps) kAffinityScale) (eps_fold_operand), so the accumulator is kAffinityScale^2
// (a + eps') with eps' = e^2 / kAffinityScale^2 (eps_folded: within 2^-10 of eps, the fp16
// operands' own precision), and on a tile where every pair is distant the unscale moves into the
// exponent: exp2(x - m - kAffinityLog2Scale) a' = exp2(x - m) (a + eps'), one multiply per score
// (gate_acc_all_folded) where gate_acc_all has a multiply-add and a multiply. eps_foldable:
// e a normal fp16 (eps in [2.2e-16, 255]); other eps keep the unfolded gate.
constexpr float kAffinityLog2Scale = 24.f;  // log2(kAffinityScale^2)
ATTN_FWL_FN float round_to_f16(float x) {   // round to nearest even, normal fp16 range
  int e = 0;
  const float m = std::frexp(x, &e);  // x = m 2^e, 0.5 <= |m| < 1
  return std::ldexp(std::rint(std::ldexp(m, 11)), e - 11);
}
ATTN_FWL_FN bool eps_foldable(float eps) {
  const float e = std::sqrt(eps) * kAffinityScale;
  return e >= 6.103515625e-05f && e <= 65504.f;  // fp16's smallest normal .. largest
}
ATTN_FWL_FN float eps_fold_operand(float eps) {
  return round_to_f16(std::sqrt(eps) * kAffinityScale);
}
ATTN_FWL_FN float eps_folded(float eps) {
  const float e = eps_fold_operand(eps);
  return e * e * kAffinityUnscale;
}

// Every pair of a tile of rows r_first .. (queries) and columns .. c_last (keys) is distant: the
// forward then gates the whole accumulator without the per-element test (gate_acc_all).
ATTN_FWL_FN bool tile_all_distant(int r_first, int c_last, int w) { return r_first - c_last > w; }

// gate_acc on a tile where every pair is distant (tile_all_distant).
template <int kVals>
ATTN_FWL_FN void gate_acc_all(float (&s)[kVals], const float (&a)[kVals], float eps) {
  ATTN_FWL_UNROLL
  for (int i = 0; i < kVals; ++i) s[i] *= a[i] * kAffinityUnscale + eps;
}

// gate_acc_all with eps folded (above): s = exp2(x - m - kAffinityLog2Scale) on entry, a the
// accumulator with eps' in it.
template <int kVals>
ATTN_FWL_FN void gate_acc_all_folded(float (&s)[kVals], const float (&a)[kVals]) {
  ATTN_FWL_UNROLL
  for (int i = 0; i < kVals; ++i) s[i] *= a[i];
}

// Half a shared group in the accumulator's scale (a kAffinityUnscale < 0.5, compared unscaled:
// the same test without a multiply per score, exact since the scale is a power of two).
constexpr float kHardShareThreshold = 0.5f / kAffinityUnscale;  // 2^23

// The hard-routed forward on the soft kernel (focus_wgmma_fwd.cu, kHard): a is the affinity of the
// tokens' group indicators (split_groups: 1 in each group of the token's set), so a
// kAffinityUnscale counts the groups the pair shares, exactly; a distant pair that shares none is
// masked (-inf, before the row max, as the causal mask; a < kHardShareThreshold), every other
// pair kept ungated. Elements as gate_acc's.
template <int kVals>
ATTN_FWL_FN void mask_acc_hard(float (&s)[kVals], const float (&a)[kVals], int row0, int col0,
                               int w) {
  ATTN_FWL_UNROLL
  for (int i = 0; i < kVals; ++i) {
    const int row = row0 + 8 * ((i >> 1) & 1), col = col0 + 8 * (i >> 2) + (i & 1);
    if (row - col > w && a[i] < kHardShareThreshold) s[i] = -INFINITY;
  }
}

// mask_acc_hard on a tile where every pair is distant (tile_all_distant).
template <int kVals>
ATTN_FWL_FN void mask_acc_hard_all(float (&s)[kVals], const float (&a)[kVals]) {
  ATTN_FWL_UNROLL
  for (int i = 0; i < kVals; ++i) {
    if (a[i] < kHardShareThreshold) s[i] = -INFINITY;
  }
}

// The fused backward's step on chunk `chunk` (focus_wgmma_bwd.cu, kFusedDg): on the distant pairs
// da = s (dp - delta), the gate gradient dA from the ungated P (s = exp(score - lse)), then s *=
// a + eps (as gate_chunk); elsewhere da = 0 and s stays. dl[n][e]: delta of the query of column e
// (even, odd) of tile n; rows and columns as gate_chunk (rows keys, columns queries).
template <int kVals>
ATTN_FWL_FN void gate_chunk_da(float (&s)[kVals], float (&da)[2][4], const float (&dp)[kVals],
                               const float (&a)[2][4], const float (&dl)[2][2], int chunk, int row0,
                               int col0, int w, float eps) {
  for (auto& t : da) t[0] = t[1] = t[2] = t[3] = 0.f;
  for_each_distant(chunk, row0, col0, w, [&](int n, int c, int i) {
    da[n][c] = s[i] * (dp[i] - dl[n][c & 1]);
    s[i] *= a[n][c] + eps;
  });
}

// The hard gate (the straight-through backward of route_training: hard, focus_attention.cuh):
// value c of tile n of a chunk pairs the thread's key row r = c >> 1 (group set mk[r]) with query
// column e = c & 1 of n-tile n (group set mq[n][e]); bit x of a set: group x among the token's
// top_k. The pair shares a group iff the sets meet (several shared groups count once).
ATTN_FWL_FN bool chunk_shares(const unsigned (&mk)[2], const unsigned (&mq)[2][2], int n, int c) {
  return (mk[c >> 1] & mq[n][c & 1]) != 0u;
}

// gate_chunk for the hard gate: distant pairs that share no group are not attended (s = 0).
template <int kVals>
ATTN_FWL_FN void gate_chunk_hard(float (&s)[kVals], const unsigned (&mk)[2],
                                 const unsigned (&mq)[2][2], int chunk, int row0, int col0, int w) {
  for_each_distant(chunk, row0, col0, w, [&](int n, int c, int i) {
    if (!chunk_shares(mk, mq, n, c)) s[i] = 0.f;
  });
}

// gate_chunk_da for the hard gate: on the distant pairs da = min(s, 1) (dp - delta) (s =
// exp(score - lse): the mask's straight-through gradient, its weight bounded by 1 since a masked
// pair's s is not a probability), then s = 0 where the pair shares no group; elsewhere da = 0 and
// s stays.
template <int kVals>
ATTN_FWL_FN void gate_chunk_hard_da(float (&s)[kVals], float (&da)[2][4], const float (&dp)[kVals],
                                    const unsigned (&mk)[2], const unsigned (&mq)[2][2],
                                    const float (&dl)[2][2], int chunk, int row0, int col0, int w) {
  for (auto& t : da) t[0] = t[1] = t[2] = t[3] = 0.f;
  for_each_distant(chunk, row0, col0, w, [&](int n, int c, int i) {
    da[n][c] = hard_straight_through_weight(s[i]) * (dp[i] - dl[n][c & 1]);
    if (!chunk_shares(mk, mq, n, c)) s[i] = 0.f;
  });
}

// Leading dimension (floats) of the fused backward's fp32 dg_query tile [queries][dgq_ld(KP)]:
// the red.shared of one C value v of a warp's mma (query 2 (l % 4) + v % 2, group l / 4 + ..)
// fall on 32 distinct banks (8 (l % 4) + l / 4 mod 32 for both KP).
constexpr ATTN_FWL_FN int dgq_ld(int KP) { return KP + 4; }

// At KP 8 (K <= 8, the default) the fused backward forms dg_query on the tensor cores (wgmma_dgq):
// each chunk's bf16 dA^T fragment (the A operand of its dg_key product) is stored into a
// [keys][queries] tile as dS^T is (store_ds_chunk), and after the tile's barrier one m64n16 wgmma
// per warpgroup gives dg_query = dA (G_k hi | G_k lo) over the block's keys (kQ 128: warpgroup wg
// the queries 64 wg .., all 128 keys; kQ 64: all 64 queries, the warpgroup's own 64 keys, the two
// partial sums reduced into dg separately), B = the keys' g in two planes [keys][8] (hi, lo; 16
// bytes a row: gk_plane_bytes), the no-swizzle MN-major layout. Its accumulator (acc_coord's,
// N = 16: columns 0 .. 7 the hi products of groups 0 .. 7, 8 .. 15 the lo) summed per group and
// exchanged between lane pairs (dgq_v4_*) is one 16-byte reduction into dg per thread.
// Earlier forms: per-warp fp32 regions written by mma.sync products of movmatrix-transposed dA
// (a tree sum over the regions in each tile's drain); before them a shared tile of dgq_ld taking
// fp32 red.shared, which sm_90 runs as compare-and-swap loops (ATOMS.CAST.SPIN). Wider KP keep
// that shared tile.
constexpr ATTN_FWL_FN bool wgmma_dgq(int KP) { return KP == 8; }
// Bytes of one plane of the keys' g for the dg_query wgmma: rows x 8 bf16.
constexpr ATTN_FWL_FN int gk_plane_bytes(int rows) { return rows * 16; }

// The dg_query accumulator of a thread (acc_coord, N = 16; hi and lo summed: h[r][e] = acc[2 r +
// e] + acc[4 + 2 r + e], query row 16 warp + lane / 4 + 8 r, group 2 (lane % 4) + e) as one row
// of 4 groups: the lanes with lane % 4 even keep row r = 0, the odd ones r = 1, each giving its
// pair partner (lane ^ 1) the two values of the partner's row (dgq_v4_send) and taking the
// partner's two (recv): groups dgq_v4_group0(lane) .. + 3 of row dgq_v4_row(lane).
ATTN_FWL_FN int dgq_v4_row(int lane) { return lane & 1; }
ATTN_FWL_FN int dgq_v4_group0(int lane) { return 4 * ((lane & 3) >> 1); }
// The pair (h[row][0], h[row][1]) to send: the row the partner keeps.
ATTN_FWL_FN int dgq_v4_send_row(int lane) { return dgq_v4_row(lane) ^ 1; }
// The four values from the kept row's own pair and the received one, in group order.
ATTN_FWL_FN void dgq_v4_assemble(const float (&h)[2][2], const float (&recv)[2], int lane,
                                 float (&out)[4]) {
  const int r = dgq_v4_row(lane);
  const bool low = r == 0;  // the even lane holds groups group0, group0 + 1 itself
  out[low ? 0 : 2] = h[r][0];
  out[low ? 1 : 3] = h[r][1];
  out[low ? 2 : 0] = recv[0];
  out[low ? 3 : 1] = recv[1];
}

}  // namespace attnlab::focus_wgmma

#undef ATTN_FWL_FN
#undef ATTN_FWL_UNROLL
