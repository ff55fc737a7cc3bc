// RMSNorm over the last dimension (LLaMA): no mean subtraction, no bias.
// x, y, dy, dx: [rows, cols]; gamma, dgamma: [cols]; rstd: [rows] fp32.
// fwd: rstd = 1 / sqrt(mean_c(x^2) + eps) written; y = x * rstd * gamma        (written =)
// bwd: dx += rstd * (dy * gamma - xhat * mean_c(dy * gamma * xhat)), xhat = x * rstd
//      (accumulated: the residual stream gradient flows through it; may be null)
//      dgamma += sum_rows dy * xhat                          (accumulated +=; null = frozen)
// Statistics and math in fp32 (the CPU reference in double); T is float or bf16.
#pragma once
#include "kernels/common/launch.h"

namespace attnlab {

template <typename T>
struct RmsNormParams {
  const T* x = nullptr;
  const T* gamma = nullptr;
  T* y = nullptr;
  float* rstd = nullptr;
  const T* dy = nullptr;
  T* dx = nullptr;
  T* dgamma = nullptr;
  int64_t rows = 0;
  int cols = 0;
  float eps = 1e-6f;
};

template <typename T>
void launch_rmsnorm_fwd(const RmsNormParams<T>& p, Stream s);
template <typename T>
void launch_rmsnorm_bwd(const RmsNormParams<T>& p, Stream s);

}  // namespace attnlab
