// Residual add. a, b, y, dy, da, db: [n].
// fwd: y = a + b (written; y may alias a or b).
// bwd: da += dy; db += dy (accumulated; either may be null).
#pragma once
#include "kernels/common/launch.h"

namespace attnlab {

template <typename T>
struct ResidualParams {
  const T* a = nullptr;
  const T* b = nullptr;
  T* y = nullptr;
  const T* dy = nullptr;
  T* da = nullptr;
  T* db = nullptr;
  int64_t n = 0;
};

template <typename T>
void launch_residual_fwd(const ResidualParams<T>& p, Stream s);
template <typename T>
void launch_residual_bwd(const ResidualParams<T>& p, Stream s);

}  // namespace attnlab
