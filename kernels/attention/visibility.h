// Which keys a query sees: the one description of the attention mask that every kernel of the
// attention family (CUDA and the CPU references) derives its loops, tile ranges and element masks
// from. Plain C++ (the CPU references include it); __host__ __device__ when compiled by nvcc.
//
// Key s is visible from query t iff  (!causal || s <= t)  and  (window == 0 || s > t - window),
// and both lie in the sequence (0 <= s, t < T). The dense op is always causal; window > 0 is a
// sliding window (t - window < s <= t). The CPU reference rejects a window without causality.
//
// Machine code: the kernels were tuned with these exact expressions written out. nvcc compiles an
// inlined call of a function returning bool into other (longer) code than the same expression in
// place: with AttentionMask's member functions in the element masks, the cubin .text of the
// mma.sync forward grew by up to a quarter. So the tile and element predicates are defined once
// here as expression macros (ATTN_MASK_*), which the member functions expand and which the
// kernels use directly; key_visible stays a function (the form the backward kernels had). With
// them the default kernels' .text is byte-identical to the hand-written forms they replaced.
// Change them only together with such a check (cubin .text, or SASS where cuobjdump exists).
#pragma once

#include <algorithm>

#if defined(__CUDACC__)
#define ATTN_VIS_FN __host__ __device__ __forceinline__
#else
#define ATTN_VIS_FN inline
#endif
// Device code: CUDA's integer min / max (what the kernels were tuned with); host: std::.
#if defined(__CUDA_ARCH__)
#define ATTN_VIS_MIN(a, b) min(a, b)
#define ATTN_VIS_MAX(a, b) max(a, b)
#else
#define ATTN_VIS_MIN(a, b) std::min(a, b)
#define ATTN_VIS_MAX(a, b) std::max(a, b)
#endif

// ---- tile and element predicates over a mask m (an AttentionMask) ------------------------------
// Arguments are evaluated as written (some twice): pass plain values.
// Key s past T or hidden from query t (the forward's element mask; rows t >= T are not stored):
#define ATTN_MASK_HIDDEN(m, t, s, T) \
  ((s) >= (T) || ((m).causal && (s) > (t)) || ((m).window > 0 && (s) <= (t) - (m).window))
// No query of q0 .. q_last sees any key of k0 .. k_last (a warp or warpgroup skips the tile):
#define ATTN_MASK_TILE_INVISIBLE(m, q0, q_last, k0, k_last) \
  (((m).causal && (k0) > (q_last)) || ((m).window > 0 && (k_last) <= (q0) - (m).window))
// Some key of k0 .. k0 + cols - 1 is past T or hidden from some query of q0 .. q0 + rows - 1: the
// tile needs element masks (rows past T not considered: the forward kernels do not store them).
#define ATTN_MASK_NEEDS_KEY_MASK(m, q0, rows, k0, cols, T)          \
  ((k0) + (cols) > (T) || ((m).causal && (k0) + (cols)-1 > (q0)) || \
   ((m).window > 0 && (k0) <= (q0) + (rows)-1 - (m).window))
// The same, also when rows of the tile are past T (the backward kernels mask those too).
#define ATTN_MASK_NEEDS_MASK(m, q0, rows, k0, cols, T)                                     \
  ((q0) + (rows) > (T) || (k0) + (cols) > (T) || ((m).causal && (k0) + (cols)-1 > (q0)) || \
   ((m).window > 0 && (k0) <= (q0) + (rows)-1 - (m).window))

namespace attnlab {

// Key s visible from query t under (causal, window), both inside the sequence of T.
ATTN_VIS_FN bool key_visible(int t, int s, int T, bool causal, int window) {
  return s < T && t < T && (!causal || s <= t) && (window <= 0 || s > t - window);
}

// Half-open range [begin, end) of tile indices; empty when end <= begin.
struct TileRange {
  int begin, end;
};

struct AttentionMask {
  bool causal = true;
  int window = 0;  // 0: no sliding window
  // Where a content-dependent mask plugs in (not implemented in this family): Focus (hard
  // routing) would add the query's and key's group ids, SFA its selected-feature sets, as members
  // read by visible() / ATTN_MASK_HIDDEN; the tile functions would keep their positional answer
  // for the tile range (a superset) and report needs_mask for every tile the extra mask can cut.
  // Those variants get their own kernel families and params structs; dense stays positional.

