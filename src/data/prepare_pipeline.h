// The middle of `prepare`'s pipeline (prepare.cpp drives it): a Batch of whole documents cut into
// tasks, the EncodePool whose threads encode the tasks, and the BatchQueue whose writer thread
// takes the encoded batches in order and recycles them. Internal to prepare; the stages and why
// they are arranged so are in docs/tokenizer.md ("How prepare spreads the work").
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "data/text_reader.h"

namespace attnlab {

class Tokenizer;

namespace prepare_detail {

using Clock = std::chrono::steady_clock;

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
  void clear();  // keeps every buffer's capacity
};

// Cuts the batch's documents into segments and about `parts` tasks of about equal bytes: a
// document that does not fit the current task is cut at the first split_point() at or after the
// place where the task would be full (or not at all, when the tokenizer finds no cut nearby).
void plan_tasks(const Tokenizer& tokenizer, size_t parts, bool spans_of_decoded, Batch& batch);

// The tokens that frame each document: `start` (document_start_id) before it, and `end` (the
// end-of-text token, or -1 for none) after it.
struct DocumentFrame {
  int32_t start = -1;
  int32_t end = -1;
};

// Encodes task t of a batch into `out` (the calling thread's own vector, then swapped into the
// batch): the frame's start token before the first segment of each document and its end token
// (if any) after the last, and the train/val decision
// (a hash of the whole document) where the document starts. Encoding straight into
// batch.tokens[t] would be false sharing: the vectors of neighbouring tasks, encoded at the same
// time on other threads, share cache lines, and every appended id writes the vector's end
// pointer (the main cause of the poor thread scaling in docs/tokenizer.md, "What stopped the
// scaling").
void encode_task(const Tokenizer& tokenizer, DocumentFrame frame, uint64_t seed,
                 double val_fraction, Batch& batch, size_t t, std::vector<int32_t>& out);

// `threads` encoding threads that live for the whole run (the BPE tokenizer keeps a cache per
// thread, which a thread per batch would throw away). Batches are queued; a worker takes the next
// task of the oldest batch that has one left, so the next batch starts while the last tasks of
// the previous one finish, and no thread waits at a batch boundary.
class EncodePool {
 public:
  EncodePool(const Tokenizer& tokenizer, DocumentFrame frame, int threads, uint64_t seed,
             double val_fraction);
  ~EncodePool();

  void submit(std::shared_ptr<Batch> batch);

  // True when no task waits for a thread (the threads may still be finishing theirs).
  bool starving();

  // Blocks until task t of `batch` is done; rethrows its error.
  void wait(const Batch& batch, size_t t);

  // Seconds the threads spent encoding, summed over threads.
  double busy_seconds() const { return double(busy_ns_.load()) * 1e-9; }

 private:
  void work();

  const Tokenizer& tokenizer_;
  const DocumentFrame frame_;
  const uint64_t seed_;
  const double val_fraction_;
  std::mutex mutex_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<std::shared_ptr<Batch>> queue_;
  bool stop_ = false;
  std::atomic<int64_t> busy_ns_{0};
  std::vector<std::thread> workers_;
};

// The batches between the reading main thread and the writer thread: at most `capacity` exist
// (one being filled, the rest being encoded or written), and they are recycled. The writer thread
// takes submitted batches in order, waits until they are encoded and writes them. Its errors
// (and the encoding errors it rethrows) come back to the main thread through acquire()/finish().
class BatchQueue {
 public:
  BatchQueue(size_t capacity, std::function<void(Batch&)> write);
  ~BatchQueue();

  // An empty batch; waits while `capacity` batches are in use.
  std::shared_ptr<Batch> acquire();

  void submit(std::shared_ptr<Batch> batch);

  // Waits until every submitted batch is written; rethrows the writer's error.
  void finish();

  double wait_seconds() const { return wait_seconds_; }  // in acquire(), for the summary

 private:
  void run();

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

}  // namespace prepare_detail
}  // namespace attnlab
