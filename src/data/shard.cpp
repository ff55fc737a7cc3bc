#include "data/shard.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/hash.h"

namespace attnlab {

namespace fs = std::filesystem;

namespace {

uint16_t load_u16(const unsigned char* p) { return uint16_t(p[0] | (p[1] << 8)); }
uint32_t load_u32(const unsigned char* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}
void store_u32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = (unsigned char)(v >> (8 * i));
}

int64_t bytes_per_token(int32_t version) { return version == kShardVersionU16 ? 2 : 4; }

}  // namespace

int32_t shard_version_for_vocab(int64_t vocab_size) {
  ATTN_REQUIRE(vocab_size > 0, "shard: vocab_size must be positive, got %lld",
               (long long)vocab_size);
  return vocab_size <= 65536 ? kShardVersionU16 : kShardVersionU32;
}

// ---- MemoryTokens -------------------------------------------------------------------------------

MemoryTokens::MemoryTokens(std::vector<int32_t> tokens, std::string name)
    : tokens_(std::move(tokens)), name_(std::move(name)) {}

void MemoryTokens::read(int64_t start, int64_t count, int32_t* out) const {
  ATTN_ASSERT(start >= 0 && count >= 0 && start + count <= size());
  std::memcpy(out, tokens_.data() + start, size_t(count) * sizeof(int32_t));
}

// ---- ShardFile ----------------------------------------------------------------------------------

std::unique_ptr<ShardFile> ShardFile::open(const std::string& path, int64_t vocab_size) {
  // The shard's directory, and the one it lies in when `path` is a symlink.
  std::error_code ec;
  const fs::path real = fs::weakly_canonical(path, ec);
  for (const fs::path& p : {fs::path(path), ec ? fs::path(path) : real}) {
    const std::string dir = p.parent_path().string();
    const std::string marker =
        (dir.empty() ? std::string(".") : dir) + "/" + kPrepareIncompleteMarker;
    ATTN_REQUIRE(::access(marker.c_str(), F_OK) != 0,
                 "token shard '%s': its directory holds '%s', left by an `attnlab prepare` that "
                 "did not finish replacing the directory's shards (it may mix two datasets or "
                 "disagree with tokenizer.json); run that prepare again",
                 path.c_str(), marker.c_str());
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ATTN_REQUIRE(fd >= 0, "cannot open token shard '%s': %s", path.c_str(), std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    ATTN_FAIL("cannot stat token shard '%s': %s", path.c_str(), std::strerror(err));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    ATTN_FAIL(
        "token shard '%s' is a directory: give a glob of its shard files (e.g. "
        "'%s/train_*.bin')",
        path.c_str(), path.c_str());
  }
  const int64_t file_bytes = st.st_size;
  if (file_bytes < kShardHeaderBytes) {
    ::close(fd);
    ATTN_FAIL("token shard '%s' is truncated: %lld bytes, smaller than the %lld-byte header",
              path.c_str(), (long long)file_bytes, (long long)kShardHeaderBytes);
  }
  void* map = ::mmap(nullptr, size_t(file_bytes), PROT_READ, MAP_SHARED, fd, 0);
  int map_err = errno;
  ::close(fd);  // the mapping keeps the file alive
  ATTN_REQUIRE(map != MAP_FAILED, "cannot mmap token shard '%s': %s", path.c_str(),
               std::strerror(map_err));

  std::unique_ptr<ShardFile> shard(new ShardFile());
  shard->path_ = path;
  shard->map_ = map;
  shard->map_bytes_ = size_t(file_bytes);
  const auto* bytes = static_cast<const unsigned char*>(map);
  const int32_t magic = int32_t(load_u32(bytes));
  const int32_t version = int32_t(load_u32(bytes + 4));
  const int32_t count = int32_t(load_u32(bytes + 8));
  ATTN_REQUIRE(magic == kShardMagic,
               "token shard '%s': bad magic number: expected %d, found %d (not an llm.c/attnlab "
               "token shard)",
               path.c_str(), kShardMagic, magic);
  ATTN_REQUIRE(version == kShardVersionU16 || version == kShardVersionU32,
               "token shard '%s': unsupported version %d (expected 1 = uint16 tokens or 2 = uint32 "
               "tokens)",
               path.c_str(), version);
  ATTN_REQUIRE(count >= 0, "token shard '%s': negative token count %d in the header", path.c_str(),
               count);
  const int64_t expected = kShardHeaderBytes + int64_t(count) * bytes_per_token(version);
  ATTN_REQUIRE(file_bytes >= expected,
               "token shard '%s' is truncated: the header promises %d tokens (%lld bytes) but the "
               "file has %lld bytes",
               path.c_str(), count, (long long)expected, (long long)file_bytes);
  ATTN_REQUIRE(file_bytes == expected,
               "token shard '%s': file has %lld bytes, expected %lld for %d tokens (trailing "
               "data after the tokens)",
               path.c_str(), (long long)file_bytes, (long long)expected, count);
  shard->version_ = version;
  shard->num_tokens_ = count;
  shard->data_ = bytes + kShardHeaderBytes;
  // Reads are mostly sequential within a window and random across windows.
  ::madvise(map, size_t(file_bytes), MADV_WILLNEED);

  if (vocab_size > 0) {
    const int32_t max_id = shard->max_token();
    ATTN_REQUIRE(max_id < vocab_size,
                 "token shard '%s': token id %d is out of range for vocab_size %lld (wrong "
                 "tokenizer or model vocabulary?)",
                 path.c_str(), max_id, (long long)vocab_size);
  }
  return shard;
}

ShardFile::~ShardFile() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
}

