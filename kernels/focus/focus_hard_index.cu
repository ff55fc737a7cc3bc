// Group-sorted index lists of the hard-routed Focus forward (contract: focus_hard.cuh). A stable
// counting sort per batch row in three kernels, each O(T top_k) work:
//   count:   per chunk of kFocusHardChunk tokens, each token's group bit set (masks) and the
//            chunk's count per group (chunk_counts, group-major: [B, K, n_chunks]);
//   scan:    per batch row, one exclusive scan over the group-major counts gives every (group,
//            chunk) its first list slot; offsets and tile_offsets from the per-group totals;
//   scatter: per chunk, each token's rank among the chunk's earlier tokens of the same group (one
//            warp ballot per group, then a prefix over the block's warps): positions stay sorted.
// Rows of at most kAutoFusedMaxChunks chunks (T <= 4096) run one kernel (hard_index_fused, the
// same sort in one block per row; it takes up to kFusedMaxChunks = 8 when forced:
// FocusHardIndexPath).
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "kernels/common/device.cuh"
#include "kernels/focus/focus_hard.cuh"
#include "kernels/focus/focus_hard_walk.h"

namespace attnlab {
namespace {

constexpr int kChunk = kFocusHardChunk;  // = threads per block of count and scatter
constexpr int kWarps = kChunk / 32;

__global__ void __launch_bounds__(kChunk) hard_index_count(const FocusHardIndexParams p) {
  __shared__ int count[kFocusHardMaxGroups];
  const int b = blockIdx.y, n_chunks = gridDim.x;
  const int t = blockIdx.x * kChunk + threadIdx.x;
  if (threadIdx.x < p.K) count[threadIdx.x] = 0;
  __syncthreads();
  if (t < p.T) {
    const uint64_t m =
        focus_hard::group_set(p.groups + (int64_t(b) * p.T + t) * p.top_k, p.top_k, p.K);
    p.masks[int64_t(b) * p.T + t] = m;
    for (uint64_t r = m; r != 0; r &= r - 1) atomicAdd(&count[__ffsll(int64_t(r)) - 1], 1);
  }
  __syncthreads();
  if (threadIdx.x < p.K)
    p.chunk_counts[(int64_t(b) * p.K + threadIdx.x) * n_chunks + blockIdx.x] = count[threadIdx.x];
}

// One block per batch row: exclusive scan, in place, of its K * n_chunks counts (group-major).
constexpr int kScanThreads = 1024;
__global__ void __launch_bounds__(kScanThreads)
    hard_index_scan(const FocusHardIndexParams p, int n_chunks) {
  __shared__ int warp_sums[kScanThreads / 32];
  __shared__ int carry;
  const int b = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int32_t* c = p.chunk_counts + int64_t(b) * p.K * n_chunks;
  int32_t* offs = p.offsets + int64_t(b) * (p.K + 1);
  const int n = p.K * n_chunks;
  if (threadIdx.x == 0) carry = 0;
  __syncthreads();
  for (int base = 0; base < n; base += kScanThreads) {
    const int i = base + threadIdx.x;
    const int x = i < n ? c[i] : 0;
    int incl = x;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += y;
    }
    if (lane == 31) warp_sums[warp] = incl;
    __syncthreads();
    if (warp == 0) {
      int w = warp_sums[lane];
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, w, o);
        if (lane >= o) w += y;
      }
      warp_sums[lane] = w;  // inclusive over warps
    }
    __syncthreads();
    const int excl = carry + (warp > 0 ? warp_sums[warp - 1] : 0) + incl - x;
    if (i < n) {
      c[i] = excl;
      if (i % n_chunks == 0) offs[i / n_chunks] = excl;
    }
    __syncthreads();
    if (threadIdx.x == 0) carry += warp_sums[kScanThreads / 32 - 1];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    offs[p.K] = carry;
    int32_t* toff = p.tile_offsets + int64_t(b) * (p.K + 1);
    int tiles = 0;
    for (int g = 0; g < p.K; ++g) {
      toff[g] = tiles;
      tiles += (offs[g + 1] - offs[g] + p.tile_rows - 1) / p.tile_rows;
    }
    toff[p.K] = tiles;
  }
}

