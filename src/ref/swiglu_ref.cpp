#include "ref/swiglu_ref.h"

#include <cmath>

#include "ref/parallel.h"

namespace attnlab {

namespace {
double sigmoid(double g) { return 1.0 / (1.0 + std::exp(-g)); }
}  // namespace

void swiglu_fwd_ref(const SwiGluParams<float>& p) {
  const int64_t F = p.f;
#pragma omp parallel for schedule(static) if (worth_parallel(p.rows * F * 16))
  for (int64_t r = 0; r < p.rows; ++r) {
    const float* gate = p.pre + r * 2 * F;
    const float* up = gate + F;
    float* y = p.y + r * F;
    for (int64_t c = 0; c < F; ++c) {
      const double g = gate[c];
      y[c] = static_cast<float>(g * sigmoid(g) * up[c]);
    }
  }
}

// d silu(g) / dg = sigmoid(g) + g sigmoid(g) (1 - sigmoid(g)) = sigmoid(g) (1 + g (1 -
// sigmoid(g))).
void swiglu_bwd_ref(const SwiGluParams<float>& p) {
  const int64_t F = p.f;
#pragma omp parallel for schedule(static) if (worth_parallel(p.rows * F * 16))
  for (int64_t r = 0; r < p.rows; ++r) {
    const float* gate = p.pre + r * 2 * F;
    const float* up = gate + F;
    const float* dy = p.dy + r * F;
    float* dgate = p.dpre + r * 2 * F;
    float* dup = dgate + F;
    for (int64_t c = 0; c < F; ++c) {
      const double g = gate[c], u = up[c], d = dy[c];
      const double sg = sigmoid(g);
      dgate[c] = static_cast<float>(d * u * sg * (1.0 + g * (1.0 - sg)));
      dup[c] = static_cast<float>(d * g * sg);
    }
  }
}

}  // namespace attnlab
