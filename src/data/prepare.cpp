#include "data/prepare.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "core/error.h"
#include "data/shard.h"
#include "data/text_reader.h"
#include "tokenizer/tokenizer.h"

namespace attnlab {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

uint64_t mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A seeded 64-bit hash of a document's bytes (8 bytes per step, then a strong finaliser).
uint64_t hash_text(std::string_view text, uint64_t seed) {
  uint64_t h = mix64(seed + 0x9e3779b97f4a7c15ULL) ^ uint64_t(text.size());
  size_t i = 0;
  for (; i + 8 <= text.size(); i += 8) {
    uint64_t word;
    std::memcpy(&word, text.data() + i, 8);
    h = (h ^ mix64(word)) * 0x9fb21c651e98df25ULL;
    h ^= h >> 29;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, text.data() + i, text.size() - i);
  h = (h ^ mix64(tail + 1)) * 0x9fb21c651e98df25ULL;
  return mix64(h);
}

enum Split { kTrain = 0, kVal = 1 };

struct EncodedBatch {
  std::vector<int32_t> tokens[2];
  int64_t documents[2] = {0, 0};
  int64_t bytes[2] = {0, 0};
};

// Encodes documents [begin, end) of `docs`, each preceded by <|endoftext|>.
void encode_range(const Tokenizer& tokenizer, const std::vector<std::string>& docs, size_t begin,
                  size_t end, uint64_t seed, double val_fraction, EncodedBatch& out) {
  const int32_t eot = tokenizer.eot_id();
  for (size_t d = begin; d < end; ++d) {
    const int split = is_val_document(docs[d], seed, val_fraction) ? kVal : kTrain;
    out.tokens[split].push_back(eot);
    tokenizer.encode(docs[d], out.tokens[split]);
    ++out.documents[split];
    out.bytes[split] += int64_t(docs[d].size());
  }
}

// Encodes a batch on `threads` threads (contiguous ranges of about equal bytes), keeping order.
EncodedBatch encode_batch(const Tokenizer& tokenizer, const std::vector<std::string>& docs,
                          int threads, uint64_t seed, double val_fraction) {
  int64_t total_bytes = 0;
  for (const auto& d : docs) total_bytes += int64_t(d.size());
  const size_t parts = std::max<size_t>(1, std::min<size_t>(size_t(threads), docs.size()));
  std::vector<size_t> bounds{0};
  int64_t acc = 0;
  for (size_t d = 0; d < docs.size() && bounds.size() < parts; ++d) {
    acc += int64_t(docs[d].size());
    if (acc * int64_t(parts) >= total_bytes * int64_t(bounds.size())) bounds.push_back(d + 1);
  }
  if (bounds.back() != docs.size()) bounds.push_back(docs.size());

  std::vector<EncodedBatch> pieces(bounds.size() - 1);
  std::vector<std::exception_ptr> errors(pieces.size());
  std::vector<std::thread> workers;
  for (size_t p = 1; p < pieces.size(); ++p) {
    workers.emplace_back([&, p] {
      try {
        encode_range(tokenizer, docs, bounds[p], bounds[p + 1], seed, val_fraction, pieces[p]);
      } catch (...) {
        errors[p] = std::current_exception();
      }
    });
  }
  if (!pieces.empty()) {
    try {
      encode_range(tokenizer, docs, bounds[0], bounds[1], seed, val_fraction, pieces[0]);
    } catch (...) {
      errors[0] = std::current_exception();
    }
  }
  for (auto& w : workers) w.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  EncodedBatch out;
  for (int s = 0; s < 2; ++s) {
    size_t n = 0;
    for (const auto& piece : pieces) n += piece.tokens[s].size();
    out.tokens[s].reserve(n);
    for (const auto& piece : pieces) {
      out.tokens[s].insert(out.tokens[s].end(), piece.tokens[s].begin(), piece.tokens[s].end());
      out.documents[s] += piece.documents[s];
      out.bytes[s] += piece.bytes[s];
    }
  }
  return out;
}

// Cuts one split's token stream into shards of at most shard_tokens tokens.
class SplitWriter {
 public:
  SplitWriter(std::string dir, std::string split, int32_t version, int64_t shard_tokens,
              SplitSummary& summary)
      : dir_(std::move(dir)),
        split_(std::move(split)),
        version_(version),
        shard_tokens_(shard_tokens),
        summary_(summary) {}

