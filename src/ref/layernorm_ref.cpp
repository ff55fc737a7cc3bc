#include "ref/layernorm_ref.h"

#include <algorithm>
#include <cmath>

#include "ref/parallel.h"

namespace attnlab {

// Mean and variance per row in double (two passes, so no cancellation); the saved mean and rstd
// are float and y is computed from those saved values, exactly as the backward will see them.
void layernorm_fwd_ref(const LayerNormParams<float>& p) {
  const int C = p.cols;
#pragma omp parallel for schedule(static) if (worth_parallel(p.rows * C))
  for (int64_t r = 0; r < p.rows; ++r) {
    const float* x = p.x + r * C;
    double sum = 0.0;
    for (int c = 0; c < C; ++c) sum += x[c];
    const double mean = sum / C;
    double var = 0.0;
    for (int c = 0; c < C; ++c) {
      const double d = x[c] - mean;
      var += d * d;
    }
    var /= C;
    const float mean_f = static_cast<float>(mean);
    const float rstd_f = static_cast<float>(1.0 / std::sqrt(var + double(p.eps)));
    float* y = p.y + r * C;
    for (int c = 0; c < C; ++c) {
      const double xhat = (double(x[c]) - mean_f) * rstd_f;
      const double shift = p.beta ? double(p.beta[c]) : 0.0;  // null beta: no bias
      y[c] = static_cast<float>(xhat * p.gamma[c] + shift);
    }
    p.mean[r] = mean_f;
    p.rstd[r] = rstd_f;
  }
}

// dx += rstd * (g - mean(g) - xhat * mean(g * xhat)),  g = dy * gamma.
// dx may be null (skipped). dgamma/dbeta: column blocks are owned by one thread each and sum the
// rows in order.
void layernorm_bwd_ref(const LayerNormParams<float>& p) {
  const int C = p.cols;
#pragma omp parallel for schedule(static) if (worth_parallel(p.rows * C))
  for (int64_t r = 0; r < (p.dx ? p.rows : 0); ++r) {
    const float* x = p.x + r * C;
    const float* dy = p.dy + r * C;
    const double mean = p.mean[r], rstd = p.rstd[r];
    double sum_g = 0.0, sum_gx = 0.0;
    for (int c = 0; c < C; ++c) {
      const double g = double(dy[c]) * p.gamma[c];
      sum_g += g;
      sum_gx += g * (x[c] - mean) * rstd;
    }
    const double mean_g = sum_g / C, mean_gx = sum_gx / C;
    float* dx = p.dx + r * C;
    for (int c = 0; c < C; ++c) {
      const double g = double(dy[c]) * p.gamma[c];
      const double xhat = (x[c] - mean) * rstd;
      dx[c] = static_cast<float>(dx[c] + rstd * (g - mean_g - xhat * mean_gx));
    }
  }
  if (!p.dgamma && !p.dbeta) return;
  constexpr int kBlock = 64;
  const int nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (worth_parallel(p.rows * C))
  for (int blk = 0; blk < nblocks; ++blk) {
    const int c0 = blk * kBlock, c1 = std::min(C, c0 + kBlock);
    double acc_g[kBlock] = {}, acc_b[kBlock] = {};
    for (int64_t r = 0; r < p.rows; ++r) {
      const float* x = p.x + r * C;
      const float* dy = p.dy + r * C;
      const double mean = p.mean[r], rstd = p.rstd[r];
      for (int c = c0; c < c1; ++c) {
        acc_g[c - c0] += double(dy[c]) * ((x[c] - mean) * rstd);
        acc_b[c - c0] += dy[c];
      }
    }
    for (int c = c0; c < c1; ++c) {
      if (p.dgamma) p.dgamma[c] = static_cast<float>(p.dgamma[c] + acc_g[c - c0]);
      if (p.dbeta) p.dbeta[c] = static_cast<float>(p.dbeta[c] + acc_b[c - c0]);
    }
  }
}

}  // namespace attnlab
