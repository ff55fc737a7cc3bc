#include "dist/shard_map.h"

#include <algorithm>

#include "core/error.h"
#include "core/parameters.h"

namespace attnlab {

ZeroShardMap::ZeroShardMap(int64_t trainable_numel, int world, int rank, int64_t bucket_elems)
    : world_(world), rank_(rank) {
  ATTN_REQUIRE(world >= 1 && rank >= 0 && rank < world, "ZeroShardMap: rank %d of %d", rank, world);
  const int64_t unit = int64_t(world) * kParamAlignElements;
  ATTN_REQUIRE(trainable_numel % unit == 0,
               "ZeroShardMap: the trainable range (%lld elements) must be a multiple of %lld (%d "
               "ranks x 64: finalize the store with %d shards)",
               (long long)trainable_numel, (long long)unit, world, world);
  const int64_t b = std::max(unit, bucket_elems / unit * unit);
  for (int64_t at = 0; at < trainable_numel; at += b) {
    const Bucket k{at, std::min(b, trainable_numel - at)};
    const int64_t slice = k.numel / world;
    buckets_.push_back(k);
    pieces_.push_back(Piece{k.offset + rank * slice, shard_numel_, slice});
    shard_numel_ += slice;
  }
}

ZeroShardMap ZeroShardMap::whole(int64_t trainable_numel) {
  ZeroShardMap m;
  if (trainable_numel > 0) {
    m.buckets_.push_back(Bucket{0, trainable_numel});
    m.pieces_.push_back(Piece{0, 0, trainable_numel});
  }
  m.shard_numel_ = trainable_numel;
  return m;
}

}  // namespace attnlab
