// CPU reference for kernels/attention/attention.cuh, with the same contract on float (T = float).
// It is the CPU backend and the oracle for the CUDA kernels. Deterministic: every output is
// computed by one thread in a fixed order, so results are bit-identical for any thread count.
#pragma once
#include "kernels/attention/attention.cuh"

namespace attnlab {

void attention_fwd_ref(const AttentionParams<float>& p);
void attention_bwd_ref(const AttentionParams<float>& p);

}  // namespace attnlab
