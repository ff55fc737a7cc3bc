// Hopper (sm_90a) wgmma Focus attention for the additive gate (the contract of
// focus_attention.cuh): bf16, head dim 64 or 128, causal, GQA, packed qkv (kv_head_stride = D),
// pos = 0, 1 .. 32 groups (K padded to KP = 8, 16 or 32). The op (src/ops/focus.cpp) sends those
// calls here when focus_wgmma_supported() and the rest to the tiled kernel (focus_tiled.cuh).
// g is split once per call (focus_wgmma_split_g) into an fp16 affinity operand and bf16 hi / lo
// parts (focus_wgmma_layout.h).
//   fwd (focus_wgmma_fwd_pp.cu; g split in focus_wgmma_fwd.cu): 128 queries per block, a producer
//     warpgroup (TMA for Q, K, V; cp.async for the g tiles) and two compute warpgroups taking
//     turns at the tensor cores (FlashAttention-3's ping-pong), 128-key tiles; S = Q K^T and the
//     affinity A =
//     G_q G_k^T (one fp16 wgmma on the fp16 operands: g to 11 bits; its accumulator is S's
//     layout) in one group, the exponentials, exp(s - m) times (a + eps) on the distant pairs;
//     O += P V on wgmma.
//   bwd (focus_wgmma_bwd.cu): delta = rowsum(dO O) (launch_attention_bwd_delta, which zeroes the
//     dQ accumulator), then the dense wgmma backward's loop (one block per 128 keys of a kv head
//     over the heads of its group and the query tiles that see its keys; dK, dV in registers, dQ
//     by fp32 bulk reductions) with P^T gated the same way (the affinity per 16-query chunk on
//     fp16 mma.sync; dS = P (dP - delta) with the gated P is the gradient of the logit). dg in
//     the same loop, on the distant pairs of each 16-query chunk: dA = exp(s - lse) (dP - delta)
//     from the ungated P, dg_key += dA^T G_q in registers and dg_query += dA G_k
//     (movmatrix-transposed dA^T) reduced in shared memory, on mma.sync (bf16 dA times g hi + lo),
//     both by fp32 atomics into dg (zeroed first). dq and dg are not bitwise reproducible; dk, dv
//     are. With FocusAttentionParams::deterministic the same loop adds dq and dg in a fixed order
//     (turn counters per query tile, per-head dg slices: focus_wgmma_det.h). The hard gate's
//     backward (route_training: hard, whose forward is the hard-routed kernel, focus_hard.cuh) is
//     the same loop with the affinity replaced by the tokens' group sets (bit x: group x among the
//     top_k, from split_g): a distant pair keeps P iff the sets meet, and dA (the straight-through
//     gradient) and the dg products are the additive gate's.
#pragma once
#include "kernels/focus/focus_attention.cuh"

namespace attnlab {

// True when the build holds the sm_90a code and the current device is compute capability 9.0.
bool focus_wgmma_device_supported();
// focus_wgmma_device_supported() and p is a call the kernels take (see above): the forward
// takes the additive gate, the backward also the hard gate (with groups).
bool focus_wgmma_supported(const FocusAttentionParams<bf16>& p);
bool focus_wgmma_bwd_supported(const FocusAttentionParams<bf16>& p);
void launch_focus_wgmma_fwd(const FocusAttentionParams<bf16>& p, Stream s);
// dq, dk, dv written (=); dg (if not null) written (=).
void launch_focus_wgmma_bwd(const FocusAttentionParams<bf16>& p, Stream s);
// The hard-routed forward (gate hard, groups [B, T, top_k], g unused) on the same tiles and
// affinity product, in the dense forward's simple schedule (focus_wgmma_fwd.cu): the
// affinity of the tokens' group indicators counts the groups a pair shares, and a distant pair
// that shares none is masked before the softmax (focus_wgmma_layout.h, mask_acc_hard): o and lse
// (natural log) written (=), the hard routing's rows exactly (up to float order), at a dense
// forward's cost plus the affinity, whatever top_k. K <= focus_wgmma::kHardFwdMaxGroups (one KP
// instantiation).
bool focus_wgmma_hard_fwd_supported(const FocusAttentionParams<bf16>& p);
void launch_focus_wgmma_hard_fwd(const FocusAttentionParams<bf16>& p, Stream s);
// The additive gate's forward on the producer and ping-pong schedule (focus_wgmma_fwd_pp.cu),
// from split g (gs) with fold_e the folded eps's operand (0: unfolded): launch_focus_wgmma_fwd's
// kernel.
void launch_focus_wgmma_fwd_pp(const FocusAttentionParams<bf16>& p, const bf16* gs, int KP,
                               float fold_e, Stream s);
// g [B, T, K] fp32 into gs [B, T, 3 KP] 16-bit (the fp16 affinity operands, the bf16 hi parts,
// the bf16 lo parts, zero past K: focus_wgmma_layout.h), the operand form every wgmma Focus
// kernel reads. KP = padded_groups(K). sets (if not null): [B, T] the tokens' group sets of the
// hard gate (bit x: group x among its top_k groups; K <= 32). dg_zero (if not null): [B, T, K]
// written 0 (the backward's dg, in the same launch).
void focus_wgmma_split_g(const FocusAttentionParams<bf16>& p, bf16* gs, int KP, Stream s,
                         unsigned* sets = nullptr, float* dg_zero = nullptr);

}  // namespace attnlab
