// Hard-routed Focus attention forward on tensor cores (docs/focus_hard.md): bf16,
// head dim 64 or 128, pos = 0, GQA. The same rows as launch_focus_attention_fwd with gate hard:
// pair (i, j), j <= i, is attended iff i - j <= local_window or i and j share one of their top_k
// groups (counted once); o = softmax over the row of q_i . k_j * scale, times v.
//
// Two steps, both stream-ordered, no host synchronisation:
// 1. Index (launch_focus_hard_index): per batch row, a stable counting sort of the memberships
//    (token t, group groups[t][s]) by group: list[b][offsets[b][g] ..] holds the tokens of group g
//    in increasing position; tile_offsets[b][g] counts the tile_rows-query tiles of groups < g
//    (tile_offsets[b][K] = all tiles of row b); masks[b][t] = the bit set of t's groups. Group ids
//    outside [0, K) are dropped (focus_route_topk never writes them; a token with no valid id
//    gets no output row); a token listing a group twice is listed once there.
// 2. Attention (launch_focus_hard_fwd): one block per (query tile of one group, head, batch row),
//    tile_rows (64 or 128) group-sorted queries gathered by index. One online-softmax state walks
//    (a) the group's key tiles up to the tile's last query (the list is sorted by position, so that
//    is a prefix) and (b) the contiguous key tiles of the union of the queries' local bands. Each
//    pair is counted once: query i met in the pass of its slot s (group groups[i][s]) takes key j
//    of the group only if j holds none of groups[i][0 .. s-1]; local-band pairs are taken only in
//    i's first pass (slot 0) and only if i and j share no group (those were taken in a group pass).
//    The rule and the walk are host/device functions (focus_hard_walk.h) that a CPU test replays.
//    top_k = 1: o and lse written directly. top_k > 1: each pass writes a partial (o, lse) per
//    membership (part_o f32 [B, T, top_k, H, D], part_lse f32 [B, T, top_k, H]) and a merge kernel
//    combines a token's top_k partials by log-sum-exp into o and lse.
// Written (=): o, lse (and the workspace). Layout of q/k/v/o/lse as in FocusAttentionParams.
#pragma once
#include <cstdint>

#include "kernels/common/launch.h"

