// Atomic writes and ensure_dir: the old file survives an abandoned writer, errors name the path.
#include <gtest/gtest.h>
#include <unistd.h>  // geteuid

#include <filesystem>
#include <random>

#include "core/error.h"
#include "io/atomic_file.h"
#include "test_util.h"

namespace attnlab::io {
namespace {

namespace fs = std::filesystem;

// TempDir restores the permissions EnsureDirInReadOnlyDirFails takes away before removing it.
class AtomicFile : public ::testing::Test {
 protected:
  test::TempDir tmp_{"atomic"};
  const std::string dir_ = tmp_.path().string();
};

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = char(rng());
  return s;
}

TEST_F(AtomicFile, WriteReplacesContentsAndLeavesNoTemp) {
  std::string path = dir_ + "/a.bin";
  std::string first = random_bytes(1000, 1), second = random_bytes(3 << 20, 2);
  write_file_atomic(path, first);
  EXPECT_EQ(read_file(path), first);
  write_file_atomic(path, std::as_bytes(std::span<const char>(second.data(), second.size())));
  EXPECT_EQ(read_file(path), second);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

// A crash between writing the temp file and the rename leaves "<path>.tmp" behind: the next write
// starts it afresh (no stale bytes survive) and renames it away.
TEST_F(AtomicFile, StaleTempFromACrashIsReplaced) {
  std::string path = dir_ + "/tokenizer.json";
  write_file_atomic(path, std::string_view("old\n"));
  write_file_atomic(path + ".tmp", random_bytes(5000, 3));  // what a crashed writer left
  write_file_atomic(path, std::string_view("{\"new\": 1}\n"));
  EXPECT_EQ(read_file(path), "{\"new\": 1}\n");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST_F(AtomicFile, StreamingMixesSmallAndLargeChunksInOrder) {
  std::string path = dir_ + "/stream.bin";
  std::string expect;
  {
    AtomicFileWriter w(path);
    std::mt19937 rng(7);
    // Sizes straddle the 1 MiB internal buffer so both the buffered and direct paths are used.
    for (size_t n : {size_t(3), size_t(1000), size_t(1) << 20, size_t(5), size_t(3) << 19,
                     size_t(0), size_t(77)}) {
      std::string chunk = random_bytes(n, rng());
      w.write(chunk);
      expect += chunk;
    }
    EXPECT_EQ(w.bytes_written(), expect.size());
    EXPECT_FALSE(fs::exists(path));  // nothing visible before commit
    w.commit();
  }
  EXPECT_EQ(read_file(path), expect);
}

// overwrite() replaces written bytes (buffered or not yet flushed alike) and later writes go on
// at the end; bytes not yet written cannot be overwritten.
TEST_F(AtomicFile, OverwriteReplacesWrittenBytesAndWritingGoesOnAtTheEnd) {
  const std::string path = dir_ + "/o.bin";
  AtomicFileWriter w(path);
  w.write("abcdef");
  w.overwrite(1, "XY", 2);
  w.write("gh");
  test::expect_error([&] { w.overwrite(7, "ZZ", 2); }, "only 8 were written");
  w.commit();
  EXPECT_EQ(read_file(path), "aXYdefgh");
}

TEST_F(AtomicFile, AbandonedWriterKeepsOldFileAndRemovesTemp) {
  std::string path = dir_ + "/model.safetensors";
  std::string old = random_bytes(4096, 3);
  write_file_atomic(path, old);
  {
    AtomicFileWriter w(path);
    w.write(random_bytes(2 << 20, 4));
    EXPECT_TRUE(fs::exists(w.temp_path()));
  }  // destroyed without commit(), as when an exception unwinds a save
  EXPECT_EQ(read_file(path), old);
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  // The same through an exception thrown mid-save.
  EXPECT_THROW(
      {
        AtomicFileWriter w(path);
        w.write(std::string_view("partial"));
        ATTN_FAIL("simulated failure");
      },
      Error);
  EXPECT_EQ(read_file(path), old);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST_F(AtomicFile, CommitTwiceAndWriteAfterCommitFail) {
  AtomicFileWriter w(dir_ + "/x");
  w.write(std::string_view("abc"));
  w.commit();
  EXPECT_THROW(w.commit(), Error);
  EXPECT_THROW(w.write(std::string_view("d")), Error);
  EXPECT_EQ(read_file(dir_ + "/x"), "abc");
}

TEST_F(AtomicFile, ErrorsNameThePathAndReason) {
  test::expect_error(
      [&] { write_file_atomic(dir_ + "/missing/x.bin", "data"); },
      {"cannot write '" + dir_ + "/missing/x.bin.tmp'", "No such file or directory"});

  test::expect_error([&] { read_file(dir_ + "/nope"); }, "cannot read '" + dir_ + "/nope'");
  test::expect_error([&] { read_file(dir_ + "/nope", "recipe"); },
                     {"cannot read recipe '" + dir_ + "/nope'", "No such file or directory"});
}

TEST_F(AtomicFile, EnsureDirCreatesNestedAndAcceptsExisting) {
  std::string d = dir_ + "/runs/exp1/ckpt/";
  ensure_dir(d);
  EXPECT_TRUE(fs::is_directory(dir_ + "/runs/exp1/ckpt"));
  ensure_dir(d);  // idempotent
  ensure_dir(dir_ + "/runs/exp1");
  write_file_atomic(dir_ + "/runs/exp1/ckpt/f", "ok");
  EXPECT_EQ(read_file(dir_ + "/runs/exp1/ckpt/f"), "ok");
}

TEST_F(AtomicFile, EnsureDirUnderAFileFails) {
  // Fails for root as well, unlike permission checks.
  write_file_atomic(dir_ + "/plain", "x");
  test::expect_error([&] { ensure_dir(dir_ + "/plain/sub/dir"); },
                     "'" + dir_ + "/plain' exists and is not a directory");
  test::expect_error([&] { ensure_dir(dir_ + "/plain"); }, "is not a directory");
}

TEST_F(AtomicFile, EnsureDirInReadOnlyDirFails) {
  if (geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  std::string ro = dir_ + "/ro";
  ensure_dir(ro);
  fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
  test::expect_error([&] { ensure_dir(ro + "/sub"); },
                     "cannot create directory '" + ro + "/sub': Permission denied");
  test::expect_error([&] { ensure_dir(ro); }, "directory '" + ro + "' is not writable");
  test::expect_error([&] { write_file_atomic(ro + "/f", "x"); },
                     "cannot write '" + ro + "/f.tmp': Permission denied");
}

}  // namespace
}  // namespace attnlab::io
