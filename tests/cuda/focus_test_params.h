// The plain Focus kernel's params for packed qkv [B, T, (H + 2 Hkv) D] (what src/ops/focus.cpp
// builds), for the GPU tests that call the kernels directly. groups / top_k: the hard gate's
// top-k group lists [B, T, top_k] (nullptr / 0 for the soft gates).
#pragma once
#include <cmath>

#include "cuda_test_util.h"
#include "kernels/focus/focus_attention.cuh"
#include "ops/qkv_layout.h"

namespace attnlab::test {

inline FocusAttentionParams<bf16> focus_plain_params(
    const DeviceArray<bf16>& qkv, const QKVLayout& l, int B, int T, const DeviceArray<float>& g,
    int K, const FocusGateParams& gate, const int32_t* groups = nullptr, int top_k = 0) {
  FocusAttentionParams<bf16> p;
  p.q = qkv.ptr();
  p.k = qkv.ptr() + l.k_offset();
  p.v = qkv.ptr() + l.v_offset();
  p.g = g.ptr();
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

}  // namespace attnlab::test
