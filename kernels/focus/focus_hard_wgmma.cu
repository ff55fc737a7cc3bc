// Hard-routed Focus forward for Hopper on warpgroup MMA (wgmma), bf16, head dim 64 or 128: the
// split schedule (contract: focus_hard.cuh, launch_focus_hard_wgmma; design and cost budget:
// docs/focus_hard.md).
//
// The group pass (the split schedule's first launch; the band pass is focus_hard_band.cu, and
// for top_k 1 from 32K tokens the group pass is focus_hard_sorted.cu instead), a
// FlashAttention-3-style "simple" block of the dense wgmma forward (attention_wgmma.cu, D = 64): 2
// warpgroups x 64 query rows, key tiles of kBN keys in a ring of shared-memory buffers
// (kRingStages) in the 128-byte-swizzled wgmma layout (wgmma_common.cuh), per tile S = Q K^T (wgmma
// m64nBNk16, both operands from shared memory), online softmax in registers (log2 domain), O += P V
// (wgmma m64nDk16, P from registers, V MN-major); kBN = 64. Rows of Q, K and V are copied by
// cp.async, 16 bytes per thread, into the swizzled layout: the positions of a tile's rows are not
// contiguous, so TMA boxes do not apply. A block owns 128 consecutive entries of one group's sorted
// list (queries gathered by index) and walks the group's list in tiles of kBN entries up to its
// last query (the causal keys are a prefix). It takes the distant pairs only, i - j > w (the window
// partition, focus_hard_walk.h: the band pass takes every pair of the window): element test
// take_group_key on the queries' group_bound, i - w - 1 (j <= i - w - 1, and j holds none of
// i's groups of lower slots: a pair sharing several groups is counted in i's first shared slot).
// A warpgroup skips a tile whose first key is past its last query's bound and drops the element
// test where every pair is taken. Output: the partial (o normalised, lse; empty rows: o 0, lse
// -inf) of the membership, f32, [B, T, top_k, H, D] / [B, T, top_k, H].
// Why two passes instead of the band inside the group walk (one softmax state): the 128 queries
// of a group tile are spread over ~128 K positions, so the union of their bands is ~(128 K + w)
// keys of which each query needs w + 1; in token order the band is (128 + w) keys for 128
// queries. The price is the partial's round trip (8 (D + 1) bytes per membership and head).
// Synchronisation per tile: a cp.async wait for all but the newest group (the next tile's rows
// stay in flight), the proxy fence, a block barrier; the tiles' key positions and group sets in
// static shared memory beside the operands.
//
// The bodies exist only in the sm_90a compilation (CMake's attnlab_wgmma object library); other
// builds compile empty kernels and focus_hard_wgmma_supported() is false.
#include <cuda_bf16.h>

#include "core/cuda_check.h"
#include "kernels/common/device.cuh"
#include "kernels/focus/focus_hard.cuh"
#include "kernels/focus/focus_hard_group_block.cuh"

namespace attnlab {
namespace {

using namespace focus_hard_group;

template <int D>
__global__ void __launch_bounds__(kThreads, kMinBlocks<D>)
    focus_hard_wgmma_kernel(const FocusHardAttnParams p, int max_tiles) {
#if ATTN_WGMMA_DEVICE
  extern __shared__ __align__(16) unsigned char smem_raw[];
  group_block<D, true>(p, max_tiles, blockIdx.x, blockIdx.z,
                       static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)), [] {});
#else
  (void)p, (void)max_tiles;
#endif
}

template <int D>
void launch(const FocusHardAttnParams& p, cudaStream_t st, unsigned blocks) {
  constexpr size_t smem = smem_bytes<D>();
  auto* kernel = focus_hard_wgmma_kernel<D>;
  static std::atomic<uint64_t> attributes_set{0};
  set_max_shared_once(attributes_set, reinterpret_cast<const void*>(kernel), smem);
  kernel<<<dim3(blocks * unsigned(p.n_head), 1, p.B), kThreads, smem, st>>>(p, int(blocks));
  CUDA_CHECK_LAUNCH();
}

template <int D>
void run_group(const FocusHardAttnParams& p, cudaStream_t st) {
  const int64_t max_tiles = focus_hard_max_tiles(p.T, p.K, p.top_k, kBM);
  ATTN_REQUIRE(max_tiles * p.n_head <= INT32_MAX,
               "focus_hard: %lld query tiles x %d heads exceed the grid", (long long)max_tiles,
               p.n_head);
  launch<D>(p, st, unsigned(max_tiles));
}

}  // namespace

bool focus_hard_wgmma_supported(int D) {
#if defined(ATTNLAB_WGMMA_SM90A)
  if (D != 64 && D != 128) return false;
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    (void)cudaGetLastError();  // leave no sticky error for the caller's next check
    return false;
  }
  return major == 9 && minor == 0;
#else
  (void)D;
  return false;
#endif
}

void launch_focus_hard_wgmma(const FocusHardAttnParams& p, Stream s) {
  ATTN_REQUIRE(focus_hard_wgmma_supported(p.D),
               "focus_hard wgmma: needs a build with sm_90a code (CMAKE_CUDA_ARCHITECTURES "
               "containing 90), a compute capability 9.0 device and head dim 64 or 128 (got %d)",
               p.D);
  ATTN_ASSERT(p.tile_rows == kBM);
  ATTN_ASSERT(p.K >= 1 && p.K <= kFocusHardMaxGroups && p.top_k >= 1 && p.top_k <= 64);
  ATTN_ASSERT(p.part_o != nullptr && p.part_lse != nullptr);
  ATTN_ASSERT(p.q_row_stride % 8 == 0 && p.kv_row_stride % 8 == 0 && p.o_row_stride % 2 == 0);
  ATTN_ASSERT(!p.band_first || p.top_k == 1);
  auto st = reinterpret_cast<cudaStream_t>(s);
  if (p.sorted != nullptr) {
    launch_focus_hard_sorted_group(p, st);
  } else if (p.D == 64) {
    run_group<64>(p, st);
  } else {
    run_group<128>(p, st);
  }
  // band_first: the caller ran the band pass before.
  if (!p.band_first) launch_focus_hard_band(p, st);
}

}  // namespace attnlab
