// CPU reference for kernels/position/rope.cuh, with the same contract on float (T = float).
// It is the CPU backend and the oracle for the CUDA kernels. Deterministic: every output is
// computed by one thread in a fixed order, so results are bit-identical for any thread count.
#pragma once
#include "kernels/position/rope.cuh"

namespace attnlab {

void rope_fwd_ref(const RopeParams<float>& p);
void rope_bwd_ref(const RopeParams<float>& p);

}  // namespace attnlab
