// SwiGLU (LLaMA's MLP activation). pre: [rows, 2F], the gate projection in columns [0, F) and the
// up projection in [F, 2F); y, dy: [rows, F]; dpre: [rows, 2F].
// fwd: y = silu(gate) * up, silu(g) = g * sigmoid(g)                             (written =)
// bwd: dpre[:, :F] = dy * up * silu'(gate), silu'(g) = sigmoid(g) * (1 + g * (1 - sigmoid(g)));
//      dpre[:, F:] = dy * silu(gate)                                             (written =)
// Math in fp32 (the CPU reference in double); T is float or bf16.
#pragma once
#include "kernels/common/launch.h"

namespace attnlab {

template <typename T>
struct SwiGluParams {
  const T* pre = nullptr;
  T* y = nullptr;
  const T* dy = nullptr;
  T* dpre = nullptr;
  int64_t rows = 0;
  int64_t f = 0;  // F: the width of y; pre and dpre are 2F wide
};

template <typename T>
void launch_swiglu_fwd(const SwiGluParams<T>& p, Stream s);
template <typename T>
void launch_swiglu_bwd(const SwiGluParams<T>& p, Stream s);

}  // namespace attnlab
