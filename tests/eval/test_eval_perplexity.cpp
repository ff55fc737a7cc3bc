// The evaluation harness's perplexity paths (src/eval/perplexity, validation, score) against brute
// force on the tiny run of eval_test_util.h: sliding windows score every token once, the standard
// errors are over texts, validation scores every whole window, `score` writes one line per token.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <numbers>

#include "config/recipe.h"
#include "eval/eval_model.h"
#include "eval/perplexity.h"
#include "eval/score.h"
#include "eval/validation.h"
#include "eval_test_util.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace attnlab;
using test::cpu;
using test::EvalTest;

TEST_F(EvalTest, SlidingWindowPerplexityAgainstBruteForce) {
  const ModelSource src = inspect_model_source(run_);
  EvalModel model(src, cpu(4));
  const std::vector<int32_t> doc = test::random_ints(90, 3, 257);
  // stride == context: the sum over non-overlapping windows [kN, kN + N], each brute-forced.
  const int N = 16;
  double expect = 0.0;
  for (size_t b = 0; b + 1 < doc.size(); b += N) {
    std::vector<int32_t> w(doc.begin() + ptrdiff_t(b),
                           doc.begin() + ptrdiff_t(std::min(doc.size(), b + N + 1)));
    for (double lp : test::brute_force_logprobs(src, w)) expect -= lp;
  }
  const auto s = score_documents(model, {doc}, N, N, false);
  double got = 0.0;
  for (float lp : s[0].logprob) got -= lp;
  EXPECT_NEAR(got, expect, 1e-3);
  // Any stride: every token counted once; stride 1 at context 32 equals the full-context scores
  // of the first 32 targets.
  for (int stride : {1, 5, 16, 32}) {
    size_t next = 0;
    std::vector<std::vector<int32_t>> docs = {doc,
                                              std::vector<int32_t>(doc.begin(), doc.begin() + 7)};
    auto feed = [&](std::vector<int32_t>& t, int64_t&) {
      if (next >= docs.size()) return false;
      t = docs[next++];
      return true;
    };
    const PerplexityResult r = perplexity(model, feed, 32, stride, /*cluster_break=*/-1);
    EXPECT_EQ(r.tokens, 89 + 6) << stride;
    EXPECT_EQ(r.documents, 2);
  }
  const auto full = score_documents(model, {doc}, 32, 1, false);
  const std::vector<int32_t> head(doc.begin(), doc.begin() + 33);
  const auto lp = test::brute_force_logprobs(src, head);
  for (size_t i = 0; i < 32; ++i) EXPECT_NEAR(full[0].logprob[i], lp[i], 1e-4);
}

// The standard errors: clusters are the <|endoftext|>-separated texts of each document (the eot
// that ends a text counts with it), and the loss's error is the ratio estimator's, recomputed here
// from the per-target scores in two passes.
TEST_F(EvalTest, PerplexityStandardErrorIsOverTextsNotTokens) {
  const ModelSource src = inspect_model_source(run_);
  EvalModel model(src, cpu(4));
  constexpr int32_t kEot = 256;
  std::vector<std::vector<int32_t>> docs = {
      test::random_ints(70, 3, 256), test::random_ints(40, 3, 256), test::random_ints(9, 3, 256)};
  docs[0][0] = kEot, docs[0][20] = kEot, docs[0][21] = kEot, docs[0][50] = kEot;
  docs[1][0] = kEot;
  const auto scores = score_documents(model, docs, 32, 8, false);
  std::vector<std::pair<double, int64_t>> clusters;  // (nll, targets)
  double nll = 0.0;
  int64_t n = 0;
  for (size_t d = 0; d < docs.size(); ++d) {
    std::map<int, std::pair<double, int64_t>> by_text;
    int breaks = 0;
    for (size_t p = 1; p < docs[d].size(); ++p) {
      breaks += docs[d][p - 1] == kEot;
      by_text[breaks].first -= scores[d].logprob[p - 1];
      by_text[breaks].second += 1;
    }
    for (const auto& [_, c] : by_text) clusters.push_back(c), nll += c.first, n += c.second;
  }
  // Document 0: four (one of them only the eot that ends an empty text); 1 and 2: one each.
  ASSERT_EQ(clusters.size(), 4u + 1u + 1u);
  const double loss = nll / double(n);
  double ss = 0.0;
  for (const auto& [x, m] : clusters) ss += (x - loss * double(m)) * (x - loss * double(m));
  const double se =
      std::sqrt(double(clusters.size()) / double(clusters.size() - 1) * ss) / double(n);
  size_t next = 0;
  auto feed = [&](std::vector<int32_t>& t, int64_t& bytes) {
    if (next >= docs.size()) return false;
    bytes = int64_t(docs[next].size()) * 2 + 37 * int64_t(next);  // bytes per token differ
    t = docs[next++];
    return true;
  };
  const PerplexityResult r = perplexity(model, feed, 32, 8, kEot);
  EXPECT_EQ(r.tokens, n);
  EXPECT_EQ(r.clusters, int64_t(clusters.size()));
  EXPECT_NEAR(r.loss(), loss, 1e-9);
  EXPECT_NEAR(r.loss_stderr(), se, 1e-9 * se);
  EXPECT_NEAR(r.perplexity_stderr(), std::exp(loss) * se, 1e-9 * std::exp(loss) * se);
  // Bits per byte: the ratio nats / bytes over the documents (bytes differ by document here).
  double doc_ss = 0.0;
  const double per_byte = nll / double(r.bytes);
  for (size_t d = 0; d < docs.size(); ++d) {
    double x = 0.0;
    for (float lp : scores[d].logprob) x -= lp;
    const double b = double(docs[d].size()) * 2 + 37.0 * double(d);
    doc_ss += (x - per_byte * b) * (x - per_byte * b);
  }
  const double bpb_se = std::sqrt(3.0 / 2.0 * doc_ss) / double(r.bytes) / std::numbers::ln2;
  EXPECT_NEAR(r.bits_per_byte_stderr(), bpb_se, 1e-9 * bpb_se);
  EXPECT_GT(bpb_se, 0.0);
  EXPECT_GT(se, 0.0);
  // No cluster break: one cluster per document; a single cluster has no error.
  next = 0;
  const PerplexityResult whole = perplexity(model, feed, 32, 8, -1);
  EXPECT_EQ(whole.clusters, 3);
  EXPECT_NEAR(whole.loss(), loss, 1e-9);
  next = 2;
  EXPECT_TRUE(std::isnan(perplexity(model, feed, 32, 8, -1).loss_stderr()));
}

