// Helpers of the Focus GPU tests: the plain Focus kernel's params for packed qkv (what
// src/ops/focus.cpp builds, for the tests that call the kernels directly), the wgmma dg's
// same-precision reference, a softmax assignment g, and the check that a soft kernel's backward
// writes dg.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/focus/focus_attention.cuh"
#include "ops/focus_ops.h"
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

// The plain Focus kernel's params (what src/ops/focus.cpp builds) on device arrays.
inline FocusAttentionParams<bf16> focus_plain_params(
    const DeviceArray<bf16>& qkv, const QKVLayout& l, int B, int T, const DeviceArray<float>& g,
    int K, const FocusGateParams& gate, const int32_t* groups = nullptr, int top_k = 0) {
  return focus_packed_params(qkv.ptr(), l, B, T, g.ptr(), K, gate, groups, top_k);
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

// g [rows, K]: softmax of random scores (scale 3: peaked rows, as a trained assignment).
inline std::vector<float> softmax_g(size_t rows, int K, uint32_t seed) {
  std::vector<float> z = random_vector(rows * K, seed, -3, 3), g(z.size());
  for (size_t r = 0; r < rows; ++r) {
    double mx = -1e30, s = 0;
    for (int k = 0; k < K; ++k) mx = std::max(mx, double(z[r * K + k]));
    for (int k = 0; k < K; ++k) s += std::exp(double(z[r * K + k]) - mx);
    for (int k = 0; k < K; ++k) g[r * K + k] = float(std::exp(double(z[r * K + k]) - mx) / s);
  }
  return g;
}

// The soft-gate backward of `kernel` writes dg (=): a second backward into the same (poisoned)
// buffer gives the same values, up to the order of the atomics; dg == 0 where every pair is local
// (local_window >= T). Additive gate, D 64, GQA, B 2, T 333, K 8.
inline void check_backward_writes_dg(ops::FocusSoftKernel kernel) {
  auto gpu = ExecContext::make_cuda(0);
  const int B = 2, T = 333, K = 8, D = 64;
  const QKVLayout l{4, 2, D};
  const Shape qs{B, T, l.width()}, os{B, T, l.q_width()}, ls{B, 4, T}, gs{B, T, K};
  DeviceArray<bf16> gq(random_vector(size_t(B) * T * l.width(), 7, -2, 2));
  DeviceArray<bf16> gdo(random_vector(size_t(B) * T * l.q_width(), 8));
  DeviceArray<bf16> go(size_t(B) * T * l.q_width()), gdq(size_t(B) * T * l.width());
  DeviceArray<float> gl(size_t(B) * 4 * T), gg(softmax_g(size_t(B) * T, K, 9)), gdg(gg.size());
  for (int w : {16, T}) {
    SCOPED_TRACE(testing::Message() << "local_window " << w);
    FocusGateParams gate;
    gate.local_window = w;
    ops::focus_attention_fwd(*gpu, dev_tensor(go, os), dev_tensor(gl, ls), dev_tensor(gq, qs), l,
                             dev_tensor(gg, gs), Tensor(), gate, kernel);
    std::vector<float> first;
    for (int rep = 0; rep < 2; ++rep) {
      gdg.poison();
      ops::focus_attention_bwd(*gpu, dev_tensor(gdq, qs), dev_tensor(gdg, gs), dev_tensor(gdo, os),
                               dev_tensor(gq, qs), dev_tensor(go, os), dev_tensor(gl, ls), l,
                               dev_tensor(gg, gs), Tensor(), gate, kernel);
      std::vector<float> d = gdg.download();
      // NaN (the poison) where an element was not written.
      EXPECT_TRUE(std::all_of(d.begin(), d.end(), [](float x) { return std::isfinite(x); }));
      double mx = 0;
      for (float x : d) mx = std::max(mx, double(std::fabs(x)));
      if (w >= T) {
        EXPECT_EQ(mx, 0.0);
      } else {
        EXPECT_GT(mx, 0.0);
      }
      if (rep == 0) {
        first = d;
      } else {
        EXPECT_LT(max_rel_error(d, first), 1e-5);
      }
    }
  }
}

}  // namespace attnlab::test