  void append(const EncodedBatch& batch, int s) {
    std::span<const int32_t> tokens(batch.tokens[s]);
    summary_.documents += batch.documents[s];
    summary_.bytes += batch.bytes[s];
    summary_.tokens += int64_t(tokens.size());
    while (!tokens.empty()) {
      if (!writer_) {
        const std::string path =
            strformat("%s/%s_%06d.bin", dir_.c_str(), split_.c_str(), int(summary_.shards.size()));
        writer_ = std::make_unique<ShardWriter>(path, version_);
        summary_.shards.push_back(path);
      }
      const size_t take =
          size_t(std::min<int64_t>(int64_t(tokens.size()), shard_tokens_ - writer_->size()));
      writer_->append(tokens.first(take));
      tokens = tokens.subspan(take);
      if (writer_->size() == shard_tokens_) finish();
    }
  }

  void finish() {
    if (writer_) writer_->finish();
    writer_.reset();
  }

 private:
  std::string dir_, split_;
  int32_t version_;
  int64_t shard_tokens_;
  SplitSummary& summary_;
  std::unique_ptr<ShardWriter> writer_;
};

std::string format_duration(double seconds) {
  const int64_t s = int64_t(seconds + 0.5);
  return strformat("%lld:%02lld:%02lld", (long long)(s / 3600), (long long)(s / 60 % 60),
                   (long long)(s % 60));
}

// The progress line: input read (of the total file size), decompressed text rate, tokens, ETA.
class Progress {
 public:
  Progress(bool enabled, int64_t total_file_bytes)
      : enabled_(enabled), total_(total_file_bytes), start_(Clock::now()), last_(start_) {}

  void update(int64_t file_bytes_done, int64_t text_bytes, int64_t tokens, size_t file,
              size_t files, bool force = false) {
    if (!enabled_) return;
    const auto now = Clock::now();
    if (!force && now - last_ < std::chrono::milliseconds(500)) return;
    last_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double fraction =
        total_ > 0 ? std::min(1.0, double(file_bytes_done) / double(total_)) : 0;
    const std::string eta = fraction > 0.001 && fraction < 1.0
                                ? format_duration(elapsed * (1.0 - fraction) / fraction)
                                : std::string("?");
    std::fprintf(stderr,
                 "\rprepare: file %zu/%zu, %.1f%% of input, %.1f MB text (%.1f MB/s), %.2f M "
                 "tokens, ETA %s   ",
                 file, files, 100.0 * fraction, double(text_bytes) / 1e6,
                 double(text_bytes) / 1e6 / std::max(elapsed, 1e-9), double(tokens) / 1e6,
                 eta.c_str());
    std::fflush(stderr);
  }
  void finish() {
    if (enabled_) std::fprintf(stderr, "\n");
  }

 private:
  bool enabled_;
  int64_t total_;
  Clock::time_point start_, last_;
};

void remove_old_shards(const std::string& dir) {
  static const std::regex kShardName(R"((train|val)_[0-9]{6}\.bin)");
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file() && std::regex_match(entry.path().filename().string(), kShardName))
      fs::remove(entry.path());
  }
}

void write_text_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    ATTN_REQUIRE(f.good(), "cannot write '%s'", tmp.c_str());
    f << text << "\n";
    ATTN_REQUIRE(f.good(), "cannot write '%s'", tmp.c_str());
  }
  fs::rename(tmp, path);
}

std::string with_commas(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

}  // namespace

bool is_val_document(std::string_view text, uint64_t seed, double val_fraction) {
  if (val_fraction <= 0.0) return false;
  const double u = double(hash_text(text, seed) >> 11) * 0x1.0p-53;
  return u < val_fraction;
}

void PrepareOptions::validate() const {
  ATTN_REQUIRE(!inputs.empty(), "prepare: no input files given");
  ATTN_REQUIRE(!out_dir.empty(), "prepare: out_dir is empty");
  ATTN_REQUIRE(val_fraction >= 0.0 && val_fraction < 1.0,
               "prepare: val_fraction must be in [0, 1), got %g", val_fraction);
  ATTN_REQUIRE(shard_tokens > 0 && shard_tokens <= kShardMaxTokens,
               "prepare: shard_tokens must be in [1, %lld], got %lld", (long long)kShardMaxTokens,
               (long long)shard_tokens);
  ATTN_REQUIRE(threads >= 0, "prepare: threads must be >= 0, got %d", threads);
}