TEST_F(EvalTest, ValidationScoresEveryWholeWindow) {
  const ModelSource src = inspect_model_source(run_);
  Recipe r = parse_recipe(src.recipe_yaml, "ckpt", {"train.micro_batch=4"}, RecipeUse::eval);
  // 1000 tokens, seq_len 16: 62 whole windows = 15 full batches of 4 + 2.
  auto loader = validation_loader(r);
  ASSERT_EQ(loader->num_windows(), 62);
  EvalDeviceOptions d = cpu(4);
  d.max_len = 16;
  EvalModel model(src, d);
  const ValidationResult all = model.validate(*loader, 1000);
  EXPECT_EQ(all.windows, 62);
  EXPECT_EQ(all.tokens, 62 * 16);
  const ValidationResult part = model.validate(*loader, 3);
  EXPECT_EQ(part.windows, 12);
  EXPECT_EQ(part.tokens, 12 * 16);
  // The same windows through the sliding-window path (stride == context) give the same mean.
  std::vector<int32_t> stream(size_t(loader->num_tokens()));
  loader->sources()[0]->read(0, loader->num_tokens(), stream.data());
  stream.resize(62 * 16 + 1);  // the whole windows only
  const auto s = score_documents(model, {stream}, 16, 16, false);
  double nll = 0.0;
  for (float lp : s[0].logprob) nll -= lp;
  EXPECT_NEAR(all.loss, nll / double(62 * 16), 1e-5);
}

TEST_F(EvalTest, ScoreWritesOneLinePerToken) {
  test::write(tmp_.path() / "t.txt", "hello");
  ScoreOptions o;
  o.model = run_;
  o.text = (tmp_.path() / "t.txt").string();
  o.device = cpu();
  const std::string out = (tmp_.path() / "s.jsonl").string();
  std::FILE* f = std::fopen(out.c_str(), "wb");
  const ScoreSummary s =
      score_tokens(o, [&](std::string_view l) { std::fwrite(l.data(), 1, l.size(), f); });
  std::fclose(f);
  EXPECT_EQ(s.tokens, 5);
  std::ifstream in(out);
  std::string line;
  std::vector<nlohmann::json> rows;
  while (std::getline(in, line)) rows.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(rows.size(), 5u);
  const ModelSource src = inspect_model_source(run_);
  std::vector<int32_t> ids = {256};
  ByteTokenizer().encode("hello", ids);
  const auto lp = test::brute_force_logprobs(src, ids);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(rows[i]["pos"], i);
    EXPECT_EQ(rows[i]["token"], ids[i + 1]);
    EXPECT_EQ(rows[i]["piece"], std::string(1, "hello"[i]));
    EXPECT_NEAR(rows[i]["logprob"].get<double>(), lp[i], 1e-4);
    std::vector<int32_t> prefix(ids.begin(), ids.begin() + ptrdiff_t(i) + 1);
    EXPECT_EQ(rows[i]["argmax"], test::brute_force_argmax(src, prefix));
  }
  // Token files: ids as text; the first token has no context.
  test::write(tmp_.path() / "ids.txt", "104 101 108\n108 111");
  EXPECT_EQ(read_token_file((tmp_.path() / "ids.txt").string()),
            (std::vector<int32_t>{104, 101, 108, 108, 111}));
  test::write(tmp_.path() / "bad.txt", "1 2 x3");
  test::expect_error([&] { read_token_file((tmp_.path() / "bad.txt").string()); },
                     {"bad.txt", "entry 2 (counting from 0), 'x3', is not a token id"});
  test::expect_error([&] { read_token_file(tmp_.path().string()); }, {"is a directory"});
  // Nothing to score (no token, or one: the first has no prediction) is an error, not 0 tokens.
  for (const char* content : {"", "104"}) {
    test::write(tmp_.path() / "few.txt", content);
    ScoreOptions few = o;
    few.text.clear();
    few.tokens = (tmp_.path() / "few.txt").string();
    test::expect_error([&] { score_tokens(few, [](std::string_view) {}); },
                       {"few.txt", "nothing to score"});
  }
}
