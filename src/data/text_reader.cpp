#include "data/text_reader.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/error.h"

#ifdef ATTNLAB_HAVE_ZLIB
#include <zlib.h>
#endif
#ifdef ATTNLAB_HAVE_LZMA
#include <lzma.h>
#endif

namespace attnlab {

namespace {

enum class Format { kPlain, kGzip, kXz };

// The bytes a format is told from (and a binary file refused by).
constexpr size_t kSniffBytes = 4096;

// Bytes of head[0 .. n) outside valid UTF-8 sequences (a sequence cut at n is not counted).
size_t invalid_utf8_bytes(const unsigned char* head, size_t n) {
  size_t bad = 0, i = 0;
  while (i < n) {
    const unsigned char c = head[i];
    const int len = c < 0x80           ? 1
                    : (c >> 5) == 0x6  ? 2
                    : (c >> 4) == 0xe  ? 3
                    : (c >> 3) == 0x1e ? 4
                                       : 0;
    if (len == 0) {
      ++bad, ++i;
      continue;
    }
    if (i + size_t(len) > n) break;  // cut by the sample's end
    int k = 1;
    while (k < len && (head[i + size_t(k)] & 0xc0) == 0x80) ++k;
    if (k < len) {
      ++bad, ++i;
      continue;
    }
    i += size_t(len);
  }
  return bad;
}

// The format of a file whose content starts with head[0 .. n); refuses formats that would
// otherwise be read as text and encoded as garbage.
Format classify(const std::string& path, const unsigned char* head, size_t n) {
  if (n >= 2 && head[0] == 0x1f && head[1] == 0x8b) return Format::kGzip;
  static const unsigned char kXzMagic[6] = {0xfd, '7', 'z', 'X', 'Z', 0x00};
  if (n >= 6 && std::memcmp(head, kXzMagic, 6) == 0) return Format::kXz;
  struct Other {
    const char* name;
    unsigned char magic[6];
    size_t len;
  };
  static const Other kOthers[] = {{"zstd", {0x28, 0xb5, 0x2f, 0xfd}, 4},
                                  {"zip", {'P', 'K', 0x03, 0x04}, 4},
                                  {"7z", {'7', 'z', 0xbc, 0xaf, 0x27, 0x1c}, 6},
                                  {"UTF-16 (little-endian BOM)", {0xff, 0xfe}, 2},
                                  {"UTF-16 (big-endian BOM)", {0xfe, 0xff}, 2},
                                  // 20240520, little-endian (data/shard.h's kShardMagic)
                                  {"token shard (llm.c format)", {0x88, 0xd8, 0x34, 0x01}, 4},
                                  {"compiled program (ELF)", {0x7f, 'E', 'L', 'F'}, 4},
                                  {"bzip2", {}, 0}};
  const bool bzip2 = n >= 4 && std::memcmp(head, "BZh", 3) == 0 && head[3] >= '1' && head[3] <= '9';
  for (const Other& o : kOthers) {
    const bool is =
        bzip2 ? o.len == 0 : n >= o.len && o.len > 0 && !std::memcmp(head, o.magic, o.len);
    ATTN_REQUIRE(!is,
                 "'%s' is a %s file: attnlab reads text as UTF-8, plain, gzip or xz; convert it "
                 "first",
                 path.c_str(), o.name);
  }
  // Text holds no NUL bytes (a stray one is let through), and is mostly valid UTF-8 (a legacy
  // 8-bit encoding has a few stray bytes); binary data is full of both.
  const size_t nul = size_t(std::count(head, head + n, 0));
  const size_t bad = invalid_utf8_bytes(head, n);
  ATTN_REQUIRE(nul * 64 <= n && bad * 4 <= n,
               "'%s' is not text: of its first %zu bytes %zu are NUL and %zu are not UTF-8 (a "
               "binary file?); attnlab reads text as UTF-8, plain, gzip or xz",
               path.c_str(), n, nul, bad);
  return Format::kPlain;
}

class PlainStream final : public TextStream {
 public:
  // The file opened by open_text_stream: its first bytes, already read there, then the rest.
  PlainStream(const std::string& path, std::FILE* file, std::string head)
      : TextStream(path), file_(file), head_(std::move(head)) {}
  ~PlainStream() override { std::fclose(file_); }
  size_t read(char* buf, size_t n) override {
    if (head_at_ < head_.size()) {
      const size_t take = std::min(n, head_.size() - head_at_);
      std::memcpy(buf, head_.data() + head_at_, take);
      head_at_ += take;
      consumed_ += int64_t(take);
      return take;
    }
    const size_t got = std::fread(buf, 1, n, file_);
    ATTN_REQUIRE(got > 0 || !std::ferror(file_), "error reading '%s': %s", path_.c_str(),
                 std::strerror(errno));
    consumed_ += int64_t(got);
    return got;
  }
  int64_t file_bytes_consumed() const override { return consumed_; }

