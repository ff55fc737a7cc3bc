// CPU references of the Focus kernel family (kernels/focus/*.cuh), the same contracts on float.
// They are the CPU backend of Focus attention and the oracle for its CUDA kernels. Deterministic:
// every output is owned by one thread and reduced in a fixed order.
#pragma once
#include "kernels/focus/focus_assign.cuh"
#include "kernels/focus/focus_attention.cuh"
#include "kernels/focus/focus_scores.cuh"

namespace attnlab {

void sinkhorn_fwd_ref(const SinkhornParams& p);
void sinkhorn_bwd_ref(const SinkhornParams& p);
void softmax_assign_fwd_ref(const SoftmaxAssignParams& p);
void softmax_assign_bwd_ref(const SoftmaxAssignParams& p);
void topk_route_ref(const TopkRouteParams& p);

void focus_scores_fwd_ref(const FocusScoresParams<float>& p);
void focus_scores_bwd_ref(const FocusScoresParams<float>& p);

void focus_attention_fwd_ref(const FocusAttentionParams<float>& p);
void focus_attention_bwd_ref(const FocusAttentionParams<float>& p);
// The backward with each pair's dA rounded to bf16 before the dg products: the precision of the
// wgmma backward's dg (bf16 dA times g hi + lo), the same-precision reference of its dg bound.
void focus_attention_bwd_bf16_da_ref(const FocusAttentionParams<float>& p);

}  // namespace attnlab
