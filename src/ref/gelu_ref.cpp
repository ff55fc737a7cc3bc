#include "ref/gelu_ref.h"

#include <cmath>

namespace attnlab {

namespace {
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kCubic = 0.044715;
}  // namespace

void gelu_fwd_ref(const GeluParams<float>& p) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < p.n; ++i) {
    const double x = p.x[i];
    const double u = kSqrt2OverPi * (x + kCubic * x * x * x);
    p.y[i] = static_cast<float>(0.5 * x * (1.0 + std::tanh(u)));
  }
}

// d/dx [0.5 x (1 + tanh u)] = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx,
// du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
void gelu_bwd_ref(const GeluParams<float>& p) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < p.n; ++i) {
    const double x = p.x[i];
    const double u = kSqrt2OverPi * (x + kCubic * x * x * x);
    const double th = std::tanh(u);
    const double du = kSqrt2OverPi * (1.0 + 3.0 * kCubic * x * x);
    const double grad = 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * du;
    p.dx[i] = static_cast<float>(p.dy[i] * grad);  // dy read before dx written: dx may alias dy
  }
}

}  // namespace attnlab
