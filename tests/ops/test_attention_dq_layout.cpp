// The dQ row layout of the wgmma attention backward (kernels/attention/dq_layout.h), checked on the
// CPU: a permutation of each row (the conversion kernel reads back what the kernel wrote, and the
// bulk reduction adds whole rows), and the shared-memory stores of the kernel's dQ fragments free
// of bank conflicts (each half-warp's 64-bit stores on 32 different banks), which the old layout
// (XOR with row % 8) was not. The fragment pattern is the one store_dq_tile writes.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <vector>

#include "kernels/attention/dq_layout.h"

namespace attnlab {
namespace {

// Shared-memory wavefronts of one warp's st.shared.v2.f32 of fragment (r, j) of a dQ tile
// [rows][D] (float offsets row * D + layout(row, col)): rows 64 qw + 16 warp + g + 8 r, columns
// 64 dw + 8 j + 2 tig (lane = 4 g + tig), served per half-warp; a half-warp needs as many
// wavefronts as the most requests any bank gets.
template <typename Layout>
int wavefronts(int D, int qw, int dw, int warp, int r, int j, Layout layout) {
  int total = 0;
  for (int half = 0; half < 2; ++half) {
    std::vector<std::set<int>> bank(32);
    for (int lane = 16 * half; lane < 16 * half + 16; ++lane) {
      const int g = lane >> 2, tig = lane & 3;
      const int row = 64 * qw + 16 * warp + g + 8 * r, col = 64 * dw + 8 * j + 2 * tig;
      for (int e = 0; e < 2; ++e) {
        const int word = row * D + layout(row, col + e);
        bank[word % 32].insert(word);
      }
    }
    size_t worst = 0;
    for (const auto& b : bank) worst = std::max(worst, b.size());
    total += int(worst);
  }
  return total;
}

// Wavefronts of all of one tile's fragment stores, per warp (both warpgroups' blocks: D = 64 tiles
// of 128 queries split by rows, D = 128 tiles of 64 queries split by columns).
template <typename Layout>
double wavefronts_per_warp(int D, Layout layout) {
  int total = 0, warps = 0;
  for (int wg = 0; wg < 2; ++wg) {
    const int qw = D == 64 ? wg : 0, dw = D == 64 ? 0 : wg;
    for (int warp = 0; warp < 4; ++warp, ++warps) {
      for (int r = 0; r < 2; ++r) {
        for (int j = 0; j < 8; ++j) total += wavefronts(D, qw, dw, warp, r, j, layout);
      }
    }
  }
  return double(total) / warps;
}

TEST(AttentionDqLayout, PermutesEachRow) {
  for (int D : {64, 128}) {
    for (int row = 0; row < 16; ++row) {
      std::vector<int> offs(size_t(D), 0);
      for (int col = 0; col < D; ++col) offs[size_t(col)] = dq_swizzle(row, col);
      std::sort(offs.begin(), offs.end());
      std::vector<int> want(static_cast<size_t>(D));
      std::iota(want.begin(), want.end(), 0);
      EXPECT_EQ(offs, want) << "D=" << D << " row=" << row;
      // The conversion kernel knows a row's tile-relative phase only as t % 8.
      for (int col = 0; col < D; ++col) EXPECT_EQ(dq_swizzle(row, col), dq_swizzle(row + 8, col));
    }
  }
}

TEST(AttentionDqLayout, FragmentStoresHaveNoBankConflicts) {
  const auto xor_row = [](int row, int col) { return (((col >> 2) ^ (row & 7)) << 2) | (col & 3); };
  for (int D : {64, 128}) {
    // 16 stores of 256 bytes per warp: 2 wavefronts each at best.
    EXPECT_EQ(wavefronts_per_warp(D, [](int row, int col) { return dq_swizzle(row, col); }), 32.0)
        << "D=" << D;
    EXPECT_EQ(wavefronts_per_warp(D, xor_row), 64.0) << "D=" << D << " (the old layout)";
  }
}

}  // namespace
}  // namespace attnlab
