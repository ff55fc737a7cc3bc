// The synthetic retrieval metrics (eval/synthetic_probe.h) of the validation: on a tiny model over
// synthetic windows, every kind's count, correct count and loss equal a direct recomputation from
// one forward per window (argmax of the logits at position i against token i + 1, log-softmax in
// double), the recall count equals find_recall_queries' answers in the scored windows, and the
// distance buckets partition them; score_window on a constructed stream; the eval JSON keys.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "data/loader.h"
#include "data/synthetic.h"
#include "eval/synthetic_probe.h"
#include "eval/validation.h"
#include "model/model_fixture.h"
#include "test_util.h"

namespace attnlab {
namespace {

// Per stream position: for a copied token the position of the token it copies (its segment is
// COPY, the sources, SEP, the copies: read from the stream's own markers), else -1.
std::vector<int64_t> copy_sources(const std::vector<int32_t>& toks, int vocab_size) {
  const SyntheticIds ids = synthetic_ids(vocab_size);
  std::vector<int64_t> src(toks.size(), -1);
  for (size_t i = 0; i < toks.size(); ++i) {
    if (toks[i] != ids.copy) continue;
    size_t j = i + 1;
    while (j < toks.size() && toks[j] < ids.num_content) ++j;
    if (j >= toks.size() || toks[j] != ids.copy_sep) continue;
    const size_t len = j - i - 1;
    for (size_t c = 0; c < len && j + 1 + c < toks.size(); ++c) src[j + 1 + c] = int64_t(i + 1 + c);
  }
  return src;
}

// Per recall answer position: the latest earlier position the same binding's value showed (the
// binding, or an earlier answer of it).
std::map<int64_t, int64_t> nearest_occurrences(const std::vector<int32_t>& toks, int vocab_size) {
  std::map<int64_t, int64_t> out, shown;
  for (const RecallQuery& q : find_recall_queries(toks, vocab_size)) {
    const auto it = shown.find(q.binding_pos);
    out[q.answer_pos] = it == shown.end() ? q.binding_pos : it->second;
    shown[q.binding_pos] = q.answer_pos;
  }
  return out;
}

// Scores one window [start, start + T) of the stream of `sc` with a half-right argmax and checks
// every count against a direct recount; returns the recall counts per distance bucket.
std::array<int64_t, kRecallBuckets> check_score_window(const SyntheticConfig& sc, int64_t start,
                                                       int T) {
  const std::vector<int32_t> toks = generate_synthetic(sc).val;
  const SyntheticProbe probe(toks, sc.vocab_size);
  const std::vector<SyntheticKind> kinds = classify_synthetic(toks, sc.vocab_size);
  // argmax = the target exactly at even positions i (token start + i + 1), a wrong id elsewhere;
  // loss i + 0.5.
  std::vector<int32_t> argmax(T);
  std::vector<float> losses(T);
  for (int i = 0; i < T; ++i) {
    const int32_t target = toks[size_t(start + i + 1)];
    argmax[size_t(i)] = i % 2 == 0 ? target : (target + 1) % sc.vocab_size;
    losses[size_t(i)] = float(i) + 0.5f;
  }
  SyntheticScores s;
  probe.score_window(start, T, losses.data(), argmax.data(), &s);
  const std::vector<int64_t> sources = copy_sources(toks, sc.vocab_size);
  std::map<SyntheticKind, KindScore> want;
  KindScore outside;  // copied targets whose source is before the window
  for (int i = 0; i < T; ++i) {
    const size_t pos = size_t(start + i + 1);
    const bool apart = kinds[pos] == SyntheticKind::kCopied && sources[pos] < start;
    KindScore& w = apart ? outside : want[kinds[pos]];
    w.loss_sum += double(i) + 0.5;
    w.correct += i % 2 == 0;
    ++w.count;
  }
  EXPECT_EQ(s.copied_outside.count, outside.count);
  EXPECT_EQ(s.copied_outside.correct, outside.correct);
  int64_t total = 0;
  for (int k = 0; k < kSyntheticKinds; ++k) {
    const KindScore& got = s.by_kind[size_t(k)];
    const KindScore w = want[SyntheticKind(k)];
    EXPECT_EQ(got.count, w.count) << synthetic_kind_name(SyntheticKind(k));
    EXPECT_EQ(got.correct, w.correct) << synthetic_kind_name(SyntheticKind(k));
    EXPECT_DOUBLE_EQ(got.loss_sum, w.loss_sum) << synthetic_kind_name(SyntheticKind(k));
    total += got.count;
  }
  EXPECT_EQ(total + outside.count, T);
  // Buckets: the distance back to the nearest earlier occurrence of the answer, "outside" where
  // that occurrence's key (the token before it) is not in the window.
  std::array<int64_t, kRecallBuckets> bucket{};
  for (const auto& [answer, near] : nearest_occurrences(toks, sc.vocab_size)) {
    if (answer <= start || answer > start + T) continue;
    const int64_t d = answer - near;
    ++bucket[size_t(near - 1 < start ? 3 : d < 128 ? 0 : d < 512 ? 1 : 2)];
  }
  int64_t recall = 0;
  for (int b = 0; b < kRecallBuckets; ++b) {
    EXPECT_EQ(s.recall_by_distance[size_t(b)].count, bucket[size_t(b)]) << recall_bucket_name(b);
    recall += bucket[size_t(b)];
  }
  EXPECT_EQ(s.kind(SyntheticKind::kRecall).count, recall);
  // The JSON and the flat sums round-trip.
  const nlohmann::json j = s.to_json();
  EXPECT_EQ(j["recall"]["count"].get<int64_t>(), recall);
  EXPECT_EQ(j["recall_by_distance"]["lt128"]["count"].get<int64_t>(), bucket[0]);
  EXPECT_DOUBLE_EQ(j["copied"]["acc"].get<double>(), s.kind(SyntheticKind::kCopied).acc());
  EXPECT_EQ(j["copied_outside"]["count"].get<int64_t>(), outside.count);
  double v[SyntheticScores::kValues];
  s.to_values(v);
  SyntheticScores back;
  back.from_values(v);
  EXPECT_EQ(back.to_json(), j);
  EXPECT_NE(s.summary().find(recall > 0 ? "recall acc" : "recall: no targets"), std::string::npos)
      << s.summary();
  EXPECT_EQ(SyntheticScores().summary(), "recall: no targets | copied: no targets");
  return bucket;
}

TEST(SyntheticProbe, ScoreWindowCountsKindsBucketsAndTheOffByOne) {
  SyntheticConfig sc;
  sc.vocab_size = 64;
  sc.train_tokens = 10;
  sc.val_tokens = 6000;
  sc.seed = 3;
  const auto bucket = check_score_window(sc, 2000, 1000);
  EXPECT_GT(bucket[0], 0);
  EXPECT_GT(bucket[1], 0);
  EXPECT_GT(bucket[3], 0);
}

// The retrieval-heavy stream (no Markov walks or copies, 16 keys, 16 values, documents of 32-64
// tokens):
// the same exact counts; every binding is near its query, so only "< 128" and "outside" occur.
TEST(SyntheticProbe, ScoreWindowOnTheRetrievalMix) {
  SyntheticConfig sc;
  sc.vocab_size = 64;
  sc.train_tokens = 10;
  sc.val_tokens = 6000;
  sc.seed = 4;
  sc.mix = SyntheticMix{0, 1, 1, 0};
  sc.keys = 16;
  sc.values = 16;
  sc.doc_min_tokens = 32;
  sc.doc_max_tokens = 64;
  const auto bucket = check_score_window(sc, 1500, 512);
  EXPECT_GT(bucket[0], 20);
  EXPECT_EQ(bucket[1] + bucket[2], 0);
  EXPECT_GT(bucket[3], 0);  // a query in the window's first document whose binding is before it
}

// The recipe keys reach the generator (training and `attnlab eval` both read synthetic_config).
TEST(SyntheticProbe, RecipeKeysReachTheGenerator) {
  Recipe r;
  r.data.synthetic.mix = SyntheticMixConfig{0, 1, 2, 3};
  r.data.synthetic.keys = 40;
  r.data.synthetic.values = 30;
  r.data.synthetic.doc_min_tokens = 50;
  r.data.synthetic.doc_max_tokens = 60;
  const SyntheticConfig sc = synthetic_config(r, 777);
  EXPECT_EQ(sc.mix, (SyntheticMix{0, 1, 2, 3}));
  EXPECT_EQ(sc.keys, 40);
  EXPECT_EQ(sc.values, 30);
  EXPECT_EQ(sc.doc_min_tokens, 50);
  EXPECT_EQ(sc.doc_max_tokens, 60);
  EXPECT_EQ(sc.train_tokens, 777);
  EXPECT_EQ(sc.val_tokens, r.data.synthetic.val_tokens);
  EXPECT_EQ(sc.seed, uint64_t(r.data.synthetic.seed));
  EXPECT_EQ(sc.vocab_size, r.data.synthetic.vocab_size);
}

// score_validation with the probe = a direct recomputation from one forward per window.
TEST(SyntheticProbe, ValidationMetricsEqualADirectRecomputationFromTheLogits) {
  GPTConfig c = test::tiny_gpt_config();
  c.n_embd = 16;
  c.vocab_size = 64;
  c.padded_vocab = 64;
  c.block_size = 640;
  const int B = 2, T = 640;
  test::ModelFixture f(c, B, T);
  SyntheticConfig sc;
  sc.vocab_size = 64;
  sc.train_tokens = 10;
  sc.val_tokens = 5 * T + 100;  // 5 whole windows: 2 full batches and a partial one
  sc.seed = 11;
  const std::vector<int32_t> toks = generate_synthetic(sc).val;
  DataLoaderOptions o;
  o.batch_size = B;
  o.seq_len = T;
  o.shuffle = false;
  DataLoader loader({std::make_shared<MemoryTokens>(toks, "synthetic/val")}, o);
  ASSERT_EQ(loader.num_windows(), 5);
  const auto probe = SyntheticProbe::for_loader(loader, sc.vocab_size);
  std::vector<int32_t> in_dev(size_t(B) * T), tg_dev(size_t(B) * T);
  const ValidationResult v =
      score_validation(f.model, *f.ctx, f.store, loader, 100, test::cpu_tensor(in_dev, {B, T}),
                       test::cpu_tensor(tg_dev, {B, T}), probe.get());
  ASSERT_TRUE(v.synthetic.has_value());
  EXPECT_EQ(v.windows, 5);

  // Direct: window w's inputs are tokens [w T, w T + T), target i is token w T + i + 1.
  const std::vector<SyntheticKind> kinds = classify_synthetic(toks, sc.vocab_size);
  const std::vector<int64_t> sources = copy_sources(toks, sc.vocab_size);
  std::array<KindScore, kSyntheticKinds> want{};
  double nll = 0.0;
  f.model.allocate(*f.ctx, 1, T, DType::f32);
  for (int w = 0; w < 5; ++w) {
    std::vector<int32_t> in(toks.begin() + int64_t(w) * T, toks.begin() + int64_t(w + 1) * T);
    f.model.forward(*f.ctx, f.store, test::cpu_tensor(in, {1, T}), Tensor(), AttentionMode::eval);
    const float* logits = static_cast<const float*>(f.model.logits().data);
    for (int i = 0; i < T; ++i) {
      const float* row = logits + size_t(i) * c.padded_vocab;
      const int32_t target = toks[size_t(int64_t(w) * T + i + 1)];
      double mx = -INFINITY, sum = 0.0;
      int best = 0;
      for (int u = 0; u < c.vocab_size; ++u) {
        if (row[u] > row[best]) best = u;
        mx = std::max(mx, double(row[u]));
      }
      for (int u = 0; u < c.vocab_size; ++u) sum += std::exp(double(row[u]) - mx);
      const double loss = mx + std::log(sum) - double(row[target]);
      const size_t pos = size_t(int64_t(w) * T + i + 1);
      if (kinds[pos] == SyntheticKind::kCopied && sources[pos] < int64_t(w) * T) {
        nll += loss;  // scored apart (copied_outside)
        continue;
      }
      KindScore& k = want[size_t(kinds[pos])];
      k.loss_sum += loss;
      k.correct += best == target;
      ++k.count;
      nll += loss;
    }
  }
  int64_t correct = 0;
  for (int k = 0; k < kSyntheticKinds; ++k) {
    const KindScore& got = v.synthetic->by_kind[size_t(k)];
    const char* name = synthetic_kind_name(SyntheticKind(k));
    EXPECT_EQ(got.count, want[size_t(k)].count) << name;
    EXPECT_EQ(got.correct, want[size_t(k)].correct) << name;
    EXPECT_NEAR(got.loss_sum, want[size_t(k)].loss_sum, 1e-4 * std::max(1.0, got.loss_sum)) << name;
    correct += got.correct;
  }
  EXPECT_GT(correct, 0);  // the argmax comparison is exercised
  EXPECT_NEAR(v.loss, nll / double(5 * T), 1e-5);
  // Recall count = find_recall_queries' answers that are targets of the 5 windows (1 .. 5 T).
  int64_t queries = 0;
  for (const RecallQuery& q : find_recall_queries(toks, sc.vocab_size))
    queries += q.answer_pos >= 1 && q.answer_pos <= 5 * T;
  EXPECT_GT(queries, 0);
  EXPECT_EQ(v.synthetic->kind(SyntheticKind::kRecall).count, queries);
  int64_t in_buckets = 0;
  for (const KindScore& b : v.synthetic->recall_by_distance) in_buckets += b.count;
  EXPECT_EQ(in_buckets, queries);
  EXPECT_GT(v.synthetic->kind(SyntheticKind::kCopied).count, 0);
}

}  // namespace
}  // namespace attnlab
