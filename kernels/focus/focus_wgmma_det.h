// The deterministic form of the wgmma Focus backward (FocusAttentionParams::deterministic, set
// from train.deterministic; docs/focus_soft.md, "The deterministic backward"). The fast form adds
// dq and dg with fp32 reductions whose order depends on which block gets there first; this one
// fixes the order of every addition, so reruns and resumes are bitwise identical.
//
// - dq (and dg_query): the blocks of one kv head's key tiles n = 0, 1, .. add into query tile m
//   of query head h. Block n sees the query tiles from n kBlockN / kQ on, so the blocks adding
//   into tile m are n = 0 .. n_max(m), a contiguous range: block n's turn at every tile is n. A
//   counter per (b, h, m) (`turns`, zeroed) holds the number of blocks that have added there;
//   block n waits until it reads n (turn_wait, thread 0, before the tile's second barrier), adds
//   its dQ tile (the bulk reduction, as the fast form) and dg_query, waits for the reduction to
//   complete and passes the turn on (turn_pass). A block waits only on blocks of lower key tile,
//   which took lower tickets (block_of_ticket) and so are running or done: no deadlock.
// - The order of the tiles in a block: descending query tiles (ascending in the fast form). Block
//   n + 1 then reaches each tile one step after block n, instead of after all of block n's earlier
//   tiles (ascending, block n would wait n steps more at every tile: a staircase).
// - dg: g is shared by the heads, so the heads' additions meet in dg. Here each query head's
//   dg_query goes to its own slice of `dgq` [B, H, slices, T, K] (slices 2 where the two
//   warpgroups both add into the same queries: kQ 64), each kv head's dg_key to its slice of
//   `dgk` [B, H_kv, T, K] (one block writes each row), and launch_focus_dg_sum adds the slices in
//   a fixed order into dg. Only at KP 8 (K <= 8): wider KP sum a tile's dg_query over the block's
//   warps with shared-memory atomics (focus_wgmma_gate.cuh), so there the launcher runs the fast
//   form (available()).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/attention/visibility.h"  // TileRange
#include "kernels/common/launch.h"

#if defined(__CUDACC__)
#define ATTN_FDET_FN __host__ __device__ __forceinline__
#else
#define ATTN_FDET_FN inline
#endif

namespace attnlab::focus_det {

// Scratch of the deterministic backward (null turns: the fast form).
struct Scratch {
  unsigned* turns = nullptr;   // [B, H, query tiles], zeroed
  unsigned* ticket = nullptr;  // 1, zeroed (block_of_ticket)
  float* dgq = nullptr;        // [B, H, dgq_slices, T, K], zeroed (null: no dg)
  float* dgk = nullptr;        // [B, H_kv, T, K], zeroed
  int dgq_slices = 1;
};

// The block a ticket stands for: the grid's (kv heads, key tiles, batch) in its linear order (kv
// head fastest, key tile 0 first). Each block of the deterministic form takes the next ticket
// (an atomic increment) at its start instead of reading blockIdx, so the blocks start in ticket
// order whatever order the hardware starts them in: a block waits only on blocks of lower key
// tile, whose tickets are lower, so they are running or done (the turns cannot deadlock).
struct BlockCoord {
  int hk, n, b;
};
ATTN_FDET_FN BlockCoord block_of_ticket(unsigned ticket, unsigned kv_heads, unsigned key_tiles) {
  return {int(ticket % kv_heads), int(ticket / kv_heads % key_tiles),
          int(ticket / kv_heads / key_tiles)};
}

// A tile of a block's loop: query head h, query tile m.
struct BwdTile {
  int h, m;
};
// The first tile of a block whose kv head's group starts at query head h0, over query tiles r.
ATTN_FDET_FN BwdTile first_tile(int h0, TileRange r, bool descending) {
  return {h0, descending ? r.end - 1 : r.begin};
}
// The next one: the query tiles of a head, then the next head of the group.
ATTN_FDET_FN BwdTile next_tile(BwdTile t, TileRange r, bool descending) {
  if (descending) return t.m == r.begin ? BwdTile{t.h + 1, r.end - 1} : BwdTile{t.h, t.m - 1};
  return t.m + 1 == r.end ? BwdTile{t.h + 1, r.begin} : BwdTile{t.h, t.m + 1};
}
// Whether a backward with K groups (dg wanted or not) has the deterministic form.
ATTN_FDET_FN bool available(int K, bool with_dg) { return K <= 8 || !with_dg; }
// The value of a tile's turn counter at which key tile n adds into it.
ATTN_FDET_FN unsigned turn_of(int key_tile) { return unsigned(key_tile); }
// The index of the turn counter of tile t in batch row b (n_qtiles query tiles a head).
ATTN_FDET_FN int64_t turn_index(int b, BwdTile t, int n_head, int n_qtiles) {
  return (int64_t(b) * n_head + t.h) * n_qtiles + t.m;
}
// dg_query's slices per query head: 2 where both warpgroups of a block add into the same queries
// (kQ 64, whose dg_query at KP 8 is per warpgroup over its own keys), else 1.
ATTN_FDET_FN int dgq_slices(int kQ) { return kQ == 64 ? 2 : 1; }

// dg = the sum over the slices of dgq (head by head, slice by slice) and of dgk (kv head by kv
// head), in that order: [B, T, K] written (=).
void launch_focus_dg_sum(float* dg, const Scratch& s, int B, int T, int K, int n_head,
                         int n_kv_head, Stream st);

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// Thread 0 of a block: wait until the counter reads `turn` (acquire), then order the block's
// later bulk (async-proxy) reductions after it.
__device__ __forceinline__ void turn_wait(const unsigned* counter, unsigned turn) {
  unsigned v;
  do {
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(counter) : "memory");
  } while (v != turn);
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}
// Thread 0, after the block's additions into the tile are complete (its bulk reductions waited
// for; the other threads' reductions before a block barrier): pass the turn to the next block.
__device__ __forceinline__ void turn_pass(unsigned* counter) {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
  __threadfence();
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(counter) : "memory");
}
#endif

}  // namespace attnlab::focus_det

#undef ATTN_FDET_FN