// The index build's last kernel lets its stream's next launch start now if that launch allows
// it (the fused forward, focus_hard_fused.cu: it waits for this grid before reading the lists);
// no effect on a plain launch.
__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

__global__ void __launch_bounds__(kChunk) hard_index_scatter(const FocusHardIndexParams p) {
  allow_dependent_launch();
  __shared__ int warp_base[kFocusHardMaxGroups][kWarps];
  const int b = blockIdx.y, n_chunks = gridDim.x;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int t = blockIdx.x * kChunk + threadIdx.x;
  const uint64_t m = t < p.T ? p.masks[int64_t(b) * p.T + t] : 0;
  const unsigned lt = (1u << lane) - 1u;
  for (int g = 0; g < p.K; ++g) {
    const unsigned bal = __ballot_sync(0xffffffffu, (m >> g) & 1);
    if (lane == 0) warp_base[g][warp] = __popc(bal);
  }
  __syncthreads();
  // Exclusive prefix over the warps, per group, from the (group, chunk) base of the scan.
  if (threadIdx.x < p.K) {
    const int g = threadIdx.x;
    int run = p.chunk_counts[(int64_t(b) * p.K + g) * n_chunks + blockIdx.x];
    for (int w = 0; w < kWarps; ++w) {
      const int c = warp_base[g][w];
      warp_base[g][w] = run;
      run += c;
    }
  }
  __syncthreads();
  int32_t* list = p.list + int64_t(b) * p.T * p.top_k;
  for (int g = 0; g < p.K; ++g) {
    const bool has = (m >> g) & 1;
    const unsigned bal = __ballot_sync(0xffffffffu, has);
    if (has) list[warp_base[g][warp] + __popc(bal & lt)] = t;
  }
}

// Short rows (at most kFusedMaxChunks chunks): the whole sort in one launch, one block per batch
// row, in three phases with a barrier between each (no atomics, no serial loop over the chunks):
//   1. per (group g, chunk c, warp w) the count of the warp's tokens in g (a ballot),
//      cnt[(g * n_chunks + c) * 32 + w] in shared memory (group-major, then position order);
//   2. one exclusive scan of those K * n_chunks * 32 counts: each (g, c, w) its first list slot;
//   3. each token, per group of its set: that slot + its rank among the warp's earlier tokens of
//      the group (the same ballot). Positions stay sorted inside a group (chunk, warp, lane order).
// Saves two launches and their gaps at short T, where the index is latency only.
constexpr int kFusedMaxChunks = kFocusHardFusedMaxChunks;
// The automatic choice: the fused kernel for rows of at most this many chunks, the three kernels
// beyond (docs/performance_focus_history.md, "The index build's threshold, measured").
constexpr int kAutoFusedMaxChunks = 4;
inline size_t fused_smem_bytes(int K, int n_chunks) {
  return sizeof(int) * (size_t(K) * n_chunks * kWarps + kWarps);
}
__global__ void __launch_bounds__(kChunk) hard_index_fused(const FocusHardIndexParams p) {
  allow_dependent_launch();
  extern __shared__ int fused_smem[];
  const int b = blockIdx.x, n_chunks = (p.T + kChunk - 1) / kChunk, K = p.K;
  const int n = K * n_chunks * kWarps;  // <= 16 per thread
  int* cnt = fused_smem;                // [K][n_chunks][kWarps], scanned in place
  int* warp_sums = fused_smem + n;      // [kWarps]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const unsigned lt = (1u << lane) - 1u;

  uint64_t mk[kFusedMaxChunks];
#pragma unroll
  for (int c = 0; c < kFusedMaxChunks; ++c) {
    const int t = c * kChunk + threadIdx.x;
    mk[c] = 0;
    if (c < n_chunks && t < p.T) {
      mk[c] = focus_hard::group_set(p.groups + (int64_t(b) * p.T + t) * p.top_k, p.top_k, K);
      p.masks[int64_t(b) * p.T + t] = mk[c];
    }
  }
#pragma unroll
  for (int c = 0; c < kFusedMaxChunks; ++c) {
    if (c >= n_chunks) break;
    for (int g = 0; g < K; ++g) {
      const unsigned bal = __ballot_sync(0xffffffffu, (mk[c] >> g) & 1);
      if (lane == 0) cnt[(g * n_chunks + c) * kWarps + warp] = __popc(bal);
    }
  }
  __syncthreads();

  // Exclusive scan of cnt: thread x owns items [x * per, (x + 1) * per).
  const int per = (n + kChunk - 1) / kChunk;
  const int lo = threadIdx.x * per;
  int own = 0;
  for (int k = 0; k < per; ++k)
    if (lo + k < n) own += cnt[lo + k];
  int incl = own;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    int v = warp_sums[lane];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, v, o);
      if (lane >= o) v += y;
    }
    warp_sums[lane] = v;  // inclusive over warps
  }
  __syncthreads();
  int run = (warp > 0 ? warp_sums[warp - 1] : 0) + incl - own;
  for (int k = 0; k < per; ++k) {
    if (lo + k >= n) break;
    const int x = cnt[lo + k];
    cnt[lo + k] = run;
    run += x;
  }
  __syncthreads();  // the scanned counts

  int32_t* offs = p.offsets + int64_t(b) * (K + 1);
  const int total = warp_sums[kWarps - 1];
  const int per_group = n_chunks * kWarps;
  for (int g = threadIdx.x; g <= K; g += kChunk) offs[g] = g < K ? cnt[g * per_group] : total;
  if (threadIdx.x == 0) {
    int32_t* toff = p.tile_offsets + int64_t(b) * (K + 1);
    int tiles = 0;
    for (int g = 0; g < K; ++g) {
      const int end = g + 1 < K ? cnt[(g + 1) * per_group] : total;
      toff[g] = tiles;
      tiles += (end - cnt[g * per_group] + p.tile_rows - 1) / p.tile_rows;
    }
    toff[K] = tiles;
  }
  int32_t* list = p.list + int64_t(b) * p.T * p.top_k;