PrepareSummary prepare(const PrepareOptions& options) {
  options.validate();
  const auto start = Clock::now();
  const std::unique_ptr<Tokenizer> tokenizer = make_tokenizer(options.tokenizer);
  const std::vector<std::string> files = expand_globs(options.inputs);
  const int threads = options.threads > 0 ? options.threads
                                          : int(std::max(1u, std::thread::hardware_concurrency()));

  PrepareSummary summary;
  summary.tokenizer = tokenizer->name();
  summary.vocab_size = tokenizer->vocab_size();
  summary.shard_version = shard_version_for_vocab(tokenizer->vocab_size());
  summary.input_files = int64_t(files.size());

  std::error_code ec;
  fs::create_directories(options.out_dir, ec);
  ATTN_REQUIRE(fs::is_directory(options.out_dir),
               "prepare: cannot create output directory '%s'%s%s", options.out_dir.c_str(),
               ec ? ": " : "", ec ? ec.message().c_str() : "");
  remove_old_shards(options.out_dir);

  int64_t total_file_bytes = 0;
  for (const auto& f : files) total_file_bytes += int64_t(fs::file_size(f));
  Progress progress(options.progress, total_file_bytes);

  SplitWriter writers[2] = {SplitWriter(options.out_dir, "train", summary.shard_version,
                                        options.shard_tokens, summary.train),
                            SplitWriter(options.out_dir, "val", summary.shard_version,
                                        options.shard_tokens, summary.val)};
  const int64_t batch_bytes = int64_t(threads) * (8 << 20);

  // Pipeline: the main thread reads batch k+1 while batch k is being encoded.
  std::future<EncodedBatch> pending;
  auto write_pending = [&] {
    if (!pending.valid()) return;
    const EncodedBatch encoded = pending.get();
    for (int s = 0; s < 2; ++s) writers[s].append(encoded, s);
  };
  auto submit = [&](std::vector<std::string>&& docs) {
    write_pending();
    pending = std::async(std::launch::async, [&, docs = std::move(docs)] {
      return encode_batch(*tokenizer, docs, threads, options.seed, options.val_fraction);
    });
  };

  std::vector<std::string> batch;
  int64_t batch_size = 0, text_bytes = 0, files_done_bytes = 0;
  const bool jsonl = !options.jsonl_field.empty();
  for (size_t fi = 0; fi < files.size(); ++fi) {
    DocumentReader reader(open_text_stream(files[fi]), jsonl ? "\n" : options.delimiter);
    std::string doc;
    int64_t record = 0;
    while (reader.next(doc)) {
      ++record;
      if (jsonl) {
        nlohmann::json obj;
        try {
          obj = nlohmann::json::parse(doc);
        } catch (const nlohmann::json::exception& e) {
          ATTN_FAIL("'%s': record %lld is not valid JSON: %s", files[fi].c_str(), (long long)record,
                    e.what());
        }
        const auto it = obj.is_object() ? obj.find(options.jsonl_field) : obj.end();
        ATTN_REQUIRE(obj.is_object() && it != obj.end() && it->is_string(),
                     "'%s': record %lld has no string field '%s'", files[fi].c_str(),
                     (long long)record, options.jsonl_field.c_str());
        doc = it->get<std::string>();
        if (doc.empty()) continue;
      }
      text_bytes += int64_t(doc.size());
      batch_size += int64_t(doc.size());
      batch.push_back(std::move(doc));
      doc = std::string();
      if (batch_size >= batch_bytes) {
        submit(std::move(batch));
        batch = {};
        batch_size = 0;
      }
      const int64_t consumed = reader.stream().file_bytes_consumed();
      progress.update(files_done_bytes + std::max<int64_t>(0, consumed), text_bytes,
                      summary.train.tokens + summary.val.tokens, fi + 1, files.size());
    }
    files_done_bytes += int64_t(fs::file_size(files[fi]));
  }
  if (!batch.empty()) submit(std::move(batch));
  write_pending();
  for (auto& w : writers) w.finish();
  progress.update(files_done_bytes, text_bytes, summary.train.tokens + summary.val.tokens,
                  files.size(), files.size(), /*force=*/true);
  progress.finish();

  write_text_atomic(options.out_dir + "/tokenizer.json", tokenizer->to_json());
  summary.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (options.val_fraction > 0 && summary.val.documents == 0 && options.progress)
    std::fprintf(stderr,
                 "prepare: warning: no document went to val (val_fraction %g, %lld "
                 "documents); raise val_fraction or add documents\n",
                 options.val_fraction, (long long)summary.train.documents);
  return summary;
}

std::string PrepareSummary::to_string() const {
  std::string s =
      strformat("prepared %lld file(s) with tokenizer %s (vocab %d, %s shards) in %.1f s\n",
                (long long)input_files, tokenizer.c_str(), vocab_size,
                shard_version == kShardVersionU16 ? "uint16" : "uint32", seconds);
  const std::pair<const char*, const SplitSummary*> splits[] = {{"train", &train}, {"val", &val}};
  for (const auto& [name, split] : splits) {
    s += strformat("  %-5s %s documents, %s tokens, %s bytes, %.4f tokens/byte, %zu shard(s)\n",
                   name, with_commas(split->documents).c_str(), with_commas(split->tokens).c_str(),
                   with_commas(split->bytes).c_str(), split->tokens_per_byte(),
                   split->shards.size());
  }
  return s;
}

}  // namespace attnlab