namespace attnlab {

constexpr int kFocusHardTile = 64;       // keys per key tile; queries per block: tile_rows
constexpr int kFocusHardChunk = 1024;    // tokens per block of the counting sort
constexpr int kFocusHardMaxGroups = 64;  // group bit sets are 64-bit

// Which kernels build the index (launch_focus_hard_index): automatic = the fused kernel for rows
// of at most 4 chunks (T <= 4096), three kernels beyond; fused / split force one (fused up to
// kFocusHardFusedMaxChunks chunks). For A/B tests and benchmarks; the lists are the same.
enum class FocusHardIndexPath { automatic, fused, split };
constexpr int kFocusHardFusedMaxChunks = 8;  // the fused kernel's limit (its shared counts)

struct FocusHardIndexParams {
  const int32_t* groups = nullptr;  // [B, T, top_k]
  int32_t* chunk_counts = nullptr;  // [B, n_chunks, K] workspace (n_chunks = ceil(T / chunk))
  int32_t* offsets = nullptr;       // [B, K + 1]
  int32_t* tile_offsets = nullptr;  // [B, K + 1]
  int32_t* list = nullptr;          // [B, T * top_k] (only the first offsets[b][K] are written)
  uint64_t* masks = nullptr;        // [B, T]
  int B = 0, T = 0, K = 0, top_k = 0;
  int tile_rows = kFocusHardTile;  // queries per attention block: 64 or 128
  FocusHardIndexPath path = FocusHardIndexPath::automatic;
};

struct FocusHardAttnParams {
  const bf16* q = nullptr;
  const bf16* k = nullptr;
  const bf16* v = nullptr;
  bf16* o = nullptr;
  float* lse = nullptr;             // [B, n_head, T]
  const int32_t* groups = nullptr;  // [B, T, top_k]
  const int32_t* offsets = nullptr;
  const int32_t* tile_offsets = nullptr;
  const int32_t* list = nullptr;
  const uint64_t* masks = nullptr;
  float* part_o = nullptr;    // top_k > 1 only
  float* part_lse = nullptr;  // top_k > 1 only
  // The wgmma kernel, top_k = 1: workspace [B, T, q_row_stride] bf16 for the group-sorted copy
  // of the packed qkv rows; when set, the group pass runs on it (launch_focus_hard_sorted_group).
  bf16* sorted = nullptr;
  int64_t q_batch_stride = 0, q_row_stride = 0;
  int64_t kv_batch_stride = 0, kv_row_stride = 0;
  int64_t o_batch_stride = 0, o_row_stride = 0;
  int B = 0, T = 0, n_head = 0, n_kv_head = 0, D = 0, K = 0, top_k = 0;
  int local_window = 0;
  float scale = 0.f;
  int tile_rows = kFocusHardTile;  // queries per block (64: one m-tile per warp; 128: two), as
                                   // the index was built with
  // The wgmma kernel's order of passes (launch_focus_hard_wgmma), top_k 1 only: the band pass
  // first, into the partial of slot 0 (it reads nothing of the index, so it can run beside the
  // index build and the gather), and the group pass merges it into o and lse.
  bool band_first = false;
  // The order of the wgmma group passes' blocks: true = longest first over all groups (query
  // tile j descending, then group, then head; focus_hard::longest_first_tile; the sorted pass
  // with sorted_block_levels), false = head after head, each group's latest tiles first (the
  // sorted pass: each head's last rows first). The blocks compute the same; only the tail of the
  // launch differs.
  bool longest_first = true;
};

inline int focus_hard_chunks(int T) { return (T + kFocusHardChunk - 1) / kFocusHardChunk; }
// An upper bound of tile_offsets[b][K] over all b: the grid of the attention kernel.
inline int64_t focus_hard_max_tiles(int T, int K, int top_k, int tile_rows) {
  return (int64_t(T) * top_k + tile_rows - 1) / tile_rows + K;
}

void launch_focus_hard_index(const FocusHardIndexParams& p, Stream s);
void launch_focus_hard_fwd(const FocusHardAttnParams& p, Stream s);

// The Hopper kernel (focus_hard_wgmma.cu, sm_90a, wgmma), the split schedule: the index built with
// tile_rows = kFocusHardWgmmaRows; part_o / part_lse required for every top_k (the group passes'
// partials, [B, T, top_k, H, D] / [B, T, top_k, H] f32, written by the first kernel and read by
// the second). Two launches: group passes (one block per kFocusHardWgmmaRows group-sorted
// queries), then the local band in token order (one block per kFocusHardWgmmaRows consecutive
// queries) whose epilogue merges the token's partials by log-sum-exp and writes o and lse. With
// the list group pass the window partition of focus_hard_walk.h (the group pass takes the
// distant pairs sharing a group, i - j > w: take_group_key on group_bound; the band every pair
// of the window, take_window_key); with the sorted one (p.sorted) the group pass takes every
// pair sharing a group and the band the window's others (focus_hard_window_band, below). With
// p.band_first (top_k 1) the order is reversed: the caller runs launch_focus_hard_band before and
// makes s wait for it (it reads nothing of the index: src/ops/focus_hard.cpp runs it on a second
// stream beside the index build and the gather), and this launches the group pass alone, which
// merges the band's partial (slot 0) into o and lse. Same rows and limits as launch_focus_hard_fwd.
constexpr int kFocusHardWgmmaRows = 128;
// Keys per tile of the passes on TMA tiles (focus_hard_sorted.cu, focus_hard_band.cu).
constexpr int kFocusHardTmaKeys = 128;
// True when this build holds the sm_90a code (CMake: architectures containing 90), the current
// device is compute capability 9.0 and D is 64 or 128.
bool focus_hard_wgmma_supported(int D);
void launch_focus_hard_wgmma(const FocusHardAttnParams& p, Stream s);
// The wgmma kernel's group pass for top_k = 1 when p.sorted is set (focus_hard_sorted.cu, sm_90a),
// in two launches: launch_focus_hard_gather copies the packed qkv rows (q at the start of each
// q_row_stride row, k and v in it) in list order into p.sorted (after the index); then
// launch_focus_hard_sorted_group (called by launch_focus_hard_wgmma) runs dense causal attention
// inside each group's segment of that order (the pairs sharing a group) by the dense wgmma
// forward's schedule on TMA tiles, writing the partials that the band pass merges, or with
// band_first merging the band's partial into o and lse.
void launch_focus_hard_gather(const FocusHardAttnParams& p, Stream s);
void launch_focus_hard_sorted_group(const FocusHardAttnParams& p, Stream s);
// The wgmma kernel's band pass (focus_hard_band.cu, sm_90a): the local band in token order on TMA
// tiles: every pair of the window beside the list group pass (focus_hard_window_band), the pairs
// sharing no group beside the sorted one (which takes every shared pair). With band_first (top_k
// 1), before the group pass: its partial (slot 0) for the group pass to merge; otherwise after the
// group pass, merged with its partials by log-sum-exp into o and lse. Reads q, k, v and groups only
// (not the index).
void launch_focus_hard_band(const FocusHardAttnParams& p, Stream s);
// The band pass and the list group pass in one launch (focus_hard_fused.cu, sm_90a; top_k 1,
// band_first, p.sorted null): a grid of at most SMs x blocks per SM taking items from counters[0]
// (the band's blocks first, then the group pass's), the group items waiting for the index grid
// (this kernel is launched as the programmatic dependent of the launch before it on s, which
// must be the index build's last kernel: hard_index_fused or hard_index_scatter, which let it
// start at once) and, before their merge, for every band item
// (counters[1]). counters: 2 ints, zero at launch (the caller clears them before the index
// build). Same rows and limits as the two launches.
void launch_focus_hard_fused(const FocusHardAttnParams& p, int* counters, Stream s);
// The same items warp-specialised (focus_hard_ws.cu, sm_90a, head dim 64): one block per SM, a
// producer warpgroup loading each item's query rows and 128-key tiles ahead across items, two
// consumer warpgroups of 64 rows each. Same contract as launch_focus_hard_fused.
void launch_focus_hard_fused_ws(const FocusHardAttnParams& p, int* counters, Stream s);
// The two fused launches' common host part (focus_hard_fused.cu): their contract's checks, and
// their number of items (the band's tiles, then the group pass's blocks, per head and batch row)
// with, in *max_tiles, the group pass's blocks per head.
int64_t focus_hard_fused_items(const FocusHardAttnParams& p, const int* counters,
                               int64_t* max_tiles);
// The partition of the pairs between the wgmma group and band passes (focus_hard_walk.h): the
// window partition with the list group pass (its tiles carry the keys' positions, so it can
// leave the window's pairs to the band, which then needs no group sets), the shared-group one
// with the sorted group pass (p.sorted set; its tiles are entries of the sorted order).
inline bool focus_hard_window_band(const FocusHardAttnParams& p) { return p.sorted == nullptr; }

}  // namespace attnlab
