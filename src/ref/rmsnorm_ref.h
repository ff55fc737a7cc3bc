// CPU reference for kernels/norm/rmsnorm.cuh, with the same contract on float (T = float).
// It is the CPU backend and the oracle for the CUDA kernels. Deterministic: every output is
// computed by one thread in a fixed order, so results are bit-identical for any thread count.
#pragma once
#include "kernels/norm/rmsnorm.cuh"

namespace attnlab {

void rmsnorm_fwd_ref(const RmsNormParams<float>& p);
void rmsnorm_bwd_ref(const RmsNormParams<float>& p);

}  // namespace attnlab
