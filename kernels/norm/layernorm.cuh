// LayerNorm over the last dimension.
// x, y, dy, dx: [rows, cols]; gamma, beta, dgamma, dbeta: [cols]; mean, rstd: [rows] fp32.
// fwd: mean/rstd written; y = (x - mean) * rstd * gamma + beta                     (written =)
//      beta may be null: no bias (nanoGPT's bias=False), y = (x - mean) * rstd * gamma
// bwd: dx += ...  (accumulated: the residual stream gradient flows through it; may be null)
//      dgamma += sum_rows dy * xhat; dbeta += sum_rows dy    (accumulated +=; null = frozen)
#pragma once
#include "kernels/common/launch.h"

namespace attnlab {

template <typename T>
struct LayerNormParams {
  const T* x = nullptr;
  const T* gamma = nullptr;
  const T* beta = nullptr;
  T* y = nullptr;
  float* mean = nullptr;
  float* rstd = nullptr;
  const T* dy = nullptr;
  T* dx = nullptr;
  T* dgamma = nullptr;
  T* dbeta = nullptr;
  int64_t rows = 0;
  int cols = 0;
  float eps = 1e-5f;
};

template <typename T>
void launch_layernorm_fwd(const LayerNormParams<T>& p, Stream s);
template <typename T>
void launch_layernorm_bwd(const LayerNormParams<T>& p, Stream s);

}  // namespace attnlab
