// The group pass of the hard-routed Focus forward for top_k = 1 on a group-sorted copy of qkv
// (contract: focus_hard.cuh, FocusHardAttnParams::sorted; design: docs/focus_hard.md, "The sorted
// group pass"). bf16, head dim 64 or 128, sm_90a.
//
// With one group per token the pairs that share a group are, in the order of the group-sorted
// list (stable, so positions increase inside a group), exactly the causal pairs inside each
// group's segment: entry e sees entries seg_lo(e) .. e, seg_lo(e) the first entry of e's group.
// So the pass is dense causal attention with a per-row lower bound, and once the rows are
// gathered into that order it runs at the dense kernel's cost per tile:
//   1. gather: qkv rows (all heads, q, k and v) copied in list order into `sorted` [B, T, width]
//      (rows past the row's entries zeroed, so that no tile reads uninitialised memory);
//   2. the dense wgmma forward's simple schedule (attention_wgmma.cu: 2 warpgroups x 64 queries,
//      128-key K / V tiles double-buffered by TMA, S = Q K^T and O += P V on wgmma, the online
//      softmax of wgmma_softmax.cuh) over the sorted rows, with key tiles from seg_lo of the
//      block's first query to its last one; a warpgroup skips tiles outside its rows' bounds and
//      masks elements only on tiles that cut a row's bounds. The epilogue writes each row's
//      partial (o normalised, lse) at its token, where the band pass (focus_hard_band.cu) reads it
//      (the band pass takes the pairs sharing no group and merges).
// Beside the list kernel of focus_hard_wgmma.cu (rows gathered by cp.async per tile, 64-key
// tiles): the copy costs 4 width bytes per token (a read and a write), the tiles are TMA boxes of
// 128 keys.
#include <cuda_bf16.h>

#include <climits>

#include "core/cuda_check.h"
#include "kernels/attention/wgmma_common.cuh"
#include "kernels/common/device.cuh"
#include "kernels/focus/focus_hard.cuh"
#include "kernels/focus/focus_hard_partial.cuh"
#include "kernels/focus/focus_hard_tma.cuh"
#include "kernels/focus/focus_hard_walk.h"

