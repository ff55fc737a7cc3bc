// The counting rule and the key-tile walk of the hard-routed Focus forward (focus_hard.cuh), as
// host/device functions: the kernel (focus_hard_fwd.cu) runs them, and a CPU test
// (tests/ops/test_focus_hard_walk.cpp) replays the walk of every block to prove that each
// attended pair is taken exactly once and no other pair is.
#pragma once
#include <climits>
#include <cmath>
#include <cstdint>

#include "kernels/focus/focus_hard.cuh"

#if defined(__CUDACC__)
#define ATTN_FOCUS_HD __host__ __device__ __forceinline__
#else
#define ATTN_FOCUS_HD inline
#endif

namespace attnlab::focus_hard {

// The slot of group grp in a token's groups row (its first occurrence; top_k if absent), and in
// *low the bit set of the valid groups of the slots before it.
ATTN_FOCUS_HD int slot_of(const int32_t* row, int top_k, int grp, int K, uint64_t* low) {
  uint64_t m = 0;
  int s = 0;
  for (; s < top_k; ++s) {
    const int x = row[s];
    if (x == grp) break;
    if (x >= 0 && x < K) m |= uint64_t(1) << x;
  }
  *low = m;
  return s;
}

// The bit set of a token's valid groups (ids in [0, K); duplicates once): what the index's masks
// hold, computed from the groups row by passes that run without the index (the band pass).
ATTN_FOCUS_HD uint64_t group_set(const int32_t* row, int top_k, int K) {
  uint64_t m = 0;
  for (int s = 0; s < top_k; ++s) {
    const int x = row[s];
    if (x >= 0 && x < K) m |= uint64_t(1) << x;
  }
  return m;
}

// Whether the band pass's merge (focus_hard_band.cu) reads the group partial of slot sl of a
// token's groups row, called for sl = 0, 1, .. in turn: the first occurrence of each distinct
// valid group (*seen: the groups met at the slots before, 0 at the start; updated). The group pass
// of group x writes its partial at slot_of(row, .., x, ..), the same first occurrence
// (FocusHardWalk's replay checks the two agree).
ATTN_FOCUS_HD bool reads_partial_slot(const int32_t* row, int K, int sl, uint64_t* seen) {
  const int x = row[sl];
  if (x < 0 || x >= K || ((*seen >> x) & 1)) return false;
  *seen |= uint64_t(1) << x;
  return true;
}

// Two softmax partials of one row over disjoint key sets, (o_a normalised, lse_a) and (o_b
// normalised, lse_b), either may be empty (lse -inf, o 0), not both: o = w_a o_a + w_b o_b and
// the row's lse.
ATTN_FOCUS_HD void merge_weights(float lse_a, float lse_b, float* w_a, float* w_b, float* lse) {
  const float mx = lse_a > lse_b ? lse_a : lse_b;
  const float ea = lse_a == -INFINITY ? 0.f : expf(lse_a - mx);
  const float eb = lse_b == -INFINITY ? 0.f : expf(lse_b - mx);
  const float inv = 1.f / (ea + eb);
  *w_a = ea * inv;
  *w_b = eb * inv;
  *lse = mx + logf(ea + eb);
}

// In the pass of group g, query i (whose groups of lower slots are `low`) takes key j of g's list
// iff j <= i and j holds none of them: a shared pair is taken in the pass of i's first slot that
// j shares.
ATTN_FOCUS_HD bool take_group_key(int i, int j, uint64_t key_mask, uint64_t low) {
  return j >= 0 && j <= i && (key_mask & low) == 0;
}

// In the local band, only in i's first pass (low == 0: slot 0 when the ids are valid), and only
// pairs sharing no group (the others were taken in a group pass).
ATTN_FOCUS_HD bool take_local_key(int i, int j, int w, bool first, uint64_t key_mask,
                                  uint64_t query_mask) {
  return first && j >= 0 && j <= i && i - j <= w && (key_mask & query_mask) == 0;
}

// The window partition of the split schedule (focus_hard_wgmma.cu's list group pass and the band
// pass beside it; the sorted group pass keeps the partition above, its tiles carry no key
// positions): the band takes every pair of the window, 0 <= i - j <= w, with no group test
// (take_window_key), and the group passes only the distant pairs, i - j > w: take_group_key and
// the group tiles' shortcuts on the query's position lowered by w + 1 (group_bound; -1, no row,
// stays -1). The band then needs no group sets, and always takes (i, i).
ATTN_FOCUS_HD bool take_window_key(int i, int j, int w) { return j >= 0 && j <= i && i - j <= w; }
ATTN_FOCUS_HD int group_bound(int i, int w, bool window) {
  if (!window || i < 0) return i;
  return i - (w < INT_MAX ? w + 1 : w);  // >= -INT_MAX for i >= 0
}

// The first position tile (kFocusHardTile keys) >= from that meets the band [i - w, i] of some
// query of the block in its first pass (qpos: n entries, -1 = none; qfirst: nonzero for a first
// pass), or -1.
ATTN_FOCUS_HD int next_local_tile(const int* qpos, const int* qfirst, int n, int from, int w) {
  constexpr int kt = kFocusHardTile;
  if (w <= 0) return -1;  // the band is (i, i), which shares i's own group: no local pair
  int best = INT_MAX;
  for (int r = 0; r < n; ++r) {
    const int i = qpos[r];
    if (i < 0 || !qfirst[r] || i < from * kt) continue;
    const int first = (i - w > 0 ? i - w : 0) / kt;
    const int t = first > from ? first : from;
    best = t < best ? t : best;
  }
  return best == INT_MAX ? -1 : best;
}

// A warp's shortcuts over its rows (lo = its first query's position, hi = its last valid one's;
// with the window partition their group_bound; all_first: every row in its first pass;
// any_first: some valid row is). A group tile (key positions kmin .. kmax, -1 = no key) no row
// can see; a group tile every row takes whole; a local tile (positions k0 ..) no row's band
// meets.
ATTN_FOCUS_HD bool group_tile_visible(int kmin, int hi) { return kmin >= 0 && kmin <= hi; }
ATTN_FOCUS_HD bool group_tile_unmasked(int kmax, int lo, bool all_first) {
  return all_first && kmax >= 0 && kmax <= lo;
}
ATTN_FOCUS_HD bool local_tile_visible(int k0, int lo, int hi, int w, bool any_first) {
  return any_first && k0 <= hi && k0 + kFocusHardTile - 1 + w >= lo;
}

// The split schedule of the Hopper kernel (focus_hard_wgmma.cu): the group pass takes only group
// pairs (take_group_key, tiles of bn list entries, the shortcuts above per 64-row warpgroup), and
// the local band runs once per query in token order: take_local_key with first = true, or with
// the window partition take_window_key. Its key tiles (bn positions each) for the rows q0 .. q0 +
// rows - 1 (< T): [*begin, *end); none when w = 0 outside the window partition (the band's one
// pair, (i, i), shares i's group).
ATTN_FOCUS_HD void band_tiles(int q0, int rows, int T, int w, int bn, bool window, int* begin,
                              int* end) {
  const int last = (q0 + rows < T ? q0 + rows : T) - 1;
  *begin = (q0 - w > 0 ? q0 - w : 0) / bn;
  *end = (w <= 0 && !window) || last < q0 ? *begin : last / bn + 1;
}
// A band tile (positions k0 .. k0 + bn - 1) some row in lo .. hi (token order) can see (written
// so that no sum overflows for any w >= 0).
ATTN_FOCUS_HD bool band_tile_visible(int k0, int bn, int lo, int hi, int w) {
  return lo <= hi && k0 <= hi && lo - (k0 + bn - 1) <= w;
}

// The list group pass's ring of key tiles (focus_hard_wgmma.cu): kRingStages K and V buffers (a
// tile's gathered rows have kRingStages - 1 tiles' compute to land in: a block walks 1-8 key
// tiles at 4K, so latency, not throughput, bounds it) and kRingPosSlots slots of key positions
// (tile t's in slot t % kRingPosSlots), each loaded kRingPosLead iterations before its rows are
// gathered. The prologue loads the positions of tiles [t_begin, ring_prologue_pos_end) and the
// rows of [t_begin, ring_prologue_rows_end) = kRingStages - 1 tiles, in kRingStages - 1 cp.async
// groups (group k: tile t_begin + k's rows, or empty past the walk; group 0 also Q and every
// position), and waits for group 0 only (cp.async.wait_group kRingPrologueWaitGroups, then a
// barrier); iteration t waits (cp.async.wait_group kRingWaitGroups, then a barrier), computes
// tile t, and commits two groups: the positions of tile ring_pos_tile(t), then the rows of tile
// ring_rows_tile(t) (either empty past the walk). The rows of tile t were committed 2
// (kRingStages - 2) groups before that wait (a prologue tile kRingStages - 2 + t - t_begin), the
// positions of ring_rows_tile(t) 2 kRingPosLead - 1 groups before: kRingWaitGroups is the
// smaller. FocusHardWalk.RingGroupsSlotsAndBuffers replays it.
constexpr int kRingStages = 4, kRingPosLead = kRingStages - 2, kRingPosSlots = 8;
constexpr int kRingWaitGroups = 2 * kRingStages - 5, kRingPrologueWaitGroups = kRingStages - 2;
static_assert(kRingStages >= 3 && kRingPosLead >= 1 && kRingPosSlots >= kRingStages + kRingPosLead,
              "a slot is rewritten only after its tile's last read");
ATTN_FOCUS_HD int ring_pos_tile(int t) { return t + kRingStages - 1 + kRingPosLead; }
ATTN_FOCUS_HD int ring_rows_tile(int t) { return t + kRingStages - 1; }
ATTN_FOCUS_HD int ring_prologue_pos_end(int t_begin) { return ring_pos_tile(t_begin); }
ATTN_FOCUS_HD int ring_prologue_rows_end(int t_begin) { return ring_rows_tile(t_begin); }

// The o-th (from 0, ascending) member of a set of up to 64 groups given as its words lo (groups
// 0 .. 31) and hi (32 .. 63), o below the set's size: the list group pass's decode of a block's
// group (the sets are warp ballots of the groups with more than j tiles).
ATTN_FOCUS_HD int nth_member(uint32_t lo, uint32_t hi, int o) {
#if defined(__CUDA_ARCH__)
  const int c = __popc(lo);
#else
  const int c = __builtin_popcount(lo);
#endif
  uint32_t set = o < c ? lo : hi;
  for (int i = o < c ? o : o - c; i > 0; --i) set &= set - 1;  // drop the lowest set bit
#if defined(__CUDA_ARCH__)
  return (o < c ? 0 : 32) + __ffs(int(set)) - 1;
#else
  return (o < c ? 0 : 32) + __builtin_ffs(int(set)) - 1;
#endif
}

// The longest-first order of the list group pass's blocks (focus_hard_wgmma.cu). The block of
// query tile j of a group's list walks that list's key tiles up to its last query, j + 1 query
// tiles' worth, so ordering the blocks by j descending over all groups (then by group, then head,
// the fastest) hands out the longest first and leaves short ones for the tail; ordered group by
// group, a long block of the last group would start late and set the tail. Tile rank u (the
// block's rank / heads) -> the group and j, or false past the row's tiles. F(L): the number of
// tiles with j >= L over the groups (sum of max(0, n_g - L), n_g a group's tiles); maxn: the
// largest n_g; nth(j, o): the o-th group (ascending, from 0) with n_g > j. The kernel evaluates F
// and nth across a warp's lanes, the test on the host.
template <class TilesFrom, class NthGroup>
ATTN_FOCUS_HD bool longest_first_tile(int64_t u, int maxn, TilesFrom F, NthGroup nth, int* grp,
                                      int* j) {
  if (maxn <= 0 || u >= F(0)) return false;
  int lo = 0, hi = maxn;  // F(lo) > u >= F(hi)
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (F(mid) > u)
      lo = mid;
    else
      hi = mid;
  }
  *j = lo;
  *grp = nth(lo, int(u - F(lo + 1)));
  return true;
}

