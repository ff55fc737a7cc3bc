// The causal attention kernels' grid (kernels/common/causal_grid.h): (heads, tiles, batch), and
// the limit past which the kernels' *_supported checks send a call to the other kernels (grid y
// and z at most 65535), checked at its edges.
#include <gtest/gtest.h>

#include "kernels/common/causal_grid.h"

namespace attnlab {
namespace {

TEST(CausalGrid, HeadsFastestThenTilesThenBatch) {
  const dim3 g = causal_grid(12, 4097, 128, 3);
  EXPECT_EQ(g.x, 12u);
  EXPECT_EQ(g.y, 33u);  // ceil(4097 / 128)
  EXPECT_EQ(g.z, 3u);
  EXPECT_EQ(causal_grid(1, 1, 128, 1).y, 1u);
}

TEST(CausalGrid, FitsUpTo65535TilesAndSequences) {
  const int64_t max_t = int64_t(65535) * 128;
  EXPECT_TRUE(causal_grid_fits(max_t, 128, 65535));
  EXPECT_FALSE(causal_grid_fits(max_t + 1, 128, 1));  // 65536 tiles
  EXPECT_FALSE(causal_grid_fits(1024, 128, 65536));
  EXPECT_TRUE(causal_grid_fits(int64_t(65535) * 64, 64, 1));
  EXPECT_FALSE(causal_grid_fits(int64_t(65535) * 64 + 1, 64, 1));
  EXPECT_EQ(causal_grid(12, max_t, 128, 1).y, 65535u);
  EXPECT_THROW(causal_grid(12, max_t + 1, 128, 1), Error);
  EXPECT_THROW(causal_grid(12, 1024, 128, 65536), Error);
}

}  // namespace
}  // namespace attnlab
