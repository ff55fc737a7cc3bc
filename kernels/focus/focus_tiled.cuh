// Tiled tensor-core Focus attention (the contract of focus_attention.cuh), bf16, head dim 64 or
// 128, causal, GQA, packed qkv (kv_head_stride = D), pos = 0, every gate, K <= 64 groups. The op
// (src/ops/focus.cpp) sends those calls here and the rest to the per-row kernel.
//   fwd (focus_tiled_fwd.cu): 128 queries per block, 64-key K/V tiles double-buffered (cp.async),
//     S = Q K^T and O += P V on mma.sync m16n8k16 like the dense mma.sync forward; beside the K/V
//     tiles, the g rows of the tile's keys (bf16 hi + lo split of the fp32 values) or, for gate
//     hard, a 64-bit group mask per key. A warp whose 32 rows see only local keys of a tile
//     (i - j <= local_window for every pair) runs the dense arithmetic; otherwise it computes
//     A = G_q G_k^T on tensor cores (three bf16 products hi.hi + hi.lo + lo.hi: about fp32
//     accuracy; the accumulator has the layout of S) and applies the gate per distant element:
//     additive multiplies exp(s - m) by (a + eps) after the exponential (a <= 1, so the running
//     max of s stays a safe bound), multiplicative scales the logit before the max, hard sets
//     non-sharing pairs to -inf.
//   bwd (focus_tiled_bwd.cu): delta = rowsum(dO O) (launch_attention_bwd_delta, which also zeroes
//     the dQ accumulator), then one block per 64 keys of a kv head loops over the heads of its GQA
//     group and the query tiles that see the keys: dV += P^T dO, dK += dS^T Q in registers, dQ +=
//     dS K into fp32 scratch with atomics (then converted), and for dg the gate gradient dA
//     (keys x queries, in shared memory as bf16 hi + lo): dg_key += dA^T G_q and dg_query +=
//     dA G_k, split products (about fp32 accuracy) added with atomics. dq and dg are not bitwise
//     reproducible (fp32 atomics); dk, dv are.
#pragma once
#include "kernels/focus/focus_attention.cuh"

namespace attnlab {

// The calls the tiled kernels take (see above); the op checks this before launching.
bool focus_tiled_supported(const FocusAttentionParams<bf16>& p);
void launch_focus_tiled_fwd(const FocusAttentionParams<bf16>& p, Stream s);
void launch_focus_tiled_bwd(const FocusAttentionParams<bf16>& p, Stream s);

}  // namespace attnlab
