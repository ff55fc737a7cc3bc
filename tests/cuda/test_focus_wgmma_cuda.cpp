// The Hopper wgmma Focus attention, additive gate (kernels/focus/focus_wgmma.cuh), reached through
// ops::focus_attention_fwd / _bwd with FocusSoftKernel::wgmma, against the CPU fp32 reference and
// the tiled kernel (FocusSoftKernel::tiled) on the same inputs. Skipped without a GPU, and where
// the build or the device has no wgmma kernel (not an H100 / H200, or no sm_90a code).
// Tolerance as tests/cuda/test_focus_tiled_cuda.cpp (STYLE.md: 2x a same-precision reference):
// the plain per-row bf16 Focus kernel and the dense bf16 attention kernels are compared with their
// CPU references on the same inputs, the bound of each output is 2x the larger error, at least
// one bf16 ulp (2^-8) for bf16 outputs and 1e-5 for lse; dg also takes the dense dqkv error (the
// backward's bf16 dA times a ~16-bit g (g hi + lo) is the precision of the dense kernels'
// dK = dS^T Q, bf16 dS times an exact operand) and its own same-precision reference's: the CPU
// backward with each dA rounded to bf16 (test::focus_dg_bf16_da). g is a softmax of random scores
// (as the model's assignment).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "cuda_test_util.h"
#include "focus_test_params.h"
#include "kernels/focus/focus_attention.cuh"
#include "ops/focus_ops.h"
#include "ops/focus_wgmma_emulate.h"
#include "ops/ops.h"

