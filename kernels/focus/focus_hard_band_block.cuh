// The band pass of the hard-routed Focus forward for Hopper (focus_hard_band.cu describes it;
// contract: focus_hard.cuh) as a device function of one block, for its own kernel and for the
// fused kernel (focus_hard_fused.cu). Device code for the sm_90a compilation only (CMake's
// attnlab_wgmma object library).
#pragma once
#include <cuda_bf16.h>

#include "kernels/attention/wgmma_common.cuh"
#include "kernels/common/device.cuh"
#include "kernels/focus/focus_hard.cuh"
#include "kernels/focus/focus_hard_partial.cuh"
#include "kernels/focus/focus_hard_tma.cuh"
#include "kernels/focus/focus_hard_walk.h"

namespace attnlab::focus_hard_band {

using namespace wgmma;
using namespace focus_hard;

constexpr int kRows = kHardTmaRows, kKeys = kHardTmaKeys;
constexpr int kStagedTopK = 4;  // group ids per token the band pass stages by cp.async

#if ATTN_WGMMA_DEVICE
// One block of the band pass: tokens q_tile * kRows .. of batch row b, head h, dynamic shared
// memory at smem (the shared-window address of its start; aligned here), for its own kernel and
// the fused kernel (focus_hard_fused.cu). It initialises the stage mbarriers at sm.full (a
// caller running blocks back to back invalidates them between). kWindow: the window partition
// (the list group pass): every pair of the window, no group sets.
template <int D, bool kWindow>
__device__ __forceinline__ void band_block(const FocusHardAttnParams& p, const CUtensorMap* tm_k,
                                           const CUtensorMap* tm_v, int q_tile, int h, int b,
                                           uint32_t smem) {
  const HardTmaSmem sm(smem, D);
  __shared__ uint64_t qmask[kRows];
  __shared__ uint64_t kmask[2][kKeys];
  // The keys' group ids of the next tile, copied beside its K / V (top_k <= kStagedTopK; more
  // groups per token load them synchronously).
  __shared__ int32_t kids[2][kKeys * kStagedTopK];

  const int T = p.T, K = p.K;
  const int w = min(p.local_window, T);  // (no overflow of i - w below)
  const int hk = h / (p.n_head / p.n_kv_head);
  const int q0 = q_tile * kRows;
  // The group sets from the groups rows, not the index's masks: with band_first this pass runs
  // beside the index build.
  const int32_t* groups = p.groups + int64_t(b) * T * p.top_k;
  auto set_of = [&](int j) { return group_set(groups + int64_t(j) * p.top_k, p.top_k, K); };
  int n_begin, n_end;
  band_tiles(q0, kRows, T, w, kKeys, kWindow, &n_begin, &n_end);
  // (w = 0 outside kWindow: only the merge); Q's copy in flight during the sets' loads
  if (n_begin < n_end) {
    load_tile<kRows, D, kHardTmaThreads>(sm.q, p.q + b * p.q_batch_stride + h * D, p.q_row_stride,
                                         q0, T);
  }
  cp_async_commit();
  if constexpr (!kWindow) {
    for (int r = threadIdx.x; r < kRows; r += kHardTmaThreads) {
      qmask[r] = q0 + r < T ? set_of(q0 + r) : 0;
    }
  }
  if (threadIdx.x == 0) {
    mbar_init(sm.full, 1);
    mbar_init(sm.full + 8, 1);
    fence_mbar_init();
  }
  __syncthreads();  // qmask, the mbarriers

  const int wg = threadIdx.x / 128, warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, tig = lane & 3;
  const int wq0 = q0 + 64 * wg, wq_hi = min(wq0 + 63, T - 1);  // this warpgroup's rows
  const int rrow = 64 * wg + 16 * warp + g;  // this thread's rows in the block: rrow, rrow + 8
  const int i0 = q0 + rrow, i1 = i0 + 8;
  const uint64_t qm0 = kWindow ? 0 : qmask[rrow], qm1 = kWindow ? 0 : qmask[rrow + 8];
  float o[D / 2];
  RowState st;
  hard_tma_mainloop<D>(
      o, st, sm, tm_k, tm_v, b, hk, n_begin, n_end, p.scale * kLog2e,
      [&](int nb, int stage) {  // the keys' group ids by cp.async (or their sets, top_k > 4)
        if constexpr (!kWindow) {
          for (int c = threadIdx.x; c < kKeys; c += kHardTmaThreads) {
            const int j = nb * kKeys + c;
            if (p.top_k > kStagedTopK) {
              kmask[stage][c] = j < T ? set_of(j) : 0;
            } else if (j < T) {
              for (int x = 0; x < p.top_k; ++x)
                dev::cp_async4(&kids[stage][c * kStagedTopK + x], groups + int64_t(j) * p.top_k + x,
                               true);
            }
          }
          cp_async_commit();
        }
      },
      [&](int nb, int stage) {  // this thread's copies landed: the sets from the ids
        if constexpr (!kWindow) {
          if (p.top_k > kStagedTopK) return;
          cp_async_wait_all();
          for (int c = threadIdx.x; c < kKeys; c += kHardTmaThreads) {
            const int j = nb * kKeys + c;
            kmask[stage][c] = j < T ? group_set(&kids[stage][c * kStagedTopK], p.top_k, K) : 0;
          }
        }
      },
      [&](int k0) { return band_tile_visible(k0, kKeys, wq0, wq_hi, w); }, [](int) { return true; },
      [&](float(&s)[kKeys / 2], int k0, int stage) {
        // take_local_key (focus_hard_walk.h, replayed on the CPU) with first = true, or
        // take_window_key (kWindow): row i takes the keys of its window that share no group
        // with it (any key with kWindow).
        mask_band_tile<kKeys, !kWindow>(s, i0, i1, k0, tig, w, &kmask[stage][2 * tig], qm0, qm1);
      });

  // Epilogue, per row of this thread (row sums completed over the 4 threads of a row); a token
  // with no valid group has no output row (focus_hard.cuh). band_first: the band's partial (o
  // normalised, lse; slot 0 of top_k 1) for the group pass to merge (kWindow: for every token;
  // the group pass merges those of its list). Otherwise the band's state merged with the token's
  // group partials, one per distinct valid slot (what the group pass wrote), into o and lse.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l = row_sum(st.sum[r]);
    const int i = r == 0 ? i0 : i1;
    if (i >= T) continue;
    if constexpr (!kWindow) {
      if ((r == 0 ? qm0 : qm1) == 0) continue;
    }
    if (p.band_first) {
      write_partial<D>(p, o, r, tig, l, st.max[r], (int64_t(b) * T + i) * p.n_head + h);
      continue;
    }
    const float lse = row_lse(l, st.max[r]);
    const int64_t bt = int64_t(b) * T + i;
    const int32_t* gr = p.groups + bt * p.top_k;
    if constexpr (kWindow) {
      if (group_set(gr, p.top_k, K) == 0) continue;
    }
    // f(slot) for each distinct valid slot of the token (the partials the group pass wrote:
    // reads_partial_slot, which FocusHardWalk's replay checks against the group passes' slots).
    auto each_slot = [&](auto f) {
      uint64_t seen = 0;
      for (int sl = 0; sl < p.top_k; ++sl) {
        if (reads_partial_slot(gr, K, sl, &seen)) f(sl);
      }
    };
    auto part_lse = [&](int sl) { return p.part_lse[(bt * p.top_k + sl) * p.n_head + h]; };
    float mx = lse;
    each_slot([&](int sl) { mx = fmaxf(mx, part_lse(sl)); });
    // mx > -inf: the band (kWindow) or slot 0's pass takes (i, i). Weights exp(lse_s - mx), sum
    // >= 1.
    float sum = lse == -INFINITY ? 0.f : __expf(lse - mx);
    each_slot([&](int sl) {
      const float ls = part_lse(sl);
      sum += ls == -INFINITY ? 0.f : __expf(ls - mx);
    });
    const float inv_sum = 1.f / sum;
    const float self = lse == -INFINITY ? 0.f : __expf(lse - mx) * inv_sum / l;
#pragma unroll
    for (int jj = 0; jj < D / 8; ++jj) {
      o[4 * jj + 2 * r] *= self;
      o[4 * jj + 2 * r + 1] *= self;
    }
    each_slot([&](int sl) {
      const float ls = part_lse(sl);
      if (ls == -INFINITY) return;
      const float wgt = __expf(ls - mx) * inv_sum;
      const float* src = p.part_o + ((bt * p.top_k + sl) * p.n_head + h) * D;
#pragma unroll
      for (int jj = 0; jj < D / 8; ++jj) {
        const float2 v = *reinterpret_cast<const float2*>(src + 8 * jj + 2 * tig);
        o[4 * jj + 2 * r] = fmaf(wgt, v.x, o[4 * jj + 2 * r]);
        o[4 * jj + 2 * r + 1] = fmaf(wgt, v.y, o[4 * jj + 2 * r + 1]);
      }
    });
    bf16* out = p.o + b * p.o_batch_stride + int64_t(i) * p.o_row_stride + h * D;
#pragma unroll
    for (int jj = 0; jj < D / 8; ++jj) {
      *reinterpret_cast<__nv_bfloat162*>(out + 8 * jj + 2 * tig) =
          __floats2bfloat162_rn(o[4 * jj + 2 * r], o[4 * jj + 2 * r + 1]);
    }
    if (tig == 0) p.lse[(int64_t(b) * p.n_head + h) * T + i] = mx + __logf(sum);
  }
}
#endif  // ATTN_WGMMA_DEVICE

}  // namespace attnlab::focus_hard_band
