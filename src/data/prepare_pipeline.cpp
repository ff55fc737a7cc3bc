#include "data/prepare_pipeline.h"

#include <algorithm>

#include "core/error.h"
#include "data/prepare.h"
#include "tokenizer/tokenizer.h"

namespace attnlab::prepare_detail {

void Batch::clear() {
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

void encode_task(const Tokenizer& tokenizer, DocumentFrame frame, uint64_t seed,
                 double val_fraction, Batch& batch, size_t t, std::vector<int32_t>& out) {
  out.clear();
  for (size_t i = batch.task_first[t]; i < batch.task_first[t + 1]; ++i) {
    const Batch::Segment& seg = batch.segments[i];
    const std::string_view doc = batch.docs[seg.doc];
    if (seg.begin == 0) {
      batch.split[seg.doc] = is_val_document(doc, seed, val_fraction) ? kVal : kTrain;
      out.push_back(frame.start);
    }
    tokenizer.encode(doc.substr(seg.begin, seg.end - seg.begin), out);
    if (frame.end >= 0 && seg.end == doc.size()) out.push_back(frame.end);
    batch.segment_end[i] = out.size();
  }
  batch.tokens[t].swap(out);  // `out` takes the batch's old buffer, for the next task
}

// ---- EncodePool ---------------------------------------------------------------------------------

EncodePool::EncodePool(const Tokenizer& tokenizer, DocumentFrame frame, int threads, uint64_t seed,
                       double val_fraction)
    : tokenizer_(tokenizer), frame_(frame), seed_(seed), val_fraction_(val_fraction) {
  for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
}

EncodePool::~EncodePool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    queue_.clear();
  }
  work_cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void EncodePool::submit(std::shared_ptr<Batch> batch) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(batch));
  }
  work_cv_.notify_all();
}

bool EncodePool::starving() {
  std::lock_guard<std::mutex> lock(mutex_);
  return queue_.empty();
}

void EncodePool::wait(const Batch& batch, size_t t) {
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [&] { return batch.task_done[t] != 0; });
  if (batch.errors[t]) std::rethrow_exception(batch.errors[t]);
}

void EncodePool::work() {
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
      encode_task(tokenizer_, frame_, seed_, val_fraction_, *batch, t, tokens);
    } catch (...) {
      batch->errors[t] = std::current_exception();
    }
    busy_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      batch->task_done[t] = 1;
    }
    done_cv_.notify_all();
  }
}

// ---- BatchQueue ---------------------------------------------------------------------------------

BatchQueue::BatchQueue(size_t capacity, std::function<void(Batch&)> write)
    : capacity_(capacity), write_(std::move(write)), writer_([this] { run(); }) {}

BatchQueue::~BatchQueue() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  writer_.join();
}

std::shared_ptr<Batch> BatchQueue::acquire() {
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

void BatchQueue::submit(std::shared_ptr<Batch> batch) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.push_back(std::move(batch));
  }
  cv_.notify_all();
}

void BatchQueue::finish() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return error_ || (pending_.empty() && !writing_); });
  if (error_) std::rethrow_exception(error_);
}

void BatchQueue::run() {
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

}  // namespace attnlab::prepare_detail
