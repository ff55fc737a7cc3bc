// Token sampling from a row of logits: temperature, top-k, top-p (nucleus), seeded. The order and
// the rules are Hugging Face's (TopK, then TopP on the softmax at the temperature): top-k keeps the
// k largest logits and every token tied with the k-th (as HF and nanoGPT), and the nucleus is the
// smallest prefix, by probability, whose mass reaches top_p (at least one token).
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace attnlab {

struct SamplingOptions {
  float temperature = 1.0f;  // 0: greedy (argmax)
  int top_k = 0;             // 0: no top-k cut
  float top_p = 1.0f;        // 1: no nucleus cut
};

// The tokens that can be drawn, by falling probability (ties: lower id first), and their
// probabilities, renormalised over them (sum 1). Temperature 0: the argmax alone.
struct SamplingDistribution {
  std::vector<int32_t> ids;
  std::vector<double> p;
};
SamplingDistribution sampling_distribution(const float* logits, int V, const SamplingOptions& o);

// Samples an id in [0, V) from logits[0..V). Deterministic for a given rng state.
int32_t sample_token(const float* logits, int V, const SamplingOptions& o, std::mt19937_64& rng);

}  // namespace attnlab
