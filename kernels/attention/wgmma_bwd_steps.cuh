// The per-tile steps that the wgmma attention backwards share: dense
// (kernels/attention/attention_wgmma_bwd.cu, whose comments describe the loop) and Focus
// (kernels/focus/focus_wgmma_bwd.cu, the same loop with the gate). A block owns kBwdKeys keys, 64
// per warpgroup (the M of one wgmma), and walks tiles of kQ queries; accumulator element
// 4 j + 2 r + e of a thread: key key0 + 8 r, query q0 + 8 j + 2 tig + e. Device code for the
// sm_90a compilation only (CMake's attnlab_wgmma object library).
#pragma once
#include <cstdint>

#include "kernels/attention/dq_layout.h"
#include "kernels/attention/wgmma_common.cuh"

namespace attnlab::wgmma {

constexpr int kBwdKeys = 128;  // keys per block (64 per warpgroup)

#if ATTN_WGMMA_DEVICE
// Issues acc += A B (not committed): A (64 x kQ) from registers, B = a [kQ][D] tile (MN-major,
// column blocks kQ x 128 B apart: LBO), kQ / 16 k-steps of 16 rows (2 x 1024 B).
template <int D, int kQ>
__device__ __forceinline__ void issue_rs(float (&acc)[D / 2], const uint32_t (&a)[kQ / 16][4],
                                         uint32_t b_tile) {
  const uint64_t b0 = smem_desc(b_tile, kQ * 128, 1024);
#pragma unroll
  for (int kk = 0; kk < kQ / 16; ++kk) wgmma_rs<D>(acc, a[kk], desc_add(b0, kk * 16 * 128));
}

// dV += P^T dO and dK += dS^T Q (A = P^T, dS^T from registers), one committed group, not waited.
template <int D, int kQ>
__device__ __forceinline__ void issue_dv_dk(float (&dv)[D / 2], float (&dk)[D / 2],
                                            uint32_t (&pa)[kQ / 16][4], uint32_t (&dsa)[kQ / 16][4],
                                            uint32_t dO_tile, uint32_t q_tile) {
  fence_regs(dk);
  fence_regs(dv);
  fence_regs(dsa);
  fence_regs(pa);
  wgmma_fence();
  issue_rs<D, kQ>(dv, pa, dO_tile);
  issue_rs<D, kQ>(dk, dsa, q_tile);
  wgmma_commit();
}

// dP^T -> dS^T = P^T (dP^T - delta) in place.
template <int kQ>
__device__ __forceinline__ void dp_to_ds(float (&dp)[kQ / 2], const float (&pt)[kQ / 2],
                                         uint32_t c_delta, int tig) {
#pragma unroll
  for (int j = 0; j < kQ / 8; ++j) {
    const float2 dl = lds_f2(c_delta + 4 * (8 * j + 2 * tig));
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      dp[4 * j + 2 * r] = pt[4 * j + 2 * r] * (dp[4 * j + 2 * r] - dl.x);
      dp[4 * j + 2 * r + 1] = pt[4 * j + 2 * r + 1] * (dp[4 * j + 2 * r + 1] - dl.y);
    }
  }
}

// store_ds (below) for one 16-query chunk (A fragment dsa of k-step `chunk`).
template <int kQ>
__device__ __forceinline__ void store_ds_chunk(uint32_t sdS, const uint32_t (&dsa)[4], int kr0,
                                               int tig, int chunk) {
#pragma unroll
  for (int jj = 0; jj < 2; ++jj) {
    const int j = 2 * chunk + jj;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint32_t addr = sdS + swizzled_offset<kBwdKeys>(kr0 + 8 * r, j) + 4 * tig;
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(dsa[2 * jj + r]) : "memory");
    }
  }
}

// dS^T (bf16 A fragments) to the [kBwdKeys][kQ] tile at sdS (not fenced). Row kr (key in the
// block), 16-byte chunk j of the query columns: the swizzle makes the 8 rows of a warp's store hit
// 8 different chunks, so the 32 lanes cover all 32 banks.
template <int kQ>
__device__ __forceinline__ void store_ds(uint32_t sdS, const uint32_t (&dsa)[kQ / 16][4], int kr0,
                                         int tig) {
#pragma unroll
  for (int chunk = 0; chunk < kQ / 16; ++chunk)
    store_ds_chunk<kQ>(sdS, dsa[chunk], kr0, tig, chunk);
}

// Issues (one committed group, not waited) warpgroup wg's 64 x 64 block of dQ = dS K: queries
// 64 qw.., columns 64 dw.. of the kQ x D tile (D = 64: qw = wg; D = 128: dw = wg), A = dS
// MN-major (the transposed dS^T tile), B = K MN-major, K = the block's 128 keys.
template <int kQ>
__device__ __forceinline__ void issue_dq(float (&dq)[32], uint32_t sdS, uint32_t sK, int wg) {
  const int qw = kQ == 128 ? wg : 0, dw = kQ == 128 ? 0 : wg;
  fence_regs(dq);
  wgmma_fence();
  const uint64_t a0 = smem_desc(sdS + qw * kBwdKeys * 128, kBwdKeys * 128, 1024);
  const uint64_t b0 = smem_desc(sK + dw * kBwdKeys * 128, kBwdKeys * 128, 1024);
#pragma unroll
  for (int kk = 0; kk < kBwdKeys / 16; ++kk) {
    wgmma_ss<64, 1, 1>(dq, desc_add(a0, kk * 16 * 128), desc_add(b0, kk * 16 * 128), kk > 0);
  }
  wgmma_commit();
}

// The dQ block of issue_dq to the fp32 shared tile [kQ][D] (rows in the dq_swizzle layout); dq
// element 4 j + 2 r + e: tile row 64 qw + 16 warp + g + 8 r, column 64 dw + 8 j + 2 tig + e.
template <int D, int kQ>
__device__ __forceinline__ void store_dq_tile(uint32_t sdQ, const float (&dq)[32], int wg, int warp,
                                              int g, int tig) {
  const int qw = kQ == 128 ? wg : 0, dw = kQ == 128 ? 0 : wg;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = 64 * qw + 16 * warp + g + 8 * r;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int col = 64 * dw + 8 * j + 2 * tig;
      asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(
                       sdQ + 4 * uint32_t(row * D + dq_swizzle(row, col))),
                   "f"(dq[4 * j + 2 * r]), "f"(dq[4 * j + 2 * r + 1])
                   : "memory");
    }
  }
}
#endif  // ATTN_WGMMA_DEVICE

}  // namespace attnlab::wgmma