 private:
  std::FILE* file_ = nullptr;
  int64_t consumed_ = 0;
  std::string head_;
  size_t head_at_ = 0;
};

#ifdef ATTNLAB_HAVE_ZLIB
class GzipStream final : public TextStream {
 public:
  explicit GzipStream(const std::string& path) : TextStream(path) {
    file_ = gzopen(path.c_str(), "rb");
    ATTN_REQUIRE(file_ != nullptr, "cannot open gzip file '%s': %s", path.c_str(),
                 std::strerror(errno));
    gzbuffer(file_, 1 << 20);
  }
  ~GzipStream() override { gzclose(file_); }
  size_t read(char* buf, size_t n) override {
    const unsigned chunk = unsigned(std::min<size_t>(n, 1u << 30));
    const int got = gzread(file_, buf, chunk);
    if (got < 0) {
      int errnum = 0;
      const char* msg = gzerror(file_, &errnum);
      ATTN_FAIL("corrupt gzip data in '%s': %s", path_.c_str(), msg);
    }
    if (got == 0) {  // a truncated stream ends without the gzip trailer
      int errnum = 0;
      const char* msg = gzerror(file_, &errnum);
      ATTN_REQUIRE(errnum == Z_OK || errnum == Z_STREAM_END, "corrupt gzip data in '%s': %s",
                   path_.c_str(), msg);
    }
    return size_t(got);
  }
  int64_t file_bytes_consumed() const override { return int64_t(gzoffset(file_)); }

 private:
  gzFile file_ = nullptr;
};
#endif

#ifdef ATTNLAB_HAVE_LZMA
class XzStream final : public TextStream {
 public:
  explicit XzStream(const std::string& path) : TextStream(path), in_buf_(size_t(1) << 20, '\0') {
    file_ = std::fopen(path.c_str(), "rb");
    ATTN_REQUIRE(file_ != nullptr, "cannot open xz file '%s': %s", path.c_str(),
                 std::strerror(errno));
    const lzma_ret rc = lzma_stream_decoder(&strm_, UINT64_MAX, LZMA_CONCATENATED);
    if (rc != LZMA_OK) {
      std::fclose(file_);
      ATTN_FAIL("cannot initialise the xz decoder for '%s' (lzma error %d)", path.c_str(), int(rc));
    }
  }
  ~XzStream() override {
    lzma_end(&strm_);
    std::fclose(file_);
  }
  size_t read(char* buf, size_t n) override {
    if (done_) return 0;
    strm_.next_out = reinterpret_cast<uint8_t*>(buf);
    strm_.avail_out = n;
    while (strm_.avail_out == n) {  // until some output (or the end)
      lzma_action action = LZMA_RUN;
      if (strm_.avail_in == 0) {
        const size_t got = std::fread(in_buf_.data(), 1, in_buf_.size(), file_);
        ATTN_REQUIRE(got > 0 || !std::ferror(file_), "error reading '%s': %s", path_.c_str(),
                     std::strerror(errno));
        strm_.next_in = reinterpret_cast<const uint8_t*>(in_buf_.data());
        strm_.avail_in = got;
        if (got == 0) action = LZMA_FINISH;
      }
      const lzma_ret rc = lzma_code(&strm_, action);
      if (rc == LZMA_STREAM_END) {
        done_ = true;
        break;
      }
      ATTN_REQUIRE(rc == LZMA_OK, "corrupt or truncated xz data in '%s' (%s)", path_.c_str(),
                   rc == LZMA_BUF_ERROR ? "unexpected end of input" : "decoder error");
    }
    return n - strm_.avail_out;
  }
  int64_t file_bytes_consumed() const override { return int64_t(strm_.total_in); }

