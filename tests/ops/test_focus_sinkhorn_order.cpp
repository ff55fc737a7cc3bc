// The cooperative Sinkhorn's in-order fold over a warp (kernels/focus/focus_sinkhorn_order.h),
// replayed on the CPU: 32 lanes fold their lane_share of the items, then the tree_step rounds with
// the shuffle emulated (lane l receives lane l + d's value, its own past lane 31); lane 0 must
// hold the sequential fold, for an operation that is associative but does not commute (the
// composition of affine maps, in exact integer arithmetic, as the backward composes its maps).
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/focus/focus_sinkhorn_order.h"

namespace attnlab {
namespace {

using focus_sinkhorn::kLanes;

struct Map {  // x -> a x + b
  int64_t a, b;
  bool operator==(const Map& o) const { return a == o.a && b == o.b; }
};
struct MapOp {  // y after x, as AffineOp (focus_sinkhorn_tile.cuh)
  static Map identity() { return {1, 0}; }
  static Map combine(Map x, Map y) { return {y.a * x.a, y.a * x.b + y.b}; }
};

// What warp_fold (focus_sinkhorn_coop.cu) leaves in lane 0 for items [first, last), reversed or
// not.
Map replay(const std::vector<Map>& items, int first, int last, bool reverse) {
  std::array<Map, kLanes> acc;
  const int n = last > first ? last - first : 0;
  for (int lane = 0; lane < kLanes; ++lane) {
    int b = 0, e = 0;
    focus_sinkhorn::lane_share(n, lane, &b, &e);
    acc[size_t(lane)] = MapOp::identity();
    for (int i = b; i < e; ++i)
      acc[size_t(lane)] =
          MapOp::combine(acc[size_t(lane)], items[size_t(reverse ? last - 1 - i : first + i)]);
  }
  for (int d = 1; d < kLanes; d <<= 1) {
    const std::array<Map, kLanes> before = acc;  // every lane shuffles the same round's values
    for (int lane = 0; lane < kLanes; ++lane) {
      const Map next = lane + d < kLanes ? before[size_t(lane + d)] : before[size_t(lane)];
      acc[size_t(lane)] = focus_sinkhorn::tree_step<MapOp>(before[size_t(lane)], next, lane, d);
    }
  }
  return acc[0];
}

TEST(FocusSinkhornOrder, WarpFoldIsTheInOrderFold) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> small(-2, 2);
  for (int chunks : {1, 2, 3, 31, 32, 33, 64, 100, 255, 256}) {
    std::vector<Map> items(static_cast<size_t>(chunks));
    for (Map& m : items) m = {small(rng) == 0 ? 1 : small(rng), small(rng)};
    for (int first = 0; first <= chunks; first += chunks > 40 ? 17 : 1) {
      for (int last : {first, first + 1, (first + chunks) / 2, chunks}) {
        if (last < first || last > chunks) continue;
        for (bool reverse : {false, true}) {
          Map want = MapOp::identity();
          for (int i = 0; i < last - first; ++i)
            want = MapOp::combine(want, items[size_t(reverse ? last - 1 - i : first + i)]);
          EXPECT_EQ(replay(items, first, last, reverse), want)
              << "chunks " << chunks << " [" << first << ", " << last << ") reverse " << reverse;
        }
      }
    }
  }
}

// Every item lands in exactly one lane's share, in order, and the shares are contiguous.
TEST(FocusSinkhornOrder, LaneSharesCoverTheItemsInOrder) {
  for (int n = 0; n <= 300; ++n) {
    int next = 0;
    for (int lane = 0; lane < kLanes; ++lane) {
      int b = 0, e = 0;
      focus_sinkhorn::lane_share(n, lane, &b, &e);
      ASSERT_LE(b, e);
      if (b < e) {
        ASSERT_EQ(b, next) << "n " << n << " lane " << lane;
        next = e;
      }
    }
    EXPECT_EQ(next, n);
  }
}

}  // namespace
}  // namespace attnlab
