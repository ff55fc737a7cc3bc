// The ordering of the deterministic wgmma Focus backward (kernels/focus/focus_wgmma_det.h),
// emulated on the CPU with the very functions the kernel calls: blocks started in ticket order
// (block_of_ticket: kv head fastest, then key tile, then batch row) onto a limited number of
// resident slots, each walking its tiles (first_tile / next_tile over the causal mask's
// query_tiles), adding into a tile only when the tile's turn counter reads turn_of(its key tile)
// and passing the turn one iteration later, as the kernel's thread 0 does. Checks that every
// launch completes (no block waits on one that cannot run), that each tile receives exactly the
// blocks whose range covers it, in ascending key-tile order, and that the descending walk keeps
// the blocks in step (the ascending one, which the fast form uses, would form a staircase). What
// it cannot see: the kernel's own code around the calls (tests/cuda:
// FocusWgmmaCuda.Deterministic*).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <vector>

#include "kernels/attention/visibility.h"
#include "kernels/focus/focus_wgmma_det.h"

namespace attnlab {
namespace {

using focus_det::BwdTile;

struct Launch {
  int T, kQ, n_head, n_kv_head, B;
};
constexpr int kBlockN = 128;  // keys per block (the kernel's kBwdKeys)

struct Block {
  int hk, n, b;
  TileRange tiles;
  BwdTile cur;
  int left;           // tiles still to add
  int64_t held = -1;  // the turn counter it holds (acquired, not yet passed)
};

struct Result {
  bool completed = false;
  int rounds = 0;        // rounds until the last block finished
  int longest = 0;       // the most tiles of one block
  bool ordered = false;  // every tile received its blocks in ascending key-tile order, all of them
};

// Rounds, as the kernel's thread 0 runs them: a block passes the turn it holds (the tile it added
// into in its previous iteration, or its last tile after the loop), then adds into its current
// tile if that tile's counter reads its turn, holding that turn until the next round. Blocks start
// in ticket order (block_of_ticket) as resident slots free up.
Result emulate(const Launch& L, int slots, bool descending) {
  const AttentionMask mask{};
  const int n_ktiles = (L.T + kBlockN - 1) / kBlockN, n_qtiles = (L.T + L.kQ - 1) / L.kQ;
  const int group = L.n_head / L.n_kv_head;
  std::vector<Block> grid;
  const unsigned n_blocks = unsigned(L.n_kv_head * n_ktiles * L.B);
  for (unsigned ticket = 0; ticket < n_blocks; ++ticket) {
    const focus_det::BlockCoord c =
        focus_det::block_of_ticket(ticket, unsigned(L.n_kv_head), unsigned(n_ktiles));
    const TileRange r = mask.query_tiles(c.n * kBlockN, kBlockN, L.kQ, L.T);
    grid.push_back({c.hk, c.n, c.b, r, focus_det::first_tile(c.hk * group, r, descending),
                    group * std::max(0, r.end - r.begin)});
  }
  std::vector<unsigned> turns(size_t(L.B) * L.n_head * n_qtiles, 0);
  std::map<int64_t, std::vector<int>> received;  // tile -> key tiles in the order they added
  Result res;
  for (const Block& blk : grid) res.longest = std::max(res.longest, blk.left);
  size_t next = 0;
  std::vector<size_t> resident;
  while (true) {
    while (int(resident.size()) < slots && next < grid.size()) resident.push_back(next++);
    if (resident.empty()) break;
    ++res.rounds;
    bool progressed = false;
    for (size_t i : resident) {  // the passes
      Block& blk = grid[i];
      if (blk.held >= 0) {
        ++turns[size_t(blk.held)];
        blk.held = -1;
        progressed = true;
      }
    }
    std::vector<size_t> still;
    for (size_t i : resident) {  // the waits
      Block& blk = grid[i];
      if (blk.left > 0) {
        const int64_t t = focus_det::turn_index(blk.b, blk.cur, L.n_head, n_qtiles);
        if (turns[size_t(t)] == focus_det::turn_of(blk.n)) {
          received[t].push_back(blk.n);
          blk.held = t;
          blk.cur = focus_det::next_tile(blk.cur, blk.tiles, descending);
          --blk.left;
          progressed = true;
        }
      }
      if (blk.left > 0 || blk.held >= 0) still.push_back(i);
    }
    resident = still;
    if (!progressed) return res;  // every resident block waits: deadlock
  }
  res.completed = true;
  res.ordered = true;
  for (int b = 0; b < L.B; ++b)
    for (int h = 0; h < L.n_head; ++h)
      for (int m = 0; m < n_qtiles; ++m) {
        std::vector<int> want;  // the key tiles whose query range covers m, ascending
        for (int n = 0; n < n_ktiles; ++n) {
          const TileRange r = mask.query_tiles(n * kBlockN, kBlockN, L.kQ, L.T);
          if (m >= r.begin && m < r.end) want.push_back(n);
        }
        const int64_t t = focus_det::turn_index(b, BwdTile{h, m}, L.n_head, n_qtiles);
        if (received[t] != want) res.ordered = false;
      }
  return res;
}

const std::vector<Launch> kLaunches = {
    {1, 128, 4, 4, 1},   {127, 128, 2, 1, 2},    {129, 64, 4, 2, 2},   {1000, 128, 12, 12, 1},
    {1000, 64, 8, 2, 3}, {4096, 128, 12, 12, 1}, {4096, 64, 32, 8, 1}, {5000, 128, 4, 1, 2},
};

TEST(FocusWgmmaDet, EveryLaunchCompletesInKeyTileOrder) {
  for (const Launch& L : kLaunches)
    for (int slots : {1, 3, 132, 1 << 20}) {
      SCOPED_TRACE(testing::Message() << "T " << L.T << " kQ " << L.kQ << " heads " << L.n_head
                                      << "/" << L.n_kv_head << " B " << L.B << " slots " << slots);
      const Result r = emulate(L, slots, /*descending=*/true);
      EXPECT_TRUE(r.completed);
      EXPECT_TRUE(r.ordered);
    }
}

// All blocks resident: the descending walk finishes within the longest block's tiles plus one
// round per block of lower key tile it follows (the start-up lag), with GQA per head of the
// group; the ascending walk makes block n wait about n rounds at every head, far longer.
TEST(FocusWgmmaDet, DescendingWalkKeepsBlocksInStep) {
  for (const Launch& L : {Launch{4096, 128, 12, 12, 1}, Launch{4096, 64, 32, 8, 1}}) {
    SCOPED_TRACE(testing::Message() << "kQ " << L.kQ);
    const int n_ktiles = L.T / kBlockN, group = L.n_head / L.n_kv_head;
    const Result down = emulate(L, 1 << 20, true), up = emulate(L, 1 << 20, false);
    ASSERT_TRUE(down.completed && up.completed);
    std::printf(
        "  [focus det order] kQ %d: longest block %d tiles; rounds descending %d, "
        "ascending %d\n",
        L.kQ, down.longest, down.rounds, up.rounds);
    EXPECT_LE(down.rounds, down.longest + group * n_ktiles);
    EXPECT_GT(up.rounds, down.rounds + n_ktiles / 2);
  }
}

// The slices of dg_query (two where both warpgroups add into the same queries) and where the
// deterministic form exists (K <= 8, or no dg); tickets in the grid's linear order.
TEST(FocusWgmmaDet, SlicesAvailabilityAndTickets) {
  EXPECT_EQ(focus_det::dgq_slices(64), 2);
  EXPECT_EQ(focus_det::dgq_slices(128), 1);
  EXPECT_TRUE(focus_det::available(8, true));
  EXPECT_FALSE(focus_det::available(9, true));
  EXPECT_TRUE(focus_det::available(32, false));
  const focus_det::BlockCoord c = focus_det::block_of_ticket(3 * 5 * 2 + 4 * 3 + 2, 3, 5);
  EXPECT_EQ(c.hk, 2);
  EXPECT_EQ(c.n, 4);
  EXPECT_EQ(c.b, 2);
}

}  // namespace
}  // namespace attnlab
