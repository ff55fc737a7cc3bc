#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace attnlab {

SamplingDistribution sampling_distribution(const float* logits, int V, const SamplingOptions& o) {
  ATTN_REQUIRE(V > 0, "sample_token: empty vocabulary");
  ATTN_REQUIRE(o.temperature >= 0.f && std::isfinite(o.temperature),
               "temperature must be finite and >= 0, got %g", o.temperature);
  ATTN_REQUIRE(o.top_p > 0.f && o.top_p <= 1.f, "top_p must be in (0, 1], got %g", o.top_p);
  ATTN_REQUIRE(o.top_k >= 0, "top_k must be >= 0, got %d", o.top_k);
  SamplingDistribution d;
  if (o.temperature == 0.f) {
    d.ids = {int32_t(std::max_element(logits, logits + V) - logits)};
    d.p = {1.0};
    return d;
  }
  // Candidates sorted by logit (descending, ties by id), cut to top-k and the tokens tied with
  // the k-th.
  std::vector<int32_t>& idx = d.ids;
  idx.resize(static_cast<size_t>(V));
  std::iota(idx.begin(), idx.end(), 0);
  auto before = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  size_t k = o.top_k > 0 ? size_t(std::min(o.top_k, V)) : size_t(V);
  std::partial_sort(idx.begin(), idx.begin() + long(k), idx.end(), before);
  if (k < size_t(V)) {
    const float kth = logits[idx[k - 1]];
    const auto tied = std::partition(idx.begin() + long(k), idx.end(),
                                     [&](int32_t i) { return logits[i] == kth; });
    std::sort(idx.begin() + long(k), tied);  // by id, after the k-th (equal logits)
    k = size_t(tied - idx.begin());
  }
  idx.resize(k);
  // Softmax at the temperature, in double.
  std::vector<double>& p = d.p;
  p.resize(idx.size());
  const double mx = logits[idx[0]];
  double sum = 0.0;
  for (size_t i = 0; i < idx.size(); ++i)
    sum += p[i] = std::exp((double(logits[idx[i]]) - mx) / o.temperature);
  for (double& x : p) x /= sum;
  // Nucleus: the smallest prefix whose mass reaches top_p.
  if (o.top_p < 1.f) {
    double acc = 0.0;
    for (size_t i = 0; i < p.size(); ++i) {
      acc += p[i];
      if (acc >= o.top_p) {
        idx.resize(i + 1);
        p.resize(i + 1);
        for (double& x : p) x /= acc;
        break;
      }
    }
  }
  return d;
}

int32_t sample_token(const float* logits, int V, const SamplingOptions& o, std::mt19937_64& rng) {
  const SamplingDistribution d = sampling_distribution(logits, V, o);
  double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  for (size_t i = 0; i < d.ids.size(); ++i) {
    u -= d.p[i];
    if (u <= 0.0) return d.ids[i];
  }
  return d.ids.back();
}

}  // namespace attnlab
