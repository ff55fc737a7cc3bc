// ZeroShardMap: buckets cover the trainable range in order; each rank owns one equal, aligned
// slice of every bucket; the ranks' slices partition the range; bad arguments are refused.
#include <gtest/gtest.h>

#include <vector>

#include "core/parameters.h"
#include "dist/shard_map.h"
#include "test_util.h"

namespace attnlab {
namespace {

TEST(ZeroShardMap, SlicesOfEveryBucketPartitionTheRange) {
  for (int world : {1, 2, 3, 8}) {
    const int64_t unit = world * kParamAlignElements;
    const int64_t n = unit * 37;
    for (int64_t bucket : {int64_t(1), unit * 5 + 17, n, n * 4}) {
      std::vector<int> owner(size_t(n), -1);
      size_t num_buckets = 0;
      for (int r = 0; r < world; ++r) {
        const ZeroShardMap m(n, world, r, bucket);
        EXPECT_EQ(m.shard_numel() * world, n);
        ASSERT_EQ(m.pieces().size(), m.buckets().size());
        num_buckets = m.buckets().size();
        int64_t at = 0, local = 0;
        for (size_t k = 0; k < m.buckets().size(); ++k) {
          const auto& b = m.buckets()[k];
          const auto& p = m.pieces()[k];
          EXPECT_EQ(b.offset, at);
          EXPECT_EQ(b.numel % unit, 0);
          EXPECT_EQ(p.numel * world, b.numel);
          EXPECT_EQ(p.flat, b.offset + r * p.numel);
          EXPECT_EQ(p.flat % kParamAlignElements, 0);
          EXPECT_EQ(p.local, local);
          for (int64_t i = p.flat; i < p.flat + p.numel; ++i) {
            ASSERT_EQ(owner[size_t(i)], -1) << "element " << i << " owned twice";
            owner[size_t(i)] = r;
          }
          at += b.numel;
          local += p.numel;
        }
        EXPECT_EQ(at, n);
      }
      for (int64_t i = 0; i < n; ++i) ASSERT_GE(owner[size_t(i)], 0) << "element " << i;
      // Buckets: bucket_elems rounded down to a multiple of world x 64, at least one unit.
      const int64_t b = std::max(unit, bucket / unit * unit);
      EXPECT_EQ(num_buckets, size_t((n + b - 1) / b));
    }
  }
}

TEST(ZeroShardMap, WholeIsOnePieceAndBadArgumentsAreRefused) {
  const ZeroShardMap w = ZeroShardMap::whole(640);
  ASSERT_EQ(w.pieces().size(), 1u);
  EXPECT_EQ(w.pieces()[0].numel, 640);
  EXPECT_EQ(w.shard_numel(), 640);
  test::expect_error([] { ZeroShardMap(200, 2, 0, 1024); }, "must be a multiple of 128");
  test::expect_error([] { ZeroShardMap(256, 2, 2, 1024); }, "rank 2 of 2");
}

}  // namespace
}  // namespace attnlab
