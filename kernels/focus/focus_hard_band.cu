// The local band of the hard-routed Focus forward for Hopper (contract: focus_hard.cuh,
// launch_focus_hard_wgmma; design: docs/focus_hard.md), the second launch of the
// split schedule after either group pass (focus_hard_wgmma.cu: rows gathered per tile;
// focus_hard_sorted.cu: top_k 1 on the group-sorted rows). bf16, head dim 64 or 128, sm_90a.
//
// A block owns 128 consecutive tokens and walks, in token order, the 128-key tiles of their bands
// [i - w, i] (band_tiles; a warpgroup skips tiles outside its rows' bands, band_tile_visible), on
// the TMA block of focus_hard_tma.cuh: the rows are contiguous, so K and V are TMA boxes of the
// original qkv. Beside the list group pass (which takes the distant pairs only: the window
// partition of focus_hard_walk.h) it takes every pair of the window (take_window_key) and reads
// no group set; beside the sorted group pass (which takes every pair sharing a group) the pairs
// that share no group (take_local_key), the keys' group sets beside each tile in shared memory
// (their ids copied a tile ahead by cp.async, the sets formed after the current tile's compute).
// The epilogue merges
// the band's state with the token's group partials (one per distinct valid slot) by log-sum-exp
// and writes o (bf16) and lse once; with band_first (top_k 1, the list group pass) it runs before
// the group pass, beside the index build (on a second stream), and writes the band's partial,
// which the group pass merges.
#include <cuda_bf16.h>

#include "core/cuda_check.h"
#include "kernels/common/device.cuh"
#include "kernels/focus/focus_hard.cuh"
#include "kernels/focus/focus_hard_band_block.cuh"

namespace attnlab {
namespace {

using namespace focus_hard;
using namespace focus_hard_band;

template <int D, bool kWindow>
__global__ void __launch_bounds__(kHardTmaThreads, kHardTmaMinBlocks<D>)
    band_kernel(const FocusHardAttnParams p, const __grid_constant__ CUtensorMap tm_k,
                const __grid_constant__ CUtensorMap tm_v) {
#if ATTN_WGMMA_DEVICE
  extern __shared__ __align__(16) unsigned char smem_raw[];
  band_block<D, kWindow>(p, &tm_k, &tm_v, blockIdx.x, blockIdx.y, blockIdx.z,
                         static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)));
#else
  (void)p, (void)tm_k, (void)tm_v;
#endif
}

template <int D>
void launch_band(const FocusHardAttnParams& p, cudaStream_t st) {
  const int kv_width = p.n_kv_head * D;
  const CUtensorMap tm_k = tile_map(p.k, kv_width, p.T, p.B, p.kv_row_stride, p.kv_batch_stride,
                                    kKeys),
                    tm_v = tile_map(p.v, kv_width, p.T, p.B, p.kv_row_stride, p.kv_batch_stride,
                                    kKeys);
  const dim3 grid((p.T + kRows - 1) / kRows, p.n_head, p.B);
  if (focus_hard_window_band(p))
    launch_hard_tma<D, band_kernel<D, true>>(grid, p, tm_k, tm_v, st);
  else
    launch_hard_tma<D, band_kernel<D, false>>(grid, p, tm_k, tm_v, st);
}

}  // namespace

void launch_focus_hard_band(const FocusHardAttnParams& p, Stream s) {
  ATTN_ASSERT(p.part_o != nullptr && p.part_lse != nullptr && (p.D == 64 || p.D == 128));
  ATTN_ASSERT(!p.band_first || p.top_k == 1);
  ATTN_ASSERT(p.K >= 1 && p.K <= kFocusHardMaxGroups);
  ATTN_ASSERT(aligned16(p.q) && aligned16(p.k) && aligned16(p.v) && p.q_row_stride % 8 == 0 &&
              p.kv_row_stride % 8 == 0 && p.kv_batch_stride % 8 == 0);
  auto st = reinterpret_cast<cudaStream_t>(s);
  if (p.D == 64)
    launch_band<64>(p, st);
  else
    launch_band<128>(p, st);
}

}  // namespace attnlab
