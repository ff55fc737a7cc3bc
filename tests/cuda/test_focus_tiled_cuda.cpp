// The tiled tensor-core Focus attention (kernels/focus/focus_tiled.cuh), reached through
// ops::focus_attention_fwd / _bwd with bf16, D 64 / 128 and FocusSoftKernel::tiled, against the CPU
// fp32 reference (skipped without a GPU). Inputs are rounded to bf16 first, so the errors are the
// kernels' own. Tolerance (STYLE.md: 2x a same-precision reference): on the same inputs, the plain
// per-row bf16 Focus kernel (launch_focus_attention_fwd/_bwd<bf16>, fp32 probabilities) and the
// dense bf16 attention kernels (bf16 probabilities in P V and dS in dS^T Q, as here) are compared
// with their CPU references; the bound for each output is 2x the larger of those errors, at least
// one bf16 ulp (2^-8, relative to the largest value) for bf16 outputs and 1e-5 for lse. dg has
// no dense counterpart (the tiled kernel splits dA and g into bf16 hi + lo, about fp32; its
// inputs carry the bf16 rounding of the outputs), so its bound also takes the dense dqkv error.
// The hard gate's backward also runs on the wgmma kernel (FocusWgmmaCuda.HardBackward*, below),
// held to the same bounds, its dg also to 2x the error of its own same-precision reference (the
// CPU backward with each dA rounded to bf16, as its dg products take it: the products are the
// additive gate's, fused layout test).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cuda_test_util.h"
#include "focus_test_params.h"
#include "kernels/focus/focus_tiled.cuh"
#include "ops/focus_ops.h"
#include "ops/ops.h"

