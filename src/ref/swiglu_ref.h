// CPU reference for kernels/activation/swiglu.cuh, with the same contract on float (T = float).
// It is the CPU backend and the oracle for the CUDA kernels. Deterministic: every output is
// computed by one thread in a fixed order, so results are bit-identical for any thread count.
#pragma once
#include "kernels/activation/swiglu.cuh"

namespace attnlab {

void swiglu_fwd_ref(const SwiGluParams<float>& p);
void swiglu_bwd_ref(const SwiGluParams<float>& p);

}  // namespace attnlab
