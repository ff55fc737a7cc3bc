// The hard-routed Focus forward's band pass and list group pass in one launch (top_k 1, the band
// first; contract: focus_hard.cuh, launch_focus_hard_fused; design: docs/focus_hard_fused.md, "The
// fused launch"). sm_90a, bf16, head dim 64 or 128.
//
// The split schedule's two passes (focus_hard_band_block.cuh, focus_hard_group_block.cuh) are
// items of one grid of at most (SMs x blocks per SM) blocks: each block takes the next item
// number from a counter (counters[0], zeroed before the index build), runs it, and takes another
// until none is left. Items 0 .. n_band - 1 are the band's (token tiles x heads x batch rows),
// the rest the group pass's blocks (longest first, batch row after batch row). So the band's
// items are all handed out before any group item, a group item starts as soon as a block frees
// up (no kernel boundary: the band's last wave and the group pass's first share the SMs), and
// the index build, the launch before this one on the same stream, runs beside the band's items:
// this kernel is launched as its programmatic dependent (cudaLaunchAttributeProgrammaticStream
// Serialization; the index build's last kernel, the fused index kernel or the split path's
// scatter, calls griddepcontrol.launch_dependents first), and a block
// waits for the index (griddepcontrol.wait: its grid completed, its writes visible) only before
// its first group item. A group item's epilogue merges the band's partials of its rows, so it
// waits first until every band item has finished (counters[1], each band item's count after its
// partials, a barrier and a fence). No deadlock: an item number is taken only by a running block,
// band items wait for nothing, and a group item waits only for band items (all taken before it, by
// running blocks) and for the index grid (running before this grid could start).
#include <cuda.h>
#include <cuda_bf16.h>

#include <algorithm>

#include "core/cuda_check.h"
#include "kernels/attention/wgmma_common.cuh"
#include "kernels/common/device.cuh"
#include "kernels/common/pdl_launch.h"
#include "kernels/focus/focus_hard.cuh"
#include "kernels/focus/focus_hard_band_block.cuh"
#include "kernels/focus/focus_hard_group_block.cuh"
#include "kernels/focus/focus_hard_tma.cuh"

