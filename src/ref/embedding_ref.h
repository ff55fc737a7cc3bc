// CPU reference for kernels/embed/embedding.cuh, with the same contract on float (T = float).
// It is the CPU backend and the oracle for the CUDA kernels. Deterministic: every output is
// computed by one thread in a fixed order, so results are bit-identical for any thread count.
#pragma once
#include "kernels/embed/embedding.cuh"

namespace attnlab {

void embedding_fwd_ref(const EmbeddingParams<float>& p);
void embedding_bwd_ref(const EmbeddingParams<float>& p);

}  // namespace attnlab
