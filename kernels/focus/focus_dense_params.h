// The dense attention view of a Focus call's tensors: the backward kernels of Focus run the dense
// attention's delta pass (launch_attention_bwd_delta: delta = rowsum(dO O), the dQ accumulator
// zeroed) on the same q, k, v, o, dout, lse and strides.
#pragma once
#include "kernels/attention/attention.cuh"
#include "kernels/focus/focus_attention.cuh"

namespace attnlab {

inline AttentionParams<bf16> focus_dense_params(const FocusAttentionParams<bf16>& p) {
  AttentionParams<bf16> ap;
  ap.o = p.o;
  ap.dout = p.dout;
  ap.q = p.q;
  ap.k = p.k;
  ap.v = p.v;
  ap.dq = p.dq;
  ap.dk = p.dk;
  ap.dv = p.dv;
  ap.lse = p.lse;
  ap.qkv_batch_stride = p.q_batch_stride;
  ap.qkv_row_stride = p.q_row_stride;
  ap.o_batch_stride = p.o_batch_stride;
  ap.o_row_stride = p.o_row_stride;
  ap.B = p.B;
  ap.seq_len = p.seq_len;
  ap.n_head = p.n_head;
  ap.n_kv_head = p.n_kv_head;
  ap.D = p.D;
  ap.scale = p.scale;
  return ap;
}

}  // namespace attnlab