namespace attnlab {
namespace {

using test::cpu_tensor;
using test::dev_ints;
using test::dev_tensor;
using test::DeviceArray;

struct TiledCase {
  FocusGateKind kind;
  int D, T, local_window, K;
  int top_k = 0;               // the hard gate's groups per token; 0: min(2, K)
  bool with_dg = true;         // false: the backward without dg (its own kernel instantiation)
  bool deterministic = false;  // the wgmma backward's deterministic form (focus_wgmma_det.h)
};

struct Errors {
  double out, lse, dqkv, dg;
};

// kernel: the backward's kernel (tiled, or wgmma for the hard gate); the hard gate's forward is
// the hard-routed kernel either way.
void run_case(const TiledCase& c, ops::FocusSoftKernel kernel = ops::FocusSoftKernel::tiled) {
  SCOPED_TRACE(testing::Message() << "gate " << int(c.kind) << " D " << c.D << " T " << c.T << " w "
                                  << c.local_window << " K " << c.K << " kernel " << int(kernel));
  auto cpu = ExecContext::make_cpu();
  auto gpu = ExecContext::make_cuda(0);
  gpu->deterministic = c.deterministic;
  const int B = 2, T = c.T, D = c.D, K = c.K, tk = c.top_k > 0 ? c.top_k : std::min(2, K);
  const int H = D == 64 ? 4 : 2, Hkv = H / 2;  // GQA: 2 query heads per kv head
  const QKVLayout l{H, Hkv, D};
  const int64_t W = l.width(), Q = l.q_width();
  const uint32_t seed = uint32_t(T * 7 + D + K * 131 + c.local_window);
  std::vector<float> qkv =
      test::to_precision<bf16>(test::random_vector(size_t(B) * T * W, seed, -2, 2));
  std::vector<float> g = test::random_vector(size_t(B) * T * K, seed + 1, 0.05f, 1);
  for (size_t r = 0; r < size_t(B) * T; ++r) {
    // Unbalanced rows; the favoured group hashed from the row, so tokens 8 apart do not share
    // it by construction (a set lookup off by one 8-row tile would pass at top_k 1 otherwise).
    g[r * K + (uint32_t(r) * 2654435761u >> 7) % uint32_t(K)] += 1.5f;
    double s = 0;
    for (int k = 0; k < K; ++k) s += g[r * K + k];
    for (int k = 0; k < K; ++k) g[r * K + k] = float(g[r * K + k] / s);
  }
  std::vector<int32_t> groups(size_t(B) * T * tk);
  const Shape qs{B, T, W}, os{B, T, Q}, ls{B, H, T}, gs{B, T, K}, grs{B, T, tk};
  ops::focus_route_topk(*cpu, cpu_tensor(groups, grs), cpu_tensor(g, gs));
  FocusGateParams gate;
  gate.kind = c.kind;
  gate.local_window = c.local_window;
  std::vector<float> dout =
      test::to_precision<bf16>(test::random_vector(size_t(B) * T * Q, seed + 2));

  // CPU references: Focus and dense (backwards from the bf16-rounded outputs, as on the GPU).
  std::vector<float> out(dout.size()), lse(size_t(B) * H * T), dqkv(qkv.size()), dg(g.size());
  ops::focus_attention_fwd(*cpu, cpu_tensor(out, os), cpu_tensor(lse, ls), cpu_tensor(qkv, qs), l,
                           cpu_tensor(g, gs), cpu_tensor(groups, grs), gate);
  std::vector<float> out_r = test::to_precision<bf16>(out);
  ops::focus_attention_bwd(*cpu, cpu_tensor(dqkv, qs), cpu_tensor(dg, gs), cpu_tensor(dout, os),
                           cpu_tensor(qkv, qs), cpu_tensor(out_r, os), cpu_tensor(lse, ls), l,
                           cpu_tensor(g, gs), cpu_tensor(groups, grs), gate);
  std::vector<float> dense_out(out.size()), dense_lse(lse.size()), dense_dqkv(qkv.size());
  ops::attention_fwd(*cpu, cpu_tensor(dense_out, os), cpu_tensor(dense_lse, ls),
                     cpu_tensor(qkv, qs), l);
  std::vector<float> dense_out_r = test::to_precision<bf16>(dense_out);
  ops::attention_bwd(*cpu, cpu_tensor(dense_dqkv, qs), cpu_tensor(dout, os), cpu_tensor(qkv, qs),
                     cpu_tensor(dense_out_r, os), cpu_tensor(dense_lse, ls), l);

  DeviceArray<bf16> gq(qkv), gdo(dout);
  DeviceArray<float> gg(g);
  test::DeviceInts ggr(groups);
  // The kernels through the op (the dispatch under test).
  const FocusAttentionParams<bf16> pp =
      test::focus_plain_params(gq, l, B, T, gg, K, gate, ggr.ptr(), tk);
  ASSERT_TRUE(focus_tiled_supported(pp));
  DeviceArray<bf16> go(out.size()), gdq(qkv.size());
  DeviceArray<float> gl(lse.size()), gdg(g.size());
  go.poison();
  gl.poison();
  ops::focus_attention_fwd(*gpu, dev_tensor(go, os), dev_tensor(gl, ls), dev_tensor(gq, qs), l,
                           dev_tensor(gg, gs), dev_ints(ggr, grs), gate,
                           ops::FocusSoftKernel::tiled);
  gdq.poison();
  gdg.poison();
  ops::focus_attention_bwd(*gpu, dev_tensor(gdq, qs), c.with_dg ? dev_tensor(gdg, gs) : Tensor(),
                           dev_tensor(gdo, os), dev_tensor(gq, qs), dev_tensor(go, os),
                           dev_tensor(gl, ls), l, dev_tensor(gg, gs), dev_ints(ggr, grs), gate,
                           kernel);
  const Errors got{test::max_rel_error(go.download(), out), test::max_rel_error(gl.download(), lse),
                   test::max_rel_error(gdq.download(), dqkv),
                   test::max_rel_error(gdg.download(), dg)};

  // The plain per-row kernel on the same inputs (its own outputs feed its backward).
  DeviceArray<bf16> po(out.size()), pdq(qkv.size());
  DeviceArray<float> pl(lse.size()), pdg(g.size());
  FocusAttentionParams<bf16> pf = pp;
  pf.o = po.ptr();
  pf.lse = pl.ptr();
  launch_focus_attention_fwd(pf, gpu->stream);
  FocusAttentionParams<bf16> pb = pf;
  pb.dout = gdo.ptr();
  pb.dq = pdq.ptr();
  pb.dk = pdq.ptr() + l.k_offset();
  pb.dv = pdq.ptr() + l.v_offset();
  pb.dg = pdg.ptr();
  launch_focus_attention_bwd(pb, gpu->stream);
  const Errors plain{
      test::max_rel_error(po.download(), out), test::max_rel_error(pl.download(), lse),
      test::max_rel_error(pdq.download(), dqkv), test::max_rel_error(pdg.download(), dg)};

  // The dense bf16 kernels on the same qkv.
  DeviceArray<bf16> dno(out.size()), dndq(qkv.size());
  DeviceArray<float> dnl(lse.size());
  ops::attention_fwd(*gpu, dev_tensor(dno, os), dev_tensor(dnl, ls), dev_tensor(gq, qs), l);
  ops::attention_bwd(*gpu, dev_tensor(dndq, qs), dev_tensor(gdo, os), dev_tensor(gq, qs),
                     dev_tensor(dno, os), dev_tensor(dnl, ls), l);
  const double dense_out_err = test::max_rel_error(dno.download(), dense_out);
  const double dense_lse_err = test::max_rel_error(dnl.download(), dense_lse);
  const double dense_dqkv_err = test::max_rel_error(dndq.download(), dense_dqkv);

  constexpr double kBf16Ulp = 1.0 / 256;
  const double b_out = std::max(2 * std::max(plain.out, dense_out_err), kBf16Ulp);
  const double b_lse = std::max(2 * std::max(plain.lse, dense_lse_err), 1e-5);
  const double b_dqkv = std::max(2 * std::max(plain.dqkv, dense_dqkv_err), kBf16Ulp);
  // The wgmma backward's dg also takes its own same-precision reference: the CPU backward with
  // each dA rounded to bf16.
  double e_bf16_da = 0;
  if (kernel == ops::FocusSoftKernel::wgmma && c.with_dg) {
    e_bf16_da = test::max_rel_error(
        test::focus_dg_bf16_da(qkv, dout, out_r, lse, l, B, T, g, K, gate, groups.data(), tk), dg);
  }
  const double b_dg = std::max(2 * std::max({plain.dg, dense_dqkv_err, e_bf16_da}), kBf16Ulp);
  std::printf(
      "  [focus %s] gate %d D %d T %d w %d K %d: out %.2e (bound %.2e) lse %.2e (%.2e) "
      "dqkv %.2e (%.2e) dg %.2e (%.2e; plain %.2e dense %.2e bf16 dA %.2e)\n",
      kernel == ops::FocusSoftKernel::wgmma ? "wgmma" : "tiled", int(c.kind), D, T, c.local_window,
      K, got.out, b_out, got.lse, b_lse, got.dqkv, b_dqkv, got.dg, b_dg, plain.dg, dense_dqkv_err,
      e_bf16_da);
  EXPECT_LE(got.out, b_out);
  EXPECT_LE(got.lse, b_lse);
  EXPECT_LE(got.dqkv, b_dqkv);
  if (c.with_dg) {
    EXPECT_LE(got.dg, b_dg);
  }

  // K = 1: a = 1, so the additive gate only scales distant weights by 1 + eps: dense attention.
  if (K == 1 && c.kind == FocusGateKind::additive) {
    const double to_dense_out = test::max_rel_error(go.download(), dense_out);
    const double to_dense_dqkv = test::max_rel_error(gdq.download(), dense_dqkv);
    std::printf("  [focus tiled] K 1 additive vs dense: out %.2e dqkv %.2e\n", to_dense_out,
                to_dense_dqkv);
    EXPECT_LE(to_dense_out, std::max(2 * dense_out_err, kBf16Ulp));
    EXPECT_LE(to_dense_dqkv, std::max(2 * dense_dqkv_err, kBf16Ulp));
  }
}

// T covers 1, one tile, tile edges +-1, many tiles and 2048; the window covers 0 (only the
// diagonal ungated), 37 (not a tile multiple), 128 and >= T (everything local: dense math).
const std::vector<TiledCase> kShapes = {
    {FocusGateKind::additive, 0, 1, 0, 4},      {FocusGateKind::additive, 0, 64, 37, 8},
    {FocusGateKind::additive, 0, 127, 0, 1},    {FocusGateKind::additive, 0, 129, 128, 4},
    {FocusGateKind::additive, 0, 1000, 37, 8},  {FocusGateKind::additive, 0, 2048, 128, 8},
    {FocusGateKind::additive, 0, 300, 4096, 4}, {FocusGateKind::additive, 0, 1000, 0, 1},
};

void run_gate(FocusGateKind kind) {
  for (int D : {64, 128})
    for (TiledCase c : kShapes) {
      c.kind = kind;
      c.D = D;
      run_case(c);
    }
}

TEST(FocusTiledCuda, AdditiveMatchesTheReference) {
  CUDA_TEST_PREAMBLE();
  run_gate(FocusGateKind::additive);
}

TEST(FocusTiledCuda, MultiplicativeMatchesTheReference) {
  CUDA_TEST_PREAMBLE();
  run_gate(FocusGateKind::multiplicative);
}

TEST(FocusTiledCuda, HardMatchesTheReference) {
  CUDA_TEST_PREAMBLE();
  run_gate(FocusGateKind::hard);
}

// route_training: hard's backward on the wgmma kernel (the gate from the tokens' group sets), the
// tiled kernel's shapes plus K 17 (KP 32) and 9 (KP 16), against the same bounds.
TEST(FocusWgmmaCuda, HardBackwardMatchesTheReference) {
  CUDA_TEST_PREAMBLE();
  if (!ops::focus_soft_wgmma_available(64, 8)) GTEST_SKIP() << "no wgmma Focus kernel here";
  const test::PoisonScratch poison;  // an unwritten group set or gate reads NaN
  std::vector<TiledCase> shapes = kShapes;
  shapes.push_back({FocusGateKind::hard, 0, 700, 37, 17});
  shapes.push_back({FocusGateKind::hard, 0, 1000, 0, 9});
  shapes.push_back({FocusGateKind::hard, 0, 1000, 37, 8, 1});         // top_k 1 of 8
  shapes.push_back({FocusGateKind::hard, 0, 1000, 37, 8, 2, false});  // no dg
  shapes.push_back({FocusGateKind::hard, 0, 129, 0, 17, 1, false});   // no dg, KP 32
  for (int D : {64, 128})
    for (TiledCase c : shapes) {
      c.kind = FocusGateKind::hard;
      c.D = D;
      run_case(c, ops::FocusSoftKernel::wgmma);
    }
}

// The same in the backward's deterministic form (train.deterministic).
TEST(FocusWgmmaCuda, DeterministicHardBackwardMatchesTheReference) {
  CUDA_TEST_PREAMBLE();
  if (!ops::focus_soft_wgmma_available(64, 8)) GTEST_SKIP() << "no wgmma Focus kernel here";
  const test::PoisonScratch poison;
  for (int D : {64, 128})
    for (TiledCase c : std::vector<TiledCase>{{FocusGateKind::hard, 0, 1000, 37, 8},
                                              {FocusGateKind::hard, 0, 2048, 128, 8},
                                              {FocusGateKind::hard, 0, 700, 37, 5},
                                              {FocusGateKind::hard, 0, 1000, 0, 8, 1}}) {
      c.D = D;
      c.deterministic = true;
      run_case(c, ops::FocusSoftKernel::wgmma);
    }
}

// dg is written (=), zero where every pair is local (test::check_backward_writes_dg).
TEST(FocusTiledCuda, BackwardWritesDgAndIsZeroWhenAllLocal) {
  CUDA_TEST_PREAMBLE();
  test::check_backward_writes_dg(ops::FocusSoftKernel::tiled);
}

}  // namespace
}  // namespace attnlab
