// Device helpers of the wgmma Focus kernels (focus_wgmma.cuh): the g tiles (split_g's rows,
// focus_wgmma_layout.h) copied into shared memory, the forward's fp16 affinity wgmma, the
// backward's affinity A = G_a G_b^T of one 16-column chunk of an accumulator on fp16 mma.sync
// m16n8k16 (its C fragments are the chunk's accumulator elements) and its dg products. Device code
// only; compiled in the sm_90a object library.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/attention/mma_common.cuh"
#include "kernels/attention/visibility.h"
#include "kernels/attention/wgmma_bwd_steps.cuh"
#include "kernels/attention/wgmma_common.cuh"
#include "kernels/focus/focus_wgmma_layout.h"

namespace attnlab::focus_wgmma {

#if ATTN_WGMMA_DEVICE
// Rows row0 .. row0 + ROWS - 1 of the hi and lo columns of the split g (gs: [T][gs_width(KP)] of
// one sequence) into the tile at shared address s ([ROWS][kLd]) by cp.async, zero past T; with
// kF16 also the fp16 columns, after them (column 2 KP: gq_ld). Part of the caller's group. The
// backward's tiles: the keys' (kLd = g_ld(KP)) and the queries' (gq_ld(KP), gq_has_f16(KP)).
template <int ROWS, int KP, int kThreads, int kLd = 2 * KP + 8, bool kF16 = false>
__device__ __forceinline__ void load_g_tile(uint32_t s, const bf16* gs, int row0, int T) {
  constexpr int kChunks = (kF16 ? 3 : 2) * KP / 8;  // 16-byte chunks per row
  constexpr int kW = 3 * KP, kGsChunks = kW / 8;
  for (int i = threadIdx.x; i < ROWS * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i - r * kChunks;
    const int src = (c + KP / 8) % kGsChunks;  // tile hi | lo | f16 from gs f16 | hi | lo
    const bool valid = row0 + r < T;
    wgmma::cp_async16(s + uint32_t(r * kLd + 8 * c) * 2,
                      valid ? gs + int64_t(row0 + r) * kW + 8 * src : gs, valid);
  }
}

// The fp16 affinity columns (0 .. KP) of rows row0 .. row0 + ROWS - 1 of the split g into a
// [ROWS] x 128-byte tile in the 128-byte swizzle of the wgmma tiles (wgmma::swizzled_offset; the
// rest of each row is not read), zero past T: the forward's operands of A = G_q G_k^T, K-major
// as Q and K are for S. At KP = 8 the k16 step's upper half (columns 8 .. 16) is not written
// here: fill_g_upper_half writes it once per buffer. Part of the caller's cp.async group.
// tid: the calling thread's index among the kThreads that copy (threadIdx.x by default).
template <int ROWS, int KP, int kThreads>
__device__ __forceinline__ void load_g_affinity_tile(uint32_t s, const bf16* gs, int row0, int T,
                                                     int tid = int(threadIdx.x)) {
  constexpr int kChunks = KP == 8 ? 1 : 2 * affinity_ksteps(KP), kW = 3 * KP;
  for (int i = tid; i < ROWS * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i - r * kChunks;
    const bool valid = row0 + r < T && 8 * c < KP;
    wgmma::cp_async16(s + wgmma::swizzled_offset<ROWS>(r, c),
                      valid ? gs + int64_t(row0 + r) * kW + 8 * c : gs, valid);
  }
}

// Columns 8 .. 16 of every row of a KP = 8 affinity tile (load_g_affinity_tile's [ROWS] x 128
// bytes): column 8 = e (fp16; the folded eps's operand, focus_wgmma_layout.h, or 0), the rest 0.
// Plain stores: the caller's fence_proxy_async and barrier (tiles_ready) publish them to wgmma.
template <int ROWS, int kThreads>
__device__ __forceinline__ void fill_g_upper_half(uint32_t s, float e, int tid = int(threadIdx.x)) {
  const uint32_t word = uint32_t(__half_as_ushort(__float2half_rn(e)));
  for (int r = tid; r < ROWS; r += kThreads) {
    asm volatile(
        "st.shared.v4.b32 [%0], {%1, %2, %2, %2};\n" ::"r"(s + wgmma::swizzled_offset<ROWS>(r, 1)),
        "r"(word), "r"(0u)
        : "memory");
  }
}

__device__ __forceinline__ uint32_t lds32(const bf16* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// Two groups' fp16 affinity operand from their bf16 hi and lo words (low half first): fp16 of
// kAffinityScale (hi + lo), the same bits split_g writes into the forward's columns (hi + lo and
// the power-of-two scale are exact in fp32).
__device__ __forceinline__ uint32_t affinity_f16x2(uint32_t hi, uint32_t lo) {
  const float x0 = (__uint_as_float(hi << 16) + __uint_as_float(lo << 16)) * kAffinityScale;
  const float x1 =
      (__uint_as_float(hi & 0xffff0000u) + __uint_as_float(lo & 0xffff0000u)) * kAffinityScale;
  const __half2 h = __floats2half2_rn(x0, x1);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// The fp16 A fragments of rows arow0 .. arow0 + 15 of a backward g tile (generic pointer to
// shared memory, [rows][g_ld(KP)]), k = the KP groups.
template <int KP>
__device__ __forceinline__ void load_g_a(uint32_t (&a)[affinity_ksteps(KP)][4], const bf16* tile,
                                         int arow0, int lane) {
  constexpr int kLd = 2 * KP + 8;
#pragma unroll
  for (int kc = 0; kc < affinity_ksteps(KP); ++kc) {
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      const int off = g_a_offset(arow0, kc, x, lane, kLd);
      // KP = 8: registers 2, 3 hold groups 8 .. 15 (none)
      a[kc][x] = KP < 16 && x >= 2 ? 0u : affinity_f16x2(lds32(tile + off), lds32(tile + off + KP));
    }
  }
}

// a (the C fragments of two m16n8 tiles: 16 rows x 16 columns) = A B^T over the KP groups: A the
// fragments of load_g_a, B = rows n0 .. n0 + 15 of the backward's query tile `tile` ([rows][kLd];
// kF16: its fp16 columns at 2 KP, else converted from hi + lo), one fp16 mma.sync per k16 and
// n-tile, unscaled to the affinity.
template <int KP, int kLd, bool kF16>
__device__ __forceinline__ void affinity_chunk(float (&a)[2][4],
                                               const uint32_t (&af)[affinity_ksteps(KP)][4],
                                               const bf16* tile, int n0, int lane) {
  auto b_word = [&](int off) {
    return kF16 ? lds32(tile + off + 2 * KP)
                : affinity_f16x2(lds32(tile + off), lds32(tile + off + KP));
  };
#pragma unroll
  for (int n = 0; n < 2; ++n) a[n][0] = a[n][1] = a[n][2] = a[n][3] = 0.f;
#pragma unroll
  for (int kc = 0; kc < affinity_ksteps(KP); ++kc) {
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      const int off0 = g_b_offset(n0 + 8 * n, kc, 0, lane, kLd);
      const int off1 = g_b_offset(n0 + 8 * n, kc, 1, lane, kLd);
      // KP = 8: register 1 holds groups 8 .. 15 (none; the tile's padding is not zeroed)
      const uint32_t b1 = KP < 16 ? 0u : b_word(off1);
      mma::mma16816_f16(a[n], af[kc], b_word(off0), b1);
    }
  }
#pragma unroll
  for (int n = 0; n < 2; ++n) {
#pragma unroll
    for (int v = 0; v < 4; ++v) a[n][v] *= kAffinityUnscale;
  }
}

// The backward kernels' S^T -> exp2(S^T scale log2 e - lse log2 e), zero where the key does not see
// the query (causal, T); accumulator element 4 j + 2 r + e: key key0 + 8 r, query q0 + 8 j + 2 tig
// + e.
template <int kQ>
__device__ __forceinline__ void scores_to_p(float (&s)[kQ / 2], uint32_t c_lse, bool need_mask,
                                            int key0, int q0, int tig, float sl2, int T) {
  const AttentionMask mask{};
  if (need_mask) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int key = key0 + 8 * r, base = q0 + 2 * tig;
      int lo, hi;
      mask.query_bounds(key, T, base, &lo, &hi);
#pragma unroll
      for (int j = 0; j < kQ / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (8 * j + e > hi || 8 * j + e < lo) s[4 * j + 2 * r + e] = -INFINITY;
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kQ / 8; ++j) {
    const float2 l = wgmma::lds_f2(c_lse + 4 * (8 * j + 2 * tig));
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int i = 4 * j + 2 * r + e;
        s[i] = wgmma::exp2_ftz(fmaf(s[i], sl2, -(e ? l.y : l.x) * wgmma::kLog2e));
      }
    }
  }
}