// The longest-first order of the sorted group pass's blocks (focus_hard_sorted.cu; the list
// pass's is longest_first_tile's use above). Block b holds the entries rows b .. of the sorted
// list and walks the key tiles (rows entries each) from its first entry's segment start to its
// last entry, j + 1 of them, j = b - floor(lo / rows) for the segment [lo, hi) its first entry
// lies in. Per segment (group) those blocks have j in [*jmin, *jmax] (*jmin > *jmax: none; *jmin
// is 0 or 1), block b = floor(lo / rows) + j. longest_first_tile over these levels hands out every
// block once, longest first.
ATTN_FOCUS_HD void sorted_block_levels(int lo, int hi, int rows, int* jmin, int* jmax) {
  const int base = lo / rows;
  *jmin = (lo + rows - 1) / rows - base;
  *jmax = (hi + rows - 1) / rows - 1 - base;
}
// The blocks of a segment with levels jmin .. jmax at level >= L (F's term for one group).
ATTN_FOCUS_HD int sorted_blocks_from(int jmin, int jmax, int L) {
  const int from = L > jmin ? L : jmin;
  return jmax >= from ? jmax - from + 1 : 0;
}

// The sorted group pass of top_k 1 (focus_hard_sorted.cu), in the entries of the stable
// group-sorted list (n of them): entry e takes entry j iff lo <= j <= e, lo the first entry of e's
// group (the pairs sharing a group). A block of `rows` entries from q0 walks the key tiles (bn
// entries each) [*begin, *end): from the tile of seg_lo(q0) to that of its last row.
ATTN_FOCUS_HD bool sorted_take(int e, int j, int lo) { return j >= lo && j <= e; }
ATTN_FOCUS_HD void sorted_tiles(int q0, int rows, int n, int seg_lo_q0, int bn, int* begin,
                                int* end) {
  *begin = seg_lo_q0 / bn;
  *end = ((q0 + rows < n ? q0 + rows : n) - 1) / bn + 1;
}
// For a warpgroup with rows wq0 .. hi (hi < wq0: none), lo = the first entry of wq0's group and
// cut = that of hi's: a tile (entries k0 .. k0 + bn - 1) with a key some row takes; a tile every
// row takes whole.
ATTN_FOCUS_HD bool sorted_tile_visible(int k0, int bn, int lo, int wq0, int hi) {
  return wq0 <= hi && k0 <= hi && k0 + bn - 1 >= lo;
}
ATTN_FOCUS_HD bool sorted_tile_unmasked(int k0, int bn, int wq0, int cut) {
  return k0 + bn - 1 <= wq0 && k0 >= cut;
}

}  // namespace attnlab::focus_hard
