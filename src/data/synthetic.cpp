#include "data/synthetic.h"

#include <cmath>
#include <unordered_map>

#include "core/error.h"

namespace attnlab {

namespace {

constexpr int kNumReserved = 8;  // top ids: 5 markers + 3 reserved
constexpr int kSuccessors = 4;
constexpr double kSuccessorProb[kSuccessors] = {0.5, 0.25, 0.15, 0.1};

// A small, fully specified generator (std:: distributions differ between standard libraries,
// and the dataset must be identical everywhere).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n).
  int64_t below(int64_t n) { return int64_t((unsigned __int128)next() * uint64_t(n) >> 64); }
  int64_t between(int64_t lo, int64_t hi) { return lo + below(hi - lo + 1); }  // inclusive
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

struct Grammar {
  int num_content;
  std::vector<int32_t> successors;  // [num_content, kSuccessors]

  Grammar(int n, uint64_t seed) : num_content(n), successors(size_t(n) * kSuccessors) {
    Rng rng(seed ^ 0x6772616d6d6172ULL);
    for (int t = 0; t < n; ++t) {
      int32_t* s = &successors[size_t(t) * kSuccessors];
      for (int k = 0; k < kSuccessors; ++k) {
        bool fresh;
        do {  // distinct successors
          s[k] = int32_t(rng.below(n));
          fresh = true;
          for (int j = 0; j < k; ++j) fresh = fresh && s[j] != s[k];
        } while (!fresh);
      }
    }
  }

  int32_t step(int32_t from, Rng& rng) const {
    double u = rng.uniform();
    for (int k = 0; k < kSuccessors - 1; ++k) {
      if (u < kSuccessorProb[k]) return successors[size_t(from) * kSuccessors + size_t(k)];
      u -= kSuccessorProb[k];
    }
    return successors[size_t(from) * kSuccessors + kSuccessors - 1];
  }
};

// Appends documents to `out` until it holds `count` tokens (the last document is cut).
// The segment kinds in the order of their cumulative thresholds.
enum class Segment : uint8_t { kBind, kQuery, kCopy, kMarkov };

struct SegmentChooser {
  double bind_below, query_below, copy_below;  // cumulative shares in [0, 1]
  Segment no_binding_fallback;                 // what a query becomes before anything is bound

  explicit SegmentChooser(const SyntheticMix& m) {
    // Sums of the (integer-valued) default weights are exact, so the thresholds are the correctly
    // rounded 0.20, 0.40, 0.55 of the original generator.
    const double total = m.bind + m.query + m.copy + m.markov;
    bind_below = m.bind / total;
    query_below = (m.bind + m.query) / total;
    copy_below = (m.bind + m.query + m.copy) / total;
    no_binding_fallback = m.copy > 0     ? Segment::kCopy
                          : m.markov > 0 ? Segment::kMarkov
                                         : Segment::kBind;
  }

