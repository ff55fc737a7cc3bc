// The list group pass of the hard-routed Focus forward for Hopper (focus_hard_wgmma.cu describes
// it; contract: focus_hard.cuh) as a device function of one block, for its own kernel and for the
// fused kernel (focus_hard_fused.cu). Device code for the sm_90a compilation only (CMake's
// attnlab_wgmma object library).
#pragma once
#include <cuda_bf16.h>

#include "kernels/attention/wgmma_common.cuh"
#include "kernels/attention/wgmma_softmax.cuh"
#include "kernels/common/device.cuh"
#include "kernels/focus/focus_hard.cuh"
#include "kernels/focus/focus_hard_partial.cuh"
#include "kernels/focus/focus_hard_walk.h"

namespace attnlab::focus_hard_group {

using namespace wgmma;

constexpr int kWarpgroups = 2;
constexpr int kThreads = 128 * kWarpgroups;
constexpr int kBM = kFocusHardWgmmaRows;  // queries per block
static_assert(kBM == 64 * kWarpgroups, "one m64 wgmma per warpgroup");
// Keys per tile and blocks per SM (the launch bounds' register budget: 2 blocks = 128 registers).
// 64 keys: with 128 (the dense kernel's tile at D = 64) the gathered walk's extra per-tile state
// spilled at 128 registers. D = 64: two blocks per SM (128 registers, ptxas, no spills);
// D = 128: one (O alone is 64 registers; at 128 it spilled; 159 registers), so 8 warps per SM,
// the next tiles' copies overlapping this tile's MMAs.
template <int D>
constexpr int kBN = 64;
template <int D>
constexpr int kMinBlocks = D == 64 ? 2 : 1;

// Key tiles in flight: the ring of focus_hard_walk.h (kRingStages K and V buffers, each tile's
// positions kRingPosLead tiles ahead of its rows in kRingPosSlots slots; FocusHardWalk.Ring*
// replays its cp.async groups, slots and buffers on the CPU).
constexpr int kStages = focus_hard::kRingStages, kPosSlots = focus_hard::kRingPosSlots;

// Dynamic shared memory: Q, the K and V rings, 1 KiB of alignment.
template <int D>
constexpr size_t smem_bytes() {
  return size_t(tile_bytes(kBM, D)) + 2 * kStages * size_t(tile_bytes(kBN<D>, D)) + 1024;
}

// Query rows of the block and key rows of the tiles in flight (position -1 = none).
template <int BN>
struct Meta {
  int qpos[kBM];
  int qslot[kBM];               // the slot of the block's group in the query's top_k
  uint64_t qmask[kBM];          // the query's groups of lower slots
  int kpos[kPosSlots][BN];      // key tile t's positions in slot t % kPosSlots
  uint64_t kmask[kStages][BN];  // the keys' group sets, top_k > 1 only (top_k 1: no slot)
  // Block scalars the tile loop reads back (fewer live registers across the loop: two blocks per
  // SM allow 128).
  int count;               // entries of the group's list
  const int32_t* glist;    // the group's list
  int wg_lo[2], wg_hi[2];  // per warpgroup: its rows' group_bound lo .. hi (hi < 0: none)
  int wg_first[2];         // per warpgroup: every valid row in its first pass
};

#if ATTN_WGMMA_DEVICE

// Rows pos[0 .. ROWS) (-1: zero) of NM strided bf16 matrices g[m] (the same rows of each) into
// swizzled [ROWS][D] tiles at s[m], by threads 0 .. kN - 1 (the block's kThreads by default; the
// warp-specialised kernel's producer warpgroup). The copies of load_tile's rounds
// (wgmma_common.cuh): this thread's 16-byte chunk c and first row r are fixed, each round moves
// kN / (D / 8) rows down (a multiple of 8: the same swizzle phase), so the shared offset is one
// constant per round and a row's global offset is computed once for all matrices (a loop over
// i = threadIdx.x, threadIdx.x + kN, .. copies the same (row, chunk) pairs, but its trip count is
// not known to the compiler: ~30 instructions a copy, against ~6 here).
template <int ROWS, int D, int NM, int kN = kThreads, typename Pos>
__device__ __forceinline__ void gather_rows(const uint32_t (&s)[NM], const bf16* const (&g)[NM],
                                            int64_t stride, Pos pos) {
  constexpr int kChunks = D / 8, kRowsPerRound = kN / kChunks;
  static_assert(kN % kChunks == 0 && ROWS % kRowsPerRound == 0 && kRowsPerRound % 8 == 0,
                "whole rounds, each keeping the swizzle phase");
  const int r = threadIdx.x / kChunks, c = threadIdx.x % kChunks;
  const uint32_t dst = swizzled_offset<ROWS>(r, c);
#pragma unroll
  for (int it = 0; it < ROWS / kRowsPerRound; ++it) {
    const int j = pos(r + it * kRowsPerRound);
    const int64_t src = int64_t(j < 0 ? 0 : j) * stride + c * 8;
#pragma unroll
    for (int m = 0; m < NM; ++m)
      cp_async16(s[m] + dst + it * kRowsPerRound * 128, g[m] + src, j >= 0);
  }
}

#endif  // ATTN_WGMMA_DEVICE

#if ATTN_WGMMA_DEVICE
// A block of the list group pass: its head, group, query tile j of the group's list, and the
// list's offset and size in its batch row.
struct GroupTile {
  int h, grp, j, list_off, count;
};

// Block bx of batch row b's grid (bx covers max_tiles tiles x H heads, an upper bound of the row's
// tiles), in p.longest_first's order; false where bx names no tile. Every lane of a whole warp
// calls it (warp sums and ballots), each warp of a block the same bx.
__device__ __forceinline__ bool decode_group_tile(const FocusHardAttnParams& p, int max_tiles,
                                                  unsigned bx, int b, GroupTile& gt) {
  const int K = p.K, H = p.n_head;
  const int32_t* toff = p.tile_offsets + int64_t(b) * (K + 1);
  const int32_t* offs = p.offsets + int64_t(b) * (K + 1);
  // Group g's query tiles.
  auto ntiles = [&](int g) { return toff[g + 1] - toff[g]; };
  int grp = 0, j = 0;
  if (p.longest_first) {  // j descending over all groups, heads fastest (focus_hard_walk.h)
    const int u = int(bx / unsigned(H));
    gt.h = int(bx) - u * H;
    // Every warp decodes the same rank: lane l holds the tile counts of groups l and l + 32,
    // and their list offsets and sizes, loaded in the same round trip (the block's come from
    // its group's lane by a shuffle, not by a second dependent load).
    const int lane = threadIdx.x % 32;
    const int n_lo = lane < K ? ntiles(lane) : 0;
    const int n_hi = lane + 32 < K ? ntiles(lane + 32) : 0;
    const int o_lo = lane < K ? offs[lane] : 0, o_hi = lane + 32 < K ? offs[lane + 32] : 0;
    const int c_lo = lane < K ? offs[lane + 1] - o_lo : 0;
    const int c_hi = lane + 32 < K ? offs[lane + 33] - o_hi : 0;
    const int maxn = int(__reduce_max_sync(0xffffffffu, unsigned(max(n_lo, n_hi))));
    auto tiles_from = [&](int L) {
      return int64_t(__reduce_add_sync(0xffffffffu, unsigned(max(0, n_lo - L) + max(0, n_hi - L))));
    };
    auto nth_group = [&](int level, int o) {
      return focus_hard::nth_member(__ballot_sync(0xffffffffu, n_lo > level),
                                    __ballot_sync(0xffffffffu, n_hi > level), o);
    };
    if (!focus_hard::longest_first_tile(u, maxn, tiles_from, nth_group, &grp, &j)) return false;
    const bool lo_half = grp < 32;  // (grp is the same in every lane)
    gt.list_off = __shfl_sync(0xffffffffu, lo_half ? o_lo : o_hi, grp & 31);
    gt.count = __shfl_sync(0xffffffffu, lo_half ? c_lo : c_hi, grp & 31);
  } else {  // group after group per head, each group's latest tiles first
    gt.h = int(bx / unsigned(max_tiles));
    const int tile = max_tiles - 1 - (int(bx) - gt.h * max_tiles);
    int before = 0;  // tiles of the groups before grp
    while (grp < K && before + ntiles(grp) <= tile) before += ntiles(grp++);
    if (grp == K) return false;
    j = tile - before;
    gt.list_off = offs[grp];
    gt.count = offs[grp + 1] - gt.list_off;
  }
  gt.grp = grp;
  gt.j = j;
  return true;
}

// One block of the list group pass: block bx of batch row b's grid (bx covers max_tiles tiles x H
// heads), dynamic shared memory at smem (the shared-window address of its start; aligned here).
// before_merge() runs in every thread before a band_first epilogue reads the band's partials
// (the fused kernel's wait for them; a no-op after a separate band launch). Returns at once
// where bx names no tile. kBothRows: the merge loads both rows' band partials before its first
// store (one round trip); else row by row (two), for the fused kernel, where holding both
// spilled (D 64: 216 bytes at its 128 registers) and measured 13% slower at 4K (H100).
template <int D, bool kBothRows, typename BeforeMerge>
__device__ __forceinline__ void group_block(const FocusHardAttnParams& p, int max_tiles,
                                            unsigned bx, int b, uint32_t smem,
                                            BeforeMerge before_merge) {
  constexpr int BN = kBN<D>;
  constexpr uint32_t kQBytes = tile_bytes(kBM, D), kKVBytes = tile_bytes(BN, D);
  const uint32_t sQ = (smem + 1023u) & ~1023u;
  const uint32_t sK = sQ + kQBytes, sV = sK + kStages * kKVBytes;
  __shared__ Meta<BN> m;

  const int T = p.T, K = p.K;
  const int w = min(p.local_window, T);

  // The block's head, group and query tile j of the group's list (its list entries q0 ..), and
  // its key tiles.
  GroupTile gt;
  if (!decode_group_tile(p, max_tiles, bx, b, gt)) return;
  const int h = gt.h, grp = gt.grp, count = gt.count;
  const int q0 = gt.j * kBM;  // list index of the first query
  const int32_t* glist = p.list + int64_t(b) * T * p.top_k + gt.list_off;
  const int nq = min(kBM, count - q0);
  const int t_begin = 0, t_end = (q0 + nq + BN - 1) / BN;
  const int hk = h / (p.n_head / p.n_kv_head);
  for (int r = threadIdx.x; r < kBM; r += kThreads) {
    int pos = -1, slot = 0;
    uint64_t qm = 0;
    if (r < nq) {
      pos = glist[q0 + r];
      // top_k 1: a member's one group is the block's (slot 0, no lower slot): no groups load.
      if (p.top_k > 1)
        slot =
            focus_hard::slot_of(p.groups + (int64_t(b) * T + pos) * p.top_k, p.top_k, grp, K, &qm);
    }
    m.qpos[r] = pos;
    m.qslot[r] = slot;
    m.qmask[r] = qm;
  }
  const bf16* gq = p.q + b * p.q_batch_stride + h * D;
  gather_rows<kBM, D, 1>({sQ}, {gq}, p.q_row_stride,
                         [&](int r) { return r < nq ? glist[q0 + r] : -1; });
  if (threadIdx.x == 0) {
    m.count = count;
    m.glist = glist;
  }
  // The positions of key tile t (list entries t * BN ..; -1 past the list) into
  // kpos[t % kPosSlots], by cp.async, kRingPosLead tiles before load_kv needs them: the gathers'
  // addresses are then in shared memory when they are issued, and no thread waits on a list load
  // inside the tile loop. Reads the block scalars from shared memory (after a barrier) or the
  // registers (the first tiles).
  auto load_pos = [&](int t, int n_list, const int32_t* list) {
    if (threadIdx.x < BN) {
      const int e = t * BN + threadIdx.x;
      if (e < n_list)
        dev::cp_async4(&m.kpos[t % kPosSlots][threadIdx.x], list + e, true);
      else
        m.kpos[t % kPosSlots][threadIdx.x] = -1;
    }
  };
  // Key tile t's rows into buffer t % kStages, from the positions pos(r) of its rows.
  const int64_t kv_off = b * p.kv_batch_stride + hk * D;
  auto gather_kv = [&](int t, auto pos) {
    const int buf = t % kStages;
    gather_rows<BN, D, 2>({sK + buf * kKVBytes, sV + buf * kKVBytes}, {p.k + kv_off, p.v + kv_off},
                          p.kv_row_stride, pos);
    if (p.top_k > 1 && threadIdx.x < BN) {
      const int j = pos(threadIdx.x);
      m.kmask[buf][threadIdx.x] = j >= 0 ? p.masks[int64_t(b) * T + j] : 0;
    }
  };
  // ... with its positions in shared memory (landed and visible: loaded before a barrier).
  auto load_kv = [&](int t) {
    const int* kp = m.kpos[t % kPosSlots];
    gather_kv(t, [&](int r) { return kp[r]; });
  };
  // Prologue, one round trip after the list: Q, the positions of the first tiles and the rows of
  // the first kStages - 1 tiles (ring_prologue_*) with their addresses from the list itself (in
  // global memory: the positions are not in shared memory yet), in kStages - 1 cp.async groups:
  // group k holds tile t_begin + k's rows (empty past the walk), group 0 also Q and the
  // positions. Only group 0 is waited for here; the loop's wait finds the others
  // (focus_hard_walk.h, the ring).
  for (int t = t_begin; t < min(t_end, focus_hard::ring_prologue_pos_end(t_begin)); ++t)
    load_pos(t, count, glist);
  for (int k = 0; k < kStages - 1; ++k) {
    const int t = t_begin + k, e0 = t * BN;
    if (t < t_end) gather_kv(t, [&](int r) { return e0 + r < count ? glist[e0 + r] : -1; });
    cp_async_commit();
  }
  cp_async_wait_group<focus_hard::kRingPrologueWaitGroups>();
  __syncthreads();  // the query rows of Meta, the first tiles' positions, tile t_begin's rows

  const int wg = threadIdx.x / 128, warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, tig = lane & 3;
  const int wrow = 64 * wg;  // this warpgroup's first row in the block
  // Its rows' bounds lo .. hi (group_bound of the sorted positions; hi < 0: no valid row) and
  // whether every valid row is in its first pass (no lower-slot group to exclude).
  if (threadIdx.x % 128 < 32) {  // the warpgroup's first warp
    bool first = true;
    for (int r = lane; r < 64; r += 32) first = first && m.qmask[wrow + r] == 0;
    first = __all_sync(0xffffffffu, first);
    if (lane == 0) {
      m.wg_lo[wg] = wrow < nq ? focus_hard::group_bound(m.qpos[wrow], w, true) : 0;
      m.wg_hi[wg] =
          wrow < nq ? focus_hard::group_bound(m.qpos[min(wrow + 63, nq - 1)], w, true) : -1;
      m.wg_first[wg] = first;
    }
  }

  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  fence_regs(o);
  RowState st = {{-INFINITY, -INFINITY}, {0.f, 0.f}};
  const float sl2 = p.scale * kLog2e;
  const uint32_t q_rows = sQ + wrow * 128;
  const int rrow = wrow + 16 * warp + g;  // this thread's rows: rrow and rrow + 8
  float s[BN / 2];
  uint32_t pa[BN / 16][4];

  for (int t = t_begin; t < t_end; ++t) {
    const int buf = t % kStages;
    // Tile t's rows and the positions of the tile gathered now landed (kRingWaitGroups), visible
    // to the block; everybody done with tile t - 1's buffer and position slot.
    cp_async_wait_group<focus_hard::kRingWaitGroups>();
    fence_proxy_async();
    __syncthreads();
    const int tp = focus_hard::ring_pos_tile(t), tr = focus_hard::ring_rows_tile(t);
    if (tp < t_end) load_pos(tp, m.count, m.glist);
    cp_async_commit();
    if (tr < t_end) load_kv(tr);
    cp_async_commit();
    const int* kp = m.kpos[t % kPosSlots];
    if (!focus_hard::group_tile_visible(kp[0], m.wg_hi[wg])) continue;
    const bool need_mask =
        !focus_hard::group_tile_unmasked(kp[BN - 1], m.wg_lo[wg], m.wg_first[wg] != 0);
    issue_abt<D, kBM, BN>(s, q_rows, sK + buf * kKVBytes);
    wgmma_wait<0>();
    fence_regs(s);
    if (need_mask) {
      const int i0 = focus_hard::group_bound(m.qpos[rrow], w, true),
                i1 = focus_hard::group_bound(m.qpos[rrow + 8], w, true);
#pragma unroll
      for (int jj = 0; jj < BN / 8; ++jj) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = 8 * jj + 2 * tig + e;
          const int j = kp[col];
          const uint64_t km = p.top_k > 1 ? m.kmask[buf][col] : 0;
          if (!focus_hard::take_group_key(i0, j, km, m.qmask[rrow])) s[4 * jj + e] = -INFINITY;
          if (!focus_hard::take_group_key(i1, j, km, m.qmask[rrow + 8]))
            s[4 * jj + 2 + e] = -INFINITY;
        }
      }
    }
    float corr[2];
    online_softmax<BN>(s, st, corr, sl2);
    rescale<D>(o, corr);
    acc_to_a<BN>(pa, s);
    issue_pv<D, BN>(o, pa, sV + buf * kKVBytes);
    wgmma_wait<0>();
    fence_regs(o);
    fence_regs(pa);
  }

  // Epilogue, per row of this thread: the membership's partial for the band pass to merge, or
  // with band_first (top_k 1) the band's partial merged in, o and lse written (the band took
  // (i, i); this row may have taken nothing, l = 0).
  // The band partials are loaded before the stores they feed (focus_hard::load_partial).
  int pos[2];
  int64_t part[2];
  float l[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = rrow + 8 * r;
    l[r] = focus_hard::row_sum(st.sum[r]);  // (every lane: a shuffle)
    pos[r] = m.qpos[row];
    part[r] = ((int64_t(b) * T + pos[r]) * p.top_k + m.qslot[row]) * p.n_head + h;
  }
  if (p.band_first) {
    before_merge();
    if constexpr (kBothRows) {
      focus_hard::RowPartial<D> pr[2];
#pragma unroll
      for (int r = 0; r < 2; ++r)
        if (pos[r] >= 0) focus_hard::load_partial<D>(p, part[r], tig, pr[r]);
#pragma unroll
      for (int r = 0; r < 2; ++r)
        if (pos[r] >= 0)
          focus_hard::write_merged<D>(p, o, r, tig, l[r], st.max[r], pr[r], b, h, pos[r]);
    } else {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        if (pos[r] < 0) continue;
        focus_hard::RowPartial<D> pr;
        focus_hard::load_partial<D>(p, part[r], tig, pr);
        focus_hard::write_merged<D>(p, o, r, tig, l[r], st.max[r], pr, b, h, pos[r]);
      }
    }
  } else {
#pragma unroll
    for (int r = 0; r < 2; ++r)
      if (pos[r] >= 0) focus_hard::write_partial<D>(p, o, r, tig, l[r], st.max[r], part[r]);
  }
}
#endif  // ATTN_WGMMA_DEVICE

}  // namespace attnlab::focus_hard_group