namespace attnlab {
namespace {

using ops::FocusSoftKernel;
using test::cpu_tensor;
using test::dev_tensor;
using test::DeviceArray;

struct WgmmaCase {
  int D, T, local_window, K;
  bool deterministic = false;  // the backward's deterministic form (focus_wgmma_det.h)
};

struct Outputs {
  std::vector<float> out, lse, dqkv, dg;
};

bool wgmma_runs(int D, int K) {
  if (!cuda_available()) return false;
  auto gpu = ExecContext::make_cuda(0);
  (void)gpu;
  return ops::focus_soft_wgmma_available(D, K);
}

#define WGMMA_TEST_PREAMBLE(D, K)                                                     \
  do {                                                                                \
    CUDA_TEST_PREAMBLE();                                                             \
    if (!wgmma_runs(D, K)) GTEST_SKIP() << "no wgmma Focus kernel on this build/GPU"; \
  } while (0)

// The wgmma kernel, and the tiled kernel as its peer on the same inputs.
void run_case(const WgmmaCase& c) {
  const FocusSoftKernel kernel = FocusSoftKernel::wgmma, peer = FocusSoftKernel::tiled;
  SCOPED_TRACE(testing::Message() << "D " << c.D << " T " << c.T << " w " << c.local_window << " K "
                                  << c.K << " kernel " << int(kernel) << " deterministic "
                                  << c.deterministic);
  auto cpu = ExecContext::make_cpu();
  auto gpu = ExecContext::make_cuda(0);
  gpu->deterministic = c.deterministic;
  const int B = 2, T = c.T, D = c.D, K = c.K;
  const int H = D == 64 ? 4 : 2, Hkv = H / 2;  // GQA: 2 query heads per kv head
  const QKVLayout l{H, Hkv, D};
  const int64_t W = l.width(), Q = l.q_width();
  const uint32_t seed = uint32_t(T * 5 + D + K * 97 + c.local_window);
  std::vector<float> qkv =
      test::to_precision<bf16>(test::random_vector(size_t(B) * T * W, seed, -2, 2));
  std::vector<float> g = test::softmax_g(size_t(B) * T, K, seed + 1);
  const Shape qs{B, T, W}, os{B, T, Q}, ls{B, H, T}, gs{B, T, K};
  FocusGateParams gate;
  gate.kind = FocusGateKind::additive;
  gate.local_window = c.local_window;
  std::vector<float> dout =
      test::to_precision<bf16>(test::random_vector(size_t(B) * T * Q, seed + 2));

  // CPU references: Focus and dense (backwards from the bf16-rounded outputs, as on the GPU).
  Outputs ref{std::vector<float>(dout.size()), std::vector<float>(size_t(B) * H * T),
              std::vector<float>(qkv.size()), std::vector<float>(g.size())};
  ops::focus_attention_fwd(*cpu, cpu_tensor(ref.out, os), cpu_tensor(ref.lse, ls),
                           cpu_tensor(qkv, qs), l, cpu_tensor(g, gs), Tensor(), gate);
  std::vector<float> out_r = test::to_precision<bf16>(ref.out);
  ops::focus_attention_bwd(*cpu, cpu_tensor(ref.dqkv, qs), cpu_tensor(ref.dg, gs),
                           cpu_tensor(dout, os), cpu_tensor(qkv, qs), cpu_tensor(out_r, os),
                           cpu_tensor(ref.lse, ls), l, cpu_tensor(g, gs), Tensor(), gate);
  // The forward on the kernel's fp16 affinity operands (g as focus_wgmma_layout.h rounds it).
  std::vector<float> g16(g.size()), out16(ref.out.size()), lse16(ref.lse.size());
  for (size_t i = 0; i < g.size(); ++i) {
    g16[i] = focus_wgmma_emulate::affinity_operand_of(g[i]) / focus_wgmma::kAffinityScale;
  }
  ops::focus_attention_fwd(*cpu, cpu_tensor(out16, os), cpu_tensor(lse16, ls), cpu_tensor(qkv, qs),
                           l, cpu_tensor(g16, gs), Tensor(), gate);
  std::vector<float> dense_out(ref.out.size()), dense_lse(ref.lse.size()), dense_dqkv(qkv.size());
  ops::attention_fwd(*cpu, cpu_tensor(dense_out, os), cpu_tensor(dense_lse, ls),
                     cpu_tensor(qkv, qs), l);
  std::vector<float> dense_out_r = test::to_precision<bf16>(dense_out);
  ops::attention_bwd(*cpu, cpu_tensor(dense_dqkv, qs), cpu_tensor(dout, os), cpu_tensor(qkv, qs),
                     cpu_tensor(dense_out_r, os), cpu_tensor(dense_lse, ls), l);

  DeviceArray<bf16> gq(qkv), gdo(dout);
  DeviceArray<float> gg(g);
  // One kernel through the op: fwd, then bwd from its own outputs.
  auto run = [&](FocusSoftKernel k) {
    DeviceArray<bf16> go(ref.out.size()), gdq(qkv.size());
    DeviceArray<float> gl(ref.lse.size()), gdg(g.size());
    go.poison();
    gl.poison();
    gdq.poison();
    gdg.poison();
    ops::focus_attention_fwd(*gpu, dev_tensor(go, os), dev_tensor(gl, ls), dev_tensor(gq, qs), l,
                             dev_tensor(gg, gs), Tensor(), gate, k);
    ops::focus_attention_bwd(*gpu, dev_tensor(gdq, qs), dev_tensor(gdg, gs), dev_tensor(gdo, os),
                             dev_tensor(gq, qs), dev_tensor(go, os), dev_tensor(gl, ls), l,
                             dev_tensor(gg, gs), Tensor(), gate, k);
    return Outputs{go.download(), gl.download(), gdq.download(), gdg.download()};
  };
  const Outputs got = run(kernel);
  const Outputs other = run(peer);  // the peer kernel on the same inputs

  // The same-precision references: the plain per-row bf16 Focus kernel (its own outputs feed its
  // backward) and the dense bf16 kernels on the same qkv.
  DeviceArray<bf16> po(ref.out.size()), pdq(qkv.size());
  DeviceArray<float> pl(ref.lse.size()), pdg(g.size());
  FocusAttentionParams<bf16> pf = test::focus_plain_params(gq, l, B, T, gg, K, gate);
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
  const Outputs plain{po.download(), pl.download(), pdq.download(), pdg.download()};
  DeviceArray<bf16> dno(ref.out.size()), dndq(qkv.size());
  DeviceArray<float> dnl(ref.lse.size());
  ops::attention_fwd(*gpu, dev_tensor(dno, os), dev_tensor(dnl, ls), dev_tensor(gq, qs), l);
  ops::attention_bwd(*gpu, dev_tensor(dndq, qs), dev_tensor(gdo, os), dev_tensor(gq, qs),
                     dev_tensor(dno, os), dev_tensor(dnl, ls), l);
  const double dense_out_err = test::max_rel_error(dno.download(), dense_out);
  const double dense_lse_err = test::max_rel_error(dnl.download(), dense_lse);
  const double dense_dqkv_err = test::max_rel_error(dndq.download(), dense_dqkv);

  auto err = [&](const Outputs& o) {
    return std::vector<double>{
        test::max_rel_error(o.out, ref.out), test::max_rel_error(o.lse, ref.lse),
        test::max_rel_error(o.dqkv, ref.dqkv), test::max_rel_error(o.dg, ref.dg)};
  };
  const std::vector<double> e_got = err(got), e_other = err(other), e_plain = err(plain);
  constexpr double kBf16Ulp = 1.0 / 256;
  const double b16_out = std::max(2 * std::max(e_plain[0], dense_out_err), kBf16Ulp);
  const double b16_lse = std::max(2 * std::max(e_plain[1], dense_lse_err), 1e-5);
  const double e16_out = test::max_rel_error(out16, ref.out);
  const double e16_lse = test::max_rel_error(lse16, ref.lse);
  EXPECT_LE(test::max_rel_error(got.out, out16), b16_out);
  EXPECT_LE(test::max_rel_error(got.lse, lse16), b16_lse);
  const double b_out = std::max(b16_out, 2 * e16_out);
  const double b_lse = std::max(b16_lse, 2 * e16_lse);
  const double b_dqkv = std::max(2 * std::max(e_plain[2], dense_dqkv_err), kBf16Ulp);
  // dg's own same-precision reference: the CPU backward with each dA rounded to bf16.
  const double e_bf16_da = test::max_rel_error(
      test::focus_dg_bf16_da(qkv, dout, out_r, ref.lse, l, B, T, g, K, gate), ref.dg);
  const double b_dg = std::max(2 * std::max({e_plain[3], dense_dqkv_err, e_bf16_da}), kBf16Ulp);
  std::printf(
      "  [focus wgmma] D %d T %d w %d K %d: out %.2e (bound %.2e, tiled %.2e) lse %.2e (%.2e, "
      "%.2e) dqkv %.2e (%.2e, %.2e) dg %.2e (%.2e, %.2e; bf16 dA %.2e); fp16-operand reference: "
      "out %.2e lse %.2e from exact, kernel from it out %.2e lse %.2e\n",
      D, T, c.local_window, K, e_got[0], b_out, e_other[0], e_got[1], b_lse, e_other[1], e_got[2],
      b_dqkv, e_other[2], e_got[3], b_dg, e_other[3], e_bf16_da, e16_out, e16_lse,
      test::max_rel_error(got.out, out16), test::max_rel_error(got.lse, lse16));
  EXPECT_LE(e_got[0], b_out);
  EXPECT_LE(e_got[1], b_lse);
  EXPECT_LE(e_got[2], b_dqkv);
  EXPECT_LE(e_got[3], b_dg);
  // Against the tiled kernel: both are within the bound of the reference.
  EXPECT_LE(test::max_rel_error(got.out, other.out), 2 * b_out);
  EXPECT_LE(test::max_rel_error(got.lse, other.lse), 2 * b_lse);
  EXPECT_LE(test::max_rel_error(got.dqkv, other.dqkv), 2 * b_dqkv);
  EXPECT_LE(test::max_rel_error(got.dg, other.dg), 2 * b_dg);
}

// T: 1, tile edges +-1, many tiles, 2048; w: 0 (only the diagonal ungated), 37 (not a tile
// multiple), 128, >= T (all local: dense math, dg = 0); K: 1 (a = 1), 4, 8 (KP = 8), 9, 16 (KP =
// 16), 17 and 32 (KP = 32).
const std::vector<WgmmaCase> kShapes = {
    {0, 1, 0, 4},    {0, 127, 0, 1},    {0, 129, 128, 4},   {0, 129, 0, 8},   {0, 1000, 37, 8},
    {0, 1000, 0, 4}, {0, 2048, 128, 8}, {0, 2048, 4096, 4}, {0, 300, 300, 1}, {0, 1000, 128, 17},
    {0, 700, 0, 32}, {0, 1000, 0, 9},   {0, 700, 37, 16},
};

void run_d(int D) {
  for (WgmmaCase c : kShapes) {
    c.D = D;
    run_case(c);
  }
}

TEST(FocusWgmmaCuda, MatchesTheReferenceD64) {
  WGMMA_TEST_PREAMBLE(64, 8);
  run_d(64);
}

TEST(FocusWgmmaCuda, MatchesTheReferenceD128) {
  WGMMA_TEST_PREAMBLE(128, 8);
  run_d(128);
}

// automatic picks the wgmma kernel where it runs: bitwise the same forward as forcing it, and the
// same backward up to the order of dq's and dg's fp32 atomics.
TEST(FocusWgmmaCuda, AutomaticPicksWgmma) {
  WGMMA_TEST_PREAMBLE(64, 8);
  auto gpu = ExecContext::make_cuda(0);
  const int B = 1, T = 300, K = 8;
  const QKVLayout l{4, 2, 64};
  const Shape qs{B, T, l.width()}, os{B, T, l.q_width()}, ls{B, 4, T}, gs{B, T, K};
  DeviceArray<bf16> gq(test::random_vector(size_t(B) * T * l.width(), 3, -2, 2));
  DeviceArray<float> gg(test::softmax_g(size_t(B) * T, K, 4));
  FocusGateParams gate;
  gate.local_window = 37;
  DeviceArray<bf16> gdo(test::random_vector(size_t(B) * T * l.q_width(), 5));
  std::vector<float> o[2], dk[2], dg[2];
  for (int i = 0; i < 2; ++i) {
    const FocusSoftKernel k = i == 0 ? FocusSoftKernel::automatic : FocusSoftKernel::wgmma;
    DeviceArray<bf16> go(size_t(B) * T * l.q_width()), gdq(size_t(B) * T * l.width());
    DeviceArray<float> gl(size_t(B) * 4 * T), gdg(gg.size());
    gdg.poison();
    ops::focus_attention_fwd(*gpu, dev_tensor(go, os), dev_tensor(gl, ls), dev_tensor(gq, qs), l,
                             dev_tensor(gg, gs), Tensor(), gate, k);
    ops::focus_attention_bwd(*gpu, dev_tensor(gdq, qs), dev_tensor(gdg, gs), dev_tensor(gdo, os),
                             dev_tensor(gq, qs), dev_tensor(go, os), dev_tensor(gl, ls), l,
                             dev_tensor(gg, gs), Tensor(), gate, k);
    o[i] = go.download();
    const std::vector<float> dqkv = gdq.download();
    for (int t = 0; t < B * T; ++t)  // dk and dv: no atomics, bitwise
      dk[i].insert(dk[i].end(), dqkv.begin() + t * l.width() + l.k_offset(),
                   dqkv.begin() + (t + 1) * l.width());
    dg[i] = gdg.download();
  }
  EXPECT_EQ(o[0], o[1]);
  EXPECT_EQ(dk[0], dk[1]);
  EXPECT_LT(test::max_rel_error(dg[0], dg[1]), 1e-5);
}

// The deterministic backward (train.deterministic) against the same bounds, at the shapes that
// reach its orderings: many query tiles, GQA, K 1 .. 8 (KP 8), windows cutting the tiles; K 17
// (no deterministic form: the fast one runs).
TEST(FocusWgmmaCuda, DeterministicMatchesTheReference) {
  WGMMA_TEST_PREAMBLE(64, 8);
  for (int D : {64, 128})
    for (WgmmaCase c : std::vector<WgmmaCase>{{0, 1, 0, 4},
                                              {0, 129, 0, 8},
                                              {0, 1000, 37, 8},
                                              {0, 2048, 128, 8},
                                              {0, 1000, 0, 5},
                                              {0, 700, 37, 17},
                                              {0, 300, 300, 1}}) {
      c.D = D;
      c.deterministic = true;
      run_case(c);
    }
}

// The deterministic backward is bitwise reproducible: dq, dk, dv and dg of repeated calls (with
// the scratch and the blocks' timing free to differ) equal the first, and the fast form's within
// its float rounding. Many key tiles per query tile, GQA 4:1, B 2, both gates of the kernel, K 8
// and 5. The fast form's own reruns are compared too and the count that differed printed: that
// they differ shows the reruns do reorder the blocks' additions.
TEST(FocusWgmmaCuda, DeterministicIsBitwiseReproducible) {
  WGMMA_TEST_PREAMBLE(64, 8);
  const test::PoisonScratch poison;  // an unwritten dg slice reads NaN (a lost turn hangs)
  for (int D : {64, 128})
    for (int K : {8, 5})
      for (FocusGateKind kind : {FocusGateKind::additive, FocusGateKind::hard}) {
        SCOPED_TRACE(testing::Message() << "D " << D << " K " << K << " gate " << int(kind));
        auto gpu = ExecContext::make_cuda(0);
        const int B = 2, T = 3000, H = 8, tk = 2;
        const QKVLayout l{H, 2, D};
        const Shape qs{B, T, l.width()}, os{B, T, l.q_width()}, ls{B, H, T}, gs{B, T, K},
            grs{B, T, tk};
        DeviceArray<bf16> gq(test::random_vector(size_t(B) * T * l.width(), 31, -2, 2));
        DeviceArray<bf16> gdo(test::random_vector(size_t(B) * T * l.q_width(), 32));
        const std::vector<float> g = test::softmax_g(size_t(B) * T, K, 33);
        std::vector<int32_t> groups(size_t(B) * T * tk);
        auto cpu = ExecContext::make_cpu();
        std::vector<float> g_host = g;
        ops::focus_route_topk(*cpu, cpu_tensor(groups, grs), cpu_tensor(g_host, gs));
        DeviceArray<float> gg(g);
        const test::DeviceInts ggr(groups);
        const Tensor tgr = kind == FocusGateKind::hard ? test::dev_ints(ggr, grs) : Tensor();
        FocusGateParams gate;
        gate.kind = kind;
        gate.local_window = 128;
        DeviceArray<bf16> go(size_t(B) * T * l.q_width()), gdq(size_t(B) * T * l.width());
        DeviceArray<float> gl(size_t(B) * H * T), gdg(gg.size());
        ops::focus_attention_fwd(*gpu, dev_tensor(go, os), dev_tensor(gl, ls), dev_tensor(gq, qs),
                                 l, dev_tensor(gg, gs), tgr, gate);
        struct Grads {
          std::vector<bf16> dqkv_bits;
          std::vector<float> dqkv, dg;
        };
        auto bwd = [&](bool det) {
          gpu->deterministic = det;
          gdq.poison();
          gdg.poison();
          ops::focus_attention_bwd(*gpu, dev_tensor(gdq, qs), dev_tensor(gdg, gs),
                                   dev_tensor(gdo, os), dev_tensor(gq, qs), dev_tensor(go, os),
                                   dev_tensor(gl, ls), l, dev_tensor(gg, gs), tgr, gate,
                                   FocusSoftKernel::wgmma);
          return Grads{gdq.raw(), gdq.download(), gdg.download()};
        };
        const Grads first = bwd(true);
        for (int rep = 0; rep < 3; ++rep) {
          const Grads again = bwd(true);
          EXPECT_TRUE(test::bitwise_equal(first.dqkv_bits, again.dqkv_bits))
              << "dqkv, rerun " << rep;
          EXPECT_TRUE(test::bitwise_equal(first.dg, again.dg)) << "dg, rerun " << rep;
        }
        const Grads fast = bwd(false);
        int fast_differs = 0;
        for (int rep = 0; rep < 3; ++rep) {
          const Grads again = bwd(false);
          fast_differs += !test::bitwise_equal(fast.dqkv_bits, again.dqkv_bits) ||
                          !test::bitwise_equal(fast.dg, again.dg);
        }
        EXPECT_LE(test::max_rel_error(fast.dg, first.dg), 1e-5);
        const double e_dqkv = test::max_rel_error(fast.dqkv, first.dqkv);
        std::printf(
            "  [focus wgmma det] D %d K %d gate %d: fast vs deterministic dqkv %.2e; fast "
            "form's reruns that differed from its first: %d of 3\n",
            D, K, int(kind), e_dqkv, fast_differs);
        EXPECT_LE(e_dqkv, 1.0 / 256);
      }
}

TEST(FocusWgmmaCuda, BackwardWritesDgAndIsZeroWhenAllLocal) {
  WGMMA_TEST_PREAMBLE(64, 8);
  test::check_backward_writes_dg(FocusSoftKernel::wgmma);
}

}  // namespace
}  // namespace attnlab
