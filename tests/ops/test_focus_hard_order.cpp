// The hard-routed Focus kernels' block orders and buffer ring (kernels/focus/focus_hard_walk.h,
// the functions the kernels run), replayed on the CPU: the sorted and the list group passes'
// longest-first orders hand out every block once, longest first; nth_member; the cp.async ring's
// groups, position slots and K / V buffers.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <vector>

#include "kernels/focus/focus_hard_walk.h"
#include "test_util.h"

namespace attnlab {
namespace {

// The sorted group pass's longest-first order (focus_hard_sorted.cu, block_first_entry): over
// segment layouts with empty groups, segments shorter than a block and unaligned boundaries, the
// decode of every rank (sorted_block_levels, sorted_blocks_from, longest_first_tile) hands out
// each block of the row exactly once, longest first, and names the segment its first entry lies in.
TEST(FocusHardWalk, SortedLongestFirstCoversEveryBlockOnce) {
  constexpr int kRows = kFocusHardWgmmaRows;
  const std::vector<int32_t> r = test::random_ints(4096, 11u, 1 << 20);
  size_t at = 0;
  for (int K : {1, 3, 8, 33, 64})
    for (int layout = 0; layout < 6; ++layout) {
      std::vector<int> offs(K + 1, 0);
      for (int g = 0; g < K; ++g) {
        const int x = r[at++ % r.size()];
        const int size = layout == 0 ? 512 : layout == 1 ? x % 3 : x % (layout * 300);
        offs[g + 1] = offs[g] + (g % 5 == 4 && layout > 1 ? 0 : size);  // some empty groups
      }
      const int n = offs[K];
      SCOPED_TRACE(testing::Message() << "K " << K << " layout " << layout << " n " << n);
      std::vector<int> jmin(K), jmax(K);
      int maxn = 0;
      for (int g = 0; g < K; ++g) {
        focus_hard::sorted_block_levels(offs[g], offs[g + 1], kRows, &jmin[g], &jmax[g]);
        maxn = std::max(maxn, jmax[g] + 1);
      }
      auto from = [&](int L) {
        int64_t c = 0;
        for (int g = 0; g < K; ++g) c += focus_hard::sorted_blocks_from(jmin[g], jmax[g], L);
        return c;
      };
      auto nth = [&](int level, int o) {
        for (int g = 0; g < K; ++g)
          if (jmin[g] <= level && level <= jmax[g] && o-- == 0) return g;
        return -1;
      };
      const int n_blocks = (n + kRows - 1) / kRows;
      std::vector<int> seen(n_blocks, 0);
      int last_j = INT32_MAX;
      int64_t u = 0;
      for (int grp, j; focus_hard::longest_first_tile(u, maxn, from, nth, &grp, &j); ++u) {
        ASSERT_TRUE(grp >= 0 && grp < K) << "rank " << u;
        const int b = offs[grp] / kRows + j;
        ASSERT_TRUE(b >= 0 && b < n_blocks) << "rank " << u << " block " << b;
        EXPECT_TRUE(offs[grp] <= b * kRows && b * kRows < offs[grp + 1])
            << "block " << b << " named group " << grp;
        EXPECT_LE(j, last_j) << "rank " << u << ": not longest first";
        last_j = j;
        ++seen[b];
      }
      EXPECT_EQ(u, n_blocks);
      for (int b = 0; b < n_blocks; ++b) EXPECT_EQ(seen[b], 1) << "block " << b;
    }
}

// nth_member against counting the set's bits one by one: sets with members in one word, in both,
// a full word, single bits at the edges.
TEST(FocusHardWalk, NthMemberIsTheOthSetBitAscending) {
  std::vector<uint64_t> sets = {1,
                                uint64_t(1) << 31,
                                uint64_t(1) << 32,
                                uint64_t(1) << 63,
                                0xffffffffull,
                                0xffffffff00000000ull,
                                ~uint64_t(0),
                                0x8000000180000001ull};
  const std::vector<int32_t> r = test::random_ints(64, 7u, 1 << 30);
  for (size_t i = 0; i + 1 < r.size(); i += 2)
    sets.push_back((uint64_t(uint32_t(r[i])) << 32) ^ uint64_t(uint32_t(r[i + 1])) ^
                   (uint64_t(uint32_t(r[i])) << 1));
  for (const uint64_t set : sets) {
    int o = 0;
    for (int g = 0; g < 64; ++g) {
      if (((set >> g) & 1) == 0) continue;
      EXPECT_EQ(focus_hard::nth_member(uint32_t(set), uint32_t(set >> 32), o), g)
          << std::hex << set << std::dec << " o " << o;
      ++o;
    }
  }
}

// The longest-first order of the list group pass's blocks (focus_hard_wgmma.cu, longest_first):
// the kernel's ranks (tile rank u = block / H, head = block % H, past the row's tiles: none)
// decoded with host versions of its lane sums map onto every (group, tile j < n_g, head) exactly
// once, with j non-increasing over the ranks and, within one j, groups ascending, heads fastest.
TEST(FocusHardWalk, LongestFirstOrderCoversEveryBlockOnceLongestFirst) {
  const std::vector<int32_t> r = test::random_ints(4096, 77, 1 << 20);
  size_t next = 0;
  for (int K : {1, 2, 3, 8, 33, 64})
    for (int shape : {0, 1, 2, 3})
      for (int H : {1, 3, 12}) {
        // Tile counts: random 0 .. 20, some empty; one group holding everything; all empty;
        // all equal (the balanced case).
        std::vector<int> n(K);
        for (int g = 0; g < K; ++g) {
          const int x = r[next++ % r.size()];
          n[g] = shape == 0   ? (x % 4 == 0 ? 0 : x % 21)
                 : shape == 1 ? (g == K / 2 ? 37 : 0)
                 : shape == 2 ? 0
                              : 4;
        }
        int maxn = 0, total = 0;
        for (int x : n) maxn = std::max(maxn, x), total += x;
        auto tiles_from = [&](int L) {
          int64_t t = 0;
          for (int x : n) t += std::max(0, x - L);
          return t;
        };
        auto nth_group = [&](int level, int o) {
          for (int g = 0; g < K; ++g)
            if (n[g] > level && o-- == 0) return g;
          return -1;
        };
        std::vector<int> seen(size_t(K) * (maxn + 1) * H, 0);
        int prev_j = INT32_MAX, prev_g = -1;
        for (int64_t block = 0; block < int64_t(total + 3) * H; ++block) {
          const int64_t u = block / H;
          const int head = int(block - u * H);
          int grp = -1, j = -1;
          const bool ok = focus_hard::longest_first_tile(u, maxn, tiles_from, nth_group, &grp, &j);
          ASSERT_EQ(ok, u < total) << "K " << K << " shape " << shape << " block " << block;
          if (!ok) continue;
          ASSERT_TRUE(grp >= 0 && grp < K && j >= 0 && j < n[grp])
              << "K " << K << " shape " << shape << " u " << u << " -> group " << grp << " j " << j;
          ++seen[(size_t(grp) * (maxn + 1) + j) * H + head];
          if (head == 0) {
            ASSERT_TRUE(j < prev_j || (j == prev_j && grp > prev_g))
                << "K " << K << " shape " << shape << " u " << u << ": (" << grp << ", " << j
                << ") after (" << prev_g << ", " << prev_j << ")";
            prev_j = j, prev_g = grp;
          }
        }
        for (int g = 0; g < K; ++g)
          for (int j = 0; j <= maxn; ++j)
            for (int head = 0; head < H; ++head)
              ASSERT_EQ(seen[(size_t(g) * (maxn + 1) + j) * H + head], j < n[g] ? 1 : 0)
                  << "K " << K << " shape " << shape << " group " << g << " j " << j;
      }
}

// The list group pass's ring of key tiles (focus_hard_walk.h; focus_hard_wgmma.cu runs it),
// replayed for walks of 1 .. 24 tiles: one thread's cp.async groups in commit order, where
// cp.async.wait_group N leaves at most the newest N pending. After the wait at the top of
// iteration t, tile t's rows have landed, and so have the positions of the tile whose rows the
// iteration gathers (ring_rows_tile) and of tile t (its element test); a position slot or a K / V
// buffer is rewritten only after the last read of the tile it held (that tile's own iteration, so
// before this iteration's barrier), and still holds its tile when read.
TEST(FocusHardWalk, RingGroupsSlotsAndBuffers) {
  using namespace focus_hard;
  for (int n = 1; n <= 24; ++n) {
    SCOPED_TRACE(testing::Message() << "walk of " << n << " tiles");
    std::vector<std::vector<int>> group_pos, group_rows;  // per committed group, its tiles
    std::vector<bool> pos_landed(n, false), rows_landed(n, false);
    size_t landed = 0;
    auto land_until = [&](size_t end) {  // groups [landed, end) complete
      for (; landed < end; ++landed) {
        for (int u : group_pos[landed]) pos_landed[u] = true;
        for (int u : group_rows[landed]) rows_landed[u] = true;
      }
    };
    std::vector<int> slot(kRingPosSlots, -1), buf(kRingStages, -1);  // the tile each holds
    // Prologue: kRingStages - 1 groups, group k the rows of tile k (gathered with addresses from
    // the list, not the slots), group 0 also every prologue position; only group 0 waited for.
    for (int k = 0; k < kRingStages - 1; ++k) {
      group_pos.emplace_back();
      group_rows.emplace_back();
    }
    for (int u = 0; u < std::min(n, ring_prologue_pos_end(0)); ++u) {
      ASSERT_EQ(slot[u % kRingPosSlots], -1);
      slot[u % kRingPosSlots] = u;
      group_pos[0].push_back(u);
    }
    for (int u = 0; u < std::min(n, ring_prologue_rows_end(0)); ++u) {
      ASSERT_EQ(buf[u % kRingStages], -1);
      ASSERT_LT(u, kRingStages - 1);
      buf[u % kRingStages] = u;
      group_rows[u].push_back(u);
    }
    land_until(group_pos.size() - kRingPrologueWaitGroups);  // wait_group, then the barrier
    for (int t = 0; t < n; ++t) {
      if (group_pos.size() > size_t(kRingWaitGroups))
        land_until(group_pos.size() - kRingWaitGroups);
      ASSERT_TRUE(rows_landed[t]) << "iteration " << t << ": its tile's rows are in flight";
      ASSERT_TRUE(pos_landed[t]) << "iteration " << t << ": its tile's positions are in flight";
      const int tp = ring_pos_tile(t), tr = ring_rows_tile(t);
      group_pos.emplace_back();
      group_rows.emplace_back();
      if (tp < n) {
        const int prev = slot[tp % kRingPosSlots];
        ASSERT_LT(prev, t) << "iteration " << t << ": slot of tile " << tp << " still read";
        slot[tp % kRingPosSlots] = tp;
        group_pos.back().push_back(tp);
      }
      group_pos.emplace_back();
      group_rows.emplace_back();
      if (tr < n) {
        ASSERT_TRUE(pos_landed[tr])
            << "iteration " << t << ": gathers tile " << tr << " before its positions landed";
        ASSERT_EQ(slot[tr % kRingPosSlots], tr);
        const int prev = buf[tr % kRingStages];
        ASSERT_LT(prev, t) << "iteration " << t << ": buffer of tile " << tr << " still read";
        buf[tr % kRingStages] = tr;
        group_rows.back().push_back(tr);
      }
      ASSERT_EQ(slot[t % kRingPosSlots], t);  // the element test reads tile t's positions
      ASSERT_EQ(buf[t % kRingStages], t);     // the MMAs read tile t's rows
    }
  }
}

}  // namespace
}  // namespace attnlab
