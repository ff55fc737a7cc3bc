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
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <span>
#include <thread>

#include "core/error.h"
#include "data/shard.h"
#include "data/text_reader.h"
#include "io/atomic_file.h"
#include "io/metrics.h"
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
// Batches are recycled (BatchQueue): their buffers keep their capacity, so after the first few
// batches nothing is allocated per document or per task, and no thread page-faults fresh memory.
struct Batch {
  struct Segment {
    size_t doc, begin, end;  // bytes [begin, end) of docs[doc]
  };
  std::string text;                          // decoded input; plain-text documents are ranges of it
  std::string decoded;                       // JSON lines input: the documents' text, back to back
  std::vector<DocumentScanner::Span> spans;  // the documents, ranges of `text` or `decoded`
  int64_t doc_bytes = 0;                     // sum of the spans' sizes
  std::vector<std::string_view> docs;        // the spans as views, set by plan_tasks()
  std::vector<Segment> segments;
  std::vector<size_t> task_first;  // task t holds segments [task_first[t], task_first[t + 1])
  // Results, written by the task's worker, read by the batch's writer once the batch is done.
  std::vector<Split> split;                  // per document, by the task holding its start
  std::vector<std::vector<int32_t>> tokens;  // per task: its segments' ids, eot included
  std::vector<size_t> segment_end;           // per segment: end of its ids in its task's tokens
  std::vector<std::exception_ptr> errors;    // per task
  // Scheduling state, guarded by EncodePool's mutex.
  size_t next_task = 0;
  std::vector<uint8_t> task_done;  // per task

  size_t num_tasks() const { return task_first.size() - 1; }
  void clear() {  // keeps every buffer's capacity
    text.clear();
    decoded.clear();
    spans.clear();
    doc_bytes = 0;
    docs.clear();
    segments.clear();
    task_first.clear();
    for (auto& t : tokens) t.clear();
    next_task = 0;
  }
};

// Cuts the batch's documents into segments and about `parts` tasks of about equal bytes: a
// document that does not fit the current task is cut at the first split_point() at or after the
// place where the task would be full (or not at all, when the tokenizer finds no cut nearby).
void plan_tasks(const Tokenizer& tokenizer, size_t parts, bool spans_of_decoded, Batch& batch) {
  const std::string_view source = spans_of_decoded ? batch.decoded : batch.text;
  for (const auto& s : batch.spans) batch.docs.push_back(source.substr(s.begin, s.end - s.begin));
  const size_t total = size_t(batch.doc_bytes);
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
  if (batch.tokens.size() < batch.num_tasks()) batch.tokens.resize(batch.num_tasks());
  batch.segment_end.resize(batch.segments.size());
  batch.errors.assign(batch.num_tasks(), nullptr);
  batch.task_done.assign(batch.num_tasks(), 0);
}

