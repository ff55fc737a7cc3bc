// Token shards: round trips (uint16 and uint32), header/size validation, globs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"
#include "data/shard.h"
#include "test_util.h"

namespace attnlab {
namespace {

using test::expect_error;

namespace fs = std::filesystem;

class ShardTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_.file(name); }
  test::TempDir dir_{"shard"};
};

std::vector<int32_t> random_tokens(size_t n, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng() % uint32_t(vocab));
  return t;
}

void write_bytes(const std::string& p, const std::vector<unsigned char>& bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

std::vector<unsigned char> read_bytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(f), {});
}

TEST_F(ShardTest, RoundTripUint16IsLlmcLayout) {
  const auto tokens = random_tokens(10007, 50257, 1);
  write_shard(path("a.bin"), tokens, 50257);
  const auto bytes = read_bytes(path("a.bin"));
  ASSERT_EQ(bytes.size(), 1024 + 2 * tokens.size());
  // llm.c layout: little-endian int32 header, uint16 tokens.
  auto i32 = [&](size_t off) {
    return int32_t(bytes[off] | bytes[off + 1] << 8 | bytes[off + 2] << 16 | bytes[off + 3] << 24);
  };
  EXPECT_EQ(i32(0), 20240520);
  EXPECT_EQ(i32(4), 1);
  EXPECT_EQ(i32(8), int32_t(tokens.size()));
  for (size_t off = 12; off < 1024; off += 4) ASSERT_EQ(i32(off), 0);
  EXPECT_EQ(bytes[1024] | bytes[1025] << 8, tokens[0]);

  auto shard = ShardFile::open(path("a.bin"), 50257);
  EXPECT_EQ(shard->version(), 1);
  EXPECT_EQ(shard->size(), int64_t(tokens.size()));
  EXPECT_EQ(read_shard(path("a.bin")), tokens);
  std::vector<int32_t> part(100);
  shard->read(5000, 100, part.data());
  EXPECT_TRUE(std::equal(part.begin(), part.end(), tokens.begin() + 5000));
  EXPECT_EQ(shard->token(10006), tokens[10006]);
  EXPECT_FALSE(fs::exists(path("a.bin") + ".tmp." + std::to_string(::getpid())));
}

TEST_F(ShardTest, RoundTripUint32ForLargeVocab) {
  auto tokens = random_tokens(4099, 200000, 2);
  tokens[17] = 199999;
  write_shard(path("b.bin"), tokens, 200000);
  EXPECT_EQ(fs::file_size(path("b.bin")), 1024 + 4 * tokens.size());
  auto shard = ShardFile::open(path("b.bin"), 200000);
  EXPECT_EQ(shard->version(), 2);
  EXPECT_EQ(shard->max_token(), 199999);
  EXPECT_EQ(read_shard(path("b.bin")), tokens);
  EXPECT_EQ(shard_version_for_vocab(65536), 1);
  EXPECT_EQ(shard_version_for_vocab(65537), 2);
}

TEST_F(ShardTest, StreamingWriterAppendsAndEmptyShard) {
  const auto tokens = random_tokens(3000, 1000, 3);
  {
    ShardWriter w(path("c.bin"), kShardVersionU16);
    for (size_t i = 0; i < tokens.size(); i += 700)
      w.append(
          std::span<const int32_t>(tokens).subspan(i, std::min<size_t>(700, tokens.size() - i)));
    EXPECT_EQ(w.size(), 3000);
    EXPECT_FALSE(fs::exists(path("c.bin")));  // nothing under the final name before finish()
    w.finish();
  }
  EXPECT_EQ(read_shard(path("c.bin")), tokens);
  write_shard(path("empty.bin"), {}, 257);
  EXPECT_EQ(ShardFile::open(path("empty.bin"))->size(), 0);
  {  // an abandoned writer leaves nothing behind
    ShardWriter w(path("d.bin"), kShardVersionU32);
    w.append(tokens);
  }
  EXPECT_FALSE(fs::exists(path("d.bin")));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_.path()), fs::directory_iterator()), 2);
}

