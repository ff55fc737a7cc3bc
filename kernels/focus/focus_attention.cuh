// Focus two-level attention (docs/focus.md), causal, per head, with grouped-query attention.
//
// Query row t of chunk b sits at absolute position i = pos + t and sees keys j <= i. With
// s = scale q_i . k_j and a = g_i . g_j (assignment rows, fp32 [.., K]):
//   local   (i - j <= local_window):  logit s                        (ungated)
//   distant, gate additive:           weight exp(s) (a + eps)        (= exp(s + log(a + eps)))
//            gate multiplicative:     logit s * sigmoid(gate_scale a + gate_bias)
//            gate hard:               logit s iff i and j share one of their top_k groups
//                                     (a pair sharing several counts once), else not attended
// out = softmax over the row of those weights times v.
//
// Layout: q of (b, t, head h) at q + b*q_batch_stride + t*q_row_stride + h*D; k, v of (b, j,
// kv head h_kv) at k + b*kv_batch_stride + j*kv_row_stride + h_kv*kv_head_stride (packed qkv:
// kv_head_stride = D; a KV cache [B, n_kv_head, max_T, D]: kv_row_stride = D, kv_head_stride =
// max_T * D). o, dout: o + b*o_batch_stride + t*o_row_stride + h*D. g of (b, j) at
// g + b*g_batch_stride + j*K, groups at groups + b*groups_batch_stride + j*top_k (absolute j).
// lse: [B, n_head, T] fp32, the natural log of the sum of each row's weights (saved by fwd).
//
// fwd: o and lse written (=); keys 0 .. pos + T - 1 (decode: pos > 0 against a cache; lse may be
//   null there).
// bwd (pos = 0, packed): dq, dk, dv written (=); dg [B, T, K] fp32 written (=), summed over heads
//   (null: no assignment gradient). gate hard in the backward is the straight-through estimate:
//   the mask m in {0, 1} of the forward (weight exp(s) m) gets the gradient a would get in its
//   place, its weight bounded by 1 (hard_straight_through_weight),
//   d m_ij = min(exp(s - lse), 1) (dP_ij - delta_i), passed to dg_i += dm g_j, dg_j += dm g_i.
#pragma once
#include "kernels/common/launch.h"

namespace attnlab {

enum class FocusGateKind { additive, multiplicative, hard };

struct FocusGateParams {
  FocusGateKind kind = FocusGateKind::additive;
  int local_window = 128;
  float eps = 1e-6f;
  float scale = 10.f, bias = -5.f;  // multiplicative
};

// The hard gate's straight-through weight of a distant pair from e = exp(s - lse): e, at most 1.
// On an attended pair e is its probability; on a masked one it is not (lse sums the attended
// pairs only) and unbounded, which made hard-routed training unstable (docs/focus.md). The CPU
// reference (double) and every backward kernel take it from here.
#if defined(__CUDACC__)
#define ATTN_FOCUS_ST_FN __host__ __device__ __forceinline__
#else
#define ATTN_FOCUS_ST_FN inline
#endif
template <typename F>
ATTN_FOCUS_ST_FN F hard_straight_through_weight(F e) {
  return e < F(1) ? e : F(1);
}
#undef ATTN_FOCUS_ST_FN

template <typename T>
struct FocusAttentionParams {
  const T* q = nullptr;
  const T* k = nullptr;
  const T* v = nullptr;
  T* o = nullptr;
  float* lse = nullptr;
  const float* g = nullptr;         // soft gates and the straight-through backward
  const int32_t* groups = nullptr;  // gate hard
  const T* dout = nullptr;
  T* dq = nullptr;
  T* dk = nullptr;
  T* dv = nullptr;
  float* dg = nullptr;
  int64_t q_batch_stride = 0, q_row_stride = 0;
  int64_t kv_batch_stride = 0, kv_row_stride = 0, kv_head_stride = 0;
  int64_t o_batch_stride = 0, o_row_stride = 0;
  int64_t g_batch_stride = 0, groups_batch_stride = 0;
  int B = 0;
  int seq_len = 0;  // T: query rows per sequence
  int pos = 0;      // absolute position of query row 0
  int n_head = 0, n_kv_head = 0, D = 0;
  int K = 0, top_k = 0;
  float scale = 0.f;
  FocusGateParams gate;
  // bwd: every addition in a fixed order (bitwise reproducible), where the kernel has such a form
  // (the wgmma backward: focus_wgmma_det.h); the others add with atomics (FocusAttention warns).
  bool deterministic = false;
};

template <typename T>
void launch_focus_attention_fwd(const FocusAttentionParams<T>& p, Stream s);
template <typename T>
void launch_focus_attention_bwd(const FocusAttentionParams<T>& p, Stream s);
// Decoding (focus_soft_decode.cu): the rows of launch_focus_attention_fwd at positions pos .. pos +
// seq_len - 1 against a cache (k, v with kv_head_stride; g [B, max_T, K] for the soft gates,
// groups for the hard one), any gate kind, D <= 128; o only (lse not written).
template <typename T>
void launch_focus_attention_decode(const FocusAttentionParams<T>& p, Stream s);

}  // namespace attnlab
