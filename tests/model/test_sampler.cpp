// The sampler's distribution, exactly (temperature, top-k with ties, top-p at its boundaries), and
// that the draws follow it.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "core/error.h"
#include "model/sampler.h"

using namespace attnlab;

namespace {

// softmax(logits[ids] / temperature), renormalised over ids.
std::vector<double> softmax_over(const std::vector<float>& logits, const std::vector<int32_t>& ids,
                                 double temperature) {
  std::vector<double> p;
  double sum = 0.0;
  for (int32_t i : ids) sum += std::exp(logits[size_t(i)] / temperature);
  for (int32_t i : ids) p.push_back(std::exp(logits[size_t(i)] / temperature) / sum);
  return p;
}

void expect_distribution(const SamplingDistribution& d, const std::vector<int32_t>& ids,
                         const std::vector<double>& p) {
  ASSERT_EQ(d.ids, ids);
  ASSERT_EQ(d.p.size(), p.size());
  for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(d.p[i], p[i], 1e-12) << i;
}

}  // namespace

TEST(Sampler, TemperatureScalesTheLogits) {
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.9f, 0.0f};
  const std::vector<int32_t> order = {1, 3, 0, 4, 2};
  for (float t : {0.5f, 1.f, 2.f}) {
    SamplingOptions o;
    o.temperature = t;
    expect_distribution(sampling_distribution(logits.data(), 5, o), order,
                        softmax_over(logits, order, t));
  }
  SamplingOptions greedy;
  greedy.temperature = 0.f;
  expect_distribution(sampling_distribution(logits.data(), 5, greedy), {1}, {1.0});
}

// Top-k keeps the tokens tied with the k-th logit (HF's TopKLogitsWarper, nanoGPT), in id order.
TEST(Sampler, TopKKeepsTheTiesOfTheKth) {
  const std::vector<float> logits = {1.f, 3.f, 2.f, 2.f, 0.f, 2.f};
  SamplingOptions o;
  o.top_k = 2;
  expect_distribution(sampling_distribution(logits.data(), 6, o), {1, 2, 3, 5},
                      softmax_over(logits, {1, 2, 3, 5}, 1.0));
  o.top_k = 1;
  expect_distribution(sampling_distribution(logits.data(), 6, o), {1}, {1.0});
  o.top_k = 4;
  expect_distribution(sampling_distribution(logits.data(), 6, o), {1, 2, 3, 5},
                      softmax_over(logits, {1, 2, 3, 5}, 1.0));
  o.top_k = 100;  // past V: every token
  EXPECT_EQ(sampling_distribution(logits.data(), 6, o).ids.size(), 6u);
}

// The nucleus is the smallest prefix whose mass reaches top_p, renormalised.
TEST(Sampler, TopPTakesTheSmallestPrefixReachingIt) {
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.9f, 0.0f};
  const std::vector<double> full = softmax_over(logits, {1, 3, 0, 4, 2}, 1.0);
  SamplingOptions o;
  o.top_p = float(full[0] * 0.9);  // inside the first token's mass
  expect_distribution(sampling_distribution(logits.data(), 5, o), {1}, {1.0});
  o.top_p = float(full[0] + full[1] * 0.5);  // needs two
  expect_distribution(sampling_distribution(logits.data(), 5, o), {1, 3},
                      softmax_over(logits, {1, 3}, 1.0));
  o.top_p = float(full[0] + full[1] + full[2] * 0.01);  // needs three
  expect_distribution(sampling_distribution(logits.data(), 5, o), {1, 3, 0},
                      softmax_over(logits, {1, 3, 0}, 1.0));
  o.top_k = 2;  // top-k first, then the nucleus of what is left
  o.top_p = 0.99f;
  expect_distribution(sampling_distribution(logits.data(), 5, o), {1, 3},
                      softmax_over(logits, {1, 3}, 1.0));
}

// The draws follow the distribution: 20000 draws at temperature 0.5 over 3 tokens, each frequency
// within 4 standard deviations of its probability.
TEST(Sampler, DrawsFollowTheDistribution) {
  const std::vector<float> logits = {0.5f, 1.0f, -3.0f, 0.0f};
  SamplingOptions o;
  o.temperature = 0.5f;
  o.top_k = 3;
  const SamplingDistribution d = sampling_distribution(logits.data(), 4, o);
  std::mt19937_64 rng(3);
  std::map<int32_t, int> seen;
  const int n = 20000;
  for (int i = 0; i < n; ++i) seen[sample_token(logits.data(), 4, o, rng)]++;
  EXPECT_EQ(seen.count(2), 0u);  // cut by top-k
  for (size_t i = 0; i < d.ids.size(); ++i) {
    const double sd = std::sqrt(d.p[i] * (1 - d.p[i]) / n);
    EXPECT_NEAR(double(seen[d.ids[i]]) / n, d.p[i], 4 * sd) << d.ids[i];
  }
}

TEST(Sampler, SeededAndValidated) {
  float logits[50];
  for (int i = 0; i < 50; ++i) logits[i] = float((i * 37) % 11) * 0.3f;
  std::mt19937_64 a(9), b(9);
  SamplingOptions o;
  for (int i = 0; i < 50; ++i)
    EXPECT_EQ(sample_token(logits, 50, o, a), sample_token(logits, 50, o, b));
  o.top_p = 0.f;
  EXPECT_THROW(sample_token(logits, 50, o, a), Error);
}