// Whether the tile of rows r_first .. r_last and columns c_first .. c_last holds a distant pair
// (uniform: the affinity runs only there). Rows are queries (forward) or keys (backward).
__device__ __forceinline__ bool tile_has_distant_q_rows(int r_last, int c_first, int w) {
  return r_last - c_first > w;
}
__device__ __forceinline__ bool tile_has_distant_k_rows(int r_first, int c_last, int w) {
  return c_last - r_first > w;
}
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// The fused backward's dg products of one 16-query chunk (focus_wgmma_bwd.cu, kFusedDg), on
// mma.sync with fp32 accumulation: a = the chunk's dA^T as a bf16 A fragment (pack_da: rows = the
// warp's 16 keys wrow.., columns = queries 16 chunk ..);
//   dg_key_products: dgk (the warp's keys x KP groups, C fragments of groups 8 nt ..) += dA^T G_q:
//     B = G_q by ldmatrix.trans of gq_tile (the tile's queries);
//   dg_query_products (KP 16, 32; KP 8 takes wgmma_dgq, focus_wgmma_layout.h): dgq_tile
//     ([queries][dgq_ld(KP)] fp32, shared) += (G_k^T dA^T)^T: A = G_k^T by ldmatrix.trans of
//     gk_tile (the block's keys), B = da per 8 x 8 block transposed (movmatrix), red.shared.
// Two products per term: bf16 dA times g's hi part and times its lo part (g to ~16 bits, so dA's
// bf16 rounding is the only one, as dS's in the dense dK = dS^T Q). Measured on the H200: one
// product on g hi alone missed the GPU test's dg bound (5.8e-3 against 5.1e-3, D 128, T 129, w 0,
// K 8); these two reach at most 0.95 of it; splitting dA too (three products, the old dg pass's
// precision: 0.62 of it) was 5-7% slower in forward+backward.
__device__ __forceinline__ void pack_da(uint32_t (&a)[4], const float (&da)[2][4]) {
#pragma unroll
  for (int x = 0; x < 4; ++x) {
    const int n = a_pack_tile(x);
    a[x] = wgmma::pack_bf16(da[n][a_pack_value(x, 0)], da[n][a_pack_value(x, 1)]);
  }
}

