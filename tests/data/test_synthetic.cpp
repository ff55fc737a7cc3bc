// Synthetic dataset: determinism, structure (recall answers determined by context, copies exact),
// and baselines that show there is something to learn.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "core/error.h"
#include "data/synthetic.h"

namespace attnlab {
namespace {

SyntheticConfig small_config(uint64_t seed = 1337) {
  SyntheticConfig c;
  c.vocab_size = 512;
  c.train_tokens = 200'000;
  c.val_tokens = 30'000;
  c.seed = seed;
  return c;
}

TEST(Synthetic, DeterministicFromSeed) {
  const auto a = generate_synthetic(small_config(1));
  const auto b = generate_synthetic(small_config(1));
  const auto c = generate_synthetic(small_config(2));
  ASSERT_EQ(a.train.size(), 200'000u);
  ASSERT_EQ(a.val.size(), 30'000u);
  EXPECT_EQ(a.train, b.train);
  EXPECT_EQ(a.val, b.val);
  EXPECT_NE(a.train, c.train);
  // Val is not a prefix/copy of train.
  EXPECT_FALSE(std::equal(a.val.begin(), a.val.begin() + 1000, a.train.begin()));
  // A longer run is the shorter one extended (generation does not depend on the requested size,
  // except for the cut of the last document).
  auto longer = small_config(1);
  longer.train_tokens = 250'000;
  const auto d = generate_synthetic(longer);
  EXPECT_TRUE(std::equal(a.train.begin(), a.train.end(), d.train.begin()));
  // Golden prefix: guards against silent changes of the generator (which would change every
  // recorded baseline loss). Update docs/data.md when this changes on purpose.
  const std::vector<int32_t> golden(a.train.begin(), a.train.begin() + 8);
  EXPECT_EQ(golden, (std::vector<int32_t>{511, 223, 152, 217, 157, 170, 124, 3}));
  uint64_t h = 1469598103934665603ULL;  // FNV-1a over the whole train split
  for (int32_t t : a.train) h = (h ^ uint64_t(t)) * 1099511628211ULL;
  EXPECT_EQ(h, 6101953781739677558ULL);
}

// The new knobs at their default values (written out) leave the stream unchanged.
TEST(Synthetic, ExplicitDefaultsGiveTheDefaultStream) {
  auto c = small_config(5);
  const auto a = generate_synthetic(c);
  c.mix = SyntheticMix{45, 20, 20, 15};
  c.keys = 504;
  c.doc_min_tokens = 128;
  c.doc_max_tokens = 1024;
  EXPECT_EQ(generate_synthetic(c).train, a.train);
  c.mix = SyntheticMix{9, 4, 4, 3};  // the same shares, other thresholds' rounding: same stream
  EXPECT_EQ(generate_synthetic(c).val, a.val);
  c.keys = 503;  // one key fewer: a different stream
  EXPECT_NE(generate_synthetic(c).train, a.train);
}

TEST(Synthetic, IdsAndMarkers) {
  const auto ids = synthetic_ids(512);
  EXPECT_EQ(ids.eot, 511);
  EXPECT_EQ(ids.num_content, 504);
  const auto data = generate_synthetic(small_config());
  std::map<int32_t, int64_t> counts;
  for (int32_t t : data.train) {
    ASSERT_GE(t, 0);
    ASSERT_LT(t, 512);
    ++counts[t];
  }
  for (int32_t reserved : {504, 505, 506}) EXPECT_EQ(counts.count(reserved), 0u);
  for (int32_t marker : {ids.eot, ids.bind, ids.query, ids.copy, ids.copy_sep})
    EXPECT_GT(counts[marker], 50) << marker;
  EXPECT_GT(int64_t(counts.size()), 500);  // content ids are all used
  EXPECT_THROW(synthetic_ids(10), Error);
}

TEST(Synthetic, RecallAnswersAreDeterminedByContext) {
  const auto data = generate_synthetic(small_config());
  const auto queries = find_recall_queries(data.train, 512);
  ASSERT_GT(queries.size(), 2000u);
  int64_t far = 0;
  for (const auto& q : queries) {
    ASSERT_LT(q.binding_pos, q.answer_pos);
    ASSERT_EQ(data.train[size_t(q.binding_pos)], q.value) << "answer differs from the binding";
    ASSERT_EQ(data.train[size_t(q.binding_pos) - 1], q.key);
    far += (q.answer_pos - q.binding_pos) > 128;
  }
  // Long-range: a good share of answers lie more than 128 tokens after their binding.
  EXPECT_GT(far, int64_t(queries.size()) / 5);
  // The answer is not predictable from the key alone (keys are rebound across documents).
  std::map<int32_t, std::set<int32_t>> values_per_key;
  for (const auto& q : queries) values_per_key[q.key].insert(q.value);
  int multi = 0;
  for (const auto& [k, v] : values_per_key) multi += v.size() > 1;
  EXPECT_GT(multi, int(values_per_key.size()) / 2);
}

TEST(Synthetic, ClassifierFindsExactCopies) {
  const auto data = generate_synthetic(small_config());
  const auto kinds = classify_synthetic(data.val, 512);
  ASSERT_EQ(kinds.size(), data.val.size());
  std::map<SyntheticKind, int64_t> counts;
  for (auto k : kinds) ++counts[k];
  for (auto k : {SyntheticKind::kMarker, SyntheticKind::kMarkov, SyntheticKind::kBindKey,
                 SyntheticKind::kBindValue, SyntheticKind::kQueryKey, SyntheticKind::kRecall,
                 SyntheticKind::kCopySource, SyntheticKind::kCopied})
    EXPECT_GT(counts[k], 100) << synthetic_kind_name(k);
  EXPECT_GT(counts[SyntheticKind::kMarkov], int64_t(data.val.size()) / 2);
  // Every copied token equals the token L+1 back, where L is its segment's length.
  const auto ids = synthetic_ids(512);
  for (size_t i = 0; i < kinds.size(); ++i) {
    if (kinds[i] != SyntheticKind::kCopied || kinds[i - 1] != SyntheticKind::kMarker) continue;
    ASSERT_EQ(data.val[i - 1], ids.copy_sep);
    size_t len = 0;
    while (kinds[i - 2 - len] == SyntheticKind::kCopySource) ++len;
    for (size_t j = 0; j < len && i + j < kinds.size(); ++j)
      ASSERT_EQ(data.val[i + j], data.val[i - 1 - len + j]);
  }
}

TEST(Synthetic, BaselinesLeaveRoomToLearn) {
  const auto data = generate_synthetic(small_config());
  const double h1 = unigram_entropy(data.val, 512);
  const double h1_train = unigram_entropy(data.train, 512);
  const double h2 = bigram_entropy(data.train, 512);
  // Content ids are close to uniform: the unigram baseline is near ln(504) = 6.22.
  EXPECT_GT(h1, 5.6);
  EXPECT_LT(h1, std::log(512.0));
  EXPECT_NEAR(h1, h1_train, 0.1);
  // The Markov chain makes bigrams far more predictable than unigrams.
  EXPECT_LT(h2, h1_train - 1.5);
  // Sanity of the estimators on known distributions.
  EXPECT_NEAR(unigram_entropy({0, 1, 2, 3, 0, 1, 2, 3}, 4), std::log(4.0), 1e-12);
  EXPECT_NEAR(unigram_entropy({5, 5, 5}, 8), 0.0, 1e-12);
  EXPECT_NEAR(bigram_entropy({0, 1, 0, 1, 0, 1, 0}, 2), 0.0, 1e-12);
  EXPECT_THROW(unigram_entropy({9}, 4), Error);
}

// The retrieval-heavy setting of recipes/quickstart-recall.yaml: no Markov walks, no copies, 32
// keys and 32 disjoint values, short documents. The parsers still label it exactly.
SyntheticConfig recall_config() {
  auto c = small_config(7);
  c.mix = SyntheticMix{0, 1, 1, 0};
  c.keys = 32;
  c.values = 32;
  c.doc_min_tokens = 48;
  c.doc_max_tokens = 96;
  return c;
}

TEST(Synthetic, RetrievalMixIsLabelledExactly) {
  const auto c = recall_config();
  const auto data = generate_synthetic(c);
  const auto ids = synthetic_ids(512);
  const auto kinds = classify_synthetic(data.val, 512);
  const auto queries = find_recall_queries(data.val, 512);
  std::map<SyntheticKind, int64_t> counts;
  for (auto k : kinds) ++counts[k];
  EXPECT_EQ(counts[SyntheticKind::kMarkov], 0);
  EXPECT_EQ(counts[SyntheticKind::kCopySource], 0);
  EXPECT_EQ(counts[SyntheticKind::kCopied], 0);
  // Recall targets: 1/3 of the query tokens, ~10% of the stream (1.5% by default).
  EXPECT_GT(counts[SyntheticKind::kRecall], int64_t(data.val.size()) / 12);
  // Every recall position is a query's answer and the reverse; the answer is the binding's value.
  ASSERT_EQ(int64_t(queries.size()), counts[SyntheticKind::kRecall]);
  int64_t rebound = 0;
  for (const auto& q : queries) {
    ASSERT_EQ(kinds[size_t(q.answer_pos)], SyntheticKind::kRecall);
    ASSERT_EQ(kinds[size_t(q.binding_pos)], SyntheticKind::kBindValue);
    ASSERT_EQ(data.val[size_t(q.binding_pos)], q.value);
    ASSERT_LT(q.key, c.keys);
    // The binding is in the same (short) document: no EOT between it and the answer.
    ASSERT_LT(q.answer_pos - q.binding_pos, c.doc_max_tokens + 3 * 8);
    for (int64_t i = q.binding_pos; i < q.answer_pos; ++i) ASSERT_NE(data.val[size_t(i)], ids.eot);
    // Keys are rebound within a document: the earlier binding of this key, if any, is not it.
    for (int64_t i = q.binding_pos - 3; i > 0 && data.val[size_t(i)] != ids.eot; --i)
      if (data.val[size_t(i)] == ids.bind && data.val[size_t(i + 1)] == q.key) {
        rebound += data.val[size_t(i + 2)] != q.value;
        break;
      }
  }
  EXPECT_GT(rebound, 0);  // "most recent binding" matters
  // Bind keys are in [0, keys), values in [keys, keys + values): all of them used.
  std::set<int32_t> keys, values;
  for (size_t i = 0; i < kinds.size(); ++i) {
    if (kinds[i] == SyntheticKind::kBindKey) keys.insert(data.val[i]);
    if (kinds[i] == SyntheticKind::kBindValue) values.insert(data.val[i]);
  }
  EXPECT_EQ(keys.size(), 32u);
  EXPECT_EQ(*keys.rbegin(), 31);
  EXPECT_EQ(values.size(), 32u);
  EXPECT_EQ(*values.begin(), 32);
  EXPECT_EQ(*values.rbegin(), 63);
  // Without keys, values are the first `values` ids.
  auto c0 = c;
  c0.keys = 0;
  std::set<int32_t> values0;
  const auto data0 = generate_synthetic(c0);
  const auto kinds0 = classify_synthetic(data0.val, 512);
  for (size_t i = 0; i < kinds0.size(); ++i)
    if (kinds0[i] == SyntheticKind::kBindValue) values0.insert(data0.val[i]);
  EXPECT_EQ(*values0.rbegin(), 31);
  // Documents: EOT to EOT is [doc_min, doc_max + one segment (8 triples)] tokens; every document
  // opens with BIND (a query cannot come first, and its fallback is a bind here).
  std::vector<size_t> eots;
  for (size_t i = 0; i < data.val.size(); ++i)
    if (data.val[i] == ids.eot) eots.push_back(i);
  ASSERT_GT(eots.size(), 100u);
  for (size_t d = 0; d + 1 < eots.size(); ++d) {
    const size_t len = eots[d + 1] - eots[d] - 1;
    ASSERT_GE(len, size_t(c.doc_min_tokens));
    ASSERT_LE(len, size_t(c.doc_max_tokens + 3 * 8 - 1));
    ASSERT_EQ(data.val[eots[d] + 1], ids.bind);
  }
}

TEST(Synthetic, MixSelectsSegmentKinds) {
  auto c = small_config(3);
  c.train_tokens = 20'000;
  c.val_tokens = 20'000;
  const auto ids = synthetic_ids(512);
  auto count_markers = [&](const SyntheticMix& mix) {
    c.mix = mix;
    std::map<int32_t, int64_t> m;
    for (int32_t t : generate_synthetic(c).train) m[t] += t >= ids.num_content;
    return m;
  };
  auto only_markov = count_markers({1, 0, 0, 0});
  EXPECT_EQ(only_markov[ids.bind] + only_markov[ids.query] + only_markov[ids.copy], 0);
  EXPECT_GT(only_markov[ids.eot], 0);
  auto only_copy = count_markers({0, 0, 0, 1});
  EXPECT_EQ(only_copy[ids.bind] + only_copy[ids.query], 0);
  EXPECT_EQ(only_copy[ids.copy], only_copy[ids.copy_sep]);
  EXPECT_GT(only_copy[ids.copy], 100);
  // Query-heavy: queries outnumber binds about 3:1 in segments (2.5 vs 4.5 triples per segment).
  auto query_heavy = count_markers({0, 1, 6, 0});
  EXPECT_GT(query_heavy[ids.query], query_heavy[ids.bind]);
  EXPECT_EQ(query_heavy[ids.copy],
            0);  // the no-binding fallback is a bind when copy and markov are 0
  // Bad settings are errors.
  for (const SyntheticMix& bad : {SyntheticMix{0, 0, 0, 0}, SyntheticMix{1, 0, 1, 0},
                                  SyntheticMix{-1, 1, 1, 1}, SyntheticMix{NAN, 1, 1, 1}}) {
    c.mix = bad;
    EXPECT_THROW(c.validate(), Error);
  }
  c.mix = SyntheticMix{};
  c.keys = 505;
  EXPECT_THROW(c.validate(), Error);
  c.keys = 500;
  c.values = 5;  // 500 + 5 > 504 content ids
  EXPECT_THROW(c.validate(), Error);
  c.values = 4;
  EXPECT_NO_THROW(c.validate());
  c.keys = 0;
  c.values = 0;
  c.doc_min_tokens = 10;
  c.doc_max_tokens = 9;
  EXPECT_THROW(c.validate(), Error);
}

}  // namespace
}  // namespace attnlab
