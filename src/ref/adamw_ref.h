// CPU reference for AdamW and the gradient sum of squares (contract: kernels/optim/adamw.cuh).
#pragma once
#include <cstdint>

#include "kernels/optim/adamw.cuh"

namespace attnlab {

// One AdamW step over p.n elements, in place. Per element the update is computed in double and
// rounded once into float: g = grad*grad_scale; m, v moments; bias-corrected; decoupled decay.
// When p.master is non-null the master copy is updated and copied into param; otherwise param
// itself is the weight. p.seed is unused (no rounding into bf16 on the CPU). Elementwise, so the
// result does not depend on the number of OpenMP threads.
void adamw_ref(const AdamWParams<float>& p);

// init + sum(g[i]^2) for i in [0, n), accumulated in double in index order (fully
// deterministic); chained calls over consecutive pieces equal one call over their concatenation.
double sumsq_ref(const float* g, int64_t n, double init = 0.0);

}  // namespace attnlab
