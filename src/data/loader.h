// DataLoader: batches of B sequences of T+1 tokens from a list of token sources (shards or memory).
//
// Windows. Source s with n_s tokens holds w_s = (n_s - 1) / T windows; window j covers tokens
// [j*T, j*T + T + 1): the first T are the inputs, the last T the targets (inputs shifted by one).
// Windows never cross a source boundary. All windows of all sources are numbered 0..N-1 in
// source order. A source with fewer than T+1 tokens holds no window (short_sources() names
// them); data with no window at all is an error.
//
// Order. Each epoch visits every window exactly once: in index order when shuffle is off, else in a
// pseudo-random order that depends only on (seed, epoch) (a keyed Feistel permutation, so no
// N-sized table is built and any position can be looked up directly).
//
// Stream and ranks. The epochs' orders are concatenated into one stream. A step consumes B*W
// consecutive stream entries (W = world_size); rank r takes entries r, r+W, r+2W, ... of them, so
// ranks are disjoint and together cover every window once per epoch. Batches are always full: a
// batch may straddle an epoch boundary. All ranks share one State, which makes resume exact:
// set_state(s) followed by next() yields what next() yielded when state() returned s.
//
// Eval: shuffle off and reset() before each evaluation; the validation scores the first
// min(batches * B, N) windows, its last batch padded (eval/validation.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/shard.h"

namespace attnlab {

struct DataLoaderOptions {
  int batch_size = 0;  // B
  int seq_len = 0;     // T
  bool shuffle = true;
  uint64_t seed = 0;
  int rank = 0;
  int world_size = 1;
  // > 0: every token of every batch is checked to be < vocab_size (error names source + offset),
  // and from_files scans every shard once when it opens it (error names the file).
  int64_t vocab_size = 0;
};

class DataLoader {
 public:
  struct State {
    uint64_t epoch = 0;
    uint64_t position = 0;  // stream entries consumed in this epoch (by all ranks together)
    bool operator==(const State&) const = default;
  };
  struct Batch {
    std::vector<int32_t> inputs;   // [B, T] row-major
    std::vector<int32_t> targets;  // [B, T]
  };

  DataLoader(std::vector<std::shared_ptr<const TokenSource>> sources,
             const DataLoaderOptions& options);
  // Shards from file patterns (expand_globs), memory-mapped.
  static DataLoader from_files(const std::vector<std::string>& patterns,
                               const DataLoaderOptions& options);

  // Fills inputs[B*T] and targets[B*T] and advances the state.
  void next(int32_t* inputs, int32_t* targets);
  Batch next();

  State state() const { return state_; }
  void set_state(const State& state);
  void reset() { state_ = State{}; }

  int64_t num_windows() const { return num_windows_; }
  // Full batches per rank in one epoch: num_windows / (B * world_size).
  int64_t batches_per_epoch() const;
  int64_t num_tokens() const;  // total tokens over all sources
  const DataLoaderOptions& options() const { return options_; }
  const std::vector<std::shared_ptr<const TokenSource>>& sources() const { return sources_; }
  // Sources shorter than one window (seq_len + 1 tokens): they hold no window and are not read.
  const std::vector<std::string>& short_sources() const { return short_sources_; }

  // The window visited at `position` of `epoch`'s order (exposed for tests and tools).
  int64_t window_at(uint64_t epoch, uint64_t position) const;

 private:
  void read_window(int64_t window, int32_t* inputs, int32_t* targets);

  std::vector<std::shared_ptr<const TokenSource>> sources_;
  std::vector<std::string> short_sources_;
  DataLoaderOptions options_;
  std::vector<int64_t> window_offsets_;  // prefix sums of windows per source, size sources+1
  int64_t num_windows_ = 0;
  State state_;
  std::vector<int32_t> scratch_;  // T+1 tokens
};

}  // namespace attnlab
