// A random group-indexed decoding case shared by the CPU and CUDA tests of
// kernels/focus/focus_decode.cuh: packed qkv of Tn tokens, unbalanced top_k groups (group 0
// dominant, group K - 1 always empty), the K/V cache and the group index of all Tn positions.
#pragma once
#include <algorithm>
#include <vector>

#include "core/context.h"
#include "ops/focus_decode_ops.h"
#include "ops/focus_ops.h"
#include "ops/ops.h"
#include "test_util.h"

namespace attnlab::test {

struct FocusDecodeCase {
  int B, Tn, H, Hkv, D, K, top_k, window;
  QKVLayout layout;
  std::unique_ptr<ExecContext> cpu = ExecContext::make_cpu();
  std::vector<float> qkv, g;
  std::vector<int32_t> groups;  // [B, Tn, top_k]: also the groups cache (max_T = Tn)

  FocusDecodeCase(int B_, int Tn_, int H_, int Hkv_, int D_, int K_, int top_k_, int window_,
                  uint32_t seed)
      : B(B_),
        Tn(Tn_),
        H(H_),
        Hkv(Hkv_),
        D(D_),
        K(K_),
        top_k(top_k_),
        window(window_),
        layout{H_, Hkv_, D_} {
    qkv = random_vector(size_t(B) * Tn * layout.width(), seed, -2.f, 2.f);
    g = random_vector(size_t(B) * Tn * K, seed + 1, 0.01f, 1.f);
    for (size_t r = 0; r < size_t(B) * Tn; ++r) {
      if (r % 3 == 0) g[r * K] += 2.f;  // group 0 holds a third of the tokens or more
      g[r * K + K - 1] = 0.f;           // never in the top_k (top_k < K)
    }
    groups.resize(size_t(B) * Tn * top_k);
    ops::focus_route_topk(*cpu, cpu_tensor(groups, {B, Tn, top_k}), cpu_tensor(g, {B, Tn, K}));
  }
  Shape qkv_shape(int n) const { return Shape{B, n, layout.width()}; }
  Shape out_shape(int n) const { return Shape{B, n, layout.q_width()}; }
  Shape kv_shape() const { return Shape{B, Hkv, Tn, D}; }
  // Rows t0 .. t0+n-1 of each sequence of x [B, Tn, width].
  std::vector<float> rows(const std::vector<float>& x, int64_t width, int t0, int n) const {
    std::vector<float> r(size_t(B) * n * width);
    for (int b = 0; b < B; ++b)
      std::copy_n(x.data() + (size_t(b) * Tn + t0) * width, size_t(n) * width,
                  r.data() + size_t(b) * n * width);
    return r;
  }
  // The full forward with hard routing (the oracle): out [B, Tn, n_head * D].
  std::vector<float> full_forward() {
    std::vector<float> out(size_t(B) * Tn * layout.q_width()), lse(size_t(B) * H * Tn);
    FocusGateParams gate;
    gate.kind = FocusGateKind::hard;
    gate.local_window = window;
    ops::focus_attention_fwd(*cpu, cpu_tensor(out, out_shape(Tn)), cpu_tensor(lse, {B, H, Tn}),
                             cpu_tensor(qkv, qkv_shape(Tn)), layout, cpu_tensor(g, {B, Tn, K}),
                             cpu_tensor(groups, {B, Tn, top_k}), gate);
    return out;
  }
  // K/V cache of all Tn positions.
  void cache_all(std::vector<float>& kc, std::vector<float>& vc) {
    kc.assign(size_t(B) * Hkv * Tn * D, 0.f);
    vc.assign(kc.size(), 0.f);
    ops::kv_cache_write(*cpu, cpu_tensor(kc, kv_shape()), cpu_tensor(vc, kv_shape()),
                        cpu_tensor(qkv, qkv_shape(Tn)), 0, layout);
  }
  // The index of positions 0 .. n-1 built by the CPU op in one append.
  void index_of(int n, std::vector<int32_t>& index, std::vector<int32_t>& counts) {
    index.assign(size_t(B) * K * Tn, -1);
    counts.assign(size_t(B) * K, 0);
    ops::focus_group_index_append(*cpu, cpu_tensor(index, {B, K, Tn}), cpu_tensor(counts, {B, K}),
                                  cpu_tensor(groups, {B, Tn, top_k}), 0, n);
  }
};

}  // namespace attnlab::test
