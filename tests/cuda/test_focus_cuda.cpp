// Focus kernels (kernels/focus/*.cu) against the CPU references (skipped without a GPU). Inputs
// are rounded to the kernel's precision first, so the bound only covers the kernel's own
// rounding: fp32 1e-4 (order of summation, fp32 instead of double accumulation), bf16 2e-2
// (outputs rounded once to bf16 plus bf16 dq/dk/dv; cuda_test_util.h explains the scale) and
// 5e-2 for dg in bf16 (a sum over T key pairs of bf16-rounded products).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cuda_test_util.h"
#include "ops/focus_ops.h"
#include "ops/ops.h"

namespace attnlab {
namespace {

using test::cpu_tensor;
using test::dev_ints;
using test::dev_tensor;
using test::DeviceArray;

template <typename T>
double tol() {
  return std::is_same_v<T, bf16> ? 2e-2 : 1e-4;
}

TEST(FocusCuda, SinkhornMatchesTheReferenceBothScopes) {
  CUDA_TEST_PREAMBLE();
  auto cpu = ExecContext::make_cpu();
  auto gpu = ExecContext::make_cuda(0);
  for (int T : {1, 129, 1000})
    for (bool causal : {true, false}) {
      SCOPED_TRACE(T);
      const int B = 3, K = 8, N = 10;
      const Shape s{B, T, K}, is{N + 1, B, T, K};
      std::vector<float> sc = test::random_vector(size_t(B) * T * K, uint32_t(T), -10, 10);
      std::vector<float> dg = test::random_vector(sc.size(), 2);
      std::vector<float> g(sc.size()), it(sc.size() * (N + 1)), ds(sc.size());
      ops::focus_sinkhorn_fwd(*cpu, cpu_tensor(g, s), cpu_tensor(it, is), cpu_tensor(sc, s),
                              causal);
      ops::focus_sinkhorn_bwd(*cpu, cpu_tensor(ds, s), cpu_tensor(dg, s), cpu_tensor(g, s),
                              cpu_tensor(it, is), causal);
      DeviceArray<float> dsc(sc), dgg(dg), dgo(sc.size()), dit(it.size()), dds(sc.size());
      ops::focus_sinkhorn_fwd(*gpu, dev_tensor(dgo, s), dev_tensor(dit, is), dev_tensor(dsc, s),
                              causal);
      EXPECT_LT(test::report("sinkhorn g", test::max_rel_error(dgo.download(), g)), 1e-5);
      ops::focus_sinkhorn_bwd(*gpu, dev_tensor(dds, s), dev_tensor(dgg, s), dev_tensor(dgo, s),
                              dev_tensor(dit, is), causal);
      EXPECT_LT(test::report("sinkhorn dscores", test::max_rel_error(dds.download(), ds)), 1e-4);
    }
}

TEST(FocusCuda, SoftmaxTopkAndScoresMatchTheReference) {
  CUDA_TEST_PREAMBLE();
  auto cpu = ExecContext::make_cpu();
  auto gpu = ExecContext::make_cuda(0);
  const int N = 300, K = 8, d = 16, tk = 2;
  std::vector<float> sc = test::random_vector(N * K, 1, -5, 5), g(N * K);
  ops::focus_softmax_assign_fwd(*cpu, cpu_tensor(g, {N, K}), cpu_tensor(sc, {N, K}));
  std::vector<int32_t> groups(N * tk);
  ops::focus_route_topk(*cpu, cpu_tensor(groups, {N, tk}), cpu_tensor(g, {N, K}));
  DeviceArray<float> dsc(sc), dg(N * K);
  ops::focus_softmax_assign_fwd(*gpu, dev_tensor(dg, {N, K}), dev_tensor(dsc, {N, K}));
  EXPECT_LT(test::max_rel_error(dg.download(), g), 1e-6);
  DeviceArray<float> dgc(g);
  test::DeviceInts dgr(std::vector<int32_t>(N * tk, -1));
  ops::focus_route_topk(*gpu, dev_ints(dgr, {N, tk}), dev_tensor(dgc, {N, K}));
  std::vector<int32_t> back(N * tk);
  CUDA_CHECK(cudaMemcpy(back.data(), dgr.ptr(), back.size() * 4, cudaMemcpyDeviceToHost));
  EXPECT_EQ(back, groups);

  // Scores at the unit test's size, at a training size (many tiles and blocks of the dcentroids
  // kernel, its grid-stride loop and a partial last tile), odd K and d_g, and K d_g = 1024 (the
  // largest the CUDA op takes); dcentroids starts from random values (its += contract).
  struct Case {
    int N, K, d;
  };
  auto scores = [&]<typename T>(Case cs) {
    SCOPED_TRACE(testing::Message() << "N " << cs.N << " K " << cs.K << " d_g " << cs.d);
    const int n = cs.N, k = cs.K, d = cs.d;
    std::vector<float> z = test::to_precision<T>(test::random_vector(size_t(n) * d, 3));
    std::vector<float> c = test::to_precision<T>(test::random_vector(size_t(k) * d, 4));
    std::vector<float> dc0 = test::to_precision<T>(test::random_vector(size_t(k) * d, 6));
    std::vector<float> w = test::random_vector(size_t(n) * k, 5), s(size_t(n) * k),
                       dz(size_t(n) * d), dc = dc0;
    ops::focus_scores_fwd(*cpu, cpu_tensor(s, {n, k}), cpu_tensor(z, {n, d}), cpu_tensor(c, {k, d}),
                          0.1f);
    ops::focus_scores_bwd(*cpu, cpu_tensor(dz, {n, d}), cpu_tensor(dc, {k, d}),
                          cpu_tensor(w, {n, k}), cpu_tensor(z, {n, d}), cpu_tensor(c, {k, d}),
                          0.1f);
    DeviceArray<T> gz(z), gc(c), gdz(size_t(n) * d), gdc(dc0);
    DeviceArray<float> gs(size_t(n) * k), gw(w);
    gs.poison();
    gdz.poison();
    ops::focus_scores_fwd(*gpu, dev_tensor(gs, {n, k}), dev_tensor(gz, {n, d}),
                          dev_tensor(gc, {k, d}), 0.1f);
    ops::focus_scores_bwd(*gpu, dev_tensor(gdz, {n, d}), dev_tensor(gdc, {k, d}),
                          dev_tensor(gw, {n, k}), dev_tensor(gz, {n, d}), dev_tensor(gc, {k, d}),
                          0.1f);
    EXPECT_LT(test::report("focus scores", test::max_rel_error(gs.download(), s)), 1e-5);
    EXPECT_LT(test::report("focus dz", test::max_rel_error(gdz.download(), dz)), tol<T>());
    EXPECT_LT(test::report("focus dcentroids", test::max_rel_error(gdc.download(), dc)), tol<T>());
  };
  for (Case cs : {Case{N, K, d}, Case{70001, 8, 16}, Case{1000, 3, 5}, Case{777, 16, 64}}) {
    scores.template operator()<float>(cs);
    scores.template operator()<bf16>(cs);
  }
}

// Forward and backward of every gate, GQA, odd length, unbalanced groups; decode rows.
template <typename T>
void attention_case(FocusGateKind kind) {
  auto cpu = ExecContext::make_cpu();
  auto gpu = ExecContext::make_cuda(0);
  const int B = 2, Tn = 129, H = 4, Hkv = 2, D = 64, K = 6, tk = 2;
  const QKVLayout l{H, Hkv, D};
  const int64_t W = l.width(), Q = l.q_width();
  std::vector<float> qkv = test::to_precision<T>(test::random_vector(size_t(B) * Tn * W, 1, -2, 2));
  std::vector<float> g = test::random_vector(size_t(B) * Tn * K, 2, 0, 1);
  for (size_t r = 0; r < size_t(B) * Tn; ++r) {
    g[r * K + (r % 5 == 0 ? 2 : 0)] += 2.f;  // unbalanced; groups 4, 5 mostly empty
    double s = 0;
    for (int k = 0; k < K; ++k) s += g[r * K + k];
    for (int k = 0; k < K; ++k) g[r * K + k] = float(g[r * K + k] / s);
  }
  std::vector<int32_t> groups(size_t(B) * Tn * tk);
  ops::focus_route_topk(*cpu, cpu_tensor(groups, {B, Tn, tk}), cpu_tensor(g, {B, Tn, K}));
  FocusGateParams gate;
  gate.kind = kind;
  gate.local_window = 16;
  std::vector<float> dout = test::to_precision<T>(test::random_vector(size_t(B) * Tn * Q, 3));
  std::vector<float> out(dout.size()), lse(size_t(B) * H * Tn), dqkv(qkv.size()), dg(g.size());
  const Shape qs{B, Tn, W}, os{B, Tn, Q}, ls{B, H, Tn}, gs{B, Tn, K}, grs{B, Tn, tk};
  ops::focus_attention_fwd(*cpu, cpu_tensor(out, os), cpu_tensor(lse, ls), cpu_tensor(qkv, qs), l,
                           cpu_tensor(g, gs), cpu_tensor(groups, grs), gate);
  std::vector<float> out_r = test::to_precision<T>(out);
  ops::focus_attention_bwd(*cpu, cpu_tensor(dqkv, qs), cpu_tensor(dg, gs), cpu_tensor(dout, os),
                           cpu_tensor(qkv, qs), cpu_tensor(out_r, os), cpu_tensor(lse, ls), l,
                           cpu_tensor(g, gs), cpu_tensor(groups, grs), gate);
  DeviceArray<T> gq(qkv), go(out.size()), gdo(dout), gdq(qkv.size());
  DeviceArray<float> gl(lse.size()), gg(g), gdg(g.size());
  test::DeviceInts ggr(groups);
  go.poison();
  ops::focus_attention_fwd(*gpu, dev_tensor(go, os), dev_tensor(gl, ls), dev_tensor(gq, qs), l,
                           dev_tensor(gg, gs), dev_ints(ggr, grs), gate);
  EXPECT_LT(test::report("focus attention out", test::max_rel_error(go.download(), out)), tol<T>());
  EXPECT_LT(test::report("focus attention lse", test::max_rel_error(gl.download(), lse)), 1e-4);
  gdq.poison();
  ops::focus_attention_bwd(*gpu, dev_tensor(gdq, qs), dev_tensor(gdg, gs), dev_tensor(gdo, os),
                           dev_tensor(gq, qs), dev_tensor(go, os), dev_tensor(gl, ls), l,
                           dev_tensor(gg, gs), dev_ints(ggr, grs), gate);
  EXPECT_LT(test::report("focus attention dqkv", test::max_rel_error(gdq.download(), dqkv)),
            tol<T>());
  EXPECT_LT(test::report("focus attention dg", test::max_rel_error(gdg.download(), dg)),
            (std::is_same_v<T, bf16> ? 5e-2 : 1e-4));
  // Decode: 9 rows against a cache holding all 129 positions (the rows' entries written; later
  // positions too, which they must not see): the last 9 (129 keys: two split-K chunks) and rows
  // 20 .. 28 (one chunk).
  const int max_T = Tn;
  DeviceArray<T> kc(size_t(B) * Hkv * max_T * D), vc(kc.size());
  const Shape kvs{B, Hkv, max_T, D};
  ops::kv_cache_write(*gpu, dev_tensor(kc, kvs), dev_tensor(vc, kvs), dev_tensor(gq, qs), 0, l);
  for (const int P : {Tn - 9, 20}) {
    SCOPED_TRACE(testing::Message() << "decode rows " << P << " .. " << P + 8);
    std::vector<float> chunk(size_t(B) * 9 * W);
    for (int b = 0; b < B; ++b)
      std::copy_n(qkv.data() + (size_t(b) * Tn + P) * W, 9 * W, chunk.data() + size_t(b) * 9 * W);
    DeviceArray<T> gch(chunk), gdec(size_t(B) * 9 * Q);
    gdec.poison();
    ops::focus_attention_decode(*gpu, dev_tensor(gdec, {B, 9, Q}), dev_tensor(gch, {B, 9, W}),
                                dev_tensor(kc, kvs), dev_tensor(vc, kvs), dev_tensor(gg, gs),
                                dev_ints(ggr, grs), P, l, gate);
    std::vector<float> dec = gdec.download(), want(dec.size());
    for (int b = 0; b < B; ++b)
      std::copy_n(out.data() + (size_t(b) * Tn + P) * Q, 9 * Q, want.data() + size_t(b) * 9 * Q);
    EXPECT_LT(test::report("focus decode", test::max_rel_error(dec, want)), tol<T>());
  }
}

TEST(FocusCuda, AttentionMatchesTheReferenceF32) {
  CUDA_TEST_PREAMBLE();
  for (auto kind : {FocusGateKind::additive, FocusGateKind::multiplicative, FocusGateKind::hard})
    attention_case<float>(kind);
}

TEST(FocusCuda, AttentionMatchesTheReferenceBf16) {
  CUDA_TEST_PREAMBLE();
  for (auto kind : {FocusGateKind::additive, FocusGateKind::multiplicative, FocusGateKind::hard})
    attention_case<bf16>(kind);
}

}  // namespace
}  // namespace attnlab
