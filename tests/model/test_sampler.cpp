#include <gtest/gtest.h>

#include <map>

#include "core/error.h"
#include "model/sampler.h"

using namespace attnlab;

TEST(Sampler, GreedyTopKTopP) {
  const float logits[5] = {0.1f, 2.0f, -1.0f, 1.9f, 0.0f};
  std::mt19937_64 rng(1);
  SamplingOptions greedy;
  greedy.temperature = 0.f;
  EXPECT_EQ(sample_token(logits, 5, greedy, rng), 1);

  SamplingOptions k2;
  k2.top_k = 2;
  std::map<int, int> seen;
  for (int i = 0; i < 2000; ++i) seen[sample_token(logits, 5, k2, rng)]++;
  EXPECT_EQ(seen.size(), 2u);  // only ids 1 and 3
  EXPECT_GT(seen[1], seen[3]);
  // p(1)/p(3) = e^0.1 = 1.105: the frequencies follow the softmax.
  EXPECT_NEAR(double(seen[1]) / seen[3], 1.105, 0.15);

  SamplingOptions nucleus;
  nucleus.top_p = 0.3f;  // id 1 alone holds more than 30% of the mass
  for (int i = 0; i < 100; ++i) EXPECT_EQ(sample_token(logits, 5, nucleus, rng), 1);
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
