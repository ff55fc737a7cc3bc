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

// The row merged by log-sum-exp with the partial at `part` (over a disjoint key set; either may
// be empty, not both) into o (bf16) and lse of token i, head h, batch row b.
template <int D>
__device__ __forceinline__ void write_merged(const FocusHardAttnParams& p, const float (&o)[D / 2],
                                             int r, int tig, float l, float max2, int64_t part,
                                             int b, int h, int i) {
  float w_row, w_part, lse;
  merge_weights(row_lse(l, max2), p.part_lse[part], &w_row, &w_part, &lse);
  w_row *= l > 0.f ? 1.f / l : 0.f;
  const float* other = p.part_o + part * D;
  bf16* out = p.o + b * p.o_batch_stride + int64_t(i) * p.o_row_stride + h * D;
#pragma unroll
  for (int jj = 0; jj < D / 8; ++jj) {
    const float2 v = *reinterpret_cast<const float2*>(other + 8 * jj + 2 * tig);
    *reinterpret_cast<__nv_bfloat162*>(out + 8 * jj + 2 * tig) =
        __floats2bfloat162_rn(fmaf(w_row, o[4 * jj + 2 * r], w_part * v.x),
                              fmaf(w_row, o[4 * jj + 2 * r + 1], w_part * v.y));
  }
  if (tig == 0) p.lse[(int64_t(b) * p.n_head + h) * p.T + i] = lse;
}

// The concurrent order (FocusHardAttnParams::concurrent): this pass wrote the partials of its
// rows r = 0, 1 (tokens rows[r] of batch row b, head h; -1: no row); count the arrivals and return
// whether this pass came last for each row (of expected_arrivals). Every thread of the warp calls
// it (a row's 4 threads are lanes 4 g .. 4 g + 3). Release: each thread's fence, the warp barrier,
// then the counting lane's fence before its atomic add (the pattern of a split-K semaphore);
// acquire: that lane's fence after the add, then a warp barrier before the row's threads read the
// other partials (through L2: write_from_partials).
__device__ __forceinline__ void arrive(const FocusHardAttnParams& p, int b, int h,
                                       const int (&rows)[2], int tig, bool (&last)[2]) {
  __threadfence();
  __syncwarp();
  int is_last[2] = {0, 0};
  if (tig == 0) {
    __threadfence();
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (rows[r] < 0) continue;
      const int64_t bt = int64_t(b) * p.T + rows[r];
      const int prev = atomicAdd(p.arrivals + bt * p.n_head + h, 1);
      is_last[r] = prev == expected_arrivals(p.groups + bt * p.top_k, p.top_k, p.K) - 1;
    }
    __threadfence();
  }
  __syncwarp();
  const int leader = (threadIdx.x % 32) & ~3;
#pragma unroll
  for (int r = 0; r < 2; ++r) last[r] = __shfl_sync(0xffffffffu, is_last[r], leader) != 0;
}

// Row (b, i, h) merged from its partials alone into o (bf16) and lse: the band's partial (at
// band_part) and the group partial of each distinct valid slot of the token, in that order, so
// the result does not depend on which pass merges. The partials were written by other blocks in
// this launch or beside it: read through L2 (ld.global.cg). At least one is non-empty (the pass
// of the token's first valid slot takes (i, i)).
template <int D>
__device__ __forceinline__ void write_from_partials(const FocusHardAttnParams& p, int tig,
                                                    int64_t band_part, int b, int h, int i) {
  const int64_t bt = int64_t(b) * p.T + i;
  const int32_t* gr = p.groups + bt * p.top_k;
  // f(part) for the band's partial, then each distinct valid slot's.
  auto each_part = [&](auto f) {
    f(band_part);
    uint64_t seen = 0;
    for (int sl = next_partial_slot(gr, p.top_k, p.K, 0, &seen); sl < p.top_k;
         sl = next_partial_slot(gr, p.top_k, p.K, sl + 1, &seen))
      f((bt * p.top_k + sl) * p.n_head + h);
  };
  float mx = -INFINITY;
  each_part([&](int64_t part) { mx = fmaxf(mx, __ldcg(p.part_lse + part)); });
  float sum = 0.f;
  each_part([&](int64_t part) {
    const float ls = __ldcg(p.part_lse + part);
    sum += ls == -INFINITY ? 0.f : __expf(ls - mx);
  });
  const float inv_sum = 1.f / sum;
  float acc[D / 4];
#pragma unroll
  for (int c = 0; c < D / 4; ++c) acc[c] = 0.f;
  each_part([&](int64_t part) {
    const float ls = __ldcg(p.part_lse + part);
    if (ls == -INFINITY) return;
    const float wgt = __expf(ls - mx) * inv_sum;
    const float* src = p.part_o + part * D;
#pragma unroll
    for (int jj = 0; jj < D / 8; ++jj) {
      const float2 v = __ldcg(reinterpret_cast<const float2*>(src + 8 * jj + 2 * tig));
      acc[2 * jj] = fmaf(wgt, v.x, acc[2 * jj]);
      acc[2 * jj + 1] = fmaf(wgt, v.y, acc[2 * jj + 1]);
    }
  });
  bf16* out = p.o + b * p.o_batch_stride + int64_t(i) * p.o_row_stride + h * D;
#pragma unroll
  for (int jj = 0; jj < D / 8; ++jj) {
    *reinterpret_cast<__nv_bfloat162*>(out + 8 * jj + 2 * tig) =
        __floats2bfloat162_rn(acc[2 * jj], acc[2 * jj + 1]);
  }
  if (tig == 0) p.lse[(int64_t(b) * p.n_head + h) * p.T + i] = mx + __logf(sum);
}

// The band's partial row of (b, i, h) in the concurrent order (after the group partials).
__device__ __forceinline__ int64_t band_part(const FocusHardAttnParams& p, int b, int i, int h) {
  return int64_t(p.B) * p.T * p.top_k * p.n_head + (int64_t(b) * p.T + i) * p.n_head + h;
}

#endif  // ATTN_WGMMA_DEVICE

}  // namespace attnlab::focus_hard
