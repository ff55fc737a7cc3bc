// Text reading: plain / gzip / xz (liblzma and the xz program), document splitting.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <utility>

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

// A pipe (`<(cat f)`, /dev/stdin) is read whole: its format is told from the stream's own first
// bytes (a second open lost the first 4 KiB); compressed data through a pipe is refused by name.
TEST_F(TextReaderTest, PipeIsReadWhole) {
  const std::string text = sample_text();
  const std::string fifo = path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer([&] { write_file(fifo, text); });
  const std::string got = read_text_file(fifo);
  writer.join();
  EXPECT_EQ(got.size(), text.size());
  EXPECT_EQ(got, text);
  std::thread gz_writer([&] { write_file(fifo, std::string("\x1f\x8b\x08\x00rest", 8)); });
  test::expect_error([&] { read_text_file(fifo); },
                     {"is not a regular file (a pipe?) and holds gzip data"});
  gz_writer.join();
}

// Binary input is refused, not encoded as text: a token shard (prepare's own output), a program,
// random bytes; text with a stray NUL or a few bytes of a legacy 8-bit encoding is read.
TEST_F(TextReaderTest, BinaryIsRefused) {
  const std::pair<std::string, std::string> binaries[] = {
      {std::string("\x88\xd8\x34\x01\x01\x00\x00\x00", 8), "is a token shard (llm.c format) file"},
      {std::string("\x7f"
                   "ELF\x02\x01\x01\x00",
                   8),
       "is a compiled program (ELF) file"},
      {std::string(64, '\0') + "text", "68 bytes 64 are NUL"}};
  for (const auto& [bytes, msg] : binaries) {
    write_file(path("b.bin"), bytes);
    test::expect_error([&] { read_text_file(path("b.bin")); }, {"b.bin' ", msg});
  }
  std::mt19937 rng(3);
  std::string noise(4096, ' ');
  for (char& c : noise) c = char(0x80 + rng() % 0x7f);  // no NUL, almost none valid UTF-8
  write_file(path("noise.bin"), noise);
  test::expect_error([&] { read_text_file(path("noise.bin")); },
                     {"are not UTF-8 (a binary file?)"});
  const std::string latin1 = std::string(200, 'a') + "caf\xe9 na\xefve" + '\0' + "end";
  write_file(path("latin1.txt"), latin1);
  EXPECT_EQ(read_text_file(path("latin1.txt")), latin1);
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

// DocumentScanner must find exactly the documents of DocumentReader, however the bytes arrive:
// random text rich in newlines (and in the delimiter's other characters), appended in random
// pieces, with the consumed prefix dropped at random times (as prepare does between batches).
TEST(DocumentScanner, MatchesDocumentReaderForAnyAppendPattern) {
  std::mt19937 rng(7);
  const char alphabet[] = {'\n', '\n', '\n', 'a', 'b', '<', '>', ' '};
  for (const std::string delim : {"\n\n\n", "\n", "<doc>", "ab", "\n<", "\n\n", ""}) {
    for (int trial = 0; trial < 30; ++trial) {
      std::string data;
      const size_t n = rng() % 3000;
      for (size_t i = 0; i < n; ++i) data += alphabet[rng() % sizeof(alphabet)];
      if (trial % 3 == 0) data = "\n\n" + data + "<doc>\n";  // leading newlines, trailing delimiter
      const std::vector<std::string> expect = split_all(data, delim);

      DocumentScanner scanner(delim);
      std::string buffer;
      std::vector<DocumentScanner::Span> spans;
      std::vector<std::string> got;
      auto take = [&] {
        for (const auto& s : spans) got.push_back(buffer.substr(s.begin, s.end - s.begin));
        spans.clear();
      };
      for (size_t pos = 0; pos < data.size();) {
        const size_t take_bytes = std::min<size_t>(data.size() - pos, 1 + rng() % 97);
        buffer.append(data, pos, take_bytes);
        pos += take_bytes;
        scanner.scan(buffer, spans);
        take();
        if (rng() % 4 == 0) {  // drop what the documents found so far used
          const size_t keep = scanner.begin();
          buffer.erase(0, keep);
          scanner.drop_prefix(keep);
        }
      }
      scanner.finish(buffer, spans);
      take();
      ASSERT_EQ(got, expect) << "delimiter size " << delim.size() << ", trial " << trial;
    }
  }
}

// All blocks of a ParallelFileReader, per file: the bytes must be each file's content, the
// files in order, each closed by exactly one empty block.
std::vector<std::string> read_all_files(ParallelFileReader& reader, size_t files) {
  std::vector<std::string> content(files);
  std::vector<int> ends(files, 0);
  std::string block;
  size_t file = 0, last = 0;
  while (reader.next(block, file)) {
    EXPECT_LT(file, files);
    if (file >= files) break;
    EXPECT_GE(file, last) << "files out of order";
    EXPECT_EQ(ends[file], 0) << "bytes after the end of file " << file;
    last = file;
    if (block.empty())
      ++ends[file];
    else
      content[file] += block;
  }
  for (size_t f = 0; f < files; ++f) EXPECT_EQ(ends[f], 1) << "file " << f;
  return content;
}

TEST_F(TextReaderTest, ParallelFileReaderKeepsFileOrder) {
  // Files of 0 bytes to several blocks, plain and compressed, decoded by 1 to 8 threads with
  // budgets from none (files after the current one wait) to plenty.
  std::vector<std::string> files, expect;
  std::mt19937 rng(3);
  for (int i = 0; i < 9; ++i) {
    const size_t bytes =
        i == 2 ? 0 : (i == 5 ? 3 * ParallelFileReader::kBlockBytes + 17 : 1 + rng() % 50000);
    std::string text(bytes, ' ');
    for (auto& c : text) c = char('a' + rng() % 26);
    files.push_back(path("f" + std::to_string(i) + ".txt"));
    write_file(files.back(), text);
    expect.push_back(text);
  }
#ifdef ATTNLAB_HAVE_ZLIB
  {
    files.push_back(path("g.txt.gz"));
    expect.push_back(sample_text());
    gzFile gz = gzopen(files.back().c_str(), "wb1");
    ASSERT_NE(gz, nullptr);
    ASSERT_EQ(gzwrite(gz, expect.back().data(), unsigned(expect.back().size())),
              int(expect.back().size()));
    gzclose(gz);
  }
#endif
  if (have_xz_program()) {
    write_file(path("x.txt"), sample_text() + "xz");
    ASSERT_EQ(std::system(("xz -1 -T1 " + path("x.txt")).c_str()), 0);
    files.push_back(path("x.txt.xz"));
    expect.push_back(sample_text() + "xz");
  }
  for (const int parallel : {1, 3, 8}) {
    for (const size_t ahead : {size_t(0), size_t(100000), size_t(64) << 20}) {
      SCOPED_TRACE(testing::Message() << "parallel " << parallel << ", ahead " << ahead);
      ParallelFileReader reader(files, parallel, ahead);
      EXPECT_EQ(read_all_files(reader, files.size()), expect);
      EXPECT_TRUE(reader.ready());  // at the end: next() returns false at once
      std::string block;
      size_t file = 0;
      EXPECT_FALSE(reader.next(block, file));
    }
  }
  // Stopping early (an error elsewhere in prepare) must not hang: decoders blocked on the budget
  // are released by the destructor.
  ParallelFileReader early(files, 4, 0);
  std::string block;
  size_t file = 0;
  ASSERT_TRUE(early.next(block, file));
}

TEST_F(TextReaderTest, ParallelFileReaderReportsErrorsInOrder) {
  // A missing file between two good ones: the first file's bytes come out whole, then the error
  // (naming the file), even when the third file was decoded before the consumer got there.
  write_file(path("a.txt"), "first file");
  write_file(path("c.txt"), "third file");
  ParallelFileReader reader({path("a.txt"), path("b_missing.txt"), path("c.txt")}, 3, 1 << 20);
  std::string block, got;
  size_t file = 0;
  ASSERT_TRUE(reader.next(block, file));
  EXPECT_EQ(file, 0u);
  got = block;
  ASSERT_TRUE(reader.next(block, file));
  EXPECT_EQ(file, 0u);
  EXPECT_TRUE(block.empty());
  EXPECT_EQ(got, "first file");
  test::expect_error([&] { reader.next(block, file); }, "b_missing.txt");
}

}  // namespace
}  // namespace attnlab
