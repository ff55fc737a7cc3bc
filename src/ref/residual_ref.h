// CPU reference for kernels/activation/residual.cuh, with the same contract on float (T = float).
// It is the CPU backend and the oracle for the CUDA kernels. Deterministic: every output is
// computed by one thread in a fixed order, so results are bit-identical for any thread count.
#pragma once
#include "kernels/activation/residual.cuh"

namespace attnlab {

void residual_fwd_ref(const ResidualParams<float>& p);
void residual_bwd_ref(const ResidualParams<float>& p);

}  // namespace attnlab
