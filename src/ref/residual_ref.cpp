#include "ref/residual_ref.h"

namespace attnlab {

void residual_fwd_ref(const ResidualParams<float>& p) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < p.n; ++i) p.y[i] = p.a[i] + p.b[i];
}

void residual_bwd_ref(const ResidualParams<float>& p) {
  if (p.da) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < p.n; ++i) p.da[i] += p.dy[i];
  }
  if (p.db) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < p.n; ++i) p.db[i] += p.dy[i];
  }
}

}  // namespace attnlab
