#include "data/prepare.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <span>
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

// Tasks per thread and batch: enough that threads finishing early find work.
constexpr size_t kTasksPerThread = 4;

enum Split : uint8_t { kTrain = 0, kVal = 1 };

// A batch of whole documents, cut into tasks of about equal bytes for the encode pool. A task is
// a run of consecutive segments; a segment is a whole document or a part of one cut at
// Tokenizer::split_point(), so encoding the segments one by one gives the ids of the whole
// documents. Tasks are encoded in any order on any thread; the writer walks them in order.
struct Batch {
  struct Segment {
    size_t doc, begin, end;  // bytes [begin, end) of docs[doc]
  };
  std::vector<std::string> docs;
  std::vector<Segment> segments;
  std::vector<size_t> task_first;  // task t holds segments [task_first[t], task_first[t + 1])
  // Results, written by the task's worker, read by the batch's writer once the batch is done.
  std::vector<Split> split;                  // per document, by the task holding its start
  std::vector<std::vector<int32_t>> tokens;  // per task: its segments' ids, eot included
  std::vector<size_t> segment_end;           // per segment: end of its ids in its task's tokens
  std::vector<std::exception_ptr> errors;    // per task
  // Scheduling state, guarded by EncodePool's mutex.
  size_t next_task = 0, done_tasks = 0;

  size_t num_tasks() const { return task_first.size() - 1; }
};

// Cuts `batch.docs` into segments and about `parts` tasks of about equal bytes: a document that
// does not fit the current task is cut at the first split_point() at or after the place where
// the task would be full (or not at all, when the tokenizer finds no cut nearby).
void plan_tasks(const Tokenizer& tokenizer, size_t parts, Batch& batch) {
  size_t total = 0;
  for (const auto& d : batch.docs) total += d.size();
  const size_t target = std::max<size_t>(1, total / std::max<size_t>(1, parts));
  batch.task_first.assign(1, 0);
  size_t filled = 0;  // bytes in the open task; always < target at the top of the loop
  for (size_t d = 0; d < batch.docs.size(); ++d) {
    const std::string_view text = batch.docs[d];
    size_t begin = 0;
    do {
      size_t end = text.size();
      if (filled + (end - begin) > target) {
        end = begin + tokenizer.split_point(text.substr(begin), target - filled);
        ATTN_ASSERT(end > begin && end <= text.size());
      }
      batch.segments.push_back({d, begin, end});
      filled += end - begin;
      begin = end;
      if (filled >= target) {
        batch.task_first.push_back(batch.segments.size());
        filled = 0;
      }
    } while (begin < text.size());
  }
  if (batch.task_first.back() != batch.segments.size())
    batch.task_first.push_back(batch.segments.size());
  batch.split.assign(batch.docs.size(), kTrain);
  batch.tokens.resize(batch.num_tasks());
  batch.segment_end.resize(batch.segments.size());
  batch.errors.resize(batch.num_tasks());
}

// Encodes task t of a batch: <|endoftext|> before the first segment of each document, and the
// train/val decision (a hash of the whole document) where the document starts.
void encode_task(const Tokenizer& tokenizer, uint64_t seed, double val_fraction, Batch& batch,
                 size_t t) {
  std::vector<int32_t>& out = batch.tokens[t];
  for (size_t i = batch.task_first[t]; i < batch.task_first[t + 1]; ++i) {
    const Batch::Segment& seg = batch.segments[i];
    const std::string_view doc = batch.docs[seg.doc];
    if (seg.begin == 0) {
      batch.split[seg.doc] = is_val_document(doc, seed, val_fraction) ? kVal : kTrain;
      out.push_back(tokenizer.eot_id());
    }
    tokenizer.encode(doc.substr(seg.begin, seg.end - seg.begin), out);
    batch.segment_end[i] = out.size();
  }
}

