#include "io/data_hash.h"

#include <bit>
#include <cstring>
#include <vector>

namespace attnlab::io {
namespace {

static_assert(std::endian::native == std::endian::little, "the hash reads little-endian words");
static_assert(DataHasher::kBlockBytes % 32 == 0, "a block holds whole stripes");

// Odd 64-bit constants (multiplication by them is a bijection mod 2^64).
constexpr uint64_t kP1 = 0x9E3779B97F4A7C15ull;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kP3 = 0x94D049BB133111EBull;

uint64_t load64(const unsigned char* p) {
  uint64_t w;
  std::memcpy(&w, p, 8);
  return w;
}

uint64_t step(uint64_t lane, uint64_t word) { return std::rotl((lane ^ word) * kP1, 31) * kP2; }

// A bijective mix of all 64 bits.
uint64_t avalanche(uint64_t h) {
  h ^= h >> 31;
  h *= kP3;
  h ^= h >> 29;
  h *= kP1;
  h ^= h >> 32;
  return h;
}

}  // namespace

DataHasher::Block::Block() : lanes{kP1, kP2, kP3, ~kP1} {}

void DataHasher::Block::absorb(const unsigned char* p, size_t n) {
  bytes += n;
  if (n_pending > 0) {
    const size_t take = n < 32 - n_pending ? n : 32 - n_pending;
    std::memcpy(pending + n_pending, p, take);
    n_pending += take;
    p += take;
    n -= take;
    if (n_pending < 32) return;
    for (int l = 0; l < 4; ++l) lanes[l] = step(lanes[l], load64(pending + 8 * l));
    n_pending = 0;
  }
  uint64_t l0 = lanes[0], l1 = lanes[1], l2 = lanes[2], l3 = lanes[3];
  for (; n >= 32; p += 32, n -= 32) {
    l0 = step(l0, load64(p));
    l1 = step(l1, load64(p + 8));
    l2 = step(l2, load64(p + 16));
    l3 = step(l3, load64(p + 24));
  }
  lanes[0] = l0, lanes[1] = l1, lanes[2] = l2, lanes[3] = l3;
  std::memcpy(pending, p, n);
  n_pending = n;
}

uint64_t DataHasher::Block::digest() const {
  // Each lane enters by a rotation and an addition: a bijection in that lane for the others fixed.
  uint64_t h = std::rotl(lanes[0], 1) + std::rotl(lanes[1], 7) + std::rotl(lanes[2], 12) +
               std::rotl(lanes[3], 18);
  h = step(h, bytes);
  size_t i = 0;
  for (; i + 8 <= n_pending; i += 8) h = step(h, load64(pending + i));
  for (; i < n_pending; ++i) h = step(h, uint64_t(pending[i]) | (uint64_t(i) << 8));
  return avalanche(h);
}

DataHasher::DataHasher() = default;

void DataHasher::update(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  while (bytes > 0) {
    const size_t room = kBlockBytes - block_.bytes;
    const size_t take = bytes < room ? bytes : room;
    block_.absorb(p, take);
    p += take;
    bytes -= take;
    total_ += take;
    if (block_.bytes == kBlockBytes) {
      state_ = chain(state_, block_.digest());
      block_ = Block();
    }
  }
}

uint64_t DataHasher::digest() const {
  uint64_t s = state_;
  if (block_.bytes > 0) s = chain(s, block_.digest());
  return finish(s, total_);
}

uint64_t DataHasher::block_digest(const void* data, size_t bytes) {
  Block b;
  b.absorb(static_cast<const unsigned char*>(data), bytes);
  return b.digest();
}

uint64_t DataHasher::chain(uint64_t state, uint64_t block) { return step(state, block); }

uint64_t DataHasher::finish(uint64_t state, uint64_t total_bytes) {
  return avalanche(step(state, total_bytes));
}

uint64_t data_hash(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  const int64_t n_blocks = int64_t((bytes + DataHasher::kBlockBytes - 1) / DataHasher::kBlockBytes);
  std::vector<uint64_t> digests(static_cast<size_t>(n_blocks));
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < n_blocks; ++i) {
    const size_t begin = size_t(i) * DataHasher::kBlockBytes;
    const size_t n =
        bytes - begin < DataHasher::kBlockBytes ? bytes - begin : DataHasher::kBlockBytes;
    digests[size_t(i)] = DataHasher::block_digest(p + begin, n);
  }
  uint64_t state = DataHasher::kChainStart;
  for (uint64_t d : digests) state = DataHasher::chain(state, d);
  return DataHasher::finish(state, bytes);
}

std::string hash_hex(uint64_t h) {
  static const char* digits = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, h >>= 4) s[size_t(i)] = digits[h & 15];
  return s;
}

bool parse_hash_hex(const std::string& s, uint64_t* h) {
  if (s.size() != 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      return false;
    }
    v = (v << 4) | uint64_t(d);
  }
  *h = v;
  return true;
}

}  // namespace attnlab::io
