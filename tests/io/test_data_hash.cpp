// io/data_hash.h: the streaming hasher equals the one-call parallel hash for any split of the
// input, any changed word or tail byte changes the hash, and known answers pin the function (a
// change to it would make every checkpoint written before unreadable).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "io/data_hash.h"

namespace attnlab::io {
namespace {

std::vector<unsigned char> pattern(size_t n) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>((i * 131 + 7) ^ (i >> 9));
  return v;
}

std::vector<unsigned char> random_bytes(size_t n, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

uint64_t streamed(const std::vector<unsigned char>& v, unsigned seed, size_t max_piece) {
  std::mt19937 rng(seed);
  DataHasher h;
  for (size_t done = 0; done < v.size();) {
    const size_t piece = std::min(v.size() - done, size_t(rng() % max_piece));
    h.update(v.data() + done, piece);
    done += piece;
  }
  return h.digest();
}

TEST(DataHash, KnownAnswers) {
  // Computed once from this implementation; they define the format of the recorded hashes.
  EXPECT_EQ(hash_hex(data_hash(nullptr, 0)), "d17b12ef91ecf8ae");
  EXPECT_EQ(hash_hex(data_hash(pattern(1).data(), 1)), "63c349076db960b9");
  EXPECT_EQ(hash_hex(data_hash(pattern(100).data(), 100)), "732706b5dd42f7a3");
  const size_t big = DataHasher::kBlockBytes * 2 + 45;  // two whole blocks and a tail
  EXPECT_EQ(hash_hex(data_hash(pattern(big).data(), big)), "18dcb829294e0efa");
}

TEST(DataHash, StreamingEqualsOneCallForAnySplit) {
  for (size_t n : {size_t(0), size_t(1), size_t(31), size_t(32), size_t(33), size_t(1000),
                   DataHasher::kBlockBytes - 1, DataHasher::kBlockBytes,
                   DataHasher::kBlockBytes + 1, 2 * DataHasher::kBlockBytes + 777}) {
    const auto v = random_bytes(n, unsigned(n));
    const uint64_t one = data_hash(v.data(), v.size());
    EXPECT_EQ(streamed(v, 1, 7), one) << n;
    EXPECT_EQ(streamed(v, 2, 100), one) << n;
    EXPECT_EQ(streamed(v, 3, 5 << 20), one) << n;
    DataHasher whole;
    whole.update(v.data(), v.size());
    EXPECT_EQ(whole.digest(), one) << n;
  }
}

TEST(DataHash, EveryChangedWordOrTailByteChangesTheHash) {
  // 3 stripes, 2 tail words and 5 tail bytes: each word and byte position, each bit, and a change
  // of a whole word at once.
  auto v = random_bytes(32 * 3 + 8 * 2 + 5, 9);
  const uint64_t h = data_hash(v.data(), v.size());
  for (size_t i = 0; i < v.size(); ++i)
    for (int bit = 0; bit < 8; ++bit) {
      v[i] ^= static_cast<unsigned char>(1 << bit);
      EXPECT_NE(data_hash(v.data(), v.size()), h) << "byte " << i << " bit " << bit;
      v[i] ^= static_cast<unsigned char>(1 << bit);
    }
  for (size_t w = 0; w + 8 <= 32 * 3 + 8 * 2; w += 8) {
    for (size_t i = w; i < w + 8; ++i) v[i] = static_cast<unsigned char>(~v[i]);
    EXPECT_NE(data_hash(v.data(), v.size()), h) << "word at " << w;
    for (size_t i = w; i < w + 8; ++i) v[i] = static_cast<unsigned char>(~v[i]);
  }
  EXPECT_EQ(data_hash(v.data(), v.size()), h);
  // Lengths: a zero byte appended, or the last byte dropped.
  v.push_back(0);
  EXPECT_NE(data_hash(v.data(), v.size()), h);
  EXPECT_NE(data_hash(v.data(), v.size() - 2), h);
  // Across a block boundary: the last word of block 0 and the first of block 1, and two blocks
  // swapped.
  auto big = random_bytes(2 * DataHasher::kBlockBytes, 10);
  const uint64_t hb = data_hash(big.data(), big.size());
  for (size_t at : {DataHasher::kBlockBytes - 1, DataHasher::kBlockBytes}) {
    big[at] ^= 0x40;
    EXPECT_NE(data_hash(big.data(), big.size()), hb) << at;
    big[at] ^= 0x40;
  }
  std::rotate(big.begin(), big.begin() + DataHasher::kBlockBytes, big.end());
  EXPECT_NE(data_hash(big.data(), big.size()), hb);
}

TEST(DataHash, HexRoundTripAndRejects) {
  uint64_t h = 0;
  EXPECT_EQ(hash_hex(0x0123456789abcdefull), "0123456789abcdef");
  EXPECT_TRUE(parse_hash_hex("0123456789abcdef", &h));
  EXPECT_EQ(h, 0x0123456789abcdefull);
  EXPECT_FALSE(parse_hash_hex("0123456789ABCDEF", &h));
  EXPECT_FALSE(parse_hash_hex("0123456789abcde", &h));
  EXPECT_FALSE(parse_hash_hex("0123456789abcdefa", &h));
  EXPECT_FALSE(parse_hash_hex("0123456789abcdeg", &h));
}

}  // namespace
}  // namespace attnlab::io