  // ---- single elements -----------------------------------------------------------------------
  ATTN_VIS_FN bool visible(int t, int s, int T) const {
    return key_visible(t, s, T, causal, window);
  }
  ATTN_VIS_FN bool hidden(int t, int s, int T) const { return ATTN_MASK_HIDDEN(*this, t, s, T); }

  // ---- one query row / one key column: half-open ranges [first, end) ---------------------------
  // Keys that query t (< T) sees; queries (< T) that see key s (< T).
  ATTN_VIS_FN int first_key(int t) const {
    return window > 0 ? ATTN_VIS_MAX(0, t - window + 1) : 0;
  }
  ATTN_VIS_FN int key_end(int t, int T) const { return causal ? t + 1 : T; }
  ATTN_VIS_FN int first_query(int s) const { return causal ? s : 0; }
  ATTN_VIS_FN int query_end(int s, int T) const {
    return window > 0 ? ATTN_VIS_MIN(T, s + window) : T;
  }

  // Bounds for a masked tile, relative to column `base` (the tile's first key, or query): the
  // kernels compare a compile-time column offset c against them (c in [lo, hi] is visible), one
  // comparison per element and bound; lo is -2^30 where there is no lower bound.
  // Keys of query row t (t < T) as s - base:
  ATTN_VIS_FN void key_bounds(int t, int T, int base, int* lo, int* hi) const {
    *hi = (causal ? ATTN_VIS_MIN(T - 1, t) : T - 1) - base;
    *lo = window > 0 ? t - window + 1 - base : -(1 << 30);
  }
  // Queries (< T) that see key s, as t - base; none when s >= T:
  ATTN_VIS_FN void query_bounds(int s, int T, int base, int* lo, int* hi) const {
    *hi = T - 1 - base;
    if (window > 0) *hi = ATTN_VIS_MIN(*hi, s + window - 1 - base);
    if (s >= T) *hi = -1;
    *lo = causal ? s - base : -(1 << 30);
  }

  // ---- tiles -----------------------------------------------------------------------------------
  // Tiles of `tile` keys that hold a key visible from some query of q0 .. q0 + rows - 1.
  ATTN_VIS_FN TileRange key_tiles(int q0, int rows, int tile, int T) const {
    int end = (T + tile - 1) / tile;
    if (causal) end = ATTN_VIS_MIN(end, (q0 + rows - 1) / tile + 1);
    const int begin = window > 0 ? ATTN_VIS_MAX(0, q0 - window + 1) / tile : 0;
    return {begin, end};
  }
  // The same for query tile m when query and key tiles have one size (queries m * tile ..).
  ATTN_VIS_FN TileRange key_tiles_of_tile(int m, int tile, int T) const {
    int end = (T + tile - 1) / tile;
    if (causal) end = ATTN_VIS_MIN(end, m + 1);
    const int begin = window > 0 ? ATTN_VIS_MAX(0, m * tile - window + 1) / tile : 0;
    return {begin, end};
  }
  // Tiles of `tile` queries with a query that sees some key of k0 .. k0 + cols - 1.
  ATTN_VIS_FN TileRange query_tiles(int k0, int cols, int tile, int T) const {
    const int begin = causal ? k0 / tile : 0;
    int end = (T + tile - 1) / tile;
    if (window > 0) end = ATTN_VIS_MIN(end, (k0 + cols - 1 + window - 1) / tile + 1);
    return {begin, end};
  }
  ATTN_VIS_FN bool tile_invisible(int q0, int q_last, int k0, int k_last) const {
    return ATTN_MASK_TILE_INVISIBLE(*this, q0, q_last, k0, k_last);
  }
  ATTN_VIS_FN bool needs_key_mask(int q0, int rows, int k0, int cols, int T) const {
    return ATTN_MASK_NEEDS_KEY_MASK(*this, q0, rows, k0, cols, T);
  }
  ATTN_VIS_FN bool needs_mask(int q0, int rows, int k0, int cols, int T) const {
    return ATTN_MASK_NEEDS_MASK(*this, q0, rows, k0, cols, T);
  }
};

}  // namespace attnlab

#undef ATTN_VIS_FN
#undef ATTN_VIS_MIN
#undef ATTN_VIS_MAX
