#include "ref/rmsnorm_ref.h"

#include <algorithm>
#include <cmath>

#include "ref/parallel.h"

namespace attnlab {

// mean(x^2) per row in double; the saved rstd is float and y is computed from it, exactly as the
// backward will see it.
void rmsnorm_fwd_ref(const RmsNormParams<float>& p) {
  const int C = p.cols;
#pragma omp parallel for schedule(static) if (worth_parallel(p.rows * C))
  for (int64_t r = 0; r < p.rows; ++r) {
    const float* x = p.x + r * C;
    double ss = 0.0;
    for (int c = 0; c < C; ++c) ss += double(x[c]) * x[c];
    const float rstd_f = static_cast<float>(1.0 / std::sqrt(ss / C + double(p.eps)));
    float* y = p.y + r * C;
    for (int c = 0; c < C; ++c) y[c] = static_cast<float>(double(x[c]) * rstd_f * p.gamma[c]);
    p.rstd[r] = rstd_f;
  }
}

// dx += rstd * (g - xhat * mean(g * xhat)),  g = dy * gamma, xhat = x * rstd.
// dx may be null (skipped). dgamma: column blocks are owned by one thread each and sum the rows in
// order.
void rmsnorm_bwd_ref(const RmsNormParams<float>& p) {
  const int C = p.cols;
#pragma omp parallel for schedule(static) if (worth_parallel(p.rows * C))
  for (int64_t r = 0; r < (p.dx ? p.rows : 0); ++r) {
    const float* x = p.x + r * C;
    const float* dy = p.dy + r * C;
    const double rstd = p.rstd[r];
    double sum_gx = 0.0;
    for (int c = 0; c < C; ++c) sum_gx += double(dy[c]) * p.gamma[c] * (x[c] * rstd);
    const double mean_gx = sum_gx / C;
    float* dx = p.dx + r * C;
    for (int c = 0; c < C; ++c) {
      const double g = double(dy[c]) * p.gamma[c];
      dx[c] = static_cast<float>(dx[c] + rstd * (g - x[c] * rstd * mean_gx));
    }
  }
  if (!p.dgamma) return;
  constexpr int kBlock = 64;
  const int nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (worth_parallel(p.rows * C))
  for (int blk = 0; blk < nblocks; ++blk) {
    const int c0 = blk * kBlock, c1 = std::min(C, c0 + kBlock);
    double acc[kBlock] = {};
    for (int64_t r = 0; r < p.rows; ++r) {
      const float* x = p.x + r * C;
      const float* dy = p.dy + r * C;
      const double rstd = p.rstd[r];
      for (int c = c0; c < c1; ++c) acc[c - c0] += double(dy[c]) * (x[c] * rstd);
    }
    for (int c = c0; c < c1; ++c) p.dgamma[c] = static_cast<float>(p.dgamma[c] + acc[c - c0]);
  }
}

}  // namespace attnlab
