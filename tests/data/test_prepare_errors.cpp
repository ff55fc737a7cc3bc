// prepare's errors: a shard that cannot be written, bad options and inputs, other formats and
// surprising text, --delimiter escapes, and a failed or interrupted run that keeps the earlier
// dataset.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "prepare_test_util.h"
#include "test_util.h"

namespace attnlab {
namespace {

namespace fs = std::filesystem;
using test::join;
using test::make_docs;
using test::PrepareTest;

// Names in `dir` that look like a ShardWriter's temporary file.
std::vector<std::string> temporary_files(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.find(".tmp.") != std::string::npos) names.push_back(name);
  }
  return names;
}

// A shard that cannot be written or created stops the run with an error naming the shard, and
// nothing of the run is left behind (its staging directory, where the shards are written first,
// is removed).
TEST_F(PrepareTest, ShardWriteErrorsStopTheRun) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full to fail a write";
  write("in/a.txt", join(make_docs(400, 3)));
  auto o = options();
  o.threads = 3;
  o.batch_bytes = 5000;
  o.shard_tokens = 3000;                                         // ~16 train shards
  const std::string tmp = ".tmp." + std::to_string(::getpid());  // ShardWriter's suffix

  const std::string stage = "/.prepare-staging-" + std::to_string(::getpid()) + "/";

  // Writes to the third train shard fail: its temporary file is the full device.
  fs::create_directories(o.out_dir + stage);
  fs::create_symlink("/dev/full", o.out_dir + stage + "train_000002.bin" + tmp);
  test::expect_error([&] { prepare(o); }, {"train_000002.bin" + tmp, "No space left on device"});
  EXPECT_EQ(temporary_files(o.out_dir), std::vector<std::string>{});
  EXPECT_FALSE(fs::exists(o.out_dir + stage));

  // The second val shard cannot be created: a directory has its temporary file's name.
  o.out_dir = path("out2");
  fs::create_directories(o.out_dir + stage + "val_000001.bin" + tmp);
  test::expect_error([&] { prepare(o); }, {"cannot create token shard", "val_000001.bin" + tmp});
  EXPECT_FALSE(fs::exists(o.out_dir + stage));

  // The same run without the obstacles succeeds.
  fs::remove_all(o.out_dir);
  const auto s = prepare(o);
  EXPECT_GT(s.train.shards.size(), 10u);
  EXPECT_GT(s.val.shards.size(), 1u);
}

TEST_F(PrepareTest, ErrorsNameTheProblem) {
  auto o = options();
  test::expect_error([&] { prepare(o); }, "in/*.txt*");  // nothing in in/
  write("in/a.txt", "x");
  o.tokenizer = "nonsense";
  EXPECT_THROW(prepare(o), Error);
  o = options();
  o.val_fraction = 1.5;
  EXPECT_THROW(prepare(o), Error);
  o = options();
  o.batch_bytes = -1;
  test::expect_error([&] { prepare(o); }, "batch_bytes");
  o = options();
  o.threads = 100000;  // the OpenMP/thread runtime would abort, not say which option
  test::expect_error([&] { prepare(o); }, "threads must be in [0, 1024]");
}

// Input that would not split or encode as the user meant: refused where it cannot be text, a
// warning (in the summary and on stderr) where it is text read differently than it may be meant.
TEST_F(PrepareTest, OtherFormatsAreRefusedAndSurprisingTextIsWarnedAbout) {
  auto train_only = [&] {
    auto o = options();
    o.val_fraction = 0;  // one or two documents: none must land in val alone
    return o;
  };
  const std::pair<std::string, std::string> others[] = {
      {std::string("BZh91AY&SY", 10), "bzip2"},
      {std::string("\x28\xb5\x2f\xfd\x00\x00", 6), "zstd"},
      {std::string("PK\x03\x04\x14\x00", 6), "zip"},
      {std::string("\xff\xfeh\x00i\x00", 6), "UTF-16 (little-endian BOM)"}};
  for (const auto& [bytes, name] : others) {
    fs::remove_all(path("in"));
    fs::create_directories(path("in"));
    write("in/a.txt", bytes);
    test::expect_error([&] { prepare(train_only()); }, {"a.txt' is a " + name + " file"});
  }
  // Text that starts like bzip2's magic but is not: read as text.
  write("in/a.txt", "BZh is how the word begins\n");
  const PrepareSummary text = prepare(train_only());
  EXPECT_EQ(text.train.documents + text.val.documents, 1);

  fs::remove_all(path("in"));
  fs::create_directories(path("in"));
  write("in/crlf.txt", "one\r\n\r\n\r\ntwo\r\n");
  write("in/eot.txt", "story one<|endoftext|>story two");
  write("in/plain.txt", "a\n\n\nb\n");
  PrepareSummary s = prepare(train_only());
  ASSERT_EQ(s.warnings.size(), 2u);
  EXPECT_NE(s.warnings[0].find("1 file(s) have Windows line endings"), std::string::npos);
  EXPECT_NE(s.warnings[0].find("crlf.txt"), std::string::npos);
  EXPECT_NE(s.warnings[1].find("contain the text '<|endoftext|>', e.g. '"), std::string::npos);
  EXPECT_NE(s.warnings[1].find("eot.txt"), std::string::npos);
  // With the delimiters they call for, no warning and the documents they hold.
  auto o = train_only();
  o.delimiter = "\r\n\r\n\r\n";
  o.inputs = {path("in/crlf.txt")};
  s = prepare(o);
  EXPECT_TRUE(s.warnings.empty());
  EXPECT_EQ(s.train.documents + s.val.documents, 2);
  o.delimiter = "<|endoftext|>";
  o.inputs = {path("in/eot.txt")};
  s = prepare(o);
  EXPECT_TRUE(s.warnings.empty());
  EXPECT_EQ(s.train.documents + s.val.documents, 2);
}

