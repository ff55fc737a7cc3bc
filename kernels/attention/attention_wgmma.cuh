// Hopper (sm_90a) forward and backward of dense attention on warpgroup tensor-core instructions
// (wgmma), bf16, head dim 64 or 128. Same contract as launch_attention_fwd<bf16> (attention.cuh): o
// and lse written (=), lse in natural log, packed strided q/k/v, GQA, the mask of AttentionMask;
// its o and lse feed either backward unchanged.
//
// launch_attention_fwd<bf16> uses the forward (attention_wgmma.cu) when AttentionParams::use_wgmma
// is set (the default) and attention_fwd_wgmma_supported() is true; launch_attention_bwd<bf16> the
// backward (attention_wgmma_bwd.cu) when use_wgmma is set, deterministic is not, dout is 16-byte
// aligned and attention_bwd_wgmma_supported() is true. Each kernel has one schedule per head dim
// (see the top of its file; the timings behind the choice are in docs/performance.md).
#pragma once
#include "kernels/attention/attention.cuh"

namespace attnlab {

// True when this build holds sm_90a machine code for the kernel (CMake adds it only when
// CMAKE_CUDA_ARCHITECTURES contains 90), the current device is compute capability 9.0 exactly
// (sm_90a code runs nowhere else) and D is 64 or 128.
bool attention_fwd_wgmma_supported(const AttentionParams<bf16>& p);

// Requires attention_fwd_wgmma_supported(p) and the layout the bf16 forward requires (16-byte
// aligned q/k/v, strides multiples of 8 elements, scale > 0).
void launch_attention_fwd_wgmma(const AttentionParams<bf16>& p, Stream s);

// The backward kernel: same requirements as the forward (build, device, D); causal or not,
// sliding window, GQA.
bool attention_bwd_wgmma_supported(const AttentionParams<bf16>& p);

// The fast (non-deterministic) bf16 backward after its delta kernel: dq, dk, dv written (=) in
// bf16. dK and dV are summed over the query heads of each GQA group in registers (bitwise
// reproducible); dQ (unscaled) is summed over key blocks in dq_accum with fp32 bulk additions
// (not bitwise reproducible), then converted. delta: [B, n_head, T] fp32, rowsum(dO * O);
// dq_accum: B * n_head * T * D fp32 scratch, zero on entry (its layout is the kernel's own).
// launch_attention_bwd<bf16> computes delta, zeroes dq_accum and calls this. Requires
// attention_bwd_wgmma_supported(p), the layout of the bf16 forward and a 16-byte aligned dout (o
// strides multiples of 8 elements).
void launch_attention_bwd_wgmma(const AttentionParams<bf16>& p, const float* delta, float* dq_accum,
                                Stream s);

}  // namespace attnlab
