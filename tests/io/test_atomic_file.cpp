// Atomic writes and ensure_dir: the old file survives an abandoned writer, errors name the path.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <random>

#include "core/error.h"
#include "io/atomic_file.h"

namespace attnlab::io {
namespace {

namespace fs = std::filesystem;

class AtomicFile : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "attnlab_atomic_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add, ec);
    for (auto& e : fs::recursive_directory_iterator(dir_, ec))
      fs::permissions(e.path(), fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(dir_, ec);
  }
  std::string dir_;
};

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = char(rng());
  return s;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
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
  std::string msg = error_of([&] { write_file_atomic(dir_ + "/missing/x.bin", "data"); });
  EXPECT_NE(msg.find("cannot write '" + dir_ + "/missing/x.bin.tmp'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;

  msg = error_of([&] { read_file(dir_ + "/nope"); });
  EXPECT_NE(msg.find("cannot read '" + dir_ + "/nope'"), std::string::npos) << msg;
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
  std::string msg = error_of([&] { ensure_dir(dir_ + "/plain/sub/dir"); });
  EXPECT_NE(msg.find("'" + dir_ + "/plain' exists and is not a directory"), std::string::npos)
      << msg;
  msg = error_of([&] { ensure_dir(dir_ + "/plain"); });
  EXPECT_NE(msg.find("is not a directory"), std::string::npos) << msg;
}

TEST_F(AtomicFile, EnsureDirInReadOnlyDirFails) {
  if (geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  std::string ro = dir_ + "/ro";
  ensure_dir(ro);
  fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
  std::string msg = error_of([&] { ensure_dir(ro + "/sub"); });
  EXPECT_NE(msg.find("cannot create directory '" + ro + "/sub': Permission denied"),
            std::string::npos)
      << msg;
  msg = error_of([&] { ensure_dir(ro); });
  EXPECT_NE(msg.find("directory '" + ro + "' is not writable"), std::string::npos) << msg;
  msg = error_of([&] { write_file_atomic(ro + "/f", "x"); });
  EXPECT_NE(msg.find("cannot write '" + ro + "/f.tmp': Permission denied"), std::string::npos)
      << msg;
}

}  // namespace
}  // namespace attnlab::io
