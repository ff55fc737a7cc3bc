// ZeroShardMap: how the trainable range of a ParameterStore is cut into gradient buckets and, for
// ZeRO-1, which elements each rank owns (docs/distributed.md).
//
// The range [0, N) (N a multiple of world * 64: ParameterStore::finalize pads it so) is cut into
// buckets of bucket_elems rounded down to a multiple of world * 64 (at least world * 64; the last
// bucket shorter, still a multiple). Each bucket is split into world equal slices; rank r owns
// slice r of every bucket. Its ZeRO-1 shard is the concatenation of those slices ("pieces"), so a
// bucket's gradients reduce with one reduce-scatter as soon as they are final (during the
// backward), and the updated weights come back with one all-gather per bucket. Every rank owns
// N / world elements. Optimizer state in checkpoints is always the whole range in flat order, so
// files do not depend on this map (nor on the number of ranks).
#pragma once
#include <cstdint>
#include <vector>

namespace attnlab {

class ZeroShardMap {
 public:
  struct Bucket {
    int64_t offset = 0, numel = 0;  // elements of the flat range
  };
  struct Piece {
    int64_t flat = 0;   // first element in the flat range
    int64_t local = 0;  // first element in the rank's shard (its optimizer state)
    int64_t numel = 0;
  };
  ZeroShardMap() = default;
  // Throws unless N is a multiple of world * 64 and 0 <= rank < world.
  ZeroShardMap(int64_t trainable_numel, int world, int rank, int64_t bucket_elems);

  int world() const { return world_; }
  int rank() const { return rank_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }  // ascending offsets
  // Rank `rank`'s slice of each bucket (pieces()[k] lies in buckets()[k]).
  const std::vector<Piece>& pieces() const { return pieces_; }
  int64_t shard_numel() const { return shard_numel_; }  // N / world
  // Every rank owning everything: one piece [0, N) (no ZeRO-1, or one rank).
  static ZeroShardMap whole(int64_t trainable_numel);

 private:
  int world_ = 1, rank_ = 0;
  std::vector<Bucket> buckets_;
  std::vector<Piece> pieces_;
  int64_t shard_numel_ = 0;
};

}  // namespace attnlab
