// LayerNorm over the last dimension.
// x, y, dy, dx: [rows, cols]; gamma, beta, dgamma, dbeta: [cols]; mean, rstd: [rows] fp32.
// fwd: mean/rstd written; y = (x - mean) * rstd * gamma + beta                     (written =)
// bwd: dx += ...  (accumulated: the residual stream gradient flows through it)
//      dgamma += sum_rows dy * xhat; dbeta += sum_rows dy                            (accumulated
//      +=) dgamma/dbeta may be null (frozen parameters).
// gamma_f32/beta_f32 (CUDA, T = bf16 only): when set they replace gamma/beta, so bf16 activations
// can be normalised with the fp32 master copy of the parameters (LayerNorm gains sit near 1.0,
// where a bf16 ulp, 2^-8..2^-7, is ~10x a typical AdamW update; reading them in bf16 makes the
// forward follow the stochastic rounding of the weights instead of the trained values).
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
  const float* gamma_f32 = nullptr;
  const float* beta_f32 = nullptr;
  int64_t rows = 0;
  int cols = 0;
  float eps = 1e-5f;
};

template <typename T>
void launch_layernorm_fwd(const LayerNormParams<T>& p, Stream s);
template <typename T>
void launch_layernorm_bwd(const LayerNormParams<T>& p, Stream s);

}  // namespace attnlab
