// GELU, tanh approximation (GPT-2): y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// x, y, dy, dx: [n]. fwd: y written. bwd: dx = dy * gelu'(x), written (dx may alias dy).
#pragma once
#include "kernels/common/launch.h"

namespace attnlab {

template <typename T>
struct GeluParams {
  const T* x = nullptr;
  T* y = nullptr;
  const T* dy = nullptr;
  T* dx = nullptr;
  int64_t n = 0;
};

template <typename T>
void launch_gelu_fwd(const GeluParams<T>& p, Stream s);
template <typename T>
void launch_gelu_bwd(const GeluParams<T>& p, Stream s);

}  // namespace attnlab
