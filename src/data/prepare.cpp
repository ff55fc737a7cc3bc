// `prepare`: the driver. It reads the inputs and finds the documents on the calling thread, hands
// batches to the pipeline of prepare_pipeline.h, and cuts the encoded token streams into shards.
#include "data/prepare.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <span>
#include <thread>

#include "core/error.h"
#include "data/prepare_pipeline.h"
#include "data/shard.h"
#include "data/text_reader.h"
#include "io/atomic_file.h"
#include "io/metrics.h"
#include "tokenizer/tokenizer.h"

namespace attnlab {

namespace {

namespace fs = std::filesystem;
using prepare_detail::Batch;
using prepare_detail::BatchQueue;
using prepare_detail::Clock;
using prepare_detail::DocumentFrame;
using prepare_detail::EncodePool;
using prepare_detail::kTasksPerThread;
using prepare_detail::plan_tasks;
using prepare_detail::Split;

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
  static const std::regex kShardName(R"((train|val)_[0-9]{6,}\.bin)");
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
  ATTN_REQUIRE(threads >= 0 && threads <= kMaxThreads,
               "prepare: threads must be in [0, %d] (0 = all cores), got %d", kMaxThreads, threads);
}

PrepareSummary prepare(const PrepareOptions& options) {
  options.validate();
  const auto start = Clock::now();
  const std::unique_ptr<Tokenizer> tokenizer = make_tokenizer(options.tokenizer);
  ATTN_REQUIRE(!options.eos || tokenizer->bos_id() >= 0,
               "prepare: --eos ends documents with the end-of-text token, but tokenizer '%s' has "
               "no BOS: its documents are separated by that token already (it starts each one)",
               tokenizer->name().c_str());
  ATTN_REQUIRE(!options.eos || tokenizer->bos_id() != tokenizer->eot_id(),
               "prepare: --eos: tokenizer '%s' has one token (%d) for both its BOS and its "
               "end-of-text; every document starts with it already",
               tokenizer->name().c_str(), tokenizer->eot_id());
  const DocumentFrame frame{document_start_id(*tokenizer),
                            options.eos ? int32_t(tokenizer->eot_id()) : -1};
  const std::vector<std::string> files = expand_globs(options.inputs);
  for (const std::string& f : files)
    ATTN_REQUIRE(!fs::is_directory(f),
                 "prepare: input '%s' is a directory; give its files (e.g. '%s/*.txt')", f.c_str(),
                 f.c_str());
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
  // The shards are written into a staging directory and replace out_dir's only when the run
  // succeeds: a failed run (corrupt input, no text) leaves the earlier dataset as it was.
  const std::string stage =
      (fs::path(options.out_dir) / strformat(".prepare-staging-%d", int(::getpid()))).string();
  // A killed run's staging directory (its process gone) is removed.
  for (const auto& e : fs::directory_iterator(options.out_dir)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || name.rfind(".prepare-staging-", 0) != 0) continue;
    const int pid = std::atoi(name.c_str() + std::strlen(".prepare-staging-"));
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) fs::remove_all(e.path());
  }
  fs::create_directories(stage);
  struct StageGuard {
    std::string dir;
    ~StageGuard() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } stage_guard{stage};

  int64_t total_file_bytes = 0;
  for (const auto& f : files) {  // (a pipe has no size: progress then counts without it)
    std::error_code size_ec;
    const auto size = fs::file_size(f, size_ec);
    if (!size_ec) total_file_bytes += int64_t(size);
  }
  Progress progress(options.progress, total_file_bytes);

  SplitWriter writers[2] = {
      SplitWriter(stage, "train", summary.shard_version, options.shard_tokens, summary.train),
      SplitWriter(stage, "val", summary.shard_version, options.shard_tokens, summary.val)};
  // Pipeline, each stage on its own threads, so that they overlap:
  //   decoders (ParallelFileReader: up to `threads` files at once, each file on one thread)
  //   -> main thread: appends the decoded blocks to a batch and finds the documents in place
  //      (DocumentScanner; JSON lines are parsed here), cuts the batch into tasks
  //   -> `threads` encoding threads (EncodePool)
  //   -> one writer thread: writes the batches in order (BatchQueue). This is not what bounds a
  //      run at many threads: handing the writes to file threads of their own, so that a batch
  //      is free as soon as its ids are copied, did not shorten it (docs/tokenizer.md, "The
  //      writer was not the limit").
  // `threads` counts the encoding threads only: the other stages are light (reading and cutting a
  // plain file is much faster than encoding it; writing is a conversion to uint16) except
  // decoding, which for .gz/.xz input runs in a decoder thread (or the xz program) beside the
  // encoders.
  // Batches start small (the pool waits for the first one) and double up to the full size. A
  // batch also goes out early, at any size, when the encoders have nothing left to do and the
  // next block of input is not decoded yet (input slower than encoding: .xz).
  // Memory: kBatches batches of text and ids (~70 MB each at 16 threads), plus up to
  // kAheadBytesPerThread x threads of text decoded ahead. 6 or 8 batches ended the main thread's
  // wait for a free batch at 16 threads but did not shorten the run: the encoders bound it
  // (docs/tokenizer.md, "The writer was not the limit").
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
  EncodePool pool(*tokenizer, frame, threads, options.seed, options.val_fraction);
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
      // A line of whitespace (a CRLF file's blank line is "\r") is blank, as in eval's tasks.
      const std::string_view text(batch->text.data() + line.begin, line.end - line.begin);
      if (text.find_first_not_of(" \t\r") == std::string_view::npos) continue;
      ++record;
      nlohmann::json obj;
      try {
        obj = nlohmann::json::parse(text);
      } catch (const nlohmann::json::exception& e) {
        ATTN_FAIL("'%s': record %lld (of its lines that are not blank) is not valid JSON: %s",
                  files[file].c_str(), (long long)record, e.what());
      }
      const auto it = obj.is_object() ? obj.find(options.jsonl_field) : obj.end();
      ATTN_REQUIRE(obj.is_object() && it != obj.end() && it->is_string(),
                   "'%s': record %lld (of its lines that are not blank) has no string field '%s'",
                   files[file].c_str(), (long long)record, options.jsonl_field.c_str());
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

  // The first block of each file is looked at for input that will not split or encode as meant.
  size_t looked_at = SIZE_MAX;
  std::vector<std::string> crlf_files, eot_text_files;
  auto look_at = [&](const std::string& text) {
    if (!jsonl && options.delimiter.find('\n') != std::string::npos &&
        options.delimiter.find('\r') == std::string::npos && text.find("\r\n") != std::string::npos)
      crlf_files.push_back(files[file]);
    if (options.delimiter != "<|endoftext|>" && text.find("<|endoftext|>") != std::string::npos)
      eot_text_files.push_back(files[file]);
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
      if (file != looked_at) look_at(block), looked_at = file;
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

  ATTN_REQUIRE(summary.train.tokens + summary.val.tokens > 0,
               "prepare: the %zu input file(s) hold no text (0 documents): nothing to train on",
               files.size());
  ATTN_REQUIRE(summary.train.tokens > 0,
               "prepare: every document went to val (%lld documents, val_fraction %g): nothing "
               "to train on; lower val_fraction or add documents",
               (long long)summary.val.documents, options.val_fraction);
  // Replacing the directory's dataset takes several renames; the marker makes an interruption
  // between them an error for every reader of these shards instead of a silent mix.
  const std::string marker = options.out_dir + "/" + kPrepareIncompleteMarker;
  io::write_file_atomic(marker,
                        "attnlab prepare is replacing (or was interrupted while replacing) the "
                        "shards and tokenizer.json here; run it again\n");
  remove_old_shards(options.out_dir);
  for (SplitSummary* split : {&summary.train, &summary.val}) {
    for (std::string& shard : split->shards) {
      const std::string dest = (fs::path(options.out_dir) / fs::path(shard).filename()).string();
      fs::rename(shard, dest);
      shard = dest;
    }
  }
  io::write_file_atomic(options.out_dir + "/tokenizer.json", tokenizer->to_json() + "\n");
  fs::remove(marker);
  summary.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  summary.encode_thread_seconds = pool.busy_seconds();
  summary.input_wait_seconds = input_wait_seconds;
  summary.encoder_wait_seconds = queue.wait_seconds();
  summary.write_seconds = write_seconds;
  summary.main_seconds =
      std::max(0.0, main_loop_seconds - input_wait_seconds - queue.wait_seconds());
  if (!crlf_files.empty())
    summary.warnings.push_back(strformat(
        "%zu file(s) have Windows line endings (\\r\\n), e.g. '%s': the delimiter matches its "
        "bytes "
        "exactly, so these files split into fewer documents and keep their \\r as tokens; convert "
        "them (dos2unix) or pass --delimiter with \\r\\n",
        crlf_files.size(), crlf_files[0].c_str()));
  if (!eot_text_files.empty())
    summary.warnings.push_back(strformat(
        "%zu file(s) contain the text '<|endoftext|>', e.g. '%s': it is encoded as text (as "
        "tiktoken's encode_ordinary does), not as the end-of-text token; if it separates the "
        "documents, pass --delimiter '<|endoftext|>'",
        eot_text_files.size(), eot_text_files[0].c_str()));
  for (const std::string& w : summary.warnings)  // whatever --no-progress says
    std::fprintf(stderr, "prepare: warning: %s\n", w.c_str());
  if (options.val_fraction > 0 && summary.val.documents == 0)  // whatever --no-progress says
    std::fprintf(stderr,
                 "prepare: warning: no document went to val (val_fraction %g, %lld "
                 "documents); raise val_fraction or add documents\n",
                 options.val_fraction, (long long)summary.train.documents);
  return summary;
}

std::string unescape_delimiter(const std::string& typed) {
  std::string d;
  for (size_t i = 0; i < typed.size(); ++i) {
    if (typed[i] != '\\') {
      d += typed[i];
      continue;
    }
    const char n = i + 1 < typed.size() ? typed[++i] : '\0';
    switch (n) {
      case 'n':
        d += '\n';
        break;
      case 'r':
        d += '\r';
        break;
      case 't':
        d += '\t';
        break;
      case '\\':
        d += '\\';
        break;
      default:
        ATTN_FAIL("--delimiter '%s': %s is not an escape prepare knows (\\n, \\r, \\t, \\\\)",
                  typed.c_str(), n ? strformat("\\%c", n).c_str() : "a trailing backslash");
    }
  }
  return d;
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
