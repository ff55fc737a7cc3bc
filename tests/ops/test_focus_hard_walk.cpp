// The counting rule and tile walk of the hard-routed Focus kernel (kernels/focus/focus_hard_walk.h,
// the functions the kernel runs), replayed on the CPU for every block of a launch: every pair the
// mask attends (j <= i and (i - j <= w or a shared group)) must be taken exactly once over all the
// passes, and no other pair ever. The group lists are built here the way the index kernels define
// them (stable by position, each distinct valid group once).
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <vector>

#include "kernels/focus/focus_hard_walk.h"
#include "test_util.h"

namespace attnlab {
namespace {

constexpr int kTile = kFocusHardTile;  // keys per tile

struct WalkCase {
  int T, K, top_k, w, rows;  // rows: queries per block (tile_rows)
  int kind;  // 0 random, 1 unbalanced (90% in group 0), 2 with duplicate and out-of-range ids
};

// The case's groups [T, top_k]: distinct valid ids per token (what focus_route_topk writes), kind
// 1 with 90% of slot 0 in group 0, kind 2 with duplicate and out-of-range ids.
std::vector<int32_t> make_groups(const WalkCase& c) {
  const int T = c.T, K = c.K, tk = c.top_k;
  std::vector<int32_t> groups(size_t(T) * tk);
  const std::vector<int32_t> r =
      test::random_ints(groups.size() * 2, uint32_t(T * 13 + K), 1 << 20);
  for (int t = 0; t < T; ++t) {
    // Distinct groups per token (what focus_route_topk writes) unless kind 2.
    std::vector<bool> used(K, false);
    for (int s = 0; s < tk; ++s) {
      int x = r[size_t(t) * tk + s] % K;
      if (c.kind == 1 && s == 0 && r[groups.size() + t] % 10 < 9) x = 0;
      if (c.kind == 2) {
        const int y = r[groups.size() + size_t(t) * tk + s] % 8;
        groups[size_t(t) * tk + s] = y == 0 ? -1 : y == 1 ? K : x;  // duplicates allowed
        continue;
      }
      while (used[x]) x = (x + 1) % K;
      used[x] = true;
      groups[size_t(t) * tk + s] = x;
    }
  }
  return groups;
}

std::vector<uint64_t> make_masks(const std::vector<int32_t>& groups, int T, int K, int tk) {
  std::vector<uint64_t> mask(T, 0);
  for (int t = 0; t < T; ++t)
    for (int s = 0; s < tk; ++s) {
      const int x = groups[size_t(t) * tk + s];
      if (x >= 0 && x < K) mask[t] |= uint64_t(1) << x;
    }
  return mask;
}

void replay(const WalkCase& c) {
  SCOPED_TRACE(testing::Message() << "T " << c.T << " K " << c.K << " top_k " << c.top_k << " w "
                                  << c.w << " kind " << c.kind << " rows " << c.rows);
  const int T = c.T, K = c.K, tk = c.top_k, w = c.w;
  const std::vector<int32_t> groups = make_groups(c);
  const std::vector<uint64_t> mask = make_masks(groups, T, K, tk);
  std::vector<uint8_t> taken(size_t(T) * T, 0);
  int blocks = 0;
  for (int g = 0; g < K; ++g) {
    std::vector<int> list;
    for (int t = 0; t < T; ++t)
      if ((mask[t] >> g) & 1) list.push_back(t);
    const int count = int(list.size());
    const int rows = c.rows;
    for (int q_first = 0; q_first < count; q_first += rows, ++blocks) {
      int qpos[128], qslot[128], qfirst[128];
      uint64_t qlow[128];
      for (int r = 0; r < rows; ++r) {
        qpos[r] = q_first + r < count ? list[q_first + r] : -1;
        qslot[r] = 0;
        qlow[r] = 0;
        if (qpos[r] >= 0)
          qslot[r] = focus_hard::slot_of(groups.data() + size_t(qpos[r]) * tk, tk, g, K, &qlow[r]);
        ASSERT_LT(qslot[r], tk);
        qfirst[r] = qlow[r] == 0;
      }
      const int nq = count - q_first < rows ? count - q_first : rows;
      const int n_group_tiles = (q_first + nq + kTile - 1) / kTile;
      auto take = [&](int i, int j) {
        ASSERT_TRUE(i >= 0 && i < T && j >= 0 && j < T);
        ++taken[size_t(i) * T + j];
      };
      // The warps' shortcuts (rows / 4 rows each, as in the kernel), checked against the pairs
      // the rows take: an invisible tile takes none, an unmasked one all.
      struct Warp {
        int begin, end, lo, hi;
        bool all_first, any_first;
      };
      std::vector<Warp> warps;
      for (int wr = 0; wr < nq; wr += rows / 4) {
        Warp wp{wr, std::min(wr + rows / 4, nq), qpos[wr], 0, true, false};
        wp.hi = qpos[wp.end - 1];
        for (int r = wr; r < wr + rows / 4; ++r) {
          wp.all_first = wp.all_first && qfirst[r];
          wp.any_first = wp.any_first || (qfirst[r] && qpos[r] >= 0);
        }
        warps.push_back(wp);
      }
      for (int kt = 0; kt < n_group_tiles; ++kt) {
        int kp[kTile];
        for (int col = 0; col < kTile; ++col)
          kp[col] = kt * kTile + col < count ? list[kt * kTile + col] : -1;
        for (const Warp& wp : warps) {
          const bool visible = focus_hard::group_tile_visible(kp[0], wp.hi);
          const bool unmasked = focus_hard::group_tile_unmasked(kp[kTile - 1], wp.lo, wp.all_first);
          for (int col = 0; col < kTile; ++col)
            for (int r = wp.begin; r < wp.end; ++r) {
              const bool t = focus_hard::take_group_key(qpos[r], kp[col],
                                                        kp[col] >= 0 ? mask[kp[col]] : 0, qlow[r]);
              ASSERT_TRUE(visible || !t) << "group tile " << kt << " skipped by a warp that takes";
              ASSERT_TRUE(!unmasked || t) << "group tile " << kt << " unmasked, but a pair is not";
              if (t) take(qpos[r], kp[col]);
            }
        }
      }
      int prev = -1;
      for (int lt = focus_hard::next_local_tile(qpos, qfirst, rows, 0, w); lt >= 0;
           lt = focus_hard::next_local_tile(qpos, qfirst, rows, lt + 1, w)) {
        ASSERT_GT(lt, prev);
        prev = lt;
        for (const Warp& wp : warps) {
          const bool visible =
              focus_hard::local_tile_visible(lt * kTile, wp.lo, wp.hi, w, wp.any_first);
          for (int col = 0; col < kTile; ++col) {
            const int j = lt * kTile + col < T ? lt * kTile + col : -1;
            for (int r = wp.begin; r < wp.end; ++r) {
              const bool t = focus_hard::take_local_key(qpos[r], j, w, qfirst[r] != 0,
                                                        j >= 0 ? mask[j] : 0, mask[qpos[r]]);
              ASSERT_TRUE(visible || !t) << "local tile " << lt << " skipped by a warp that takes";
              if (t) take(qpos[r], j);
            }
          }
        }
      }
    }
  }
  EXPECT_LE(blocks, focus_hard_max_tiles(T, K, tk, c.rows));
  int64_t wrong = 0;
  for (int i = 0; i < T; ++i)
    for (int j = 0; j < T; ++j) {
      const bool attended = j <= i && (i - j <= w || (mask[i] & mask[j]) != 0);
      // A token without a valid group is in no list: its row is not computed (documented).
      if (mask[i] == 0) continue;
      wrong += taken[size_t(i) * T + j] != (attended ? 1 : 0);
    }
  EXPECT_EQ(wrong, 0);
}

// The wgmma kernel's split schedule (focus_hard_wgmma.cu): group passes over blocks of
// kFocusHardWgmmaRows list entries in tiles of bn entries, with the per-warpgroup (64 rows)
// shortcuts, taking only take_group_key pairs on the rows' group_bound (the window partition:
// distant pairs); then the band in token order, blocks of kFocusHardWgmmaRows tokens, tiles
// band_tiles / band_tile_visible, take_window_key. With the sorted group pass, the other
// partition: the group pass takes every shared pair, the band take_local_key with first = true.
// Every attended pair exactly once, nothing else.
// The sorted group pass of top_k 1 (focus_hard_sorted.cu), replayed: blocks of
// kFocusHardWgmmaRows entries of the group-sorted order (all groups in one sequence, n entries),
// warpgroups of 64 rows, tiles of bn entries from sorted_tiles, the shortcuts sorted_tile_visible
// / sorted_tile_unmasked, sorted_take on the other tiles. Taken pairs go to take(i, j) as
// positions.
template <typename Take>
void replay_sorted_group(const std::vector<uint64_t>& mask, int T, int K, int bn, Take take) {
  const int rows = kFocusHardWgmmaRows;
  std::vector<int> list, offs(K + 1, 0);
  for (int g = 0; g < K; ++g) {
    offs[g] = int(list.size());
    for (int t = 0; t < T; ++t)
      if ((mask[t] >> g) & 1) list.push_back(t);
  }
  const int n = int(list.size());
  offs[K] = n;
  auto seg_lo = [&](int e) {
    int g = 0;
    while (offs[g + 1] <= e) ++g;
    return offs[g];
  };
  for (int q0 = 0; q0 < n; q0 += rows) {
    int begin, end;
    focus_hard::sorted_tiles(q0, rows, n, seg_lo(q0), bn, &begin, &end);
    for (int wq0 = q0; wq0 < q0 + rows; wq0 += 64) {  // warpgroups
      const int hi = std::min(wq0 + 63, n - 1);
      const int lo = wq0 < n ? seg_lo(wq0) : 0, cut = wq0 < n ? seg_lo(hi) : 0;
      for (int kt = 0; kt * bn < n; ++kt) {
        const int k0 = kt * bn;
        const bool walked = kt >= begin && kt < end;
        const bool visible = walked && focus_hard::sorted_tile_visible(k0, bn, lo, wq0, hi);
        const bool unmasked = focus_hard::sorted_tile_unmasked(k0, bn, wq0, cut);
        for (int e = wq0; e <= hi; ++e)
          for (int j = k0; j < k0 + bn && j < n; ++j) {
            const bool t = focus_hard::sorted_take(e, j, seg_lo(e));
            ASSERT_TRUE(visible || !t) << "sorted tile " << kt << " skipped, but a pair is taken";
            ASSERT_TRUE(!visible || !unmasked || t)
                << "sorted tile " << kt << " unmasked, but a pair is not taken";
            if (visible && (unmasked || t)) take(list[e], list[j]);
          }
      }
    }
  }
}

// The split schedule with the sorted group pass (top_k 1) when `sorted`, else the list group pass.
void replay_split(const WalkCase& c, int bn, int band_bn, bool sorted = false) {
  SCOPED_TRACE(testing::Message() << "split: T " << c.T << " K " << c.K << " top_k " << c.top_k
                                  << " w " << c.w << " kind " << c.kind << " bn " << bn
                                  << " band bn " << band_bn << " sorted " << sorted);
  const int T = c.T, K = c.K, tk = c.top_k, w = c.w, rows = kFocusHardWgmmaRows;
  const bool window = !sorted;  // the list group pass's partition
  const std::vector<int32_t> groups = make_groups(c);
  const std::vector<uint64_t> mask = make_masks(groups, T, K, tk);
  std::vector<uint8_t> taken(size_t(T) * T, 0);
  auto take = [&](int i, int j) {
    ASSERT_TRUE(i >= 0 && i < T && j >= 0 && j < T);
    ++taken[size_t(i) * T + j];
  };
  // The slots the group passes write their partials at (the band pass's merge must read exactly
  // those).
  std::vector<std::vector<int>> written(static_cast<size_t>(T));
  if (sorted) replay_sorted_group(mask, T, K, bn, take);
  for (int g = 0; g < K && !sorted; ++g) {
    std::vector<int> list;
    for (int t = 0; t < T; ++t)
      if ((mask[t] >> g) & 1) list.push_back(t);
    const int count = int(list.size());
    for (int q0 = 0; q0 < count; q0 += rows) {
      const int nq = std::min(rows, count - q0), n_tiles = (q0 + nq + bn - 1) / bn;
      std::vector<int> qpos(rows, -1), qbound(rows, -1);
      std::vector<uint64_t> qlow(rows, 0);
      for (int r = 0; r < nq; ++r) {
        qpos[r] = list[q0 + r];
        qbound[r] = focus_hard::group_bound(qpos[r], w, window);
        const int slot =
            focus_hard::slot_of(groups.data() + size_t(qpos[r]) * tk, tk, g, K, &qlow[r]);
        ASSERT_LT(slot, tk);
        written[size_t(qpos[r])].push_back(slot);
      }
      for (int wr = 0; wr < rows; wr += 64) {  // warpgroups
        const int lo = wr < nq ? qbound[wr] : 0,
                  hi = wr < nq ? qbound[std::min(wr + 63, nq - 1)] : -1;
        bool all_first = true;
        for (int r = wr; r < wr + 64; ++r) all_first = all_first && qlow[r] == 0;
        for (int kt = 0; kt < n_tiles; ++kt) {
          std::vector<int> kp(bn);
          for (int col = 0; col < bn; ++col)
            kp[col] = kt * bn + col < count ? list[kt * bn + col] : -1;
          const bool visible = focus_hard::group_tile_visible(kp[0], hi);
          const bool unmasked = focus_hard::group_tile_unmasked(kp[bn - 1], lo, all_first);
          for (int r = wr; r < wr + 64 && r < nq; ++r)
            for (int col = 0; col < bn; ++col) {
              const bool t = focus_hard::take_group_key(qbound[r], kp[col],
                                                        kp[col] >= 0 ? mask[kp[col]] : 0, qlow[r]);
              ASSERT_TRUE(visible || !t) << "group tile " << kt << " skipped, but a pair is taken";
              ASSERT_TRUE(!unmasked || t) << "group tile " << kt << " unmasked, but a pair is not";
              if (visible && t) take(qpos[r], kp[col]);
            }
        }
      }
    }
  }
  for (int q0 = 0; q0 < T; q0 += rows) {
    int begin, end;
    focus_hard::band_tiles(q0, rows, T, w, band_bn, window, &begin, &end);
    for (int wr = 0; wr < rows; wr += 64) {
      const int lo = q0 + wr, hi = std::min(q0 + wr + 63, T - 1);
      for (int kt = 0; kt < T / band_bn + 1; ++kt) {
        const bool walked = kt >= begin && kt < end;
        const bool visible =
            walked && focus_hard::band_tile_visible(kt * band_bn, band_bn, lo, hi, w);
        for (int i = lo; i <= hi; ++i) {
          if (mask[i] == 0) continue;  // no valid group: no output row
          for (int j = kt * band_bn; j < kt * band_bn + band_bn && j < T; ++j) {
            const bool t = window ? focus_hard::take_window_key(i, j, w)
                                  : focus_hard::take_local_key(i, j, w, true, mask[j], mask[i]);
            ASSERT_TRUE(visible || !t) << "band tile " << kt << " not walked, but a pair is taken";
            if (t) take(i, j);
          }
        }
      }
    }
  }
  int64_t wrong = 0;
  for (int i = 0; i < T; ++i)
    for (int j = 0; j < T; ++j) {
      if (mask[i] == 0) continue;
      const bool attended = j <= i && (i - j <= w || (mask[i] & mask[j]) != 0);
      wrong += taken[size_t(i) * T + j] != (attended ? 1 : 0);
    }
  EXPECT_EQ(wrong, 0);
  for (int i = 0; i < T && !sorted; ++i) {
    const int32_t* row = groups.data() + size_t(i) * tk;
    // The band pass's merge (focus_hard_band.cu) reads the group partials of the slots
    // reads_partial_slot picks: those written, each once.
    std::vector<int> read;
    uint64_t seen = 0;
    for (int sl = 0; sl < tk; ++sl) {
      if (focus_hard::reads_partial_slot(row, K, sl, &seen)) read.push_back(sl);
    }
    std::vector<int> wrote = written[size_t(i)];
    std::sort(wrote.begin(), wrote.end());
    ASSERT_EQ(read, wrote) << "token " << i << ": the merge reads other slots than were written";
  }
}

// Also: the band pass's merge reads the group partials that were written.
TEST(FocusHardWalk, WgmmaSplitTakesEveryAttendedPairOnce) {
  for (int T : {1, 127, 129, 1000})
    for (int K : {1, 4, 8, 64})
      for (int tk : {1, 2, 3})
        for (int w : {0, 37, 128, 5000})
          for (int kind : {0, 1, 2}) {
            if (tk > K || (K == 64 && T < 1000) || (kind == 1 && K == 1)) continue;
            // The kernels' tiles: list group pass 64, band kFocusHardTmaKeys (and other sizes).
            replay_split({T, K, tk, w, kFocusHardWgmmaRows, kind}, 64, kFocusHardTmaKeys);
            if (T == 1000 && w == 128) {
              replay_split({T, K, tk, w, kFocusHardWgmmaRows, kind}, 128, 64);
            }
          }
  // Tile edges: windows and lengths at the 64- and 128-key tiles' boundaries.
  for (int T : {64, 128, 256, 257})
    for (int w : {1, 63, 64, 127, 129, T - 1, T})
      for (int tk : {1, 2})
        replay_split({T, 8, tk, w, kFocusHardWgmmaRows, 0}, 64, kFocusHardTmaKeys);
  // No overflow of the band test or of group_bound.
  replay_split({1000, 8, 2, 1 << 30, kFocusHardWgmmaRows, 0}, 64, kFocusHardTmaKeys);
  replay_split({300, 8, 2, INT_MAX, kFocusHardWgmmaRows, 0}, 64, kFocusHardTmaKeys);
}

// The warp-specialised fused launch (focus_hard_ws.cu; top_k 1, the window partition): band items
// of `rows` tokens walking every key tile (bn keys) of band_tiles with the window mask, group items
// of `rows` entries of a group's list walking every tile of bn entries up to the item's last query
// (entries past it loaded as no key), each tile computed whole under take_group_key on
// group_bound (the kernel skips no tile: the mask alone decides). Every attended pair exactly
// once, nothing else; each token with a valid group is a row of exactly one group item (the one
// that merges its band partial and writes its output).
void replay_ws(const WalkCase& c, int rows, int bn) {
  SCOPED_TRACE(testing::Message() << "warp-specialised: T " << c.T << " K " << c.K << " w " << c.w
                                  << " kind " << c.kind << " rows " << rows << " bn " << bn);
  const int T = c.T, K = c.K, w = std::min(c.w, c.T);
  ASSERT_EQ(c.top_k, 1);
  const std::vector<int32_t> groups = make_groups(c);
  const std::vector<uint64_t> mask = make_masks(groups, T, K, 1);
  std::vector<uint8_t> taken(size_t(T) * T, 0), rows_of(static_cast<size_t>(T), 0);
  for (int g = 0; g < K; ++g) {
    std::vector<int> list;
    for (int t = 0; t < T; ++t)
      if ((mask[t] >> g) & 1) list.push_back(t);
    const int count = int(list.size());
    for (int q0 = 0; q0 < count; q0 += rows) {
      const int nq = std::min(rows, count - q0), t_end = (q0 + nq + bn - 1) / bn;
      for (int r = 0; r < nq; ++r) {
        const int i = list[q0 + r], bound = focus_hard::group_bound(i, w, true);
        ++rows_of[size_t(i)];
        for (int e = 0; e < t_end * bn; ++e) {
          const int j = e < q0 + nq ? list[e] : -1;
          if (focus_hard::take_group_key(bound, j, 0, 0)) ++taken[size_t(i) * T + j];
        }
      }
    }
  }
  for (int q0 = 0; q0 < T; q0 += rows) {
    int begin, end;
    focus_hard::band_tiles(q0, rows, T, w, bn, true, &begin, &end);
    for (int i = q0; i < std::min(q0 + rows, T); ++i)
      for (int j = begin * bn; j < end * bn && j < T; ++j)
        if (focus_hard::take_window_key(i, j, w)) ++taken[size_t(i) * T + j];
  }
  int64_t wrong = 0;
  for (int i = 0; i < T; ++i) {
    if (mask[i] == 0) {  // no valid group: no group item, no output row
      EXPECT_EQ(rows_of[size_t(i)], 0);
      continue;
    }
    EXPECT_EQ(rows_of[size_t(i)], 1) << "token " << i;
    for (int j = 0; j < T; ++j) {
      const bool attended = j <= i && (i - j <= w || (mask[i] & mask[j]) != 0);
      wrong += taken[size_t(i) * T + j] != (attended ? 1 : 0);
    }
  }
  EXPECT_EQ(wrong, 0);
}

TEST(FocusHardWalk, WarpSpecialisedTakesEveryAttendedPairOnce) {
  for (int T : {1, 63, 64, 65, 127, 128, 129, 257, 1000})
    for (int K : {1, 4, 8, 64})
      for (int w : {0, 1, 37, 63, 64, 127, 128, 129, 5000})
        for (int kind : {0, 1, 2}) {
          if (kind == 1 && K == 1) continue;
          replay_ws({T, K, 1, w, kFocusHardWgmmaRows, kind}, kFocusHardWgmmaRows, 128);
        }
  replay_ws({1000, 8, 1, INT_MAX, kFocusHardWgmmaRows, 0}, kFocusHardWgmmaRows, 128);
}

// top_k 1 with the sorted group pass (focus_hard_sorted.cu) and the band pass: every attended
// pair exactly once, nothing else (segments that start and end inside tiles, empty groups, tokens
// without a valid group, one group of all tokens).
TEST(FocusHardWalk, SortedSplitTakesEveryAttendedPairOnce) {
  for (int T : {1, 63, 127, 129, 1000, 3001})
    for (int K : {1, 4, 8, 64})
      for (int w : {0, 37, 128, 5000})
        for (int kind : {0, 1, 2}) {
          if ((K == 64 && T < 1000) || (kind == 1 && K == 1)) continue;
          replay_split({T, K, 1, w, kFocusHardWgmmaRows, kind}, kFocusHardTmaKeys,
                       kFocusHardTmaKeys, true);
          if (T == 1000 && w == 128) {
            replay_split({T, K, 1, w, kFocusHardWgmmaRows, kind}, 64, kFocusHardTmaKeys, true);
          }
        }
}

TEST(FocusHardWalk, EveryAttendedPairIsTakenExactlyOnce) {
  for (int T : {1, 127, 129, 1000})
    for (int K : {1, 4, 8, 64})
      for (int tk : {1, 2, 3})
        for (int w : {0, 37, 128, 5000})
          for (int kind : {0, 1, 2}) {
            if (tk > K || (K == 64 && T < 1000) || (kind == 1 && K == 1)) continue;
            for (int rows : {64, 128}) replay({T, K, tk, w, rows, kind});
          }
}

}  // namespace
}  // namespace attnlab
