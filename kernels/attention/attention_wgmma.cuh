// Hopper (sm_90a) forward of dense attention on warpgroup tensor-core instructions (wgmma), bf16,
// head dim 64 or 128. Same contract as launch_attention_fwd<bf16> (attention.cuh): o and lse
// written (=), lse in natural log, packed strided q/k/v, GQA, causal or not, sliding window; its
// o and lse feed the existing backward unchanged.
//
// launch_attention_fwd<bf16> uses it when AttentionParams::use_wgmma is set (the default) and
// attention_fwd_wgmma_supported() is true (see attention_wgmma.cu for the design).
#pragma once
#include "kernels/attention/attention.cuh"

namespace attnlab {

// True when this build holds sm_90a machine code for the kernel (CMake adds it only when
// CMAKE_CUDA_ARCHITECTURES contains 90), the current device is compute capability 9.0 exactly
// (sm_90a code runs nowhere else), D is 64 or 128 and no variant is set.
bool attention_fwd_wgmma_supported(const AttentionParams<bf16>& p);

// The kernel's two schedules (attention_wgmma.cu): kSimple waits for each product before the
// next step; kPipelined overlaps the softmax of key tile n with O += P V of tile n - 1.
// kDefault picks per head dim (what launch_attention_fwd<bf16> with use_wgmma runs); the others
// are for tests and benchmarks.
enum class WgmmaFwdVariant { kDefault, kSimple, kPipelined };

// Requires attention_fwd_wgmma_supported(p) and the layout the bf16 forward requires (16-byte
// aligned q/k/v, strides multiples of 8 elements, scale > 0).
void launch_attention_fwd_wgmma(const AttentionParams<bf16>& p, Stream s,
                                WgmmaFwdVariant variant = WgmmaFwdVariant::kDefault);

}  // namespace attnlab
