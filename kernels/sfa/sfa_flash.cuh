// FlashSFA (docs/sfa.md): tiled causal SFA attention for training, read from the sparse form that
// sfa_select writes in one launch (packed q_idx / q_val [B, T, n_head, k], k_idx / k_val
// [B, T, n_kv_head, k], ascending coordinates), with V dense in the packed qkv.
//   s_ij = scale * sum over c in I(q_i) ∩ I(k_j) of q~_ic k~_jc   (j <= i)
//   o_i = sum_j softmax_j(s_ij) v_j,  lse_i = log sum_j exp(s_ij)
// Design (bf16, D 64 or 128, any sm_80+): a block scatters the k (index, value) pairs of its
// 64-row query tile and of each 64-key tile into zeroed dense tiles in shared memory, so the
// overlap sum is an ordinary bf16 tensor-core product (mma.sync, kernels/attention/mma_common.cuh)
// and every other step is the dense flash kernel's: online softmax in the log2 domain, P V on
// tensor cores, causal tiles skipped (AttentionMask, visibility.h). The products over the zeros
// are free next to a CUDA-core score stage on Hopper (docs/sfa.md, cost model). No T x T tensor
// leaves the chip; k~ is read as k * 6 bytes per head vector instead of 2 D.
// Backward (straight-through, the mask fixed): delta = rowsum(dO * O) (the dense delta kernel),
// then a dK/dV kernel per 64 keys of a kv head (over its GQA group and the query tiles that see
// them) and a dQ kernel per 64 queries, both recomputing S from the sparse form:
//   dq_i = scale sum_j dS_ij k~_j  on I(q_i) only,  dk_j = scale sum_i dS_ij q~_i  on I(k_j) only,
//   dv_j = sum_i P_ij dO_i  (dense),   dS_ij = P_ij (dO_i . v_j - delta_i).
// No atomics: o, lse, dq, dk, dv are bitwise reproducible.
//
// Layout: v (and dq, dk, dv) at the packed qkv (dqkv) layout: token t of sequence b at
//   + b*qkv_batch_stride + t*qkv_row_stride, q head h at h*D, k head g at (n_head + g)*D, v head g
//   at (n_head + n_kv_head + g)*D (src/ops/qkv_layout.h); o and dout: + b*o_batch_stride +
//   t*o_row_stride + h*D; lse [B, n_head, T] fp32 (natural log).
// fwd: o, lse written (=). bwd: dqkv written (=) in full: dq, dk zero off the selection.
#pragma once
#include "kernels/common/launch.h"

namespace attnlab {

template <typename E>
struct SfaFlashParams {
  const int32_t* q_idx = nullptr;  // [B, T, n_head, k]
  const E* q_val = nullptr;
  const int32_t* k_idx = nullptr;  // [B, T, n_kv_head, k]
  const E* k_val = nullptr;
  const E* qkv = nullptr;  // v is read from here
  E* o = nullptr;
  float* lse = nullptr;
  const E* dout = nullptr;
  E* dqkv = nullptr;
  int64_t qkv_batch_stride = 0, qkv_row_stride = 0;  // qkv and dqkv
  int64_t o_batch_stride = 0, o_row_stride = 0;      // o and dout
  int B = 0, T = 0, n_head = 0, n_kv_head = 0, D = 0, k = 0;
  float scale = 0.f;  // > 0
};

// CUDA: bf16 only (the CPU reference, src/ref/sfa_ref.h, takes float).
void launch_sfa_flash_fwd(const SfaFlashParams<bf16>& p, Stream s);
void launch_sfa_flash_bwd(const SfaFlashParams<bf16>& p, Stream s);

}  // namespace attnlab