// `threads` encoding threads that live for the whole run (the BPE tokenizer keeps a cache per
// thread, which a thread per batch would throw away). Batches are queued; a worker takes the next
// task of the oldest batch that has one left, so the next batch starts while the last tasks of
// the previous one finish, and no thread waits at a batch boundary.
class EncodePool {
 public:
  EncodePool(const Tokenizer& tokenizer, int threads, uint64_t seed, double val_fraction)
      : tokenizer_(tokenizer), seed_(seed), val_fraction_(val_fraction) {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
  }
  ~EncodePool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
      queue_.clear();
    }
    work_cv_.notify_all();
    for (auto& w : workers_) w.join();
  }

  void submit(std::shared_ptr<Batch> batch) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(batch));
    }
    work_cv_.notify_all();
  }

  // Blocks until every task of `batch` is done; rethrows the first error of its tasks.
  void wait(const Batch& batch) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_cv_.wait(lock, [&] { return batch.done_tasks == batch.num_tasks(); });
    for (const auto& e : batch.errors) {
      if (e) std::rethrow_exception(e);
    }
  }

 private:
  void work() {
    while (true) {
      std::shared_ptr<Batch> batch;
      size_t t;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        batch = queue_.front();
        t = batch->next_task++;
        if (batch->next_task == batch->num_tasks()) queue_.pop_front();
      }
      try {
        encode_task(tokenizer_, seed_, val_fraction_, *batch, t);
      } catch (...) {
        batch->errors[t] = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (++batch->done_tasks < batch->num_tasks()) continue;
      }
      done_cv_.notify_all();
    }
  }

  const Tokenizer& tokenizer_;
  const uint64_t seed_;
  const double val_fraction_;
  std::mutex mutex_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<std::shared_ptr<Batch>> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

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

  void append(std::span<const int32_t> tokens) {
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
  void count(int64_t documents, int64_t bytes) {
    summary_.documents += documents;
    summary_.bytes += bytes;
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

// Appends an encoded batch to the two splits, segment by segment in input order.
void write_batch(const Batch& batch, SplitWriter (&writers)[2]) {
  for (size_t t = 0; t < batch.num_tasks(); ++t) {
    const std::vector<int32_t>& tokens = batch.tokens[t];
    size_t from = 0;
    for (size_t i = batch.task_first[t]; i < batch.task_first[t + 1]; ++i) {
      const Batch::Segment& seg = batch.segments[i];
      SplitWriter& w = writers[batch.split[seg.doc]];
      w.count(seg.begin == 0 ? 1 : 0, int64_t(seg.end - seg.begin));
      w.append(std::span<const int32_t>(tokens).subspan(from, batch.segment_end[i] - from));
      from = batch.segment_end[i];
    }
  }
}

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
  ATTN_REQUIRE(batch_bytes >= 0, "prepare: batch_bytes must be >= 0, got %lld",
               (long long)batch_bytes);
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
  // Pipeline: the main thread reads and cuts batches; the pool encodes them; a writer task per
  // batch (chained, so batches are written in order, each on its own short-lived thread) waits
  // for its batch and writes it. Reading, encoding and writing overlap, and the main thread only
  // reads, so it keeps up with many encoding threads. The main thread waits while more than
  // kInFlight batches are unwritten. Memory: about kInFlight + 1 batches of text and ids.
  // Batches start small (the pool waits for the first one) and double up to the full size.
  constexpr size_t kInFlight = 3;
  const int64_t full_batch_bytes =
      options.batch_bytes > 0 ? options.batch_bytes : int64_t(threads) * (2 << 20);
  int64_t batch_bytes =
      options.batch_bytes > 0 ? options.batch_bytes : int64_t(threads) * (256 << 10);
  std::atomic<int64_t> tokens_written{0};  // for the progress line
  // Declared after `writers` and before `written`: a pending writer task (which the destructor
  // of its future waits for, also when an error unwinds this function) uses both.
  EncodePool pool(*tokenizer, threads, options.seed, options.val_fraction);
  std::deque<std::shared_future<void>> written;
  auto submit = [&](std::vector<std::string>&& docs) {
    auto batch = std::make_shared<Batch>();
    batch->docs = std::move(docs);
    plan_tasks(*tokenizer, size_t(threads) * kTasksPerThread, *batch);
    pool.submit(batch);
    std::shared_future<void> previous =
        written.empty() ? std::shared_future<void>() : written.back();
    written.push_back(std::async(std::launch::async, [&, previous, batch = std::move(batch)] {
                        if (previous.valid()) previous.get();  // rethrows an earlier write error
                        pool.wait(*batch);
                        write_batch(*batch, writers);
                        int64_t n = 0;
                        for (const auto& t : batch->tokens) n += int64_t(t.size());
                        tokens_written += n;
                      }).share());
    while (written.size() > kInFlight) {
      written.front().get();
      written.pop_front();
    }
    batch_bytes = std::min(full_batch_bytes, 2 * batch_bytes);
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
                      tokens_written.load(), fi + 1, files.size());
    }
    files_done_bytes += int64_t(fs::file_size(files[fi]));
  }
  if (!batch.empty()) submit(std::move(batch));
  for (auto& w : written) w.get();
  written.clear();
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
