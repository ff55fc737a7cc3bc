// The group passes' epilogue with band_first (top_k 1; focus_hard.cuh): the band pass wrote the
// token's band partial (o normalised, lse) at slot 0, and the group pass, whose state holds the
// token's other pairs, merges the two into o and lse. Shared by focus_hard_wgmma.cu (the list
// group pass) and focus_hard_sorted.cu. Device code for the sm_90a compilation.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/focus/focus_hard.cuh"
#include "kernels/focus/focus_hard_walk.h"

namespace attnlab::focus_hard {

// Row r (0: the thread's first accumulator row, 1: the row 8 below) of a thread's m64 wgmma
// accumulator o (columns 8 jj + 2 tig and + 1 of each 8), unnormalised (inv = 1 / its row sum),
// with log-sum-exp lse_g, merged with the band partial at `part` ([B, T, H] index of token i,
// head h) into o (bf16) and lse.
template <int D>
__device__ __forceinline__ void write_merged(const FocusHardAttnParams& p, const float (&o)[D / 2],
                                             int r, int tig, float inv, float lse_g, int64_t part,
                                             int b, int h, int i) {
  float w_g, w_b, lse;
  merge_weights(lse_g, p.part_lse[part], &w_g, &w_b, &lse);
  w_g *= inv;
  const float* band = p.part_o + part * D;
  bf16* out = p.o + b * p.o_batch_stride + int64_t(i) * p.o_row_stride + h * D;
#pragma unroll
  for (int jj = 0; jj < D / 8; ++jj) {
    const float2 v = *reinterpret_cast<const float2*>(band + 8 * jj + 2 * tig);
    *reinterpret_cast<__nv_bfloat162*>(out + 8 * jj + 2 * tig) = __floats2bfloat162_rn(
        fmaf(w_g, o[4 * jj + 2 * r], w_b * v.x), fmaf(w_g, o[4 * jj + 2 * r + 1], w_b * v.y));
  }
  if (tig == 0) p.lse[(int64_t(b) * p.n_head + h) * p.T + i] = lse;
}

}  // namespace attnlab::focus_hard
