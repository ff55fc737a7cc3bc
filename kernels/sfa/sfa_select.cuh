// SFA feature selection (docs/sfa.md): every head vector x in R^D of q and of k (inside the packed
// qkv [B, T, W], QKVLayout; GQA: n_head q vectors and n_kv_head k vectors per token) keeps its k
// coordinates of largest |x_c|. Ties go to the lower index: c is selected iff
//   #{c' : |x_c'| > |x_c|, or |x_c'| == |x_c| and c' < c} < k,
// so an all-zero vector keeps coordinates 0 .. k-1 (values 0), deterministically.
//
// Outputs (each null = not written), all written (=):
//   sparse form: element i (0 .. k-1, ascending coordinate) of q head h of token (b, t) at
//     q_idx / q_val + b*q_batch_stride + t*q_row_stride + h*q_head_stride (i32 coordinate, its
//     value); k likewise with the k_* strides and kv head h. Packed [B, T, H, k]: batch T*H*k,
//     row H*k, head k. A decode cache [B, n_kv_head, max_T, k] at position pos: the pointer
//     offset by pos*k, batch n_kv_head*max_T*k, row k, head max_T*k. The k coordinates go to
//     k_idx (i32) or, for the decode cache, to k_idx8 (one byte each, so D <= 256; the cache's
//     bytes per token, docs/sfa.md); at most one of the two is set.
//   v_out: the v head vectors copied (the cache append of dense V), with the v_* strides (D wide).
//   masked dense form: mask_dst [B, T, W] = mask_src with the q and k coordinates that are not
//     selected (in qkv) set to zero; the v part copied. mask_src == mask_dst is allowed (in place:
//     masks a gradient dqkv by the forward's selection, the straight-through backward).
// CUDA: one warp per head vector, D <= 128; deterministic (no reductions across threads).
#pragma once
#include "kernels/common/launch.h"

namespace attnlab {

template <typename E>
struct SfaSelectParams {
  const E* qkv = nullptr;  // selection source, packed rows of width W
  int B = 0, T = 0, n_head = 0, n_kv_head = 0, D = 0, k = 0;
  int32_t* q_idx = nullptr;
  E* q_val = nullptr;
  int64_t q_batch_stride = 0, q_row_stride = 0, q_head_stride = 0;
  int32_t* k_idx = nullptr;
  uint8_t* k_idx8 = nullptr;  // the decode cache's form (D <= 256), instead of k_idx
  E* k_val = nullptr;
  int64_t k_batch_stride = 0, k_row_stride = 0, k_head_stride = 0;
  E* v_out = nullptr;
  int64_t v_batch_stride = 0, v_row_stride = 0, v_head_stride = 0;
  const E* mask_src = nullptr;
  E* mask_dst = nullptr;
};

template <typename E>
void launch_sfa_select(const SfaSelectParams<E>& p, Stream s);

}  // namespace attnlab
