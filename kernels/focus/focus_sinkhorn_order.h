// How the cooperative Sinkhorn (focus_sinkhorn_coop.cu) combines a run of per-chunk values in scan
// order with one warp: lane l folds its share of consecutive items in order (lane_share), then an
// order-preserving tree over the lanes (tree_step: at step d, lane l with l % 2d == 0 appends lane
// l + d's value, which covers the items after its own), so the result is the in-order fold for
// an associative operation that need not commute (the backward's affine maps). Plain C++
// (__host__ __device__ under nvcc), so tests/ops/test_focus_sinkhorn_order.cpp replays the 32
// lanes on the CPU with these very functions.
#pragma once

#if defined(__CUDACC__)
#define ATTN_FSO_FN __host__ __device__ __forceinline__
#else
#define ATTN_FSO_FN inline
#endif

namespace attnlab::focus_sinkhorn {

constexpr int kLanes = 32;

// Lane `lane`'s share of n items in scan order: positions [*begin, *end) (empty past n).
ATTN_FSO_FN void lane_share(int n, int lane, int* begin, int* end) {
  const int per = (n + kLanes - 1) / kLanes;
  const int b = lane * per, e = b + per;
  *begin = b < n ? b : n;
  *end = e < n ? e : n;
}

// One step (d = 1, 2, 4, 8, 16) of the tree: `mine` covers lanes lane .. lane + d - 1's shares,
// `next` (lane + d's value, from a shuffle every lane takes part in) the d lanes after them.
template <class Op, class V>
ATTN_FSO_FN V tree_step(V mine, V next, int lane, int d) {
  return (lane & (2 * d - 1)) == 0 ? Op::combine(mine, next) : mine;
}

}  // namespace attnlab::focus_sinkhorn

#undef ATTN_FSO_FN
