// The epilogues of the hard-routed forward's wgmma passes (focus_hard_wgmma.cu, focus_hard_band.cu,
// focus_hard_sorted.cu): a pass's state for one query row written as a partial (o normalised,
// lse) for another pass to merge, or merged with the partial another pass wrote. The row is row r
// (0: the thread's first accumulator row, 1: the row 8 below) of a thread's m64 wgmma accumulator
// o (columns 8 jj + 2 tig and + 1 of each 8), unnormalised, with row sum l (completed over the
// row's 4 threads: row_sum) and running max max2 (log2 units). part: the partial's row, an index
// into part_lse and (times D) part_o. Device code for the sm_90a compilation.
#pragma once
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "kernels/attention/wgmma_common.cuh"
#include "kernels/focus/focus_hard.cuh"
#include "kernels/focus/focus_hard_walk.h"

namespace attnlab::focus_hard {

#if ATTN_WGMMA_DEVICE

// A band tile's mask on a thread's two accumulator rows i0 and i1: take_window_key with the
// bounds relative to the thread's first column (key = k0 + 2 tig + (8 jj + e); keys are >= 0
// here, and w <= T keeps i - w from overflowing) and, with kGroups, no key whose group set
// (key_sets[c] for column c of the thread's first) meets the row's, qs0 or qs1 (the band pass's
// local keys).
template <int kKeys, bool kGroups>
__device__ __forceinline__ void mask_band_tile(float (&s)[kKeys / 2], int i0, int i1, int k0,
                                               int tig, int w, const uint64_t* key_sets,
                                               uint64_t qs0, uint64_t qs1) {
  const int base = k0 + 2 * tig;
  const int hi0 = i0 - base, hi1 = i1 - base, lo0 = hi0 - w, lo1 = hi1 - w;
#pragma unroll
  for (int jj = 0; jj < kKeys / 8; ++jj) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int c = 8 * jj + e;
      uint64_t km = 0;
      if constexpr (kGroups) km = key_sets[c];
      if (c > hi0 || c < lo0 || (km & qs0) != 0) s[4 * jj + e] = -INFINITY;
      if (c > hi1 || c < lo1 || (km & qs1) != 0) s[4 * jj + 2 + e] = -INFINITY;
    }
  }
}

// A row's sum over its 4 threads (each holds a quarter of the row's columns).
__device__ __forceinline__ float row_sum(float l) {
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  return l + __shfl_xor_sync(0xffffffffu, l, 2);
}

// The row's log-sum-exp (natural log); -inf for a row that took no key (l = 0).
__device__ __forceinline__ float row_lse(float l, float max2) {
  return l > 0.f ? (max2 + log2f(l)) * wgmma::kLn2 : -INFINITY;
}

// The row as a partial: o / l (0 for an empty row) and its lse.
template <int D>
__device__ __forceinline__ void write_partial(const FocusHardAttnParams& p, const float (&o)[D / 2],
                                              int r, int tig, float l, float max2, int64_t part) {
  const float inv = l > 0.f ? 1.f / l : 0.f;
  float* out = p.part_o + part * D;
#pragma unroll
  for (int jj = 0; jj < D / 8; ++jj) {
    *reinterpret_cast<float2*>(out + 8 * jj + 2 * tig) =
        make_float2(o[4 * jj + 2 * r] * inv, o[4 * jj + 2 * r + 1] * inv);
  }
  if (tig == 0) p.part_lse[part] = row_lse(l, max2);
}

// The values of the partial at `part` that this thread's row merges (its columns of part_o, and
// part_lse), loaded by load_partial before any of the block's output stores: loads placed after
// a store to o cannot be hoisted above it (the compiler cannot prove the two do not alias), so
// loading inside the store loop made every float2 one more serial round trip (the SASS had 8 per
// row at D 64).
template <int D>
struct RowPartial {
  float2 v[D / 8];
  float lse;
};

template <int D>
__device__ __forceinline__ void load_partial(const FocusHardAttnParams& p, int64_t part, int tig,
                                             RowPartial<D>& pr) {
  const float* src = p.part_o + part * D;
#pragma unroll
  for (int jj = 0; jj < D / 8; ++jj)
    pr.v[jj] = *reinterpret_cast<const float2*>(src + 8 * jj + 2 * tig);
  pr.lse = p.part_lse[part];
}

// The row merged by log-sum-exp with the partial pr (load_partial; over a disjoint key set;
// either may be empty, not both) into o (bf16) and lse of token i, head h, batch row b.
template <int D>
__device__ __forceinline__ void write_merged(const FocusHardAttnParams& p, const float (&o)[D / 2],
                                             int r, int tig, float l, float max2,
                                             const RowPartial<D>& pr, int b, int h, int i) {
  float w_row, w_part, lse;
  merge_weights(row_lse(l, max2), pr.lse, &w_row, &w_part, &lse);
  w_row *= l > 0.f ? 1.f / l : 0.f;
  bf16* out = p.o + b * p.o_batch_stride + int64_t(i) * p.o_row_stride + h * D;
#pragma unroll
  for (int jj = 0; jj < D / 8; ++jj) {
    *reinterpret_cast<__nv_bfloat162*>(out + 8 * jj + 2 * tig) =
        __floats2bfloat162_rn(fmaf(w_row, o[4 * jj + 2 * r], w_part * pr.v[jj].x),
                              fmaf(w_row, o[4 * jj + 2 * r + 1], w_part * pr.v[jj].y));
  }
  if (tig == 0) p.lse[(int64_t(b) * p.n_head + h) * p.T + i] = lse;
}

#endif  // ATTN_WGMMA_DEVICE

}  // namespace attnlab::focus_hard
