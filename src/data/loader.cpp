#include "data/loader.h"

#include <algorithm>

#include "core/error.h"

namespace attnlab {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A pseudo-random permutation of [0, n) keyed by (seed, epoch): a balanced Feistel network on the
// smallest even-width power-of-two domain >= n, with cycle walking to stay inside [0, n). The
// domain is < 4n, so a lookup takes fewer than 4 encryptions on average.
class FeistelPermutation {
 public:
  static constexpr int kRounds = 6;

  FeistelPermutation(uint64_t n, uint64_t seed, uint64_t epoch) : n_(n) {
    int bits = 0;
    while (bits < 64 && (uint64_t(1) << bits) < n) ++bits;
    half_bits_ = std::max(1, (bits + 1) / 2);
    mask_ = (uint64_t(1) << half_bits_) - 1;
    uint64_t k = splitmix64(seed ^ 0x6174746e6c6162ULL) ^ splitmix64(epoch + 0x1234567ULL);
    for (int r = 0; r < kRounds; ++r) keys_[r] = k = splitmix64(k + uint64_t(r));
  }

  uint64_t operator()(uint64_t i) const {
    uint64_t x = i;
    do x = encrypt(x);
    while (x >= n_);
    return x;
  }

 private:
  uint64_t encrypt(uint64_t x) const {
    uint64_t left = x >> half_bits_, right = x & mask_;
    for (int r = 0; r < kRounds; ++r) {
      const uint64_t f = splitmix64(right ^ keys_[r]) & mask_;
      const uint64_t next_right = left ^ f;
      left = right;
      right = next_right;
    }
    return (left << half_bits_) | right;
  }

  uint64_t n_;
  int half_bits_ = 1;
  uint64_t mask_ = 1;
  uint64_t keys_[kRounds] = {};
};

}  // namespace

DataLoader::DataLoader(std::vector<std::shared_ptr<const TokenSource>> sources,
                       const DataLoaderOptions& options)
    : sources_(std::move(sources)), options_(options) {
  const int B = options_.batch_size, T = options_.seq_len;
  ATTN_REQUIRE(B > 0, "data loader: batch_size must be positive, got %d", B);
  ATTN_REQUIRE(T > 0, "data loader: seq_len must be positive, got %d", T);
  ATTN_REQUIRE(options_.world_size > 0, "data loader: world_size must be positive, got %d",
               options_.world_size);
  ATTN_REQUIRE(options_.rank >= 0 && options_.rank < options_.world_size,
               "data loader: rank %d is outside [0, world_size=%d)", options_.rank,
               options_.world_size);
  ATTN_REQUIRE(!sources_.empty(), "data loader: no token sources");
  window_offsets_.assign(1, 0);
  for (const auto& src : sources_) {
    ATTN_REQUIRE(src != nullptr, "data loader: null token source");
    // A source shorter than one window (prepare's last shard can be a few tokens) holds no
    // window, as every source's remainder after its last window holds none; the caller reports
    // it (short_sources). Only data with no window at all is an error.
    if (src->size() < int64_t(T) + 1) short_sources_.push_back(src->name());
    window_offsets_.push_back(window_offsets_.back() + std::max<int64_t>(0, src->size() - 1) / T);
  }
  num_windows_ = window_offsets_.back();
  if (num_windows_ == 0) {
    size_t largest = 0;
    for (size_t i = 1; i < sources_.size(); ++i)
      if (sources_[i]->size() > sources_[largest]->size()) largest = i;
    const std::string what = sources_.size() == 1
                                 ? strformat("'%s' has", sources_[0]->name().c_str())
                                 : strformat("the largest of %zu sources, '%s', has",
                                             sources_.size(), sources_[largest]->name().c_str());
    ATTN_FAIL(
        "data loader: %s %lld tokens, fewer than seq_len + 1 = %d (one training sequence); "
        "use a smaller seq_len or more data",
        what.c_str(), (long long)sources_[largest]->size(), T + 1);
  }
  scratch_.resize(size_t(T) + 1);
}

DataLoader DataLoader::from_files(const std::vector<std::string>& patterns,
                                  const DataLoaderOptions& options) {
  std::vector<std::shared_ptr<const TokenSource>> sources;
  // With a vocabulary, every id of every shard is checked here, once (a bad id in a shard failed
  // only when a batch drew it, possibly hours in, or never).
  for (const auto& path : expand_globs(patterns))
    sources.push_back(ShardFile::open(path, options.vocab_size));
  return DataLoader(std::move(sources), options);
}

int64_t DataLoader::batches_per_epoch() const {
  return num_windows_ / (int64_t(options_.batch_size) * options_.world_size);
}

int64_t DataLoader::num_tokens() const {
  int64_t n = 0;
  for (const auto& s : sources_) n += s->size();
  return n;
}

void DataLoader::set_state(const State& state) {
  ATTN_REQUIRE(state.position < uint64_t(num_windows_),
               "data loader: resume position %llu is outside the epoch of %lld windows (was the "
               "checkpoint made with different data, seq_len or sources?)",
               (unsigned long long)state.position, (long long)num_windows_);
  state_ = state;
}

int64_t DataLoader::window_at(uint64_t epoch, uint64_t position) const {
  ATTN_ASSERT(position < uint64_t(num_windows_));
  if (!options_.shuffle) return int64_t(position);
  return int64_t(FeistelPermutation(uint64_t(num_windows_), options_.seed, epoch)(position));
}

void DataLoader::read_window(int64_t window, int32_t* inputs, int32_t* targets) {
  const int T = options_.seq_len;
  const auto it = std::upper_bound(window_offsets_.begin(), window_offsets_.end(), window);
  const size_t s = size_t(it - window_offsets_.begin()) - 1;
  const int64_t start = (window - window_offsets_[s]) * T;
  const TokenSource& src = *sources_[s];
  src.read(start, int64_t(T) + 1, scratch_.data());
  if (options_.vocab_size > 0) {
    for (int i = 0; i <= T; ++i) {
      ATTN_REQUIRE(scratch_[size_t(i)] >= 0 && scratch_[size_t(i)] < options_.vocab_size,
                   "data loader: '%s' token %lld has id %d, outside the vocabulary [0, %lld)",
                   src.name().c_str(), (long long)(start + i), scratch_[size_t(i)],
                   (long long)options_.vocab_size);
    }
  }
  std::copy(scratch_.begin(), scratch_.begin() + T, inputs);
  std::copy(scratch_.begin() + 1, scratch_.end(), targets);
}

void DataLoader::next(int32_t* inputs, int32_t* targets) {
  const int B = options_.batch_size, T = options_.seq_len, W = options_.world_size;
  const uint64_t n = uint64_t(num_windows_);
  for (int b = 0; b < B; ++b) {
    const uint64_t offset = state_.position + uint64_t(b) * W + uint64_t(options_.rank);
    const uint64_t epoch = state_.epoch + offset / n;
    read_window(window_at(epoch, offset % n), inputs + size_t(b) * T, targets + size_t(b) * T);
  }
  const uint64_t advanced = state_.position + uint64_t(B) * W;
  state_.epoch += advanced / n;
  state_.position = advanced % n;
}

DataLoader::Batch DataLoader::next() {
  Batch batch;
  const size_t count = size_t(options_.batch_size) * size_t(options_.seq_len);
  batch.inputs.resize(count);
  batch.targets.resize(count);
  next(batch.inputs.data(), batch.targets.data());
  return batch;
}

}  // namespace attnlab