TEST_F(ShardTest, WriterRejectsIdsThatDoNotFit) {
  ShardWriter w(path("e.bin"), kShardVersionU16);
  const std::vector<int32_t> bad = {1, 65536};
  expect_error([&] { w.append(bad); }, {"65536", "e.bin"});
  const std::vector<int32_t> negative = {-1};
  expect_error([&] { w.append(negative); }, {"-1"});
}

TEST_F(ShardTest, CorruptFilesAreRejectedWithClearMessages) {
  const auto tokens = random_tokens(500, 300, 4);
  write_shard(path("ok.bin"), tokens, 300);
  const auto good = read_bytes(path("ok.bin"));

  // A directory (a forgotten glob) names itself and the fix.
  std::filesystem::create_directories(path("dir"));
  expect_error([&] { ShardFile::open(path("dir")); },
               {"token shard '" + path("dir") + "' is a directory", "/train_*.bin"});

  auto bad_magic = good;
  bad_magic[0] ^= 0xff;
  write_bytes(path("magic.bin"), bad_magic);
  expect_error([&] { ShardFile::open(path("magic.bin")); },
               {"magic.bin", "magic", "expected 20240520", "found"});

  auto bad_version = good;
  bad_version[4] = 7;
  write_bytes(path("version.bin"), bad_version);
  expect_error([&] { ShardFile::open(path("version.bin")); }, {"version.bin", "version 7"});

  auto truncated = good;
  truncated.resize(good.size() - 3);
  write_bytes(path("trunc.bin"), truncated);
  expect_error([&] { ShardFile::open(path("trunc.bin")); },
               {"trunc.bin", "truncated", "500 tokens"});

  write_bytes(path("tiny.bin"), std::vector<unsigned char>(good.begin(), good.begin() + 100));
  expect_error([&] { ShardFile::open(path("tiny.bin")); }, {"tiny.bin", "truncated"});

  auto trailing = good;
  trailing.push_back(0);
  trailing.push_back(0);
  write_bytes(path("trail.bin"), trailing);
  expect_error([&] { ShardFile::open(path("trail.bin")); }, {"trail.bin", "trailing"});

  expect_error([&] { ShardFile::open(path("missing.bin")); }, {"missing.bin", "cannot open"});

  // Token ids are checked against the vocabulary only when asked.
  EXPECT_NO_THROW(ShardFile::open(path("ok.bin")));
  int32_t max_id = *std::max_element(tokens.begin(), tokens.end());
  EXPECT_NO_THROW(ShardFile::open(path("ok.bin"), max_id + 1));
  expect_error([&] { ShardFile::open(path("ok.bin"), max_id); },
               {"ok.bin", std::to_string(max_id), "vocab_size " + std::to_string(max_id)});
}

TEST_F(ShardTest, GlobsAreSortedAndEmptyMatchesFail) {
  for (const char* name :
       {"train_000002.bin", "train_000000.bin", "train_000001.bin", "val_000000.bin"})
    write_shard(path(name), std::vector<int32_t>{1, 2, 3}, 10);
  const auto files = expand_glob(path("train_*.bin"));
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[0], path("train_000000.bin"));
  EXPECT_EQ(files[2], path("train_000002.bin"));
  EXPECT_EQ(expand_glob(path("val_000000.bin")).size(), 1u);
  const auto both = expand_globs({path("val_*.bin"), path("*.bin")});
  ASSERT_EQ(both.size(), 4u);  // val first (pattern order), no duplicates
  EXPECT_EQ(both[0], path("val_000000.bin"));
  // The same file by another path (a symlink to it, a path through ..) counts once.
  std::filesystem::create_symlink(path("train_000001.bin"), path("last.bin"));
  const std::filesystem::path dir = std::filesystem::path(path("x")).parent_path();
  const std::string dotdot = (dir / ".." / dir.filename() / "train_000002.bin").string();
  const auto linked = expand_globs({path("train_*.bin"), path("last.bin"), dotdot});
  EXPECT_EQ(linked.size(), 3u);
  expect_error([&] { expand_glob(path("nope_*.bin")); }, {"no files match", "nope_*.bin"});
  expect_error([&] { expand_glob(path("nope.bin")); }, {"nope.bin", "does not exist"});
}

}  // namespace
}  // namespace attnlab
