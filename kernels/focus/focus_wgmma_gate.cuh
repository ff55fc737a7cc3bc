// Device helpers of the wgmma Focus kernels (focus_wgmma.cuh): the g tiles (split_g's bf16 hi/lo
// rows, focus_wgmma_layout.h) copied into shared memory, and the affinity A = G_a G_b^T of one
// 16-column chunk of an accumulator on mma.sync m16n8k16 (its C fragments are the chunk's
// accumulator elements). Device code only; compiled in the sm_90a object library.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/attention/mma_common.cuh"
#include "kernels/attention/visibility.h"
#include "kernels/attention/wgmma_common.cuh"
#include "kernels/focus/focus_wgmma_layout.h"

namespace attnlab::focus_wgmma {

#if ATTN_WGMMA_DEVICE
// Rows row0 .. row0 + ROWS - 1 of the split g (gs: [T][2 KP] bf16 of one sequence) into the tile
// at shared address s ([ROWS][g_ld(KP)]) by cp.async, zero past T; part of the caller's group.
template <int ROWS, int KP, int kThreads>
__device__ __forceinline__ void load_g_tile(uint32_t s, const bf16* gs, int row0, int T) {
  constexpr int kChunks = 2 * KP / 8;  // 16-byte chunks per row
  constexpr int kLd = 2 * KP + 8;
  for (int i = threadIdx.x; i < ROWS * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i - r * kChunks;
    const bool valid = row0 + r < T;
    wgmma::cp_async16(s + uint32_t(r * kLd + 8 * c) * 2,
                      valid ? gs + int64_t(row0 + r) * 2 * KP + 8 * c : gs, valid);
  }
}

__device__ __forceinline__ uint32_t lds32(const bf16* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// The A fragments (hi, lo) of rows arow0 .. arow0 + 15 of a g tile (generic pointer to shared
// memory, [rows][g_ld(KP)]), k = the KP groups.
template <int KP>
__device__ __forceinline__ void load_g_a(uint32_t (&ah)[KP / 16][4], uint32_t (&al)[KP / 16][4],
                                         const bf16* tile, int arow0, int lane) {
  constexpr int kLd = 2 * KP + 8;
#pragma unroll
  for (int kc = 0; kc < KP / 16; ++kc) {
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      const int off = g_a_offset(arow0, kc, x, lane, kLd);
      ah[kc][x] = lds32(tile + off);
      al[kc][x] = lds32(tile + off + KP);
    }
  }
}

// a (the C fragments of two m16n8 tiles: 16 rows x 16 columns) = A B^T over the KP groups: A the
// fragments of load_g_a, B = rows n0 .. n0 + 15 of the g tile `tile` (the chunk's columns);
// hi.hi + hi.lo + lo.hi (the lo.lo term is below the fp32 rounding of a).
template <int KP>
__device__ __forceinline__ void affinity_chunk(float (&a)[2][4], const uint32_t (&ah)[KP / 16][4],
                                               const uint32_t (&al)[KP / 16][4], const bf16* tile,
                                               int n0, int lane) {
  constexpr int kLd = 2 * KP + 8;
#pragma unroll
  for (int n = 0; n < 2; ++n) a[n][0] = a[n][1] = a[n][2] = a[n][3] = 0.f;
#pragma unroll
  for (int kc = 0; kc < KP / 16; ++kc) {
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      const int off0 = g_b_offset(n0 + 8 * n, kc, 0, lane, kLd);
      const int off1 = g_b_offset(n0 + 8 * n, kc, 1, lane, kLd);
      const uint32_t bh0 = lds32(tile + off0), bh1 = lds32(tile + off1);
      const uint32_t bl0 = lds32(tile + off0 + KP), bl1 = lds32(tile + off1 + KP);
      mma::mma16816(a[n], ah[kc], bh0, bh1);
      mma::mma16816(a[n], ah[kc], bl0, bl1);
      mma::mma16816(a[n], al[kc], bh0, bh1);
    }
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
#endif  // ATTN_WGMMA_DEVICE

}  // namespace attnlab::focus_wgmma