 private:
  std::FILE* file_ = nullptr;
  lzma_stream strm_ = LZMA_STREAM_INIT;
  std::string in_buf_;
  bool done_ = false;
};
#endif

bool program_on_path(const char* name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return false;
  const std::string_view dirs(path);
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string_view dir = dirs.substr(start, end - start);
    std::string candidate(dir.empty() ? std::string_view(".") : dir);
    candidate.append("/").append(name);
    if (::access(candidate.c_str(), X_OK) == 0) return true;
    start = end + 1;
  }
  return false;
}

class PipeStream final : public TextStream {
 public:
  PipeStream(const std::string& path, const std::string& command) : TextStream(path) {
    pipe_ = ::popen(command.c_str(), "r");
    ATTN_REQUIRE(pipe_ != nullptr, "cannot run '%s': %s", command.c_str(), std::strerror(errno));
  }
  ~PipeStream() override {
    if (pipe_ != nullptr) ::pclose(pipe_);
  }
  size_t read(char* buf, size_t n) override {
    if (pipe_ == nullptr) return 0;
    const size_t got = std::fread(buf, 1, n, pipe_);
    if (got == 0) {
      const int status = ::pclose(pipe_);
      pipe_ = nullptr;
      ATTN_REQUIRE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
                   "`xz -dc` failed on '%s' (exit status %d): corrupt or truncated xz file?",
                   path_.c_str(), WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
    return got;
  }
  int64_t file_bytes_consumed() const override { return -1; }

 private:
  std::FILE* pipe_ = nullptr;
};

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'')
      q += "'\\''";
    else
      q += c;
  }
  return q + "'";
}

}  // namespace

std::unique_ptr<TextStream> open_xz_with_program(const std::string& path) {
  ATTN_REQUIRE(::access(path.c_str(), R_OK) == 0, "cannot open xz file '%s': %s", path.c_str(),
               std::strerror(errno));
  ATTN_REQUIRE(program_on_path("xz"),
               "cannot read '%s': attnlab was built without liblzma and the `xz` program is not "
               "on PATH (install xz-utils, or decompress the file first)",
               path.c_str());
  return std::make_unique<PipeStream>(path, "xz -dc -- " + shell_quote(path) + " 2>/dev/null");
}

std::unique_ptr<TextStream> open_text_stream(const std::string& path) {
  // The format is told from the first bytes, read once: plain text goes on from them in the same
  // stream, so a pipe (`<(zcat f)`, /dev/stdin), which cannot be opened twice, is read whole.
  std::FILE* f = std::fopen(path.c_str(), "rb");
  ATTN_REQUIRE(f != nullptr, "cannot open text file '%s': %s", path.c_str(), std::strerror(errno));
  std::string head(kSniffBytes, '\0');
  head.resize(std::fread(head.data(), 1, head.size(), f));
  Format format = Format::kPlain;
  try {
    format = classify(path, reinterpret_cast<const unsigned char*>(head.data()), head.size());
  } catch (...) {
    std::fclose(f);
    throw;
  }
  if (format == Format::kPlain) return std::make_unique<PlainStream>(path, f, std::move(head));
  std::fclose(f);  // the decompressors open the file themselves
  struct stat st {};
  ATTN_REQUIRE(::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode),
               "'%s' is not a regular file (a pipe?) and holds %s data: pipe the decompressed "
               "text (e.g. <(zcat FILE)), or give the file itself",
               path.c_str(), format == Format::kGzip ? "gzip" : "xz");
  switch (format) {
    case Format::kPlain:
      break;
    case Format::kGzip:
#ifdef ATTNLAB_HAVE_ZLIB
      return std::make_unique<GzipStream>(path);
#else
      ATTN_FAIL("cannot read gzip file '%s': attnlab was built without zlib", path.c_str());
#endif
    case Format::kXz:
#ifdef ATTNLAB_HAVE_LZMA
      return std::make_unique<XzStream>(path);
#else
      return open_xz_with_program(path);
#endif
  }
  ATTN_FAIL("internal error: unknown text format for '%s'", path.c_str());
}

std::string read_text_file(const std::string& path) {
  auto stream = open_text_stream(path);
  std::string text;
  std::string chunk(1 << 20, '\0');
  while (const size_t got = stream->read(chunk.data(), chunk.size())) text.append(chunk, 0, got);
  return text;
}

// ---- DocumentReader -----------------------------------------------------------------------------

DocumentReader::DocumentReader(std::unique_ptr<TextStream> stream, std::string delimiter)
    : stream_(std::move(stream)), delimiter_(std::move(delimiter)) {}

bool DocumentReader::fill() {
  if (eof_) return false;
  if (begin_ > 0 && begin_ * 2 >= buffer_.size()) {  // drop the consumed prefix
    buffer_.erase(0, begin_);
    scan_ -= begin_;
    begin_ = 0;
  }
  constexpr size_t kChunk = 4 << 20;
  if (chunk_.size() != kChunk) chunk_.resize(kChunk);
  const size_t got = stream_->read(chunk_.data(), kChunk);
  buffer_.append(chunk_.data(), got);
  if (got == 0) eof_ = true;
  return got > 0;
}

