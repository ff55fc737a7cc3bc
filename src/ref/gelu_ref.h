// CPU reference for kernels/activation/gelu.cuh, with the same contract on float (T = float).
// It is the CPU backend and the oracle for the CUDA kernels. Deterministic: every output is
// computed by one thread in a fixed order, so results are bit-identical for any thread count.
#pragma once
#include "kernels/activation/gelu.cuh"

namespace attnlab {

void gelu_fwd_ref(const GeluParams<float>& p);
void gelu_bwd_ref(const GeluParams<float>& p);

}  // namespace attnlab