namespace attnlab {
namespace {

using namespace wgmma;

constexpr int kThreads = focus_hard::kHardTmaThreads;
static_assert(kThreads == focus_hard_group::kThreads, "one block shape for both passes");
template <int D>
constexpr int kMinBlocks = focus_hard::kHardTmaMinBlocks<D>;
static_assert(kMinBlocks<64> == focus_hard_group::kMinBlocks<64> &&
                  kMinBlocks<128> == focus_hard_group::kMinBlocks<128>,
              "the passes' blocks per SM");
// Dynamic shared memory: the larger of the two passes' (their operands from the same aligned
// base; the band's stage mbarriers after its tiles, where the group pass's end).
template <int D>
constexpr size_t fused_smem_bytes() {
  return std::max(focus_hard_group::smem_bytes<D>(), focus_hard::hard_tma_smem_bytes<D>());
}
template <int D>
constexpr bool group_ends_before_band_mbarriers() {
  return tile_bytes(focus_hard_group::kBM, D) +
             2 * focus_hard_group::kStages * tile_bytes(focus_hard_group::kBN<D>, D) <=
         tile_bytes(focus_hard::kHardTmaRows, D) + 4 * tile_bytes(focus_hard::kHardTmaKeys, D);
}
static_assert(group_ends_before_band_mbarriers<64>() && group_ends_before_band_mbarriers<128>(),
              "a group item's buffers would overwrite the band's stage mbarriers");

#if ATTN_WGMMA_DEVICE
__device__ __forceinline__ void mbar_inval(uint32_t bar) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
#endif  // ATTN_WGMMA_DEVICE

template <int D>
__global__ void __launch_bounds__(kThreads, kMinBlocks<D>)
    focus_hard_fused_kernel(const FocusHardAttnParams p, const __grid_constant__ CUtensorMap tm_k,
                            const __grid_constant__ CUtensorMap tm_v, int max_tiles,
                            int* __restrict__ counters) {
#if ATTN_WGMMA_DEVICE
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ int item_shared;
  __shared__ int index_ready;  // this block waited for the index grid
  // Few values live across the items (two blocks per SM leave 128 registers, which each pass
  // alone needs): the item's bounds are recomputed from p per item.
  auto n_band = [&] {
    return (p.T + focus_hard::kHardTmaRows - 1) / focus_hard::kHardTmaRows * p.n_head * p.B;
  };
  if (threadIdx.x == 0) index_ready = 0;
  for (;;) {
    if (threadIdx.x == 0) item_shared = atomicAdd(counters, 1);
    __syncthreads();
    const int item = item_shared;
    __syncthreads();  // read by every thread before thread 0 takes the next
    const uint32_t smem = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
    if (item < n_band()) {
      const int q_tiles = (p.T + focus_hard::kHardTmaRows - 1) / focus_hard::kHardTmaRows;
      const int per_row = q_tiles * p.n_head, b = item / per_row, r = item - b * per_row;
      const int h = r / q_tiles;
      focus_hard_band::band_block<D, true>(p, &tm_k, &tm_v, r - h * q_tiles, h, b, smem);
      __syncthreads();  // every thread's partial rows written, every stage mbarrier waited on
      if (threadIdx.x == 0) {
        __threadfence();  // (cumulative: the block's rows, ordered before it by the barrier)
        atomicAdd(counters + 1, 1);
        const focus_hard::HardTmaSmem sm(smem, D);
        mbar_inval(sm.full);
        mbar_inval(sm.full + 8);
      }
    } else {
      const int per_row = max_tiles * p.n_head, u = item - n_band(), b = u / per_row;
      if (b >= p.B) break;     // no item left
      if (index_ready == 0) {  // (uniform: written by thread 0 before a barrier)
        asm volatile("griddepcontrol.wait;\n" ::: "memory");
        __syncthreads();
        if (threadIdx.x == 0) index_ready = 1;
      }
      focus_hard_group::group_block<D, false>(p, max_tiles, unsigned(u - b * per_row), b, smem,
                                              [&] {
                                                if (threadIdx.x == 0) {
                                                  while (ld_acquire(counters + 1) < n_band())
                                                    __nanosleep(256);
                                                }
                                                __syncthreads();
                                              });
    }
    // The next item's copies (cp.async, TMA) reuse the shared memory this one read and wrote
    // (every copy an item issues lands before it ends; waited again here all the same).
    cp_async_wait_all();
    fence_proxy_async();
    __syncthreads();
  }
#else
  (void)p, (void)tm_k, (void)tm_v, (void)max_tiles, (void)counters;
#endif
}

template <int D>
void launch(const FocusHardAttnParams& p, int* counters, int64_t n_items, int64_t max_tiles,
            cudaStream_t st) {
  constexpr size_t smem = fused_smem_bytes<D>();
  auto* kernel = focus_hard_fused_kernel<D>;
  static std::atomic<uint64_t> attributes_set{0};
  set_max_shared_once(attributes_set, reinterpret_cast<const void*>(kernel), smem);
  const int kv_width = p.n_kv_head * D;
  const CUtensorMap tm_k = tile_map(p.k, kv_width, p.T, p.B, p.kv_row_stride, p.kv_batch_stride,
                                    focus_hard::kHardTmaKeys),
                    tm_v = tile_map(p.v, kv_width, p.T, p.B, p.kv_row_stride, p.kv_batch_stride,
                                    focus_hard::kHardTmaKeys);
  const unsigned blocks =
      unsigned(std::min<int64_t>(n_items, int64_t(current_sm_count()) * kMinBlocks<D>));
  launch_programmatic_dependent(kernel, blocks, kThreads, smem, st, p, tm_k, tm_v, int(max_tiles),
                                counters);
}

}  // namespace

void launch_focus_hard_fused(const FocusHardAttnParams& p, int* counters, Stream s) {
  ATTN_REQUIRE(focus_hard_wgmma_supported(p.D),
               "focus_hard fused: needs a build with sm_90a code (CMAKE_CUDA_ARCHITECTURES "
               "containing 90), a compute capability 9.0 device and head dim 64 or 128 (got %d)",
               p.D);
  int64_t max_tiles = 0;
  const int64_t n_items = focus_hard_fused_items(p, counters, &max_tiles);
  auto st = reinterpret_cast<cudaStream_t>(s);
  if (p.D == 64)
    launch<64>(p, counters, n_items, max_tiles, st);
  else
    launch<128>(p, counters, n_items, max_tiles, st);
}

int64_t focus_hard_fused_items(const FocusHardAttnParams& p, const int* counters,
                               int64_t* max_tiles) {
  ATTN_ASSERT(p.top_k == 1 && p.band_first && p.sorted == nullptr && counters != nullptr);
  ATTN_ASSERT(p.tile_rows == kFocusHardWgmmaRows && p.part_o != nullptr && p.part_lse != nullptr);
  ATTN_ASSERT(p.K >= 1 && p.K <= kFocusHardMaxGroups);
  ATTN_ASSERT(aligned16(p.q) && aligned16(p.k) && aligned16(p.v) && p.q_row_stride % 8 == 0 &&
              p.kv_row_stride % 8 == 0 && p.kv_batch_stride % 8 == 0);
  *max_tiles = focus_hard_max_tiles(p.T, p.K, p.top_k, kFocusHardWgmmaRows);
  const int64_t q_tiles = (p.T + kFocusHardWgmmaRows - 1) / kFocusHardWgmmaRows;
  const int64_t n_items = (q_tiles + *max_tiles) * p.n_head * p.B;
  // (Each block takes numbers until one is past the last item: the counter ends above n_items.)
  ATTN_REQUIRE(n_items < INT32_MAX / 2, "focus_hard fused: %lld items exceed the item counter",
               (long long)n_items);
  return n_items;
}

}  // namespace attnlab