bool DocumentReader::next(std::string& doc) {
  while (true) {
    size_t end = std::string::npos;
    if (!delimiter_.empty()) {
      end = buffer_.find(delimiter_, scan_);
      if (end == std::string::npos) {
        // The delimiter may straddle the refill; resume just before the end.
        scan_ = std::max(begin_, buffer_.size() - std::min(buffer_.size(), delimiter_.size() - 1));
      }
    }
    size_t next_begin = 0;
    if (end != std::string::npos) {
      next_begin = end + delimiter_.size();
    } else if (!fill()) {
      if (begin_ >= buffer_.size()) return false;
      end = next_begin = buffer_.size();  // the last document
    } else {
      continue;
    }
    size_t stop = end;
    while (stop > begin_ && buffer_[stop - 1] == '\n') --stop;
    const bool empty = stop == begin_;
    if (!empty) doc.assign(buffer_, begin_, stop - begin_);
    begin_ = scan_ = next_begin;
    if (!empty) return true;
  }
}

// ---- DocumentScanner ----------------------------------------------------------------------------

void DocumentScanner::add(std::string_view text, size_t begin, size_t end,
                          std::vector<Span>& docs) const {
  while (end > begin && text[end - 1] == '\n') --end;
  if (end > begin) docs.push_back({begin, end});
}

namespace {

// The first occurrence of `needle` (non-empty) in `hay`, or npos. Delimiters start with a
// newline (the default "\n\n\n", JSON lines), which prose has every ~70 bytes, so a search that
// stops at every newline (memchr for the first byte, then a compare, which already beats glibc's
// memmem: docs/tokenizer.md) still spends most of its time in those stops. For needles
// of 2 or more bytes, SSE2 compares 16 positions at once against the first two bytes and stops only
// where both match (a blank line, for "\n\n\n"); the rest is compared there. The main thread
// runs this over every input byte while 16 encoders wait for its batches, so it bounds `prepare`.
size_t find_delimiter(std::string_view hay, std::string_view needle) {
  const size_t n = needle.size();
  const char* p = hay.data();
  const char* const last = hay.data() + hay.size();  // a match must start at or before last - n
#if defined(__SSE2__)
  if (n >= 2) {
    const __m128i first = _mm_set1_epi8(needle[0]), second = _mm_set1_epi8(needle[1]);
    // Both loads of a step (bytes p..p+16) inside hay.
    for (; last - p >= 17; p += 16) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 1));
      unsigned mask = unsigned(
          _mm_movemask_epi8(_mm_and_si128(_mm_cmpeq_epi8(a, first), _mm_cmpeq_epi8(b, second))));
      while (mask != 0) {
        const char* c = p + __builtin_ctz(mask);
        mask &= mask - 1;
        if (size_t(last - c) < n) return std::string_view::npos;  // later ones do not fit either
        size_t k = 2;  // inline: a call per blank line costs more than the compare
        while (k < n && c[k] == needle[k]) ++k;
        if (k == n) return size_t(c - hay.data());
      }
    }
  }
#endif
  while (size_t(last - p) >= n) {
    p = static_cast<const char*>(std::memchr(p, needle[0], size_t(last - p) - (n - 1)));
    if (p == nullptr) break;
    size_t k = 1;  // inline: most candidates fail at the second byte, and a call costs more
    while (k < n && p[k] == needle[k]) ++k;
    if (k == n) return size_t(p - hay.data());
    ++p;
  }
  return std::string_view::npos;
}

}  // namespace

void DocumentScanner::scan(std::string_view text, std::vector<Span>& docs) {
  if (delimiter_.empty()) return;  // one document per input: finish() takes it
  const size_t n = delimiter_.size();
  while (true) {
    const size_t hit = find_delimiter(text.substr(scan_), delimiter_);
    if (hit == std::string_view::npos) {
      // The delimiter may straddle the next append; resume just before the end.
      scan_ = std::max(begin_, text.size() - std::min(text.size(), n - 1));
      return;
    }
    const size_t at = scan_ + hit;
    add(text, begin_, at, docs);
    begin_ = scan_ = at + n;
  }
}

void DocumentScanner::finish(std::string_view text, std::vector<Span>& docs) {
  add(text, begin_, text.size(), docs);
  begin_ = scan_ = text.size();
}

void DocumentScanner::drop_prefix(size_t n) {
  ATTN_ASSERT(n <= begin_);
  begin_ -= n;
  scan_ -= n;
}

// ---- ParallelFileReader -------------------------------------------------------------------------

