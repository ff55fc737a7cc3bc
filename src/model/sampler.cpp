#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace attnlab {

int32_t sample_token(const float* logits, int V, const SamplingOptions& o, std::mt19937_64& rng) {
  ATTN_REQUIRE(V > 0, "sample_token: empty vocabulary");
  ATTN_REQUIRE(o.temperature >= 0.f && std::isfinite(o.temperature),
               "temperature must be finite and >= 0, got %g", o.temperature);
  ATTN_REQUIRE(o.top_p > 0.f && o.top_p <= 1.f, "top_p must be in (0, 1], got %g", o.top_p);
  ATTN_REQUIRE(o.top_k >= 0, "top_k must be >= 0, got %d", o.top_k);
  if (o.temperature == 0.f) return int32_t(std::max_element(logits, logits + V) - logits);

  // Candidates sorted by logit (descending), cut to top-k.
  std::vector<int32_t> idx(static_cast<size_t>(V));
  std::iota(idx.begin(), idx.end(), 0);
  const int k = o.top_k > 0 ? std::min(o.top_k, V) : V;
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  idx.resize(size_t(k));
  // Softmax at the temperature, in double.
  std::vector<double> p(idx.size());
  const double mx = logits[idx[0]];
  double sum = 0.0;
  for (size_t i = 0; i < idx.size(); ++i)
    sum += p[i] = std::exp((double(logits[idx[i]]) - mx) / o.temperature);
  for (double& x : p) x /= sum;
  // Nucleus: the smallest prefix whose mass reaches top_p.
  size_t keep = p.size();
  if (o.top_p < 1.f) {
    double acc = 0.0;
    for (size_t i = 0; i < p.size(); ++i) {
      acc += p[i];
      if (acc >= o.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double mass = std::accumulate(p.begin(), p.begin() + long(keep), 0.0);
  double u = std::uniform_real_distribution<double>(0.0, mass)(rng);
  for (size_t i = 0; i < keep; ++i) {
    u -= p[i];
    if (u <= 0.0) return idx[i];
  }
  return idx[keep - 1];
}

}  // namespace attnlab