int32_t ShardFile::token(int64_t i) const {
  ATTN_ASSERT(i >= 0 && i < num_tokens_);
  return version_ == kShardVersionU16 ? int32_t(load_u16(data_ + 2 * i))
                                      : int32_t(load_u32(data_ + 4 * i));
}

void ShardFile::read(int64_t start, int64_t count, int32_t* out) const {
  ATTN_ASSERT(start >= 0 && count >= 0 && start + count <= num_tokens_);
  if (version_ == kShardVersionU16) {
    const unsigned char* p = data_ + 2 * start;
    for (int64_t i = 0; i < count; ++i) out[i] = int32_t(load_u16(p + 2 * i));
  } else {
    const unsigned char* p = data_ + 4 * start;
    for (int64_t i = 0; i < count; ++i) out[i] = int32_t(load_u32(p + 4 * i));
  }
}

int32_t ShardFile::max_token() const {
  // One parallel pass (a training run scans every shard once at the start: data/loader.h).
  if (num_tokens_ == 0) return -1;
  if (version_ == kShardVersionU16) {
    uint32_t max_id = 0;
#pragma omp parallel for reduction(max : max_id) schedule(static)
    for (int64_t i = 0; i < num_tokens_; ++i)
      max_id = std::max<uint32_t>(max_id, load_u16(data_ + 2 * i));
    return int32_t(max_id);
  }
  uint32_t max_id = 0;
#pragma omp parallel for reduction(max : max_id) schedule(static)
  for (int64_t i = 0; i < num_tokens_; ++i) max_id = std::max(max_id, load_u32(data_ + 4 * i));
  if (max_id > uint32_t(INT32_MAX))
    for (int64_t i = 0; i < num_tokens_; ++i) {  // the first such token, for the message
      const uint32_t v = load_u32(data_ + 4 * i);
      ATTN_REQUIRE(v <= uint32_t(INT32_MAX), "token shard '%s': token %lld has id %u >= 2^31",
                   path_.c_str(), (long long)i, v);
    }
  return int32_t(max_id);
}

uint64_t token_sample_hash(const TokenSource& src) {
  const int64_t n = src.size(), samples = std::min<int64_t>(n, 4096);
  uint64_t h = fnv1a(&n, sizeof(n));
  for (int64_t i = 0; i < samples; ++i) {
    int32_t t = 0;
    src.read(samples > 1 ? i * (n - 1) / (samples - 1) : 0, 1, &t);
    h = fnv1a(&t, sizeof(t), h);
  }
  return h;
}

// ---- ShardWriter --------------------------------------------------------------------------------

ShardWriter::ShardWriter(const std::string& path, int32_t version)
    : path_(path), version_(version) {
  ATTN_REQUIRE(version == kShardVersionU16 || version == kShardVersionU32,
               "shard writer: unsupported version %d for '%s' (1 = uint16, 2 = uint32)", version,
               path.c_str());
  tmp_path_ = strformat("%s.tmp.%d", path.c_str(), int(::getpid()));
  file_ = std::fopen(tmp_path_.c_str(), "wb");
  ATTN_REQUIRE(file_ != nullptr, "cannot create token shard '%s': %s", tmp_path_.c_str(),
               std::strerror(errno));
  // Placeholder header; the real one (with the count) is written by finish().
  std::vector<unsigned char> header(kShardHeaderBytes, 0);
  if (std::fwrite(header.data(), 1, header.size(), file_) != header.size()) {
    std::fclose(file_);
    file_ = nullptr;
    std::remove(tmp_path_.c_str());
    ATTN_FAIL("cannot write token shard '%s': %s", tmp_path_.c_str(), std::strerror(errno));
  }
}

ShardWriter::~ShardWriter() {
  if (file_ != nullptr) {
    std::fclose(file_);
    std::remove(tmp_path_.c_str());
  }
}

