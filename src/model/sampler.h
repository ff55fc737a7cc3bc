// Token sampling from a row of logits: temperature, top-k, top-p (nucleus), seeded.
#pragma once
#include <cstdint>
#include <random>

namespace attnlab {

struct SamplingOptions {
  float temperature = 1.0f;  // 0: greedy (argmax)
  int top_k = 0;             // 0: no top-k cut
  float top_p = 1.0f;        // 1: no nucleus cut
};

// Samples an id in [0, V) from logits[0..V). Deterministic for a given rng state.
int32_t sample_token(const float* logits, int V, const SamplingOptions& o, std::mt19937_64& rng);

}  // namespace attnlab
