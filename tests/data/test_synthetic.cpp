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

}  // namespace
}  // namespace attnlab
