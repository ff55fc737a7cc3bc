// Layout of the fp32 dQ rows in the wgmma attention backward (attention_wgmma_bwd.cu): the kernel's
// shared-memory dQ tile, the fp32 accumulator dq_accum it is added to, and the conversion kernel
// that reads it back all use dq_swizzle. Host-includable, so that tests/ops checks its properties.
#pragma once

#if defined(__CUDACC__)
#define ATTN_DQ_LAYOUT_FN __host__ __device__ __forceinline__
#else
#define ATTN_DQ_LAYOUT_FN inline
#endif

namespace attnlab {

// The 16-byte chunk of columns col .. col + 3 of row `row` sits at chunk (col / 4) ^ f(row % 8),
// f(r) = 2 (r % 4) + r / 4. A warp's fragment store (st.shared.v2.f32: 8 rows x 4 column pairs,
// 256 bytes) is served per half-warp (4 rows x 4 pairs, 128 bytes); f maps those 4 rows and the 2
// chunks their pairs fall in to 8 different chunks, so each half-warp covers all 32 banks once: 2
// wavefronts per store, the minimum. (The XOR with r % 8 used before put each half-warp's 4 rows on
// 4 chunks only: 4 wavefronts, twice the ideal, as Nsight Compute showed on the H200.) A
// permutation inside each row: the rows of a tile stay contiguous for the bulk reduction. Returns
// the float offset inside the row. Faster than the old layout on the H200 at every T measured
// (bench_attention, docs/performance_attention_history.md v8).
ATTN_DQ_LAYOUT_FN int dq_swizzle(int row, int col) {
  const int f = ((row & 3) << 1) | ((row >> 2) & 1);
  return (((col >> 2) ^ f) << 2) | (col & 3);
}

}  // namespace attnlab

#undef ATTN_DQ_LAYOUT_FN
