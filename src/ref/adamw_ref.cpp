#include "ref/adamw_ref.h"

#include <cmath>

namespace attnlab {

void adamw_ref(const AdamWParams<float>& p) {
  const double b1 = p.beta1, b2 = p.beta2;
  const double bias1 = 1.0 - std::pow(b1, double(p.step));
  const double bias2 = 1.0 - std::pow(b2, double(p.step));
  const double lr = p.lr, eps = p.eps, wd = p.weight_decay, scale = p.grad_scale;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < p.n; ++i) {
    const double g = double(p.grad[i]) * scale;
    const double m = b1 * p.m[i] + (1.0 - b1) * g;
    const double v = b2 * p.v[i] + (1.0 - b2) * g * g;
    p.m[i] = float(m);
    p.v[i] = float(v);
    const double mhat = m / bias1, vhat = v / bias2;
    const double w = p.master ? double(p.master[i]) : double(p.param[i]);
    const float w_new = float(w - lr * (mhat / (std::sqrt(vhat) + eps) + wd * w));
    if (p.master) p.master[i] = w_new;
    p.param[i] = w_new;
  }
}

double sumsq_ref(const float* g, int64_t n, double init) {
  double s = init;
  for (int64_t i = 0; i < n; ++i) s += double(g[i]) * double(g[i]);
  return s;
}

}  // namespace attnlab