template <int KP, int kGqLd>
__device__ __forceinline__ void dg_key_products(float (&dgk)[dgk_tiles(KP)][4],
                                                const uint32_t (&a)[4], const bf16* gq_tile,
                                                int chunk, int lane) {
  if constexpr (KP == 8) {  // hi | lo as one 16-column operand
    uint32_t b[4];
    mma::ldsm_x4_t(b, gq_tile + ldsm_t_b_offset(16 * chunk, 0, lane, kGqLd));
#pragma unroll
    for (int t = 0; t < 2; ++t) mma::mma16816(dgk[t], a, b[2 * t], b[2 * t + 1]);
  } else {
#pragma unroll
    for (int nb = 0; nb < KP / 16; ++nb) {
#pragma unroll
      for (int pg = 0; pg < 2; ++pg) {  // g hi, then g lo (columns KP ..)
        uint32_t b[4];
        mma::ldsm_x4_t(b, gq_tile + ldsm_t_b_offset(16 * chunk, pg * KP + 16 * nb, lane, kGqLd));
#pragma unroll
        for (int t = 0; t < 2; ++t) mma::mma16816(dgk[2 * nb + t], a, b[2 * t], b[2 * t + 1]);
      }
    }
  }
}

template <int KP>
__device__ __forceinline__ void dg_query_products(float* dgq_tile, const uint32_t (&a)[4],
                                                  const bf16* gk_tile, int chunk, int wrow,
                                                  int lane) {
  static_assert(!wgmma_dgq(KP), "KP 8 forms dg_query by wgmma (issue_dgq)");
  constexpr int kLd = 2 * KP + 8, kDgqLd = dgq_ld(KP);
#pragma unroll
  for (int n = 0; n < 2; ++n) {
    const uint32_t b0 = movmatrix_trans(a[2 * n]), b1 = movmatrix_trans(a[2 * n + 1]);
#pragma unroll
    for (int mt = 0; mt < KP / 16; ++mt) {
      float c[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int pg = 0; pg < 2; ++pg) {  // g hi, then g lo
        uint32_t gt[4];
        mma::ldsm_x4_t(gt, gk_tile + ldsm_t_a_offset(wrow, pg * KP + 16 * mt, lane, kLd));
        mma::mma16816(c, gt, b0, b1);
      }
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const Coord cc = mma_c_coord(v, lane);  // row = group, column = query
        atomicAdd(dgq_tile + (16 * chunk + 8 * n + cc.col) * kDgqLd + 16 * mt + cc.row, c[v]);
      }
    }
  }
}

