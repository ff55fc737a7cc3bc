// Internal to the attention kernel family: the launchers that the checked entry points
// (attention.cu) dispatch to, one per kernel file. Their callers have checked the parameters
// (attention.cu: check_params, check_bf16_layout); the kernels themselves stay file-local.
#pragma once
#include <cuda_runtime.h>

#include "kernels/attention/attention.cuh"

namespace attnlab::attention_impl {

// attention_fwd_mma.cu: the bf16 mma.sync forward (D 64 or 128); the binary version (sm) of the
// build's machine code for it (the tensor-core kernels need 80 or newer).
void fwd_bf16_mma(const AttentionParams<bf16>& p, cudaStream_t st);
int mma_binary_version();

// attention_bwd_delta.cu: delta [B, n_head, T] = rowsum(dO * O) written; bf16 also zeroes
// dq_accum when it is not null (16-byte aligned, B * n_head * T * D floats).
void bwd_delta_bf16(const AttentionParams<bf16>& p, float* delta, float* dq_accum, cudaStream_t st);
void bwd_delta_f32(const AttentionParams<float>& p, float* delta, cudaStream_t st);

// attention_bwd_mma.cu: the bf16 mma.sync backward after the delta step: the fast path
// (deterministic = false: dK/dV with fused atomic dQ into the zeroed dq_accum, then its
// conversion) or the deterministic one (dq_accum unused).
void bwd_bf16_mma(const AttentionParams<bf16>& p, const float* delta, float* dq_accum,
                  cudaStream_t st);

// attention_f32.cu: the fp32 kernels (any D <= 128).
void fwd_f32(const AttentionParams<float>& p, cudaStream_t st);
void bwd_f32(const AttentionParams<float>& p, Stream s);

}  // namespace attnlab::attention_impl
