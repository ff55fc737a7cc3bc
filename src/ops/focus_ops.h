// Host ops of Focus attention (kernels/focus/*.cuh, docs/focus.md): checks, params, dispatch. The
// contracts (= vs +=) are those of the kernel headers. Assignment tensors (scores, g, iterates,
// state) are f32 on every device; q/k/v, z and the centroids are in the activation dtype.
#pragma once
#include "core/context.h"
#include "core/tensor.h"
#include "kernels/focus/focus_assign.cuh"
#include "kernels/focus/focus_attention.cuh"
#include "kernels/focus/focus_sinkhorn_state.h"
#include "ops/qkv_layout.h"

namespace attnlab::ops {

// The CUDA kernels' limits on the Focus settings (focus_scores: the group space and its product
// with the groups; focus_sinkhorn: the groups), checked by the ops and, named by their recipe
// keys, when a CUDA model is allocated (nn/attention_focus.h, focus_cuda_limits_error).
inline constexpr int kFocusCudaMaxDg = 64;
inline constexpr int kFocusCudaMaxGroupsTimesDg = 1024;
inline constexpr int kFocusCudaMaxSinkhornGroups = 256;

// scores [N, K] f32 = cos(z_i, c_k) / tau; z [N, d_g], centroids [K, d_g].
void focus_scores_fwd(const ExecContext& ctx, const Tensor& scores, const Tensor& z,
                      const Tensor& centroids, float tau);
// dz written (=); dcentroids accumulated (+=), empty = frozen.
void focus_scores_bwd(const ExecContext& ctx, const Tensor& dz, const Tensor& dcentroids,
                      const Tensor& dscores, const Tensor& z, const Tensor& centroids, float tau);

// Sinkhorn in the log domain: scores, g [B, T, K]; iterates [iterations + 1, B, T, K] (saved for
// the backward); state [B, iterations, K, 2] (causal decoding, else empty: each entry a float
// pair hi + lo, kernels/focus/focus_sinkhorn_state.h; empty entries (-inf, 0)); pos: position of
// token 0.
// path: which CUDA kernels (SinkhornPath, kernels/focus/focus_assign.cuh: automatic, or chunked /
// cooperative forced for A/B tests and benchmarks); the CPU ignores it.
void focus_sinkhorn_fwd(const ExecContext& ctx, const Tensor& g, const Tensor& iterates,
                        const Tensor& scores, bool causal, const Tensor& state = Tensor(),
                        int pos = 0, SinkhornPath path = SinkhornPath::automatic);
// dscores written (=) from dg, the forward's g and iterates.
void focus_sinkhorn_bwd(const ExecContext& ctx, const Tensor& dscores, const Tensor& dg,
                        const Tensor& g, const Tensor& iterates, bool causal,
                        SinkhornPath path = SinkhornPath::automatic);
// g = softmax over the groups of scores [.., K]; the backward writes dscores.
void focus_softmax_assign_fwd(const ExecContext& ctx, const Tensor& g, const Tensor& scores);
void focus_softmax_assign_bwd(const ExecContext& ctx, const Tensor& dscores, const Tensor& dg,
                              const Tensor& g);
// groups [.., top_k] i32: each token's top_k groups by g [.., K] (ties: lower index first).
void focus_route_topk(const ExecContext& ctx, const Tensor& groups, const Tensor& g);

// Which kernel focus_attention_fwd / _bwd run for a soft gate (and focus_attention_bwd for the
// hard gate, route_training: hard's straight-through backward) on CUDA bf16: automatic = the
// Hopper wgmma kernel (kernels/focus/focus_wgmma.cuh: the additive gate, and the hard gate's
// backward; head dim 64 / 128, K <= 32) where this build and device support the call, else the
// tiled mma.sync kernel (focus_tiled.cuh, every gate, K <= 64); tiled / wgmma force one (wgmma
// where unsupported is an error). The hard gate's forward is the hard-routed kernel
// (focus_hard_ops.h) wherever it runs. For A/B tests and benchmarks; other dtypes and devices
// ignore it.
enum class FocusSoftKernel { automatic, tiled, wgmma };

// True when this build holds the wgmma kernel's sm_90a code and the current device runs it, for
// head dim 64 or 128 and K in [1, 32] (the additive gate, bf16).
bool focus_soft_wgmma_available(int head_dim, int K);
// True when, in addition, the wgmma backward with dg has its deterministic form at K groups
// (ExecContext::deterministic; kernels/focus/focus_wgmma_det.h, focus_det::available).
bool focus_deterministic_backward_available(int head_dim, int K);

// Two-level attention over the packed qkv [B, T, layout.width()]: out [B, T, n_head*D], lse
// [B, n_head, T] f32; g [B, T, K] f32 (soft gates; the straight-through backward), groups
// [B, T, top_k] i32 (gate hard). Either may be empty where the gate does not read it.
void focus_attention_fwd(const ExecContext& ctx, const Tensor& out, const Tensor& lse,
                         const Tensor& qkv, const QKVLayout& layout, const Tensor& g,
                         const Tensor& groups, const FocusGateParams& gate,
                         FocusSoftKernel kernel = FocusSoftKernel::automatic);
// dqkv written (=); dg [B, T, K] written (=), empty: not computed.
void focus_attention_bwd(const ExecContext& ctx, const Tensor& dqkv, const Tensor& dg,
                         const Tensor& dout, const Tensor& qkv, const Tensor& out,
                         const Tensor& lse, const QKVLayout& layout, const Tensor& g,
                         const Tensor& groups, const FocusGateParams& gate,
                         FocusSoftKernel kernel = FocusSoftKernel::automatic);
// Decoding: the Tq queries of qkv [B, Tq, width] at positions pos .. pos+Tq-1 attend to the cache
// k_cache, v_cache [B, n_kv_head, max_T, D] with g_cache [B, max_T, K] / groups_cache
// [B, max_T, top_k] (the new tokens' entries already written): the rows of focus_attention_fwd.
void focus_attention_decode(const ExecContext& ctx, const Tensor& out, const Tensor& qkv,
                            const Tensor& k_cache, const Tensor& v_cache, const Tensor& g_cache,
                            const Tensor& groups_cache, int pos, const QKVLayout& layout,
                            const FocusGateParams& gate);

}  // namespace attnlab::ops