#pragma unroll
  for (int c = 0; c < kFusedMaxChunks; ++c) {
    if (c >= n_chunks) break;
    const int t = c * kChunk + threadIdx.x;
    for (int g = 0; g < K; ++g) {
      const bool has = (mk[c] >> g) & 1;
      const unsigned bal = __ballot_sync(0xffffffffu, has);
      if (has) list[cnt[(g * n_chunks + c) * kWarps + warp] + __popc(bal & lt)] = t;
    }
  }
}

}  // namespace

void launch_focus_hard_index(const FocusHardIndexParams& p, Stream s) {
  ATTN_ASSERT(p.B > 0 && p.T > 0 && p.K >= 1 && p.K <= kFocusHardMaxGroups && p.top_k >= 1);
  ATTN_ASSERT(p.tile_rows == 64 || p.tile_rows == 128);
  auto st = reinterpret_cast<cudaStream_t>(s);
  const int n_chunks = focus_hard_chunks(p.T);
  ATTN_REQUIRE(p.path != FocusHardIndexPath::fused || n_chunks <= kFusedMaxChunks,
               "focus hard index: the fused kernel takes rows of at most %d tokens (got %d)",
               kFusedMaxChunks * kChunk, p.T);
  const bool fused = p.path == FocusHardIndexPath::fused ||
                     (p.path == FocusHardIndexPath::automatic && n_chunks <= kAutoFusedMaxChunks);
  if (fused) {
    const size_t smem = fused_smem_bytes(p.K, n_chunks);
    static std::atomic<uint64_t> attributes_set{0};
    once_per_device(attributes_set, [] {
      CUDA_CHECK(cudaFuncSetAttribute(hard_index_fused, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      int(fused_smem_bytes(kFocusHardMaxGroups, kFusedMaxChunks))));
    });
    hard_index_fused<<<p.B, kChunk, smem, st>>>(p);
    CUDA_CHECK_LAUNCH();
    return;
  }
  const dim3 grid(n_chunks, p.B);
  hard_index_count<<<grid, kChunk, 0, st>>>(p);
  CUDA_CHECK_LAUNCH();
  hard_index_scan<<<p.B, kScanThreads, 0, st>>>(p, n_chunks);
  CUDA_CHECK_LAUNCH();
  hard_index_scatter<<<grid, kChunk, 0, st>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace attnlab