namespace attnlab {
namespace {

using namespace wgmma;
using namespace focus_hard;

constexpr int kGatherRows = 4;  // rows per block of the gather
constexpr int kGatherThreads = 256;
constexpr int kGatherInFlight = 4;  // 16-byte loads per thread issued before their stores

// Row e of `sorted` = the qkv row of token list[b][e] (e < the row's entries), else zeros. A
// copy of ~4 width bytes per token: each thread issues its loads before any store, so that
// enough bytes are in flight to approach the copy bandwidth.
__global__ void __launch_bounds__(kGatherThreads)
    gather_kernel(const bf16* __restrict__ src, int64_t batch_stride, int width,
                  const int32_t* __restrict__ list, const int32_t* __restrict__ offsets, int T,
                  int K, bf16* __restrict__ sorted) {
#if ATTN_WGMMA_DEVICE
  const int b = blockIdx.y, chunks = width / 8;
  const int n = offsets[int64_t(b) * (K + 1) + K];
  const int e0 = blockIdx.x * kGatherRows;
  for (int base = 0; base < kGatherRows * chunks; base += kGatherThreads * kGatherInFlight) {
    uint4 v[kGatherInFlight];
#pragma unroll
    for (int u = 0; u < kGatherInFlight; ++u) {
      const int i = base + u * kGatherThreads + int(threadIdx.x);
      const int e = e0 + i / chunks, c = i % chunks;
      v[u] = make_uint4(0, 0, 0, 0);
      if (i < kGatherRows * chunks && e < n) {
        const int t = list[int64_t(b) * T + e];
        v[u] = *reinterpret_cast<const uint4*>(src + b * batch_stride + int64_t(t) * width + 8 * c);
      }
    }
#pragma unroll
    for (int u = 0; u < kGatherInFlight; ++u) {
      const int i = base + u * kGatherThreads + int(threadIdx.x);
      const int e = e0 + i / chunks, c = i % chunks;
      if (i < kGatherRows * chunks && e < T) {
        *reinterpret_cast<uint4*>(sorted + (int64_t(b) * T + e) * width + 8 * c) = v[u];
      }
    }
  }
#else
  (void)src, (void)batch_stride, (void)width, (void)list, (void)offsets, (void)T, (void)K,
      (void)sorted;
#endif
}

#if ATTN_WGMMA_DEVICE
// The first entry of this block of the sorted group pass (-1 past the row's blocks). The grid is
// (H, max_blocks, B) with longest_first (FocusHardBlockOrder): block rank blockIdx.y over all
// groups longest first (sorted_block_levels), the heads fastest; else (max_blocks, H, B), head
// after head, each head's last rows first. offs: the row's group offsets (K + 1, shared memory),
// n = offs[K].
__device__ __forceinline__ int block_first_entry(const int* offs, int K, int n,
                                                 bool longest_first) {
  if (!longest_first) {
    const int q0 = (int(gridDim.x) - 1 - int(blockIdx.x)) * kHardTmaRows;
    return q0 < n ? q0 : -1;
  }
  const int lane = threadIdx.x % 32;
  // Every warp decodes the same rank: lane l holds the levels of groups l and l + 32.
  int jmin[2] = {1, 1}, jmax[2] = {0, 0};
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    const int grp = lane + 32 * c;
    if (grp < K) sorted_block_levels(offs[grp], offs[grp + 1], kHardTmaRows, &jmin[c], &jmax[c]);
  }
  const int maxn = int(__reduce_max_sync(0xffffffffu, unsigned(max(0, max(jmax[0], jmax[1]) + 1))));
  auto blocks_from = [&](int L) {
    return int64_t(
        __reduce_add_sync(0xffffffffu, unsigned(sorted_blocks_from(jmin[0], jmax[0], L) +
                                                sorted_blocks_from(jmin[1], jmax[1], L))));
  };
  auto nth_group = [&](int level, int o) {
    return nth_member(__ballot_sync(0xffffffffu, jmin[0] <= level && level <= jmax[0]),
                      __ballot_sync(0xffffffffu, jmin[1] <= level && level <= jmax[1]), o);
  };
  int grp, j;
  if (!longest_first_tile(int(blockIdx.y), maxn, blocks_from, nth_group, &grp, &j)) return -1;
  return (offs[grp] / kHardTmaRows + j) * kHardTmaRows;
}
#endif  // ATTN_WGMMA_DEVICE

template <int D>
__global__ void __launch_bounds__(kHardTmaThreads, kHardTmaMinBlocks<D>)
    sorted_group_kernel(const FocusHardAttnParams p, const __grid_constant__ CUtensorMap tm_k,
                        const __grid_constant__ CUtensorMap tm_v) {
#if ATTN_WGMMA_DEVICE
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const HardTmaSmem sm(static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)), D);
  __shared__ int offs[kFocusHardMaxGroups + 1];
  __shared__ int qpos[kHardTmaRows];  // the block's rows' tokens (list entries q0 ..), epilogue

  const int b = blockIdx.z, T = p.T, K = p.K;
  const int h = p.longest_first ? blockIdx.x : blockIdx.y;  // (block_first_entry: the grid)
  for (int i = threadIdx.x; i <= K; i += kHardTmaThreads) {
    offs[i] = p.offsets[int64_t(b) * (K + 1) + i];
  }
  if (threadIdx.x == 0) {
    mbar_init(sm.full, 1);
    mbar_init(sm.full + 8, 1);
    fence_mbar_init();
  }
  __syncthreads();
  const int n = offs[K];                                          // entries of row b
  const int q0 = block_first_entry(offs, K, n, p.longest_first);  // the block's entries q0 ..
  if (q0 < 0) return;
  const int hk = h / (p.n_head / p.n_kv_head);
  // The first entry of entry e's group (e < n, so the scan stops: offs[K] = n > e).
  auto seg_lo = [&](int e) {
    int g = 0;
    while (offs[g + 1] <= e) ++g;
    return offs[g];
  };
  const int wg = threadIdx.x / 128, warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, tig = lane & 3;
  const int wq0 = q0 + 64 * wg;                    // first row of this warpgroup
  const int wq_hi = min(wq0 + 63, n - 1);          // its last valid row (< wq0: none)
  const int wg_lo = wq0 < n ? seg_lo(wq0) : 0;     // the lowest key its rows see
  const int wg_cut = wq0 < n ? seg_lo(wq_hi) : 0;  // the highest lower bound of its rows
  const int row0 = wq0 + 16 * warp + g;            // this thread's rows: row0 and row0 + 8
  int lo_row[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) lo_row[r] = row0 + 8 * r < n ? seg_lo(row0 + 8 * r) : INT_MAX;
  int n_begin, n_end;
  sorted_tiles(q0, kHardTmaRows, n, seg_lo(q0), kHardTmaKeys, &n_begin, &n_end);

  const int64_t ld = p.q_row_stride, batch = int64_t(T) * ld;
  // The rows' tokens land with Q: the epilogue then reads them from shared memory, not behind a
  // list load of its own.
  for (int r = threadIdx.x; r < kHardTmaRows; r += kHardTmaThreads) {
    if (q0 + r < n) dev::cp_async4(&qpos[r], p.list + int64_t(b) * T + q0 + r, true);
  }
  load_tile<kHardTmaRows, D, kHardTmaThreads>(sm.q, p.sorted + b * batch + h * D, ld, q0, n);
  cp_async_commit();
  float o[D / 2];
  RowState st;
  hard_tma_mainloop<D>(
      o, st, sm, &tm_k, &tm_v, b, hk, n_begin, n_end, p.scale * kLog2e, [](int, int) {},
      [](int, int) {},
      [&](int k0) { return sorted_tile_visible(k0, kHardTmaKeys, wg_lo, wq0, wq_hi); },
      [&](int k0) { return !sorted_tile_unmasked(k0, kHardTmaKeys, wq0, wg_cut); },
      [&](float(&s)[kHardTmaKeys / 2], int k0, int) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          // Row e takes lo_row .. e (sorted_take); in this thread's columns key = k0 + 2 tig +
          // (8 j + x): one comparison of the compile-time offset 8 j + x against each bound.
          const int base = k0 + 2 * tig, hi = row0 + 8 * r - base;
          const int lo = lo_row[r] == INT_MAX ? INT_MAX : lo_row[r] - base;
#pragma unroll
          for (int j = 0; j < kHardTmaKeys / 8; ++j) {
#pragma unroll
            for (int x = 0; x < 2; ++x) {
              if (8 * j + x > hi || 8 * j + x < lo) s[4 * j + 2 * r + x] = -INFINITY;
            }
          }
        }
      });

  // Epilogue, at each valid row's token (top_k 1: slot 0): the partial (o normalised, lse) for
  // the band pass to merge, or with band_first the band's partial merged in, o and lse written
  // (row e takes (e, e), so l > 0).
  cp_async_wait_all();  // qpos (landed with Q at the first tile; a block walks at least one)
  __syncthreads();
  // Both rows' band partials loaded before the first store (load_partial).
  float l[2];
  int pos[2];
  RowPartial<D> pr[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] = row_sum(st.sum[r]);  // (every lane: a shuffle)
    const int e = row0 + 8 * r;
    pos[r] = e < n ? qpos[e - q0] : -1;
    if (p.band_first && pos[r] >= 0)
      load_partial<D>(p, (int64_t(b) * T + pos[r]) * p.n_head + h, tig, pr[r]);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (pos[r] < 0) continue;
    const int64_t part = (int64_t(b) * T + pos[r]) * p.n_head + h;
    if (p.band_first)
      write_merged<D>(p, o, r, tig, l[r], st.max[r], pr[r], b, h, pos[r]);
    else
      write_partial<D>(p, o, r, tig, l[r], st.max[r], part);
  }