  Segment choose(double u, bool any_bound) const {
    if (u < bind_below) return Segment::kBind;
    if (u < query_below) return any_bound ? Segment::kQuery : no_binding_fallback;
    if (u < copy_below) return Segment::kCopy;
    return Segment::kMarkov;
  }
};

void generate_split(const Grammar& grammar, const SyntheticIds& ids, const SyntheticConfig& config,
                    uint64_t seed, int64_t count, std::vector<int32_t>& out) {
  Rng rng(seed);
  const SegmentChooser chooser(config.mix);
  out.clear();
  out.reserve(size_t(count) + size_t(config.doc_max_tokens) + 64);
  std::vector<int32_t> binding(size_t(ids.num_content), -1);
  std::vector<int32_t> bound_keys;
  std::vector<int32_t> copy_buf;
  const int64_t n = ids.num_content;
  const int64_t num_keys = config.keys > 0 ? config.keys : n;
  const int64_t num_values = config.values > 0 ? config.values : n;
  const int32_t value_base = config.values > 0 && config.keys > 0 ? int32_t(config.keys) : 0;
  while (int64_t(out.size()) < count) {
    out.push_back(ids.eot);
    for (int32_t k : bound_keys) binding[size_t(k)] = -1;
    bound_keys.clear();
    const size_t doc_end =
        out.size() + size_t(rng.between(config.doc_min_tokens, config.doc_max_tokens));
    while (out.size() < doc_end) {
      const Segment kind = chooser.choose(rng.uniform(), !bound_keys.empty());
      if (kind == Segment::kBind) {
        const int64_t pairs = rng.between(1, 8);
        for (int64_t p = 0; p < pairs; ++p) {
          const int32_t key = int32_t(rng.below(num_keys)),
                        value = value_base + int32_t(rng.below(num_values));
          if (binding[size_t(key)] < 0) bound_keys.push_back(key);
          binding[size_t(key)] = value;
          out.insert(out.end(), {ids.bind, key, value});
        }
      } else if (kind == Segment::kQuery) {
        const int64_t queries = rng.between(1, 4);
        for (int64_t q = 0; q < queries; ++q) {
          const int32_t key = bound_keys[size_t(rng.below(int64_t(bound_keys.size())))];
          out.insert(out.end(), {ids.query, key, binding[size_t(key)]});
        }
      } else if (kind == Segment::kCopy) {
        const int64_t len = rng.between(4, 24);
        copy_buf.resize(size_t(len));
        for (auto& t : copy_buf) t = int32_t(rng.below(n));
        out.push_back(ids.copy);
        out.insert(out.end(), copy_buf.begin(), copy_buf.end());
        out.push_back(ids.copy_sep);
        out.insert(out.end(), copy_buf.begin(), copy_buf.end());
      } else {  // markov walk
        const int64_t len = rng.between(8, 64);
        int32_t t = int32_t(rng.below(n));
        out.push_back(t);
        for (int64_t i = 1; i < len; ++i) out.push_back(t = grammar.step(t, rng));
      }
    }
  }
  out.resize(size_t(count));
}

}  // namespace

void SyntheticConfig::validate() const {
  ATTN_REQUIRE(vocab_size >= 64 && vocab_size <= 65536,
               "synthetic data: vocab_size must be in [64, 65536], got %d", vocab_size);
  ATTN_REQUIRE(train_tokens > 0, "synthetic data: train_tokens must be positive, got %lld",
               (long long)train_tokens);
  ATTN_REQUIRE(val_tokens > 0, "synthetic data: val_tokens must be positive, got %lld",
               (long long)val_tokens);
  const double weights[] = {mix.markov, mix.bind, mix.query, mix.copy};
  double total = 0;
  for (double w : weights) {
    ATTN_REQUIRE(std::isfinite(w) && w >= 0,
                 "synthetic data: mix weights must be finite and >= 0, got markov %g bind %g "
                 "query %g copy %g",
                 mix.markov, mix.bind, mix.query, mix.copy);
    total += w;
  }
  ATTN_REQUIRE(total > 0, "synthetic data: at least one mix weight must be > 0");
  ATTN_REQUIRE(mix.query == 0 || mix.bind > 0,
               "synthetic data: mix.query (%g) needs mix.bind > 0 (queries ask for bound keys)",
               mix.query);
  const int num_content = vocab_size - kNumReserved;
  ATTN_REQUIRE(keys >= 0 && keys <= num_content,
               "synthetic data: keys must be in [0, %d] (0 = every content id), got %d",
               num_content, keys);
  const int value_room = keys > 0 ? num_content - keys : num_content;
  ATTN_REQUIRE(values >= 0 && values <= value_room,
               "synthetic data: values must be in [0, %d] (0 = every content id; with keys %d the "
               "value alphabet follows the keys), got %d",
               value_room, keys, values);
  ATTN_REQUIRE(doc_min_tokens >= 1 && doc_min_tokens <= doc_max_tokens,
               "synthetic data: need 1 <= doc_min_tokens (%d) <= doc_max_tokens (%d)",
               doc_min_tokens, doc_max_tokens);
}

SyntheticIds synthetic_ids(int vocab_size) {
  ATTN_REQUIRE(vocab_size >= 64, "synthetic data: vocab_size must be >= 64, got %d", vocab_size);
  return SyntheticIds{vocab_size - 1, vocab_size - 2, vocab_size - 3,
                      vocab_size - 4, vocab_size - 5, vocab_size - kNumReserved};
}

SyntheticData generate_synthetic(const SyntheticConfig& config) {
  config.validate();
  const SyntheticIds ids = synthetic_ids(config.vocab_size);
  const Grammar grammar(ids.num_content, config.seed);
  SyntheticData data;
  generate_split(grammar, ids, config, config.seed * 0x9e3779b97f4a7c15ULL + 1, config.train_tokens,
                 data.train);
  generate_split(grammar, ids, config, config.seed * 0x9e3779b97f4a7c15ULL + 2, config.val_tokens,
                 data.val);
  return data;
}

const char* synthetic_kind_name(SyntheticKind kind) {
  switch (kind) {
    case SyntheticKind::kMarker:
      return "marker";
    case SyntheticKind::kMarkov:
      return "markov";
    case SyntheticKind::kBindKey:
      return "bind_key";
    case SyntheticKind::kBindValue:
      return "bind_value";
    case SyntheticKind::kQueryKey:
      return "query_key";
    case SyntheticKind::kRecall:
      return "recall";
    case SyntheticKind::kCopySource:
      return "copy_source";
    case SyntheticKind::kCopied:
      return "copied";
  }
  return "?";
}

std::vector<SyntheticKind> classify_synthetic(const std::vector<int32_t>& tokens, int vocab_size) {
  const SyntheticIds ids = synthetic_ids(vocab_size);
  std::vector<SyntheticKind> kinds(tokens.size(), SyntheticKind::kMarkov);
  size_t i = 0;
  while (i < tokens.size()) {
    const int32_t t = tokens[i];
    if (t < ids.num_content) {
      kinds[i++] = SyntheticKind::kMarkov;
      continue;
    }
    kinds[i++] = SyntheticKind::kMarker;
    if (t == ids.bind || t == ids.query) {
      const bool bind = t == ids.bind;
      if (i < tokens.size()) kinds[i++] = bind ? SyntheticKind::kBindKey : SyntheticKind::kQueryKey;
      if (i < tokens.size()) kinds[i++] = bind ? SyntheticKind::kBindValue : SyntheticKind::kRecall;
    } else if (t == ids.copy) {
      size_t len = 0;
      while (i < tokens.size() && tokens[i] < ids.num_content) {
        kinds[i++] = SyntheticKind::kCopySource;
        ++len;
      }
      if (i < tokens.size() && tokens[i] == ids.copy_sep) {
        kinds[i++] = SyntheticKind::kMarker;
        for (size_t j = 0; j < len && i < tokens.size(); ++j) kinds[i++] = SyntheticKind::kCopied;
      }
    }
  }
  return kinds;
}

std::vector<RecallQuery> find_recall_queries(const std::vector<int32_t>& tokens, int vocab_size) {
  const SyntheticIds ids = synthetic_ids(vocab_size);
  std::unordered_map<int32_t, int64_t> latest;  // key -> position of its bound value
  std::vector<RecallQuery> queries;
  const int64_t n = int64_t(tokens.size());
  for (int64_t i = 0; i < n; ++i) {
    const int32_t t = tokens[size_t(i)];
    if (t == ids.eot) {
      latest.clear();
    } else if (t == ids.bind && i + 2 < n) {
      latest[tokens[size_t(i + 1)]] = i + 2;
      i += 2;
    } else if (t == ids.query && i + 2 < n) {
      const int32_t key = tokens[size_t(i + 1)];
      const auto it = latest.find(key);
      ATTN_REQUIRE(it != latest.end(),
                   "synthetic stream: QUERY at %lld asks for key %d, which "
                   "has no earlier binding in its document",
                   (long long)i, key);
      queries.push_back(RecallQuery{i + 2, it->second, key, tokens[size_t(i + 2)]});
      i += 2;
    }
  }
  return queries;
}

double unigram_entropy(const std::vector<int32_t>& tokens, int vocab) {
  ATTN_REQUIRE(!tokens.empty(), "unigram_entropy: no tokens");
  std::vector<int64_t> counts(size_t(vocab), 0);
  for (int32_t t : tokens) {
    ATTN_REQUIRE(t >= 0 && t < vocab, "unigram_entropy: id %d outside [0, %d)", t, vocab);
    ++counts[size_t(t)];
  }
  const double total = double(tokens.size());
  double h = 0.0;
  for (int64_t c : counts) {
    if (c > 0) h -= double(c) / total * std::log(double(c) / total);
  }
  return h;
}

double bigram_entropy(const std::vector<int32_t>& tokens, int vocab) {
  ATTN_REQUIRE(tokens.size() >= 2, "bigram_entropy: need at least 2 tokens");
  std::unordered_map<int64_t, int64_t> pair_counts;
  std::vector<int64_t> prev_counts(size_t(vocab), 0);
  for (size_t i = 0; i < tokens.size(); ++i) {
    ATTN_REQUIRE(tokens[i] >= 0 && tokens[i] < vocab, "bigram_entropy: id %d outside [0, %d)",
                 tokens[i], vocab);
    if (i == 0) continue;
    ++pair_counts[int64_t(tokens[i - 1]) * vocab + tokens[i]];
    ++prev_counts[size_t(tokens[i - 1])];
  }
  const double total = double(tokens.size() - 1);
  double h = 0.0;
  for (const auto& [pair, c] : pair_counts) {
    const double p_prev = double(prev_counts[size_t(pair / vocab)]);
    h -= double(c) / total * std::log(double(c) / p_prev);
  }
  return h;
}

}  // namespace attnlab