// The keys' g of a block as the dg_query wgmma's B operand (wgmma_dgq): rows row0 .. row0 + ROWS
// - 1 of the hi and lo columns of the split g into two planes [ROWS][8] (16 bytes a row, plane
// hi at s, lo at s + gk_plane_bytes(ROWS)) by cp.async, zero past T. KP 8 only. Part of the
// caller's cp.async group.
template <int ROWS, int kThreads>
__device__ __forceinline__ void load_g_planes(uint32_t s, const bf16* gs, int row0, int T) {
  constexpr int KP = 8, kW = 3 * KP;
  for (int i = threadIdx.x; i < 2 * ROWS; i += kThreads) {
    const int plane = i / ROWS, r = i - plane * ROWS;
    const bool valid = row0 + r < T;
    wgmma::cp_async16(s + uint32_t(plane * gk_plane_bytes(ROWS) + 16 * r),
                      valid ? gs + int64_t(row0 + r) * kW + KP * (1 + plane) : gs, valid);
  }
}

// Issues (one committed group, not waited) warpgroup wg's dg_query = dA (G_k hi | G_k lo)
// (wgmma_dgq): A = dA MN-major from the [kBwdKeys][kQ] dA^T tile at sdA (as issue_dq reads dS^T),
// B = the planes of load_g_planes at planes. kQ 128: queries 64 wg .., all 128 keys; kQ 64: all
// queries, keys 64 wg ...
template <int kQ>
__device__ __forceinline__ void issue_dgq(float (&dgq)[8], uint32_t sdA, uint32_t planes, int wg) {
  constexpr int kKeys = wgmma::kBwdKeys;
  constexpr bool kSplitK = kQ == 64;
  constexpr int kSteps = kSplitK ? 4 : 8;
  const int qw = kSplitK ? 0 : wg, kw0 = kSplitK ? 64 * wg : 0;
  wgmma::fence_regs(dgq);
  wgmma::wgmma_fence();
  const uint64_t a0 = wgmma::smem_desc(sdA + qw * kKeys * 128, kKeys * 128, 1024);
  // B: LBO 128 bytes (the next 8 keys), SBO a plane (the next 8 columns: hi, then lo). The two
  // swapped failed FocusWgmmaCuda.* on the H200 (2026-12-06): the GPU tests see this layout.
  const uint64_t b0 = wgmma::smem_desc_interleave(planes, 128, gk_plane_bytes(kKeys));
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) {
    const int key = kw0 + 16 * kk;
    wgmma::wgmma_ss<16, 1, 1>(dgq, wgmma::desc_add(a0, key * 128), wgmma::desc_add(b0, key * 16),
                              kk > 0);
  }
  wgmma::wgmma_commit();
}

// The dg_query accumulator of issue_dgq into dg (rows of K floats; q0w = the first query of the
// warpgroup's 64), per thread one 16-byte reduction (dgq_v4_*) where K is a multiple of 4, else
// one per group; queries past T and zero values skipped.
__device__ __forceinline__ void reduce_dgq(const float (&dgq)[8], float* dg_rows, int K, int q0w,
                                           int T, int warp, int lane) {
  float h[2][2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
#pragma unroll
    for (int e = 0; e < 2; ++e) h[r][e] = dgq[2 * r + e] + dgq[4 + 2 * r + e];
  }
  const int sr = dgq_v4_send_row(lane);
  const float recv[2] = {__shfl_xor_sync(0xffffffffu, sr ? h[1][0] : h[0][0], 1),
                         __shfl_xor_sync(0xffffffffu, sr ? h[1][1] : h[0][1], 1)};
  float v[4];
  dgq_v4_assemble(h, recv, lane, v);
  const int q = q0w + 16 * warp + (lane >> 2) + 8 * dgq_v4_row(lane), c = dgq_v4_group0(lane);
  if (q >= T || c >= K) return;
  float* dst = dg_rows + int64_t(q) * K + c;
  if (K % 4 == 0) {
    if (v[0] != 0.f || v[1] != 0.f || v[2] != 0.f || v[3] != 0.f)
      mma::red_add4(dst, make_float4(v[0], v[1], v[2], v[3]));
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (c + e < K && v[e] != 0.f) atomicAdd(dst + e, v[e]);
    }
  }
}
#endif  // ATTN_WGMMA_DEVICE

}  // namespace attnlab::focus_wgmma
