// Host ops of Sparse Feature Attention (kernels/sfa/*.cuh, docs/sfa.md): checks, params, dispatch.
// The contracts (= vs +=) are those of the kernel headers. q/k/v, values and outputs are in the
// activation dtype; indices are i32 (u8 in the decode cache); k is the number of coordinates kept
// per head vector, 1 <= k <= head_dim.
#pragma once
#include "core/context.h"
#include "core/tensor.h"
#include "ops/qkv_layout.h"

namespace attnlab::ops {

// The sparse form of q and k of qkv [B, T, layout.width()]: q_idx, q_val [B, T, n_head, k];
// k_idx, k_val [B, T, n_kv_head, k] (ascending coordinates; any may be empty: not written).
void sfa_select(const ExecContext& ctx, const Tensor& qkv, const QKVLayout& layout, int k,
                const Tensor& q_idx, const Tensor& q_val, const Tensor& k_idx, const Tensor& k_val);
// dst [B, T, width] = src with the q and k coordinates not selected in qkv zeroed, v copied;
// dst may be src (in place).
void sfa_sparsify(const ExecContext& ctx, const Tensor& dst, const Tensor& src, const Tensor& qkv,
                  const QKVLayout& layout, int k);

// softmax(Q~ K~^T / sqrt(D)) V, causal, by the reference path: qkv_sparse [B, T, width] (scratch,
// written =, kept for the backward) = sparsified qkv, then the dense attention op (out, lse as
// attention_fwd).
void sfa_attention_fwd(const ExecContext& ctx, const Tensor& out, const Tensor& lse,
                       const Tensor& qkv_sparse, const Tensor& qkv, const QKVLayout& layout, int k);
// Straight-through backward: dqkv written (=); dq, dk nonzero only on the selected coordinates, dv
// dense. qkv_sparse, out, lse from sfa_attention_fwd.
void sfa_attention_bwd(const ExecContext& ctx, const Tensor& dqkv, const Tensor& dout,
                       const Tensor& qkv_sparse, const Tensor& out, const Tensor& lse,
                       const Tensor& qkv, const QKVLayout& layout, int k);

// FlashSFA (kernels/sfa/sfa_flash.cuh), the same softmax(Q~ K~^T / sqrt(D)) V from the sparse
// form: sfa_select writes q_idx, q_val [B, T, n_head, k] and k_idx, k_val [B, T, n_kv_head, k]
// (the saved state, written =), then the tiled kernel writes out and lse (as attention_fwd). CPU
// (the overlap-form reference) or CUDA bf16 with head dim 64 or 128 (sfa_flash_supported).
bool sfa_flash_supported(const ExecContext& ctx, DType dtype, int head_dim);
void sfa_flash_fwd(const ExecContext& ctx, const Tensor& out, const Tensor& lse,
                   const Tensor& q_idx, const Tensor& q_val, const Tensor& k_idx,
                   const Tensor& k_val, const Tensor& qkv, const QKVLayout& layout);
// Straight-through backward, dqkv written (=) as sfa_attention_bwd's; the saved state and out, lse
// from sfa_flash_fwd.
void sfa_flash_bwd(const ExecContext& ctx, const Tensor& dqkv, const Tensor& dout,
                   const Tensor& out, const Tensor& lse, const Tensor& q_idx, const Tensor& q_val,
                   const Tensor& k_idx, const Tensor& k_val, const Tensor& qkv,
                   const QKVLayout& layout);

// Decoding. sfa_cache_write: the Tq new tokens of qkv [B, Tq, width] at positions pos ..
// pos+Tq-1: their k~ into k_idx_cache (u8) and k_val_cache [B, n_kv_head, max_T, k], their v into
// v_cache [B, n_kv_head, max_T, D], and their q~ into q_idx (i32), q_val [B, Tq, n_head, k] (each
// may be empty: not written; a prefill on the masked-dense forward needs no q~). The
// cache's key coordinates take one byte each, so both ops refuse head dims above
// kSfaCacheMaxHeadDim.
constexpr int kSfaCacheMaxHeadDim = 256;
void sfa_cache_write(const ExecContext& ctx, const Tensor& q_idx, const Tensor& q_val,
                     const Tensor& k_idx_cache, const Tensor& k_val_cache, const Tensor& v_cache,
                     const Tensor& qkv, int pos, const QKVLayout& layout);
// out [B, Tq, n_head*D]: query t (q_idx, q_val [B, Tq, n_head, k], position pos + t) attends to
// cache positions 0 .. pos + t by feature overlaps (sfa_attention.cuh); lse [B, n_head, Tq] f32
// or empty. With pos 0 and the whole sequence in the cache it is sfa_attention_fwd's rows.
void sfa_attention_decode(const ExecContext& ctx, const Tensor& out, const Tensor& lse,
                          const Tensor& q_idx, const Tensor& q_val, const Tensor& k_idx_cache,
                          const Tensor& k_val_cache, const Tensor& v_cache, int pos,
                          const QKVLayout& layout);

// Distillation (sfa_distill.cuh): *total += weight * mean((student - teacher)^2), total one f64
// in the context's memory; the backward writes dstudent = dout + weight * 2 (student - teacher) / n
// (dstudent may be dout).
void sfa_distill_fwd(const ExecContext& ctx, double* total, const Tensor& student,
                     const Tensor& teacher, float weight);
void sfa_distill_bwd(const ExecContext& ctx, const Tensor& dstudent, const Tensor& dout,
                     const Tensor& student, const Tensor& teacher, float weight);

}  // namespace attnlab::ops