namespace {
// Blocks the file being consumed may run ahead of the consumer, whatever the budget says. 16 MiB
// covers, at the rate a 16-thread prepare consumes text, the gaps in which the decoder thread is
// not scheduled (16 encoders plus the main, decoder and writer threads share 16 cores), so the
// main thread, and through it the encoders, do not wait for it (16 against 4 MiB is measured in
// docs/tokenizer.md, "The host's own ceiling").
constexpr size_t kCurrentFileBlocks = 16;
}  // namespace

ParallelFileReader::ParallelFileReader(std::vector<std::string> files, int parallel,
                                       size_t ahead_bytes)
    : files_(std::move(files)), ahead_bytes_(ahead_bytes), state_(files_.size()) {
  const size_t n = std::min(files_.size(), size_t(std::max(1, parallel)));
  for (size_t i = 0; i < n; ++i) decoders_.emplace_back([this] { decode_files(); });
}

ParallelFileReader::~ParallelFileReader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  decoder_cv_.notify_all();
  for (auto& d : decoders_) d.join();
}

void ParallelFileReader::decode_files() {
  while (true) {
    size_t f;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // A file after the current one is started only while the budget has room.
      decoder_cv_.wait(lock, [&] {
        return stop_ || next_file_ >= files_.size() || next_file_ == current_ ||
               buffered_ < ahead_bytes_;
      });
      if (stop_ || next_file_ >= files_.size()) return;
      f = next_file_++;
    }
    std::exception_ptr error;
    try {
      const std::unique_ptr<TextStream> stream = open_text_stream(files_[f]);
      while (true) {
        std::string block;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          if (!free_blocks_.empty()) {
            block = std::move(free_blocks_.back());
            free_blocks_.pop_back();
          }
        }
        block.resize(kBlockBytes);
        size_t got = 0;
        while (got < block.size()) {
          const size_t n = stream->read(block.data() + got, block.size() - got);
          if (n == 0) break;
          got += n;
        }
        block.resize(got);
        std::unique_lock<std::mutex> lock(mutex_);
        FileState& s = state_[f];
        const int64_t consumed = std::max<int64_t>(0, stream->file_bytes_consumed());
        consumed_total_ += consumed - s.consumed;
        s.consumed = consumed;
        if (got == 0) break;
        decoder_cv_.wait(lock, [&] {
          return stop_ || (f == current_ ? s.blocks.size() < kCurrentFileBlocks
                                         : buffered_ + got <= ahead_bytes_ || s.blocks.empty());
        });
        if (stop_) return;
        s.blocks.push_back(std::move(block));
        s.buffered += got;
        buffered_ += got;
        lock.unlock();
        consumer_cv_.notify_all();
      }
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      FileState& s = state_[f];
      s.error = error;
      s.finished = true;
      std::error_code ec;
      const int64_t size = int64_t(std::filesystem::file_size(files_[f], ec));
      if (!error && !ec) {
        consumed_total_ += size - s.consumed;
        s.consumed = size;
      }
    }
    consumer_cv_.notify_all();
  }
}

bool ParallelFileReader::ready_locked() const {
  if (current_ >= files_.size()) return true;
  const FileState& s = state_[current_];
  return !s.blocks.empty() || s.finished;
}

bool ParallelFileReader::ready() {
  std::lock_guard<std::mutex> lock(mutex_);
  return ready_locked();
}

bool ParallelFileReader::next(std::string& block, size_t& file) {
  std::unique_lock<std::mutex> lock(mutex_);
  // Enough recycled blocks for the read-ahead of the current file and one per decoder: a block
  // freed here would be unmapped, and the next one mapped and faulted in again.
  if (block.capacity() >= kBlockBytes &&
      free_blocks_.size() < decoders_.size() + kCurrentFileBlocks)
    free_blocks_.push_back(std::move(block));
  block.clear();
  consumer_cv_.wait(lock, [&] { return ready_locked(); });
  if (current_ >= files_.size()) return false;
  FileState& s = state_[current_];
  file = current_;
  if (!s.blocks.empty()) {
    block = std::move(s.blocks.front());
    s.blocks.pop_front();
    s.buffered -= block.size();
    buffered_ -= block.size();
  } else {
    if (s.error) std::rethrow_exception(s.error);
    ++current_;
  }
  lock.unlock();
  decoder_cv_.notify_all();
  return true;
}

int64_t ParallelFileReader::file_bytes_consumed() {
  std::lock_guard<std::mutex> lock(mutex_);
  return consumed_total_;
}

}  // namespace attnlab
