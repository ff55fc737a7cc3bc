// Token shards in the llm.c format, plus a uint32 extension for vocabularies above 65,535.
//
// Layout (little-endian):
//   header: 256 x int32
//     header[0] = 20240520 (magic)
//     header[1] = version: 1 = tokens are uint16 (llm.c), 2 = tokens are uint32 (attnlab extension)
//     header[2] = number of tokens (fits int32; a shard holds at most 2^31-1 tokens)
//     header[3..255] = 0
//   then header[2] tokens, 2 or 4 bytes each.
// Version-1 files are byte-compatible with llm.c's fineweb/tinyshakespeare shards.
//
// Writing is atomic: tokens go to "<path>.tmp.<pid>", which is fsync'ed and renamed over <path>,
// so a crash never leaves a half-written shard under the final name.
// Reading maps the file (mmap): a corpus is never loaded into memory.
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace attnlab {

constexpr int32_t kShardMagic = 20240520;
constexpr int kShardHeaderInts = 256;
constexpr int64_t kShardHeaderBytes = kShardHeaderInts * 4;
constexpr int32_t kShardVersionU16 = 1;
constexpr int32_t kShardVersionU32 = 2;
constexpr int64_t kShardMaxTokens = 2147483647;  // header[2] is an int32

// The version a vocabulary needs: uint16 tokens when every id fits (vocab_size <= 65536).
int32_t shard_version_for_vocab(int64_t vocab_size);

// A sequence of token ids with random access. Implementations: ShardFile (mmap'ed shard) and
// MemoryTokens (an in-memory vector, for synthetic data and tests).
class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual std::string name() const = 0;  // a file path, or a label such as "synthetic/train"
  virtual int64_t size() const = 0;      // number of tokens
  // Copies tokens [start, start + count) into out. Requires 0 <= start, start + count <= size().
  virtual void read(int64_t start, int64_t count, int32_t* out) const = 0;
};

// A hash of a source's size and of 4096 tokens spread evenly over it (all of a shorter one):
// cheap on any size, and different for regenerated or replaced data (dist/consistency.h, the
// resume's data fingerprint).
uint64_t token_sample_hash(const TokenSource& src);

class MemoryTokens final : public TokenSource {
 public:
  MemoryTokens(std::vector<int32_t> tokens, std::string name = "memory");
  std::string name() const override { return name_; }
  int64_t size() const override { return int64_t(tokens_.size()); }
  void read(int64_t start, int64_t count, int32_t* out) const override;
  const std::vector<int32_t>& tokens() const { return tokens_; }

 private:
  std::vector<int32_t> tokens_;
  std::string name_;
};

// A read-only, memory-mapped shard. Opening validates the header (magic, version), the file size
// against the token count (truncated or oversized files), and, when vocab_size > 0, that every
// token id is < vocab_size (a full sequential scan). Errors are attnlab::Error naming the file.
class ShardFile final : public TokenSource {
 public:
  static std::unique_ptr<ShardFile> open(const std::string& path, int64_t vocab_size = 0);
  ~ShardFile() override;
  ShardFile(const ShardFile&) = delete;
  ShardFile& operator=(const ShardFile&) = delete;

  std::string name() const override { return path_; }
  int64_t size() const override { return num_tokens_; }
  void read(int64_t start, int64_t count, int32_t* out) const override;
  int32_t version() const { return version_; }
  int32_t token(int64_t i) const;
  // Largest token id in the shard (full scan).
  int32_t max_token() const;

 private:
  ShardFile() = default;
  std::string path_;
  int32_t version_ = 0;
  int64_t num_tokens_ = 0;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const unsigned char* data_ = nullptr;  // first token
};

// Streaming, atomic shard writer. append() may be called many times; finish() writes the header,
// fsyncs and renames the temporary file to `path`. append() starts the writeback of the tokens
// to disk every 8 MiB or so, so that finish() waits only for the last ones. Destroying an
// unfinished writer deletes the temporary file. Every appended id must be in [0, 65536) for version
// 1, >= 0 for version 2.
class ShardWriter {
 public:
  ShardWriter(const std::string& path, int32_t version);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  void append(std::span<const int32_t> tokens);
  int64_t size() const { return num_tokens_; }
  const std::string& path() const { return path_; }
  void finish();

 private:
  std::string path_, tmp_path_;
  int32_t version_;
  int64_t num_tokens_ = 0;
  int64_t writeback_tokens_ = 0;  // tokens whose writeback to disk has been started
  std::FILE* file_ = nullptr;
  std::vector<unsigned char> scratch_;
};

// Writes a whole shard at once; the version is chosen from vocab_size (shard_version_for_vocab).
void write_shard(const std::string& path, std::span<const int32_t> tokens, int64_t vocab_size);

// Reads a whole shard into memory (tests and small files only).
std::vector<int32_t> read_shard(const std::string& path);

// `attnlab prepare` writes this file into its output directory before it replaces the directory's
// shards and tokenizer.json, and removes it once all of them are in place. ShardFile::open refuses
// a shard whose directory holds it: an interrupted replacement leaves a mix of two datasets
// (or the new shards beside the old tokenizer), which would otherwise train silently.
inline constexpr const char* kPrepareIncompleteMarker = ".prepare_incomplete";

// Files matching a glob pattern (shell syntax, e.g. "data/train_*.bin"), sorted by name.
// A pattern without wildcards must name an existing file. Throws if nothing matches.
std::vector<std::string> expand_glob(const std::string& pattern);

// expand_glob over several patterns; each pattern's matches are sorted, patterns keep their order,
// duplicates are dropped (the same file under another path, a symlink, too: by canonical path).
std::vector<std::string> expand_globs(const std::vector<std::string>& patterns);

}  // namespace attnlab
