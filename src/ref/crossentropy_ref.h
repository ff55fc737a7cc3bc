// CPU reference for kernels/loss/crossentropy.cuh, with the same contract on float (T = float).
// It is the CPU backend and the oracle for the CUDA kernels. Deterministic: every output is
// computed by one thread in a fixed order, so results are bit-identical for any thread count.
#pragma once
#include "kernels/loss/crossentropy.cuh"

namespace attnlab {

void crossentropy_fwd_ref(const CrossEntropyParams<float>& p);
void crossentropy_fwd_bwd_ref(const CrossEntropyParams<float>& p);
// Same contract as launch_crossentropy_loss_sum; sums rows in index order.
void crossentropy_loss_sum_ref(const float* losses, const int32_t* targets, int64_t N,
                               int ignore_index, double* totals);

}  // namespace attnlab