void ShardWriter::append(std::span<const int32_t> tokens) {
  ATTN_REQUIRE(file_ != nullptr, "shard writer '%s': append after finish", path_.c_str());
  ATTN_REQUIRE(num_tokens_ + int64_t(tokens.size()) <= kShardMaxTokens,
               "shard writer '%s': more than %lld tokens in one shard", path_.c_str(),
               (long long)kShardMaxTokens);
  const int64_t bpt = bytes_per_token(version_);
  scratch_.resize(tokens.size() * size_t(bpt));
  unsigned char* p = scratch_.data();
  const int64_t limit = version_ == kShardVersionU16 ? 65536 : int64_t(INT32_MAX) + 1;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t t = tokens[i];
    ATTN_REQUIRE(t >= 0 && t < limit,
                 "shard writer '%s': token id %d does not fit a version-%d shard (ids must be in "
                 "[0, %lld))",
                 path_.c_str(), t, version_, (long long)limit);
    if (bpt == 2) {
      p[2 * i] = (unsigned char)(t & 0xff);
      p[2 * i + 1] = (unsigned char)((t >> 8) & 0xff);
    } else {
      store_u32(p + 4 * i, uint32_t(t));
    }
  }
  ATTN_REQUIRE(std::fwrite(p, 1, scratch_.size(), file_) == scratch_.size(),
               "cannot write token shard '%s': %s", tmp_path_.c_str(), std::strerror(errno));
  num_tokens_ += int64_t(tokens.size());
  // Left to the kernel, the shard's pages would go to disk only in finish()'s fsync, which then
  // takes a visible share of a `prepare` run at its very end, with the encoders done and idle
  // (docs/tokenizer.md, "The writer was not the limit; the last fsync was"). Starting the writeback
  // every 8 MiB (SYNC_FILE_RANGE_WRITE queues the pages, it does not wait for them) leaves finish()
  // the last few MiB; fsync reports any write error.
  constexpr int64_t kWritebackBytes = int64_t(8) << 20;
  if ((num_tokens_ - writeback_tokens_) * bpt >= kWritebackBytes) {
    ATTN_REQUIRE(std::fflush(file_) == 0, "cannot write token shard '%s': %s", tmp_path_.c_str(),
                 std::strerror(errno));
    ::sync_file_range(::fileno(file_), kShardHeaderBytes + writeback_tokens_ * bpt,
                      (num_tokens_ - writeback_tokens_) * bpt, SYNC_FILE_RANGE_WRITE);
    writeback_tokens_ = num_tokens_;
  }
}

void ShardWriter::finish() {
  ATTN_REQUIRE(file_ != nullptr, "shard writer '%s': finish called twice", path_.c_str());
  unsigned char header[12];
  store_u32(header, uint32_t(kShardMagic));
  store_u32(header + 4, uint32_t(version_));
  store_u32(header + 8, uint32_t(num_tokens_));
  bool ok = std::fseek(file_, 0, SEEK_SET) == 0 && std::fwrite(header, 1, 12, file_) == 12 &&
            std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0;
  const int err = errno;
  ok = (std::fclose(file_) == 0) && ok;
  file_ = nullptr;
  if (!ok) {
    std::remove(tmp_path_.c_str());
    ATTN_FAIL("cannot write token shard '%s': %s", tmp_path_.c_str(), std::strerror(err));
  }
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    const int rename_err = errno;
    std::remove(tmp_path_.c_str());
    ATTN_FAIL("cannot rename '%s' to '%s': %s", tmp_path_.c_str(), path_.c_str(),
              std::strerror(rename_err));
  }
}

void write_shard(const std::string& path, std::span<const int32_t> tokens, int64_t vocab_size) {
  ShardWriter writer(path, shard_version_for_vocab(vocab_size));
  writer.append(tokens);
  writer.finish();
}

std::vector<int32_t> read_shard(const std::string& path) {
  auto shard = ShardFile::open(path);
  std::vector<int32_t> tokens(size_t(shard->size()));
  shard->read(0, shard->size(), tokens.data());
  return tokens;
}

// ---- globs --------------------------------------------------------------------------------------

std::vector<std::string> expand_glob(const std::string& pattern) {
  ATTN_REQUIRE(!pattern.empty(), "empty file pattern");
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> files;
  if (rc == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) files.emplace_back(g.gl_pathv[i]);
  }
  ::globfree(&g);
  ATTN_REQUIRE(rc == 0 || rc == GLOB_NOMATCH, "glob '%s' failed (read error or out of memory)",
               pattern.c_str());
  if (files.empty()) {
    const bool literal = pattern.find_first_of("*?[") == std::string::npos;
    if (literal) ATTN_FAIL("file '%s' does not exist", pattern.c_str());
    ATTN_FAIL("no files match '%s'", pattern.c_str());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::string> expand_globs(const std::vector<std::string>& patterns) {
  std::vector<std::string> files;
  std::set<std::string> seen;
  for (const auto& pattern : patterns) {
    for (auto& f : expand_glob(pattern)) {
      // The same file by another path (a symlink, `dir/../dir`) counts once too.
      std::error_code ec;
      const fs::path canonical = fs::weakly_canonical(f, ec);
      if (seen.insert(ec ? f : canonical.string()).second) files.push_back(std::move(f));
    }
  }
  return files;
}

}  // namespace attnlab
