// Text reading: plain / gzip / xz (liblzma and the xz program), document splitting.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"
#include "data/text_reader.h"
#include "test_util.h"

#ifdef ATTNLAB_HAVE_ZLIB
#include <zlib.h>
#endif

namespace attnlab {
namespace {

namespace fs = std::filesystem;

class TextReaderTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_.file(name); }
  test::TempDir dir_{"text"};
};

// ~300 KB of varied text with document breaks, including UTF-8 and tabs.
std::string sample_text() {
  std::mt19937 rng(42);
  const char* words[] = {"whale", "sea", "Ishmael", "\t", "caf\xc3\xa9", "the", "of", ".", ","};
  std::string text;
  for (int doc = 0; doc < 200; ++doc) {
    if (doc > 0) text += "\n\n\n";
    const int n = 50 + int(rng() % 400);
    for (int i = 0; i < n; ++i) {
      text += words[rng() % 9];
      text += (rng() % 13 == 0) ? "\n" : " ";
    }
    text += "doc" + std::to_string(doc);
  }
  return text + "\n";
}

void write_file(const std::string& p, const std::string& data) {
  std::ofstream f(p, std::ios::binary);
  f << data;
}

bool have_xz_program() { return std::system("command -v xz > /dev/null 2>&1") == 0; }

TEST_F(TextReaderTest, PlainFile) {
  const std::string text = sample_text();
  write_file(path("a.txt"), text);
  EXPECT_EQ(read_text_file(path("a.txt")), text);
  write_file(path("empty.txt"), "");
  EXPECT_EQ(read_text_file(path("empty.txt")), "");
  test::expect_error([&] { read_text_file(path("missing.txt")); }, "missing.txt");
}

#ifdef ATTNLAB_HAVE_ZLIB
TEST_F(TextReaderTest, GzipFileWrittenWithZlib) {
  const std::string text = sample_text();
  gzFile gz = gzopen(path("a.txt.gz").c_str(), "wb6");
  ASSERT_NE(gz, nullptr);
  ASSERT_EQ(gzwrite(gz, text.data(), unsigned(text.size())), int(text.size()));
  gzclose(gz);
  EXPECT_LT(fs::file_size(path("a.txt.gz")), text.size());
  EXPECT_EQ(read_text_file(path("a.txt.gz")), text);
  // Detection is by content: a gzip file without the .gz suffix still decompresses.
  fs::copy_file(path("a.txt.gz"), path("noext"));
  EXPECT_EQ(read_text_file(path("noext")), text);
  // A truncated gzip file is an error, not silently short text.
  std::ifstream in(path("a.txt.gz"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  write_file(path("trunc.gz"), bytes.substr(0, bytes.size() / 2));
  EXPECT_THROW(read_text_file(path("trunc.gz")), Error);
}
#endif

TEST_F(TextReaderTest, XzFileWrittenWithXzProgram) {
  if (!have_xz_program()) GTEST_SKIP() << "no xz program";
  const std::string text = sample_text();
  write_file(path("a.txt"), text);
  ASSERT_EQ(std::system(("xz -6 -k -T1 " + path("a.txt")).c_str()), 0);
  ASSERT_TRUE(fs::exists(path("a.txt.xz")));
  EXPECT_EQ(read_text_file(path("a.txt.xz")), text);  // liblzma when built with it

  // The fallback through `xz -dc`.
  auto stream = open_xz_with_program(path("a.txt.xz"));
  std::string out(text.size() + 10, '\0');
  size_t got = 0;
  while (size_t n = stream->read(out.data() + got, out.size() - got)) got += n;
  out.resize(got);
  EXPECT_EQ(out, text);
  EXPECT_EQ(stream->file_bytes_consumed(), -1);

  // Truncated xz: an error from both paths.
  std::ifstream in(path("a.txt.xz"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  write_file(path("trunc.xz"), bytes.substr(0, bytes.size() / 2));
  EXPECT_THROW(read_text_file(path("trunc.xz")), Error);
  EXPECT_THROW(
      {
        auto s = open_xz_with_program(path("trunc.xz"));
        std::string buf(1 << 16, '\0');
        while (s->read(buf.data(), buf.size()) > 0) {
        }
      },
      Error);
}

// A stream that returns a few bytes per read, so delimiters straddle refills.
class TrickleStream final : public TextStream {
 public:
  explicit TrickleStream(std::string data) : TextStream("trickle"), data_(std::move(data)) {}
  size_t read(char* buf, size_t n) override {
    const size_t take = std::min({n, data_.size() - pos_, size_t(1 + pos_ % 5)});
    std::copy(data_.begin() + long(pos_), data_.begin() + long(pos_ + take), buf);
    pos_ += take;
    return take;
  }
  int64_t file_bytes_consumed() const override { return int64_t(pos_); }

 private:
  std::string data_;
  size_t pos_ = 0;
};

std::vector<std::string> split_all(const std::string& data, const std::string& delim) {
  DocumentReader reader(std::make_unique<TrickleStream>(data), delim);
  std::vector<std::string> docs;
  std::string doc;
  while (reader.next(doc)) docs.push_back(doc);
  return docs;
}

TEST(DocumentReader, SplitsOnDelimiterAcrossReads) {
  using V = std::vector<std::string>;
  EXPECT_EQ(split_all("A\n\n\nB\n", "\n\n\n"), (V{"A", "B"}));
  EXPECT_EQ(split_all("para 1\n\npara 2\n\n\nsecond doc\nline", "\n\n\n"),
            (V{"para 1\n\npara 2", "second doc\nline"}));
  EXPECT_EQ(split_all("\n\n\nA\n\n\n\n\n\nB\n\n\n", "\n\n\n"), (V{"A", "B"}));  // empties skipped
  EXPECT_EQ(split_all("", "\n\n\n"), V{});
  EXPECT_EQ(split_all("whole\n\n\nfile\n", ""), (V{"whole\n\n\nfile"}));
  EXPECT_EQ(split_all("x||y||||z", "||"), (V{"x", "y", "z"}));
  const std::string text = sample_text();
  const auto docs = split_all(text, "\n\n\n");
  ASSERT_EQ(docs.size(), 200u);
  for (size_t i = 0; i < docs.size(); ++i) {
    const std::string tail = "doc" + std::to_string(i);
    ASSERT_EQ(docs[i].substr(docs[i].size() - tail.size()), tail);
  }
}

}  // namespace
}  // namespace attnlab
