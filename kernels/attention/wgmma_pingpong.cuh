// The compute warpgroups' side of FlashAttention-3's producer and ping-pong forward, shared by the
// dense forward at D = 128 (attention_wgmma.cu, whose comments describe the barriers) and the
// Focus soft forward (kernels/focus/focus_wgmma_fwd_pp.cu): the stage barriers as a compute warp
// sees them, the turns at the tensor cores, and the order of a warpgroup's tiles (S of tile i
// issued with P V of tile i - 1, the softmax of tile i while that P V runs). What a tile computes
// is the caller's (hooks). Device code only (sm_90a).
#pragma once
#include <cstdint>

#include "kernels/attention/wgmma_common.cuh"
#include "kernels/attention/wgmma_softmax.cuh"

namespace attnlab::wgmma {

#if ATTN_WGMMA_DEVICE
// full_q: Q landed (one phase); full_k / full_v [2]: the stage's TMA bytes landed (phase i / 2 of
// stage i % 2 for tile i); empty_k / empty_v [2]: one arrival per compute warp once its wgmmas
// reading the stage completed. kConsumers: the compute threads (two warpgroups).
template <int kConsumers>
struct PingpongBarriers {
  uint32_t full_q, full_k, full_v, empty_k, empty_v;
  int wg, lane;

  // Tile i's data in stage i % 2 has landed; TMA writes through the async proxy, which wgmma
  // reads through: no proxy fence.
  __device__ __forceinline__ void wait_full(uint32_t bar, int i) const {
    mbar_wait(bar + 8 * (i & 1), uint32_t(i >> 1) & 1u);
  }
  // This warp's wgmmas reading tile i's stage have completed.
  __device__ __forceinline__ void release(uint32_t bar, int i) const {
    __syncwarp();
    if (lane == 0) mbar_arrive(bar + 8 * (i & 1));
  }
  // Named barriers 1 and 2 take turns: warpgroup w issues its MMAs of a step after bar.sync on
  // 1 + w, then arrives on the other's barrier.
  __device__ __forceinline__ void turn_begin() const { named_bar_sync<kConsumers>(1 + wg); }
  __device__ __forceinline__ void turn_end() const { named_bar_arrive<kConsumers>(2 - wg); }
};

// The barriers' initialisation (one thread, before the block's barrier): Q's and each K stage's
// full barrier expect the TMA thread's arrival and `extra_full` more (the Focus producer's g
// copies), V's the TMA thread's; the empty barriers one arrival per compute warp.
template <int kConsumers>
__device__ __forceinline__ void init_pingpong_barriers(const PingpongBarriers<kConsumers>& bars,
                                                       uint32_t extra_full) {
  mbar_init(bars.full_q, 1 + extra_full);
  for (int st = 0; st < 2; ++st) {
    mbar_init(bars.full_k + 8 * st, 1 + extra_full);
    mbar_init(bars.full_v + 8 * st, 1);
    mbar_init(bars.empty_k + 8 * st, kConsumers / 32);
    mbar_init(bars.empty_v + 8 * st, kConsumers / 32);
  }
  fence_mbar_init();
}

// The producer's side: tile i goes to stage i % 2 once the compute warps released tile i - 2
// there (the stage's (i / 2 - 1)-th release, counting from 0).
__device__ __forceinline__ void wait_empty(uint32_t bar, int i) {
  if (i >= 2) mbar_wait(bar + 8 * (i & 1), uint32_t((i >> 1) - 1) & 1u);
}
// The TMA copy of a [kRows][D] bf16 tile, D / 64 column blocks kRows x 128 bytes apart, from
// coordinates (col0 + 64 c, row0, b) of tmap into dst, completing on bar (its bytes announced).
template <int D, int kRows>
__device__ __forceinline__ void tma_tile(uint32_t dst, const void* tmap, uint32_t bar, int col0,
                                         int row0, int b) {
  mbar_arrive_expect_tx(bar, tile_bytes(kRows, D));
#pragma unroll
  for (int c = 0; c < D / 64; ++c)
    tma_load_3d(dst + c * kRows * 128, tmap, bar, col0 + 64 * c, row0, b);
}

// A compute warpgroup's n >= 1 tiles. Hooks (inlined):
//   issue_s(i)   S (and what goes with it) of tile i as one committed wgmma group;
//   s_done(i)    after that group completed: fences, the K stage's release, the softmax of s,
//                leaving corr (O's factor);
//   issue_pv(i)  O += P V of tile i as one committed group (pa: tile i's P).
// Between them the loop waits, fences o and pa, releases V stages, rescales O (kO values, all
// scaled by corr) and converts s (the tile's kS exponentials) to pa.
// Warpgroup 1 arrives once first (warpgroup 0 starts); both take the same number of turns, and
// warpgroup 0 consumes warpgroup 1's last arrival at the end.
template <int kConsumers, int kO, int kS, class IssueS, class SDone, class IssuePv>
__device__ __forceinline__ void pingpong_tiles(const PingpongBarriers<kConsumers>& bars, int n,
                                               float (&o)[kO], uint32_t (&pa)[kS / 8][4],
                                               float (&s)[kS], const float (&corr)[2],
                                               IssueS issue_s, SDone s_done, IssuePv issue_pv) {
  constexpr int NO = 2 * kO, BN = 2 * kS;             // O's columns, the tile's keys
  if (bars.wg == 1) named_bar_arrive<kConsumers>(1);  // warpgroup 0 takes the first turn
  mbar_wait(bars.full_q, 0);
  bars.wait_full(bars.full_k, 0);
  bars.turn_begin();
  issue_s(0);
  bars.turn_end();
  wgmma_wait<0>();
  s_done(0);
  acc_to_a<BN>(pa, s);  // O is still 0: no rescale
  fence_regs(pa);
  for (int i = 1; i < n; ++i) {
    bars.wait_full(bars.full_k, i);
    bars.wait_full(bars.full_v, i - 1);
    bars.turn_begin();
    issue_s(i);
    issue_pv(i - 1);
    bars.turn_end();
    wgmma_wait<1>();  // S done; P V may still run
    s_done(i);
    wgmma_wait<0>();
    fence_regs(o);
    fence_regs(pa);
    bars.release(bars.empty_v, i - 1);
    rescale<NO>(o, corr);
    acc_to_a<BN>(pa, s);
    // Pin the rescale and the conversion here: left to the compiler they could sink below the
    // next S issue, into the next P V's pipeline stage (ptxas would then serialize the wgmmas).
    fence_regs(o);
    fence_regs(pa);
  }
  bars.wait_full(bars.full_v, n - 1);
  bars.turn_begin();
  issue_pv(n - 1);
  bars.turn_end();
  wgmma_wait<0>();
  fence_regs(o);
  fence_regs(pa);
  if (bars.wg == 0) named_bar_sync<kConsumers>(1);  // warpgroup 1's last turn_end
}
#endif  // ATTN_WGMMA_DEVICE

}  // namespace attnlab::wgmma