#else
  (void)p, (void)tm_k, (void)tm_v;
#endif
}

template <int D>
void launch_group(const FocusHardAttnParams& p, cudaStream_t st) {
  const int64_t ld = p.q_row_stride, batch = int64_t(p.T) * ld;
  const int kv_width = p.n_kv_head * D;
  const CUtensorMap tm_k = tile_map(p.sorted + (p.k - p.q), kv_width, p.T, p.B, ld, batch,
                                    kHardTmaKeys),
                    tm_v = tile_map(p.sorted + (p.v - p.q), kv_width, p.T, p.B, ld, batch,
                                    kHardTmaKeys);
  // One block per kHardTmaRows entries (at most T of top_k 1) and head, in the order of
  // p.longest_first (FocusHardBlockOrder; block_first_entry).
  const int blocks = (p.T + kHardTmaRows - 1) / kHardTmaRows;
  // Longest first puts the blocks on grid y (at most 65535: T up to 8.4M); past that the
  // group-major order (blocks on x) takes the call.
  FocusHardAttnParams q = p;
  q.longest_first = p.longest_first && blocks <= 65535;
  if (q.longest_first) {
    launch_hard_tma<D, sorted_group_kernel<D>>(dim3(q.n_head, blocks, q.B), q, tm_k, tm_v, st);
  } else {
    launch_hard_tma<D, sorted_group_kernel<D>>(dim3(blocks, q.n_head, q.B), q, tm_k, tm_v, st);
  }
}

