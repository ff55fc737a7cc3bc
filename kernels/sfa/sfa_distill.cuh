// SFA distillation term (docs/sfa.md): the sparse student's output O~ against the dense teacher's
// O on the same q, k, v (no gradient into the teacher), both n elements in the activation dtype.
// fwd: *total += weight * sum((O~ - O)^2) / n, total one fp64 on the device (the model's aux
//   total); one block, fixed-order fp64 reduction: deterministic.
// bwd: dstudent = dout + weight * 2 (O~ - O) / n, written (=); dstudent may equal dout.
// weight = aux scale * lambda (given at forward, AuxLossSink in nn/attention.h).
#pragma once
#include "kernels/common/launch.h"

namespace attnlab {

template <typename T>
struct SfaDistillParams {
  const T* student = nullptr;
  const T* teacher = nullptr;
  int64_t n = 0;
  float weight = 0.f;
  double* total = nullptr;  // fwd
  const T* dout = nullptr;  // bwd
  T* dstudent = nullptr;
};

template <typename T>
void launch_sfa_distill_fwd(const SfaDistillParams<T>& p, Stream s);
template <typename T>
void launch_sfa_distill_bwd(const SfaDistillParams<T>& p, Stream s);

}  // namespace attnlab
