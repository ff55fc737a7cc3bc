// Host helpers of the Focus tests, CPU and GPU: the plain Focus kernel's params for packed qkv
// (what src/ops/focus.cpp builds; host or device pointers) and the same-precision reference of
// the wgmma backward's dg (the CPU backward with bf16 dA).
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/focus/focus_attention.cuh"
#include "ops/qkv_layout.h"
#include "ref/focus_ref.h"

namespace attnlab::test {

// Focus attention params for packed qkv [B, T, (H + 2 Hkv) D] (host or device pointers). groups /
// top_k: the hard gate's top-k group lists [B, T, top_k] (nullptr / 0 for the soft gates).
template <typename E>
FocusAttentionParams<E> focus_packed_params(const E* qkv, const QKVLayout& l, int B, int T,
                                            const float* g, int K, const FocusGateParams& gate,
                                            const int32_t* groups, int top_k) {
  FocusAttentionParams<E> p;
  p.q = qkv;
  p.k = qkv + l.k_offset();
  p.v = qkv + l.v_offset();
  p.g = g;
  p.groups = groups;
  p.q_batch_stride = p.kv_batch_stride = int64_t(T) * l.width();
  p.q_row_stride = p.kv_row_stride = l.width();
  p.kv_head_stride = l.head_dim;
  p.o_batch_stride = int64_t(T) * l.q_width();
  p.o_row_stride = l.q_width();
  p.g_batch_stride = int64_t(T) * K;
  p.groups_batch_stride = int64_t(T) * top_k;
  p.B = B;
  p.seq_len = T;
  p.n_head = l.n_head;
  p.n_kv_head = l.n_kv_head;
  p.D = l.head_dim;
  p.K = K;
  p.top_k = top_k;
  p.scale = float(1.0 / std::sqrt(double(l.head_dim)));
  p.gate = gate;
  return p;
}

// dg of the CPU reference backward with each pair's dA rounded to bf16
// (focus_attention_bwd_bf16_da_ref): the same-precision reference of the wgmma backward's dg,
// which multiplies bf16 dA by g (hi + lo). Host vectors as the CPU op takes them; out: the
// bf16-rounded forward output the backward starts from.
inline std::vector<float> focus_dg_bf16_da(
    const std::vector<float>& qkv, const std::vector<float>& dout, const std::vector<float>& out,
    const std::vector<float>& lse, const QKVLayout& l, int B, int T, const std::vector<float>& g,
    int K, const FocusGateParams& gate, const int32_t* groups = nullptr, int top_k = 0) {
  std::vector<float> dqkv(qkv.size()), dg(g.size());
  FocusAttentionParams<float> p =
      focus_packed_params(qkv.data(), l, B, T, g.data(), K, gate, groups, top_k);
  p.o = const_cast<float*>(out.data());
  p.lse = const_cast<float*>(lse.data());
  p.dout = dout.data();
  p.dq = dqkv.data();
  p.dk = dqkv.data() + l.k_offset();
  p.dv = dqkv.data() + l.v_offset();
  p.dg = dg.data();
  focus_attention_bwd_bf16_da_ref(p);
  return dg;
}

}  // namespace attnlab::test
