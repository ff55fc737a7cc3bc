// AdamW with decoupled weight decay, over one flat range of parameters.
// param: [n] (T); master: [n] fp32 or null (when T is bf16 the fp32 master copy is updated and
// rounded into param); grad: [n] (T); m, v: [n] fp32.
//   g = grad * grad_scale                    (grad_scale folds in global-norm clipping)
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   mhat = m / (1 - b1^step); vhat = v / (1 - b2^step)
//   w = w - lr * (mhat / (sqrt(vhat) + eps) + weight_decay * w)
// All of param, master, m, v are updated in place; step counts from 1.
// Also: sum of squares of a gradient range (for the global norm), deterministic.
#pragma once
#include "kernels/common/launch.h"

namespace attnlab {

template <typename T>
struct AdamWParams {
  T* param = nullptr;
  float* master = nullptr;
  const T* grad = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  int64_t n = 0;
  float lr = 0.f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.f;
  float grad_scale = 1.f;
  int step = 1;
  uint32_t seed = 0;  // for stochastic rounding into bf16 params (CUDA)
};

template <typename T>
void launch_adamw(const AdamWParams<T>& p, Stream s);

// out[0] = sum(grad[i]^2) in fp32, with a fixed reduction order; out is device memory.
template <typename T>
void launch_sumsq(const T* grad, int64_t n, float* out, Stream s);

}  // namespace attnlab
