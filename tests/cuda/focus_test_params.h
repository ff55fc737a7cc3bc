// Helpers of the Focus GPU tests: the plain Focus kernel's params on device arrays, a softmax
// assignment g, and the check that a soft kernel's backward writes dg (the host helpers they
// share with the CPU tests: tests/ops/focus_ref_params.h).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cuda_test_util.h"
#include "ops/focus_ops.h"
#include "ops/focus_ref_params.h"
#include "ops/qkv_layout.h"

namespace attnlab::test {

// The plain Focus kernel's params (what src/ops/focus.cpp builds) on device arrays.
inline FocusAttentionParams<bf16> focus_plain_params(
    const DeviceArray<bf16>& qkv, const QKVLayout& l, int B, int T, const DeviceArray<float>& g,
    int K, const FocusGateParams& gate, const int32_t* groups = nullptr, int top_k = 0) {
  return focus_packed_params(qkv.ptr(), l, B, T, g.ptr(), K, gate, groups, top_k);
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
