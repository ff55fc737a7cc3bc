// Device helpers of the tiled Focus kernels (focus_tiled.cuh): the g tiles (bf16 hi + lo parts of
// the fp32 assignment rows, K zero-padded to KP, a multiple of 16), the hard gate's group masks,
// and the affinity product A = G_a G_b^T on mma.sync. Device code only.
#pragma once
#include <cuda_bf16.h>

#include "kernels/attention/mma_common.cuh"
#include "kernels/focus/focus_attention.cuh"

namespace attnlab::focus_tiled {

using namespace mma;

constexpr int kMaxKP = 64;  // groups, padded to 16s

// Rows row0 .. row0 + ROWS - 1 of g (fp32 [T, K], one sequence) into sh (bf16 of x) and sl (bf16
// of x - sh), [ROWS][ldg]; zeros past T and in columns K .. KP - 1. Plain loads and stores.
template <int ROWS, int kNThreads>
__device__ __forceinline__ void load_g_rows(bf16* sh, bf16* sl, int ldg, const float* g, int K,
                                            int KP, int row0, int T) {
  for (int i = threadIdx.x; i < ROWS * KP; i += kNThreads) {
    const int r = i / KP, c = i - r * KP;
    const float x = (row0 + r < T && c < K) ? g[int64_t(row0 + r) * K + c] : 0.f;
    const bf16 hi = __float2bfloat16_rn(x);
    sh[r * ldg + c] = hi;
    sl[r * ldg + c] = __float2bfloat16_rn(x - __bfloat162float(hi));
  }
}

// cp.async of rows row0 .. row0 + ROWS - 1 of g (fp32 [T, K], contiguous) into stage (ROWS * K
// floats; 0 past T): the forward stages a key tile's g one tile ahead and converts it with
// convert_g_rows after the next barrier, so no global load stalls the loop.
template <int ROWS, int kNThreads>
__device__ __forceinline__ void stage_g_rows(float* stage, const float* g, int K, int row0, int T) {
  const float* src = g + int64_t(row0) * K;
  for (int i = threadIdx.x; i < ROWS * K; i += kNThreads) {
    const bool valid = row0 + i / K < T;
    cp_async4(stage + i, valid ? src + i : g, valid);
  }
}

// A staged tile (stage_g_rows) into the layout of load_g_rows.
template <int ROWS, int kNThreads>
__device__ __forceinline__ void convert_g_rows(bf16* sh, bf16* sl, int ldg, const float* stage,
                                               int K, int KP) {
  for (int i = threadIdx.x; i < ROWS * KP; i += kNThreads) {
    const int r = i / KP, c = i - r * KP;
    const float x = c < K ? stage[r * K + c] : 0.f;
    const bf16 hi = __float2bfloat16_rn(x);
    sh[r * ldg + c] = hi;
    sl[r * ldg + c] = __float2bfloat16_rn(x - __bfloat162float(hi));
  }
}

// Bit c of s[r] is set iff token row0 + r has group c among its top_k (0 past T).
template <int ROWS, int kNThreads>
__device__ __forceinline__ void load_group_masks(uint64_t* s, const int32_t* groups, int top_k,
                                                 int row0, int T) {
  for (int r = threadIdx.x; r < ROWS; r += kNThreads) {
    uint64_t m = 0;
    if (row0 + r < T) {
      for (int x = 0; x < top_k; ++x) m |= uint64_t(1) << groups[int64_t(row0 + r) * top_k + x];
    }
    s[r] = m;
  }
}

// c (16 rows x 8 NT cols) = A B^T over the KP = 16 nkk padded groups, A = rows r0.. of (ah, al),
// B = rows 0 .. 8 NT - 1 of (bh, bl) (callers offset bh, bl to their first row): hi.hi + hi.lo +
// lo.hi (the lo.lo term is below the fp32 rounding of a).
template <int NT>
__device__ __forceinline__ void affinity_mma(float (&c)[NT][4], const bf16* ah, const bf16* al,
                                             int r0, const bf16* bh, const bf16* bl, int ldg,
                                             int nkk, int lane) {
#pragma unroll
  for (int n = 0; n < NT; ++n) c[n][0] = c[n][1] = c[n][2] = c[n][3] = 0.f;
  for (int kk = 0; kk < nkk; ++kk) {
    uint32_t a_h[4], a_l[4];
    const int aoff = (r0 + (lane & 15)) * ldg + kk * 16 + (lane >> 4) * 8;
    ldsm_x4(a_h, ah + aoff);
    ldsm_x4(a_l, al + aoff);
#pragma unroll
    for (int j = 0; j < NT / 2; ++j) {
      uint32_t b_h[4], b_l[4];
      const int boff =
          (j * 16 + (lane & 7) + ((lane >> 4) << 3)) * ldg + kk * 16 + ((lane >> 3) & 1) * 8;
      ldsm_x4(b_h, bh + boff);
      ldsm_x4(b_l, bl + boff);
      mma16816(c[2 * j], a_h, b_h[0], b_h[1]);
      mma16816(c[2 * j + 1], a_h, b_h[2], b_h[3]);
      mma16816(c[2 * j], a_h, b_l[0], b_l[1]);
      mma16816(c[2 * j + 1], a_h, b_l[2], b_l[3]);
      mma16816(c[2 * j], a_l, b_h[0], b_h[1]);
      mma16816(c[2 * j + 1], a_l, b_h[2], b_h[3]);
    }
  }
}

// load_b_kn (mma_common.cuh) with a run-time leading dimension: B (rows = k, cols = n) tiles.
__device__ __forceinline__ void load_b_kn_ld(uint32_t (&b)[4], const bf16* s, int ld, int k0,
                                             int n0, int lane) {
  ldsm_x4_t(b, s + (k0 + (lane & 15)) * ld + n0 + (lane >> 4) * 8);
}

// c (16 x 16, two n8 tiles) += (ah + al) (bh + bl) without the lo.lo term: A fragments ah, al
// and B fragments (load_b_* layout: [0..1] n-tile 0, [2..3] n-tile 1) bh, bl.
__device__ __forceinline__ void mma_split(float (&c)[2][4], const uint32_t (&ah)[4],
                                          const uint32_t (&al)[4], const uint32_t (&bh)[4],
                                          const uint32_t (&bl)[4]) {
  mma16816(c[0], ah, bh[0], bh[1]);
  mma16816(c[1], ah, bh[2], bh[3]);
  mma16816(c[0], ah, bl[0], bl[1]);
  mma16816(c[1], ah, bl[2], bl[3]);
  mma16816(c[0], al, bh[0], bh[1]);
  mma16816(c[1], al, bh[2], bh[3]);
}

__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + __expf(-x)); }

}  // namespace attnlab::focus_tiled
