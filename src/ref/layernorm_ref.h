// CPU reference for kernels/norm/layernorm.cuh, with the same contract on float (T = float).
// It is the CPU backend and the oracle for the CUDA kernels. Deterministic: every output is
// computed by one thread in a fixed order, so results are bit-identical for any thread count.
#pragma once
#include "kernels/norm/layernorm.cuh"

namespace attnlab {

void layernorm_fwd_ref(const LayerNormParams<float>& p);
void layernorm_bwd_ref(const LayerNormParams<float>& p);

}  // namespace attnlab
