// SFA attention from the sparse form (docs/sfa.md): scores from the overlaps of the selected
// coordinates, s_ij = scale * sum over c in I(q_i) ∩ I(k_j) of q~_ic k~_jc, then causal softmax
// and a dense P V. Equal to dense attention on the masked q~, k~ (the training path runs that:
// kernels/attention with a sparsified copy of qkv). This family is the CPU oracle of that equality
// and the decode path (the sparse KV cache: k~ as values + indices, dense V).
//
// Query row t of chunk b (head h) sits at position pos + t and sees keys j in [0, pos + t].
// q_idx / q_val of (b, t, h) at + b*q_batch_stride + t*q_row_stride + h*q_head_stride (k entries,
// ascending coordinates, as sfa_select writes them); the key coordinates (k_idx, i32, or k_idx8,
// one byte: the decode cache, D <= 256; exactly one is set) and k_val of (b, j, kv head g) at
// + b*k_batch_stride + j*k_row_stride + g*k_head_stride; v of (b, j, g) at + b*v_batch_stride +
// j*v_row_stride + g*v_head_stride (D wide); o at o + b*o_batch_stride + t*o_row_stride + h*D.
// GQA: query head h reads kv head h / (n_head / n_kv_head).
// fwd: o written (=); lse [B, n_head, Tq] fp32 written (=) when not null.
// CUDA (decode, k_idx8 only): one block per (b, t, h) over the visible keys, two passes over them;
// D <= 128;
// deterministic (fixed-order block reductions). The tiled training kernels are FlashSFA's
// (sfa_flash.cuh).
#pragma once
#include "kernels/common/launch.h"

namespace attnlab {

template <typename T>
struct SfaAttentionParams {
  const int32_t* q_idx = nullptr;
  const T* q_val = nullptr;
  const int32_t* k_idx = nullptr;   // packed training form (FlashSFA's CPU forward)
  const uint8_t* k_idx8 = nullptr;  // the decode cache
  const T* k_val = nullptr;
  const T* v = nullptr;
  T* o = nullptr;
  float* lse = nullptr;
  int64_t q_batch_stride = 0, q_row_stride = 0, q_head_stride = 0;
  int64_t k_batch_stride = 0, k_row_stride = 0, k_head_stride = 0;
  int64_t v_batch_stride = 0, v_row_stride = 0, v_head_stride = 0;
  int64_t o_batch_stride = 0, o_row_stride = 0;
  int B = 0, Tq = 0, pos = 0, n_head = 0, n_kv_head = 0, D = 0, k = 0;
  float scale = 0.f;
};

template <typename T>
void launch_sfa_attention_fwd(const SfaAttentionParams<T>& p, Stream s);

}  // namespace attnlab
