// AttentionMask (kernels/attention/visibility.h), the one definition of which keys a query sees,
// against brute force over every (query, key) pair: the element predicates, the per-row and
// per-column bounds, the masked-tile bounds, and the tile functions the kernels loop with, at
// the edges (T not a multiple of the tile, windows shorter and longer than a tile, T = 1).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "kernels/attention/visibility.h"

namespace attnlab {
namespace {

// The definition, written out: key s visible from query t in a sequence of T.
bool brute_visible(const AttentionMask& m, int t, int s, int T) {
  if (s < 0 || t < 0 || s >= T || t >= T) return false;
  if (m.causal && s > t) return false;
  return m.window == 0 || s > t - m.window;
}

// Some pair of queries [q0, q1) x keys [k0, k1) visible.
bool any_visible(const AttentionMask& m, int q0, int q1, int k0, int k1, int T) {
  for (int t = q0; t < q1; ++t)
    for (int s = k0; s < k1; ++s)
      if (brute_visible(m, t, s, T)) return true;
  return false;
}

std::string what(const AttentionMask& m, int T, int tile) {
  return "causal=" + std::to_string(m.causal) + " window=" + std::to_string(m.window) +
         " T=" + std::to_string(T) + " tile=" + std::to_string(tile);
}

TEST(AttentionVisibility, ElementsAndRowBoundsMatchBruteForce) {
  for (bool causal : {true, false}) {
    for (int window : {0, 1, 3, 8, 50}) {
      const AttentionMask m{causal, window};
      for (int T : {1, 2, 9, 33}) {
        for (int t = 0; t < T; ++t) {
          int first = T, last = -1;
          for (int s = 0; s < T; ++s) {
            const bool v = brute_visible(m, t, s, T);
            ASSERT_EQ(m.visible(t, s, T), v) << what(m, T, 0) << " t=" << t << " s=" << s;
            ASSERT_EQ(m.hidden(t, s, T), !v) << what(m, T, 0) << " t=" << t << " s=" << s;
            ASSERT_EQ(key_visible(t, s, T, causal, window), v);
            if (v) first = std::min(first, s), last = std::max(last, s);
          }
          EXPECT_EQ(m.first_key(t), first) << what(m, T, 0) << " t=" << t;
          EXPECT_EQ(m.key_end(t, T), last + 1) << what(m, T, 0) << " t=" << t;
        }
        for (int s = 0; s < T; ++s) {
          int first = T, last = -1;
          for (int t = 0; t < T; ++t) {
            if (brute_visible(m, t, s, T)) first = std::min(first, t), last = std::max(last, t);
          }
          EXPECT_EQ(m.first_query(s), first) << what(m, T, 0) << " s=" << s;
          EXPECT_EQ(m.query_end(s, T), last + 1) << what(m, T, 0) << " s=" << s;
        }
        // Past the end: nothing is visible.
        EXPECT_FALSE(m.visible(T, 0, T));
        EXPECT_FALSE(m.visible(0, T, T));
        EXPECT_TRUE(m.hidden(T - 1, T, T));
      }
    }
  }
}

// The bounds of a masked tile, relative to its first column: column offset c (0 .. tile - 1) is
// visible iff lo <= c <= hi, as the wgmma kernels test it.
TEST(AttentionVisibility, MaskedTileBoundsMatchBruteForce) {
  for (bool causal : {true, false}) {
    for (int window : {0, 1, 5, 64, 200}) {
      const AttentionMask m{causal, window};
      for (int T : {1, 100, 129}) {
        for (int tile : {16, 64}) {
          for (int base = 0; base < T; base += 7) {
            for (int row = 0; row < T; ++row) {
              int lo, hi;
              m.key_bounds(row, T, base, &lo, &hi);
              for (int c = 0; c < tile; ++c) {
                ASSERT_EQ(lo <= c && c <= hi, brute_visible(m, row, base + c, T))
                    << what(m, T, tile) << " query " << row << " keys from " << base << " +" << c;
              }
            }
            for (int key = 0; key < T + 3; ++key) {  // keys past T see no query
              int lo, hi;
              m.query_bounds(key, T, base, &lo, &hi);
              for (int c = 0; c < tile; ++c) {
                ASSERT_EQ(lo <= c && c <= hi, brute_visible(m, base + c, key, T))
                    << what(m, T, tile) << " key " << key << " queries from " << base << " +" << c;
              }
            }
          }
        }
      }
    }
  }
}

// The tile loops: key_tiles / query_tiles are exactly the tiles with a visible pair (a superset
// for a window without causality, which only the kernels accept: its query range starts at 0);
// tile_invisible and the needs-mask tests never skip or leave unmasked a tile that needs it.
TEST(AttentionVisibility, TileFunctionsMatchBruteForce) {
  for (bool causal : {true, false}) {
    for (int window : {0, 1, 7, 64, 100, 300}) {
      const AttentionMask m{causal, window};
      const bool exact = causal || window == 0;
      for (int T : {1, 5, 64, 100, 129, 200}) {
        for (int tile : {16, 64, 128}) {
          for (int rows : {tile, 2 * tile}) {
            const int n_tiles = (T + tile - 1) / tile;
            // Query blocks of `rows` against key tiles of `tile`.
            for (int q0 = 0; q0 < T; q0 += rows) {
              const TileRange r = m.key_tiles(q0, rows, tile, T);
              if (rows == tile) {  // the square-tile form the deterministic dQ kernel uses
                const TileRange sq = m.key_tiles_of_tile(q0 / tile, tile, T);
                EXPECT_TRUE(sq.begin == r.begin && sq.end == r.end)
                    << what(m, T, tile) << " " << q0;
              }
              const int q1 = std::min(q0 + rows, T);
              for (int n = 0; n < n_tiles; ++n) {
                const bool needed = any_visible(m, q0, q1, n * tile, (n + 1) * tile, T);
                const bool in = n >= r.begin && n < r.end;
                if (needed) {
                  EXPECT_TRUE(in) << what(m, T, tile) << " q0=" << q0 << " tile " << n;
                }
                if (exact) {
                  EXPECT_EQ(in, needed) << what(m, T, tile) << " q0=" << q0 << " " << n;
                }
                const int k0 = n * tile;
                // Skipping a whole tile is only allowed when nothing in it is visible.
                if (m.tile_invisible(q0, q0 + rows - 1, k0, k0 + tile - 1)) {
                  EXPECT_FALSE(needed) << what(m, T, tile) << " q0=" << q0 << " tile " << n;
                }
                // No element mask: every key < T and every pair of rows < T visible.
                bool all_keys = k0 + tile <= T, all = true;
                for (int t = q0; t < q1; ++t)
                  for (int s = k0; s < k0 + tile; ++s) all = all && brute_visible(m, t, s, T);
                if (!m.needs_key_mask(q0, rows, k0, tile, T)) {
                  EXPECT_TRUE(all_keys && all) << what(m, T, tile) << " q0=" << q0 << " " << n;
                }
                if (!m.needs_mask(q0, rows, k0, tile, T)) {
                  EXPECT_TRUE(q0 + rows <= T && all) << what(m, T, tile) << " q0=" << q0;
                }
              }
            }
            // Key blocks of `rows` against query tiles of `tile` (the backward's loop).
            for (int k0 = 0; k0 < T; k0 += rows) {
              const TileRange r = m.query_tiles(k0, rows, tile, T);
              const int k1 = std::min(k0 + rows, T);
              for (int n = 0; n < n_tiles; ++n) {
                const bool needed = any_visible(m, n * tile, (n + 1) * tile, k0, k1, T);
                const bool in = n >= r.begin && n < r.end;
                if (needed) {
                  EXPECT_TRUE(in) << what(m, T, tile) << " k0=" << k0 << " tile " << n;
                }
                if (exact) {
                  EXPECT_EQ(in, needed) << what(m, T, tile) << " k0=" << k0 << " " << n;
                }
              }
            }
          }
        }
      }
    }
  }
}

// A few ranges by hand, at the edges the kernels meet.
TEST(AttentionVisibility, TileRangesAtEdges) {
  const AttentionMask causal{true, 0};
  // T = 100 with 64-key tiles: 2 tiles, the second partial; the second query block sees both.
  EXPECT_EQ(causal.key_tiles(64, 64, 64, 100).begin, 0);
  EXPECT_EQ(causal.key_tiles(64, 64, 64, 100).end, 2);
  EXPECT_EQ(causal.key_tiles(0, 64, 64, 100).end, 1);
  // A 128-row block over 64-key tiles, clipped at T.
  EXPECT_EQ(causal.key_tiles(0, 128, 64, 100).end, 2);
  // Window shorter than a tile: the block at 128 starts at the tile of key 128 - 10 + 1 = 119.
  const AttentionMask w10{true, 10};
  EXPECT_EQ(w10.key_tiles(128, 64, 64, 300).begin, 1);
  EXPECT_EQ(w10.key_tiles(128, 64, 64, 300).end, 3);
  EXPECT_EQ(w10.key_tiles(64, 64, 64, 300).begin, 0);
  // Window longer than T: the same as full causal.
  const AttentionMask w500{true, 500};
  EXPECT_EQ(w500.key_tiles(128, 64, 64, 300).begin, 0);
  // Query tiles of a key block: from its diagonal to the window's end, clipped at T.
  EXPECT_EQ(w10.query_tiles(64, 64, 64, 300).begin, 1);
  EXPECT_EQ(w10.query_tiles(64, 64, 64, 300).end, 3);  // queries up to 64 + 63 + 9 = 136
  EXPECT_EQ(causal.query_tiles(64, 64, 64, 100).end, 2);
  EXPECT_EQ(w10.query_tiles(256, 64, 64, 300).end, 5);  // clipped at T = 300: 5 tiles
  // T = 1: one tile, one element, needing a mask only for the part past T.
  EXPECT_EQ(causal.key_tiles(0, 128, 128, 1).end, 1);
  EXPECT_TRUE(causal.needs_key_mask(0, 128, 0, 128, 1));
  // A tile entirely below the diagonal and inside the window needs no mask.
  EXPECT_FALSE(w500.needs_mask(128, 64, 0, 64, 300));
  EXPECT_TRUE(w10.needs_mask(128, 64, 64, 64, 300));  // keys 64..127 fall out of the window
  EXPECT_TRUE(w10.tile_invisible(128, 191, 0, 63));   // all before the window of query 128
}

}  // namespace
}  // namespace attnlab