// --delimiter as typed in a shell.
TEST(PrepareDelimiter, EscapesAreUnderstoodAndUnknownOnesRefused) {
  EXPECT_EQ(unescape_delimiter("\\n\\n\\n"), "\n\n\n");
  EXPECT_EQ(unescape_delimiter("\\r\\n\\t\\\\x"), "\r\n\t\\x");
  EXPECT_EQ(unescape_delimiter("<|endoftext|>"), "<|endoftext|>");
  test::expect_error([&] { unescape_delimiter("a\\qb"); }, {"\\q is not an escape"});
  test::expect_error([&] { unescape_delimiter("a\\"); }, {"a trailing backslash"});
}

// A run that fails leaves the earlier dataset whole (the new shards are staged); a directory given
// as input is named.
TEST_F(PrepareTest, AFailedRunKeepsTheEarlierShards) {
  write("in/a.txt", "first document\n\n\nsecond document\n");
  auto o = options();
  o.val_fraction = 0;
  const PrepareSummary first = prepare(o);
  ASSERT_EQ(first.train.shards.size(), 1u);
  EXPECT_EQ(first.train.shards[0], path("out") + "/train_000000.bin");
  const std::vector<int32_t> tokens = read_shard(first.train.shards[0]);
  write("in/b.txt.gz", std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00", 8));  // truncated gzip
  EXPECT_THROW(prepare(o), Error);
  EXPECT_EQ(read_shard(path("out") + "/train_000000.bin"), tokens);
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(path("out"))) ++entries;
  EXPECT_EQ(entries, 2u);  // the shard and tokenizer.json: no staging directory left
  fs::remove(path("in/b.txt.gz"));
  fs::create_directories(path("in/sub.txt"));
  test::expect_error([&] { prepare(o); }, {"sub.txt' is a directory; give its files"});
  EXPECT_EQ(read_shard(path("out") + "/train_000000.bin"), tokens);
  // Every document in val: nothing to train on, refused (and the earlier shards kept).
  fs::remove(path("in/sub.txt"));
  o.val_fraction = 0.999999;
  test::expect_error([&] { prepare(o); }, {"every document went to val (2 documents"});
  EXPECT_EQ(read_shard(path("out") + "/train_000000.bin"), tokens);
}

// A prepare interrupted while it replaces the directory's shards leaves its marker: every reader
// of those shards refuses them, naming the marker, until a prepare finishes there.
TEST_F(PrepareTest, AnInterruptedReplacementIsRefusedUntilPrepareRunsAgain) {
  write("in/a.txt", "first document\n\n\nsecond document\n");
  auto o = options();
  o.val_fraction = 0;
  const PrepareSummary first = prepare(o);
  const std::string shard = first.train.shards.at(0);
  const std::string marker = path("out") + "/" + kPrepareIncompleteMarker;
  EXPECT_FALSE(fs::exists(marker));
  EXPECT_NO_THROW(ShardFile::open(shard, 256 + 1));
  const std::vector<int32_t> tokens = read_shard(shard);
  { std::ofstream(marker) << "interrupted\n"; }
  test::expect_error([&] { ShardFile::open(shard, 256 + 1); },
                     {"train_000000.bin'", ".prepare_incomplete'", "run that prepare again"});
  test::expect_error([&] { read_shard(shard); }, {".prepare_incomplete'"});
  // Through a symlink from another directory too.
  fs::create_directories(path("elsewhere"));
  fs::create_symlink(shard, path("elsewhere/link.bin"));
  test::expect_error([&] { read_shard(path("elsewhere/link.bin")); }, {".prepare_incomplete'"});
  prepare(o);
  EXPECT_FALSE(fs::exists(marker));
  EXPECT_EQ(read_shard(shard), tokens);
}

}  // namespace
}  // namespace attnlab
