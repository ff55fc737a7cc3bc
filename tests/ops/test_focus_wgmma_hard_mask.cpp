// The hard mask of the masked wgmma forward (FocusHardKernel::wgmma_masked; focus_wgmma_layout.h,
// mask_acc_hard and mask_acc_hard_all) on the CPU, every lane of a warpgroup's tile emulated: the
// affinity of two tokens' group indicators (kAffinityScale in each of its top_k groups, as
// split_groups writes them; fp16, products summed in fp32 as the wgmma does) counts their shared
// groups exactly, and the mask keeps a pair iff it is causal-local (i - j <= w) or shares a group.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/focus/focus_wgmma_layout.h"

namespace attnlab {
namespace {

using namespace focus_wgmma;

// Tokens' group sets: top_k ids in [0, K) (a token may name a group twice), as an indicator.
std::vector<std::vector<int>> random_indicators(int n, int K, int top_k, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> pick(0, K - 1);
  std::vector<std::vector<int>> ind(n, std::vector<int>(kHardFwdMaxGroups, 0));
  for (auto& row : ind)
    for (int z = 0; z < top_k; ++z) row[pick(gen)] = 1;
  return ind;
}

// The tile's affinity as the kernel computes it: fp16(kAffinityScale x indicator) per operand
// (exact: 4096 is a power of two), products summed in fp32.
float affinity(const std::vector<int>& a, const std::vector<int>& b) {
  float acc = 0.f;
  for (int c = 0; c < kHardFwdMaxGroups; ++c)
    acc += (a[c] * kAffinityScale) * (b[c] * kAffinityScale);
  return acc;
}

// One warpgroup's 64 x N tile (rows wq0.., columns k0..), every lane: mask_acc_hard (and, on an
// all-distant tile, mask_acc_hard_all) against the direct rule.
template <int N>
void check_tile(int wq0, int k0, int w, int K, int top_k, uint32_t seed) {
  const auto ind = random_indicators(k0 + N > wq0 + 64 ? k0 + N : wq0 + 64, K, top_k, seed);
  for (int warp = 0; warp < 4; ++warp)
    for (int lane = 0; lane < 32; ++lane) {
      const int row0 = wq0 + 16 * warp + lane / 4, col0 = k0 + 2 * (lane % 4);
      float s[N / 2], s_all[N / 2], a[N / 2];
      for (int i = 0; i < N / 2; ++i) {
        const int row = row0 + 8 * ((i >> 1) & 1), col = col0 + 8 * (i >> 2) + (i & 1);
        a[i] = affinity(ind[row], ind[col]);
        s[i] = s_all[i] = 0.25f * float((i * 7 + lane) % 13) - 1.f;
      }
      mask_acc_hard(s, a, row0, col0, w);
      for (int i = 0; i < N / 2; ++i) {
        const int row = row0 + 8 * ((i >> 1) & 1), col = col0 + 8 * (i >> 2) + (i & 1);
        bool share = false;
        for (int c = 0; c < kHardFwdMaxGroups; ++c) share = share || (ind[row][c] && ind[col][c]);
        const bool kept = row - col <= w || share;
        ASSERT_EQ(std::isinf(s[i]), !kept) << "row " << row << " col " << col << " w " << w;
        if (kept) {
          ASSERT_EQ(s[i], 0.25f * float((i * 7 + lane) % 13) - 1.f);
        }
      }
      if (tile_all_distant(wq0, k0 + N - 1, w)) {
        mask_acc_hard_all(s_all, a);
        for (int i = 0; i < N / 2; ++i) ASSERT_EQ(std::isinf(s_all[i]), std::isinf(s[i]));
      }
    }
}

TEST(FocusWgmmaHardMask, KeepsLocalAndSharedPairsOnly) {
  for (int K : {1, 2, 8})
    for (int top_k : {1, 2, 3}) {
      if (top_k > K) continue;
      const uint32_t seed = 100u * K + top_k;
      check_tile<64>(512, 0, 128, K, top_k, seed);   // every pair distant
      check_tile<64>(192, 128, 40, K, top_k, seed);  // the window cuts the tile
      check_tile<128>(128, 0, 0, K, top_k, seed);    // w = 0 at the diagonal
      check_tile<64>(64, 0, 1000, K, top_k, seed);   // nothing distant: nothing masked
    }
}

// A pair sharing two groups counts once: its affinity is 2 (kept), one group 1 (kept), none 0.
TEST(FocusWgmmaHardMask, SharedCountIsExactAndTheThresholdBetweenZeroAndOne) {
  std::vector<int> a(kHardFwdMaxGroups, 0), b(kHardFwdMaxGroups, 0);
  a[1] = a[5] = 1;
  b[5] = 1;
  EXPECT_EQ(affinity(a, b) * kAffinityUnscale, 1.f);
  b[1] = 1;
  EXPECT_EQ(affinity(a, b) * kAffinityUnscale, 2.f);
  b[1] = b[5] = 0;
  b[7] = 1;
  EXPECT_EQ(affinity(a, b) * kAffinityUnscale, 0.f);
  float s[4] = {1.f, 1.f, 1.f, 1.f}, x[4] = {0.f, 0.f, 0.f, 0.f};
  x[1] = 1.f / kAffinityUnscale, x[2] = 2.f / kAffinityUnscale;
  mask_acc_hard_all(s, x);
  EXPECT_TRUE(std::isinf(s[0]) && s[1] == 1.f && s[2] == 1.f && std::isinf(s[3]));
}

}  // namespace
}  // namespace attnlab