// The packed-row layout the gather and the group kernel assume: q, k and v columns of one row of
// stride q_row_stride, q at its start.
void check_sorted_params(const FocusHardAttnParams& p) {
  ATTN_ASSERT(p.top_k == 1 && p.sorted != nullptr && p.part_o != nullptr && p.part_lse != nullptr);
  ATTN_ASSERT(p.K >= 1 && p.K <= kFocusHardMaxGroups && (p.D == 64 || p.D == 128));
  const int64_t ld = p.q_row_stride;
  ATTN_ASSERT(p.kv_row_stride == ld && p.kv_batch_stride == p.q_batch_stride && ld % 8 == 0);
  ATTN_ASSERT(p.k - p.q >= 0 && p.k - p.q + int64_t(p.n_kv_head) * p.D <= ld);
  ATTN_ASSERT(p.v - p.q >= 0 && p.v - p.q + int64_t(p.n_kv_head) * p.D <= ld);
  ATTN_ASSERT(aligned16(p.q) && aligned16(p.sorted) && (p.k - p.q) % 8 == 0 &&
              (p.v - p.q) % 8 == 0);
  ATTN_ASSERT(ld <= INT32_MAX);
}

}  // namespace

void launch_focus_hard_gather(const FocusHardAttnParams& p, Stream s) {
  check_sorted_params(p);
  const dim3 grid((p.T + kGatherRows - 1) / kGatherRows, p.B);
  gather_kernel<<<grid, kGatherThreads, 0, reinterpret_cast<cudaStream_t>(s)>>>(
      p.q, p.q_batch_stride, int(p.q_row_stride), p.list, p.offsets, p.T, p.K, p.sorted);
  CUDA_CHECK_LAUNCH();
}

void launch_focus_hard_sorted_group(const FocusHardAttnParams& p, Stream s) {
  check_sorted_params(p);
  auto st = reinterpret_cast<cudaStream_t>(s);
  if (p.D == 64)
    launch_group<64>(p, st);
  else
    launch_group<128>(p, st);
}

}  // namespace attnlab
