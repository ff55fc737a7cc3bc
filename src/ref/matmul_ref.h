// CPU reference for kernels/matmul/matmul.cuh, with the same contract on float (T = float).
// It is the CPU backend and the oracle for the CUDA kernels. Deterministic: every output is
// computed by one thread in a fixed order, so results are bit-identical for any thread count.
#pragma once
#include "kernels/matmul/matmul.cuh"

namespace attnlab {

void matmul_fwd_ref(const MatmulParams<float>& p);
void matmul_bwd_ref(const MatmulParams<float>& p);

}  // namespace attnlab