// Encodes task t of a batch into `out` (the calling thread's own vector, then swapped into the
// batch): <|endoftext|> before the first segment of each document, and the train/val decision
// (a hash of the whole document) where the document starts. Encoding straight into
// batch.tokens[t] would be false sharing: the vectors of neighbouring tasks, encoded at the same
// time on other threads, share cache lines, and every appended id writes the vector's end
// pointer (on the 16-core host that tripled the CPU time per byte at 8-16 threads).
void encode_task(const Tokenizer& tokenizer, uint64_t seed, double val_fraction, Batch& batch,
                 size_t t, std::vector<int32_t>& out) {
  out.clear();
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
  batch.tokens[t].swap(out);  // `out` takes the batch's old buffer, for the next task
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

  // True when no task waits for a thread (the threads may still be finishing theirs).
  bool starving() {
    std::lock_guard<std::mutex> lock(mutex_);
    return queue_.empty();
  }

  // Blocks until task t of `batch` is done; rethrows its error.
  void wait(const Batch& batch, size_t t) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_cv_.wait(lock, [&] { return batch.task_done[t] != 0; });
    if (batch.errors[t]) std::rethrow_exception(batch.errors[t]);
  }

  // Seconds the threads spent encoding, summed over threads.
  double busy_seconds() const { return double(busy_ns_.load()) * 1e-9; }

 private:
  void work() {
    std::vector<int32_t> tokens;  // this thread's output buffer (see encode_task)
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
      const auto start = Clock::now();
      try {
        encode_task(tokenizer_, seed_, val_fraction_, *batch, t, tokens);
      } catch (...) {
        batch->errors[t] = std::current_exception();
      }
      busy_ns_ +=
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        batch->task_done[t] = 1;
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
  std::atomic<int64_t> busy_ns_{0};
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

// Appends task t of an encoded batch to the two splits in input order: each run of consecutive
// segments of one split goes to its writer in one piece.
void write_task(const Batch& batch, size_t t, SplitWriter (&writers)[2]) {
  const std::span<const int32_t> tokens(batch.tokens[t]);
  size_t from = 0;
  size_t i = batch.task_first[t];
  while (i < batch.task_first[t + 1]) {
    const Split split = batch.split[batch.segments[i].doc];
    int64_t documents = 0, bytes = 0;
    for (; i < batch.task_first[t + 1] && batch.split[batch.segments[i].doc] == split; ++i) {
      const Batch::Segment& seg = batch.segments[i];
      documents += seg.begin == 0 ? 1 : 0;
      bytes += int64_t(seg.end - seg.begin);
    }
    writers[split].count(documents, bytes);
    writers[split].append(tokens.subspan(from, batch.segment_end[i - 1] - from));
    from = batch.segment_end[i - 1];
  }
}

// The batches between the reading main thread and the writer thread: at most `capacity` exist
// (one being filled, the rest being encoded or written), and they are recycled. The writer thread
// takes submitted batches in order, waits until they are encoded and writes them. Its errors
// (and the encoding errors it rethrows) come back to the main thread through acquire()/finish().
class BatchQueue {
 public:
  BatchQueue(size_t capacity, std::function<void(Batch&)> write)
      : capacity_(capacity), write_(std::move(write)), writer_([this] { run(); }) {}
  ~BatchQueue() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    writer_.join();
  }

  // An empty batch; waits while `capacity` batches are in use.
  std::shared_ptr<Batch> acquire() {
    std::unique_lock<std::mutex> lock(mutex_);
    const auto start = Clock::now();
    cv_.wait(lock, [&] { return error_ || !free_.empty() || created_ < capacity_; });
    wait_seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
    if (error_) std::rethrow_exception(error_);
    if (free_.empty()) {
      ++created_;
      return std::make_shared<Batch>();
    }
    std::shared_ptr<Batch> batch = std::move(free_.back());
    free_.pop_back();
    return batch;
  }

  void submit(std::shared_ptr<Batch> batch) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pending_.push_back(std::move(batch));
    }
    cv_.notify_all();
  }

  // Waits until every submitted batch is written; rethrows the writer's error.
  void finish() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return error_ || (pending_.empty() && !writing_); });
    if (error_) std::rethrow_exception(error_);
  }

  double wait_seconds() const { return wait_seconds_; }  // in acquire(), for the summary

 private:
  void run() {
    while (true) {
      std::shared_ptr<Batch> batch;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
        if (stop_ || error_) return;
        batch = std::move(pending_.front());
        pending_.pop_front();
        writing_ = true;
      }
      std::exception_ptr error;
      try {
        write_(*batch);  // waits for the encoding, then writes
      } catch (...) {
        error = std::current_exception();
      }
      batch->clear();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        writing_ = false;
        free_.push_back(std::move(batch));
        if (error) error_ = error;
      }
      cv_.notify_all();
      if (error) return;
    }
  }

  const size_t capacity_;
  const std::function<void(Batch&)> write_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Batch>> pending_;
  std::vector<std::shared_ptr<Batch>> free_;
  size_t created_ = 0;
  bool writing_ = false, stop_ = false;
  std::exception_ptr error_;
  double wait_seconds_ = 0.0;
  std::thread writer_;  // last: starts after the members above exist
};

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
                                ? io::format_duration(elapsed * (1.0 - fraction) / fraction)
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
  summary.threads = threads;

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
  // Pipeline, each stage on its own threads, so that they overlap:
  //   decoders (ParallelFileReader: up to `threads` files at once, each file on one thread)
  //   -> main thread: appends the decoded blocks to a batch and finds the documents in place
  //      (DocumentScanner; JSON lines are parsed here), cuts the batch into tasks
  //   -> `threads` encoding threads (EncodePool)
  //   -> one writer thread: writes the batches in order (BatchQueue). On the 16-core host this is
  //      not what bounds a 16-thread run: handing the writes to two file threads of their own, so
  //      that a batch is free as soon as its ids are copied, did not shorten it
  //      (docs/tokenizer.md).
  // `threads` counts the encoding threads only: the other stages are light (reading and cutting a
  // plain file runs at GB/s; writing is a conversion to uint16) except decoding, which for
  // .gz/.xz input runs in a decoder thread (or the xz program) beside the encoders.
  // Batches start small (the pool waits for the first one) and double up to the full size. A
  // batch also goes out early, at any size, when the encoders have nothing left to do and the
  // next block of input is not decoded yet (input slower than encoding: .xz).
  // Memory: kBatches batches of text and ids (~70 MB each at 16 threads), plus up to
  // kAheadBytesPerThread x threads of text decoded ahead. 6 or 8 batches ended the main thread's
  // wait for a free batch at 16 threads on the 16-core host but did not shorten the run: the
  // encoders bound it (docs/tokenizer.md).
  constexpr size_t kBatches = 4;
  constexpr size_t kAheadBytesPerThread = size_t(16) << 20;
  const int64_t full_batch_bytes =
      options.batch_bytes > 0 ? options.batch_bytes : int64_t(threads) * (2 << 20);
  int64_t batch_bytes =
      options.batch_bytes > 0 ? options.batch_bytes : int64_t(threads) * (256 << 10);
  const int64_t early_batch_bytes = std::min<int64_t>(batch_bytes, int64_t(threads) * (16 << 10));
  std::atomic<int64_t> tokens_written{0};  // for the progress line
  double write_seconds = 0.0;              // the writer thread's, read after queue.finish()
  const bool jsonl = !options.jsonl_field.empty();

  // Destroyed in reverse order: the reader's decoders stop first, then the writer thread (which
  // may be waiting for the pool), then the pool.
  EncodePool pool(*tokenizer, threads, options.seed, options.val_fraction);
  // Each task is written as soon as it and the tasks before it are encoded, so that little
  // writing is left when the last task is done.
  BatchQueue queue(kBatches, [&](Batch& batch) {
    for (size_t t = 0; t < batch.num_tasks(); ++t) {
      pool.wait(batch, t);  // rethrows an encoding error
      const auto t0 = Clock::now();
      write_task(batch, t, writers);
      tokens_written += int64_t(batch.tokens[t].size());
      write_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    }
  });
  ParallelFileReader reader(files, threads, kAheadBytesPerThread * size_t(threads));

  DocumentScanner scanner(jsonl ? "\n" : options.delimiter);
  std::vector<DocumentScanner::Span> lines;  // JSON lines input: the lines of the last block
  int64_t record = 0;                        // JSON lines input: non-empty lines of this file
  size_t file = 0;                           // file of the last block
  std::shared_ptr<Batch> batch = queue.acquire();

  // Takes the documents completed in the batch's text (all of them at the end of a file).
  auto take_documents = [&](bool end_of_file) {
    std::vector<DocumentScanner::Span>& found = jsonl ? lines : batch->spans;
    const size_t before = found.size();
    if (end_of_file)
      scanner.finish(batch->text, found);
    else
      scanner.scan(batch->text, found);
    if (!jsonl) {
      for (size_t i = before; i < found.size(); ++i)
        batch->doc_bytes += int64_t(found[i].end - found[i].begin);
      return;
    }
    for (const auto& line : lines) {
      ++record;
      nlohmann::json obj;
      try {
        obj = nlohmann::json::parse(batch->text.begin() + int64_t(line.begin),
                                    batch->text.begin() + int64_t(line.end));
      } catch (const nlohmann::json::exception& e) {
        ATTN_FAIL("'%s': record %lld is not valid JSON: %s", files[file].c_str(), (long long)record,
                  e.what());
      }
      const auto it = obj.is_object() ? obj.find(options.jsonl_field) : obj.end();
      ATTN_REQUIRE(obj.is_object() && it != obj.end() && it->is_string(),
                   "'%s': record %lld has no string field '%s'", files[file].c_str(),
                   (long long)record, options.jsonl_field.c_str());
      const std::string& value = it->get_ref<const std::string&>();
      if (value.empty()) continue;
      batch->spans.push_back({batch->decoded.size(), batch->decoded.size() + value.size()});
      batch->decoded += value;
      batch->doc_bytes += int64_t(value.size());
    }
    lines.clear();
  };
  // Sends the batch's documents to be encoded and written; the incomplete document at the end of
  // its text moves to the next batch.
  auto submit = [&] {
    std::shared_ptr<Batch> next = queue.acquire();
    const size_t keep = scanner.begin();
    next->text.reserve(size_t(full_batch_bytes) + 2 * ParallelFileReader::kBlockBytes);
    next->text.assign(batch->text, keep, std::string::npos);
    scanner.drop_prefix(keep);
    plan_tasks(*tokenizer, size_t(threads) * kTasksPerThread, jsonl, *batch);
    pool.submit(batch);
    queue.submit(std::move(batch));
    batch = std::move(next);
    batch_bytes = std::min(full_batch_bytes, 2 * batch_bytes);
  };

  std::string block;
  int64_t text_bytes = 0;
  double input_wait_seconds = 0.0;
  const auto pipeline_start = Clock::now();
  summary.setup_seconds = std::chrono::duration<double>(pipeline_start - start).count();
  while (true) {
    if (batch->doc_bytes >= early_batch_bytes && !reader.ready() && pool.starving()) submit();
    const auto t0 = Clock::now();
    if (!reader.next(block, file)) break;
    input_wait_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    if (block.empty()) {  // end of a file: the rest of the text is its last document
      take_documents(/*end_of_file=*/true);
      record = 0;
    } else {
      batch->text += block;
      text_bytes += int64_t(block.size());
      take_documents(/*end_of_file=*/false);
    }
    if (batch->doc_bytes >= batch_bytes) submit();
    progress.update(reader.file_bytes_consumed(), text_bytes, tokens_written.load(), file + 1,
                    files.size());
  }
  if (!batch->spans.empty()) submit();
  const double main_loop_seconds =
      std::chrono::duration<double>(Clock::now() - pipeline_start).count();
  queue.finish();
  const auto t0 = Clock::now();
  for (auto& w : writers) w.finish();
  summary.flush_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  summary.pipeline_seconds = std::chrono::duration<double>(Clock::now() - pipeline_start).count();
  write_seconds += summary.flush_seconds;
  progress.update(total_file_bytes, text_bytes, summary.train.tokens + summary.val.tokens,
                  files.size(), files.size(), /*force=*/true);
  progress.finish();

  io::write_file_atomic(options.out_dir + "/tokenizer.json", tokenizer->to_json() + "\n");
  summary.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  summary.encode_thread_seconds = pool.busy_seconds();
  summary.input_wait_seconds = input_wait_seconds;
  summary.encoder_wait_seconds = queue.wait_seconds();
  summary.write_seconds = write_seconds;
  summary.main_seconds =
      std::max(0.0, main_loop_seconds - input_wait_seconds - queue.wait_seconds());
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
  // Where the time went: which stage bounds the run.
  s += strformat(
      "  time: %.2f s setup (tokenizer), then %.2f s of pipeline: %d encoding threads busy %.0f%% "
      "of it; main thread worked %.2f s and waited %.2f s for decoded input and %.2f s for the "
      "encoders; writing took %.2f s (%.2f s of it the final flush to disk)\n",
      setup_seconds, pipeline_seconds, threads,
      100.0 * encode_thread_seconds / std::max(1e-9, double(threads) * pipeline_seconds),
      main_seconds, input_wait_seconds, encoder_wait_seconds, write_seconds, flush_seconds);
  return s;
}

}  // namespace attnlab
