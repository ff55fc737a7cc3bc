// Hopper (sm_90a) forward and backward of dense attention on warpgroup tensor-core instructions
// (wgmma), bf16, head dim 64 or 128. Same contract as launch_attention_fwd<bf16> (attention.cuh): o
// and lse written (=), lse in natural log, packed strided q/k/v, GQA, causal or not, sliding
// window; its o and lse feed the existing backward unchanged.
//
// launch_attention_fwd<bf16> uses it when AttentionParams::use_wgmma is set (the default) and
// attention_fwd_wgmma_supported() is true (see attention_wgmma.cu for the design).
// launch_attention_bwd<bf16> uses the backward (attention_wgmma_bwd.cu) when use_wgmma is set,
// deterministic is not, dout is 16-byte aligned and attention_bwd_wgmma_supported() is true.
#pragma once
#include "kernels/attention/attention.cuh"

namespace attnlab {

// True when this build holds sm_90a machine code for the kernel (CMake adds it only when
// CMAKE_CUDA_ARCHITECTURES contains 90), the current device is compute capability 9.0 exactly
// (sm_90a code runs nowhere else), D is 64 or 128 and no variant is set.
bool attention_fwd_wgmma_supported(const AttentionParams<bf16>& p);

// The kernel's schedules (attention_wgmma.cu): kSimple waits for each product before the next
// step; kPipelined overlaps the softmax of key tile n with O += P V of tile n - 1; kPingpong is
// kPipelined with the loads in a producer warp (mbarrier stages, no block-wide barrier) and the
// two warpgroups taking turns at the tensor cores, so one's softmax overlaps the other's MMAs.
// kDefault picks per head dim (what launch_attention_fwd<bf16> with use_wgmma runs, see
// wgmma_fwd_default_variant); the others are for tests and benchmarks.
enum class WgmmaFwdVariant { kDefault, kSimple, kPipelined, kPingpong };

// The schedule kDefault stands for at head dim D (64 or 128): never kDefault.
WgmmaFwdVariant wgmma_fwd_default_variant(int D);

// Requires attention_fwd_wgmma_supported(p) and the layout the bf16 forward requires (16-byte
// aligned q/k/v, strides multiples of 8 elements, scale > 0).
void launch_attention_fwd_wgmma(const AttentionParams<bf16>& p, Stream s,
                                WgmmaFwdVariant variant = WgmmaFwdVariant::kDefault);

// The backward kernel: same requirements as the forward (build, device, D); causal or not,
// sliding window, GQA.
bool attention_bwd_wgmma_supported(const AttentionParams<bf16>& p);

// The backward's versions (attention_wgmma_bwd.cu), the same arithmetic: kTma synchronizes its two
// warpgroups with two block barriers per query tile and computes the tile's dQ after the second;
// kTmaLagDq issues each tile's dQ product in the next tile, behind its first products (one block
// barrier per tile). kDefault is what launch_attention_bwd<bf16> runs, per head dim (see
// wgmma_bwd_default_variant; bench_attention, docs/performance.md v7).
enum class WgmmaBwdVariant { kDefault, kTma, kTmaLagDq };

// The version kDefault stands for at head dim D (64 or 128): kTma at 64, kTmaLagDq at 128.
WgmmaBwdVariant wgmma_bwd_default_variant(int D);

// The fast (non-deterministic) bf16 backward after its delta kernel: dq, dk, dv written (=) in
// bf16. dK and dV are summed over the query heads of each GQA group in registers (bitwise
// reproducible); dQ (unscaled) is summed over key blocks in dq_accum with fp32 atomic additions
// (not bitwise reproducible), then converted. delta: [B, n_head, T] fp32, rowsum(dO * O);
// dq_accum: B * n_head * T * D fp32 scratch, zero on entry (its layout is the kernel's own).
// launch_attention_bwd<bf16> computes delta, zeroes dq_accum and calls this. Requires
// attention_bwd_wgmma_supported(p), the layout of the bf16 forward and a 16-byte aligned dout (o
// strides multiples of 8 elements).
void launch_attention_bwd_wgmma(const AttentionParams<bf16>& p, const float* delta, float* dq_accum,
                                Stream s, WgmmaBwdVariant variant = WgmmaBwdVariant::kDefault);

}  // namespace attnlab
