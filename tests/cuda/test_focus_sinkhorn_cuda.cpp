// The CUDA Sinkhorn (kernels/focus/focus_sinkhorn.cu) against the CPU reference (skipped without a
// GPU): both scopes, B = 2 (B = 1 at 1M), T from 1 to 1M (not multiples of a chunk), K 1 to 64,
// scores of +-10 and +-200; g, the iterates, the carried state, rows and column masses; dscores
// from the backward run on the reference's iterates (so it measures the backward alone); the
// backward leaves the iterates untouched; decoding chunk by chunk.
//
// Bounds (max |cuda - ref| / max |ref|; the reference accumulates in double, the kernels in fp32
// in a different order): a column step computes its log-sum-exp M (|M| <= log T + the largest
// score gap, < 16 after the first row step) with a few fp32 roundings, about 1e-6 each (the
// spacing of floats in [8, 16) is 9.5e-7); N = 10 iterations add up to ~10 such errors in log g,
// so g and exp(iterates) get 2e-5 (about 2x the worst case, 5x the typical one). With scores of
// +-a the first column step's outputs reach 2a in magnitude and both sides store them in fp32
// (the iterates' contract), each with half a float spacing of error: a row whose values all sit
// near -2a keeps that error after its row step, so the bound is at least 4 spacings of 2a
// (a = 200: 1.2e-4; a = 10: 7.6e-6, below 2e-5). dscores: the backward's sums over T (sequence)
// and the reverse recurrence (causal) run in a tree order whose fp32 error grows with the depth
// (log T), not with T; 1e-4 (the previous sequential kernels' bound at T <= 1000), or the same
// 4 spacings of 2a. State: relative 1e-5 on values ~log(T / K).
// Measured before any GPU run, through a CPU emulation of the kernels (docs/focus.md): at most
// 6.4e-6 on g and 8e-6 on dscores (T <= 8300).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "cuda_test_util.h"
#include "ops/focus_ops.h"

namespace attnlab {
namespace {

using test::cpu_tensor;
using test::DeviceArray;

constexpr int kIterations = 10;
constexpr double kTolG = 2e-5, kTolDscores = 1e-4, kTolState = 1e-5;

// Four float spacings at 2 * amp: the fp32 iterates' own rounding (above).
double iterate_rounding(float amp) {
  const float v = 2.f * amp;
  return 4.0 * double(std::nextafter(v, INFINITY) - v);
}

Tensor dev(const DeviceArray<float>& a, Shape s) {
  return Tensor(a.ptr(), DType::f32, Device::cuda, s);
}

std::vector<float> exp_of(const std::vector<float>& v, size_t from) {
  std::vector<float> r(v.begin() + std::ptrdiff_t(from), v.end());
  for (auto& x : r) x = std::exp(x);
  return r;
}

// Column masses sum_t g[b, t, k], in double.
std::vector<double> column_masses(const std::vector<float>& g, int B, int T, int K) {
  std::vector<double> m(size_t(B) * K, 0.0);
  for (int b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int k = 0; k < K; ++k) m[size_t(b) * K + k] += g[(size_t(b) * T + t) * K + k];
  return m;
}

// A carried state of `entries` entries, each empty: (hi, lo) = (-inf, 0) (focus_sinkhorn_state.h).
std::vector<float> empty_state(size_t entries) {
  std::vector<float> st(entries * 2, 0.f);
  for (size_t i = 0; i < st.size(); i += 2) st[i] = -INFINITY;
  return st;
}
// Its entries' values hi + lo (the pairs' lo words alone are not comparable).
std::vector<float> state_values(const std::vector<float>& st) {
  std::vector<float> v(st.size() / 2);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = float(focus_sinkhorn_state::state_value(st.data() + 2 * i));
  return v;
}

// path: the CUDA kernels (SinkhornPath); forcing cooperative where it does not fit is an error, so
// callers force it only where sinkhorn_cooperative_fits says it runs. with_state: causal with the
// carried state (decoding's form; training has none). N: iterations.
void check_case(int B, int T, int K, bool causal, float amp,
                SinkhornPath path = SinkhornPath::automatic, bool with_state = true,
                int N = kIterations) {
  SCOPED_TRACE(testing::Message() << "B " << B << " T " << T << " K " << K
                                  << (causal ? " causal" : " sequence") << " scores +-" << amp
                                  << " path " << int(path) << " state " << with_state << " N "
                                  << N);
  auto cpu = ExecContext::make_cpu();
  auto gpu = ExecContext::make_cuda(0);
  const bool state_on = causal && with_state;  // the state exists for causal only
  const Shape s{B, T, K}, is{N + 1, B, T, K}, ss{B, N, K, 2};
  const size_t n = size_t(B) * T * K;
  const double tol_g = std::max(kTolG, iterate_rounding(amp));
  const double tol_ds = std::max(kTolDscores, iterate_rounding(amp));
  std::vector<float> sc = test::random_vector(n, uint32_t(T * 31 + K), -amp, amp);
  std::vector<float> dg = test::random_vector(n, uint32_t(T + 7));
  std::vector<float> g(n), it(n * (N + 1)), ds(n), state = empty_state(size_t(B) * N * K);
  const Tensor cpu_state = state_on ? cpu_tensor(state, ss) : Tensor();
  ops::focus_sinkhorn_fwd(*cpu, cpu_tensor(g, s), cpu_tensor(it, is), cpu_tensor(sc, s), causal,
                          cpu_state);
  ops::focus_sinkhorn_bwd(*cpu, cpu_tensor(ds, s), cpu_tensor(dg, s), cpu_tensor(g, s),
                          cpu_tensor(it, is), causal);

  // (state now holds the reference's update: the device starts from empty entries too)
  DeviceArray<float> d_sc(sc), d_g(n), d_it(it.size()), d_state(empty_state(size_t(B) * N * K));
  d_g.poison();
  d_it.poison();
  ops::focus_sinkhorn_fwd(*gpu, dev(d_g, s), dev(d_it, is), dev(d_sc, s), causal,
                          state_on ? dev(d_state, ss) : Tensor(), 0, path);
  const std::vector<float> gg = d_g.download(), git = d_it.download();
  EXPECT_LT(test::report("sinkhorn g", test::max_rel_error(gg, g)), tol_g);
  EXPECT_EQ(std::vector<float>(git.begin(), git.begin() + std::ptrdiff_t(n)), sc) << "X_0 = scores";
  EXPECT_LT(
      test::report("sinkhorn exp(iterates)", test::max_rel_error(exp_of(git, n), exp_of(it, n))),
      tol_g);
  if (state_on) {
    EXPECT_LT(test::report("sinkhorn state", test::max_rel_error(state_values(d_state.download()),
                                                                 state_values(state))),
              kTolState);
  }
  // Balance: rows sum to 1; the column masses are the reference's (T / K up to the last row step).
  double row_err = 0.0;
  for (size_t r = 0; r < size_t(B) * T; ++r) {
    double sum = 0.0;
    for (int k = 0; k < K; ++k) sum += gg[r * K + k];
    row_err = std::max(row_err, std::fabs(sum - 1.0));
  }
  EXPECT_LT(row_err, 1e-5);
  EXPECT_LT(test::report("sinkhorn column masses", test::max_rel_error(column_masses(gg, B, T, K),
                                                                       column_masses(g, B, T, K))),
            tol_g);

  // The backward alone: from the reference's g and iterates.
  DeviceArray<float> r_g(g), r_it(it), d_dg(dg), d_ds(n);
  d_ds.poison();
  ops::focus_sinkhorn_bwd(*gpu, dev(d_ds, s), dev(d_dg, s), dev(r_g, s), dev(r_it, is), causal,
                          path);
  EXPECT_LT(test::report("sinkhorn dscores", test::max_rel_error(d_ds.download(), ds)), tol_ds);
  EXPECT_EQ(r_it.download(), it) << "the backward only reads the iterates";
}

TEST(FocusSinkhornCuda, MatchesTheReferenceOddShapes) {
  CUDA_TEST_PREAMBLE();
  for (int T : {1, 2, 127, 129, 1000, 4097})
    for (int K : {1, 4, 8, 64})
      for (bool causal : {true, false})
        for (float amp : {10.f, 200.f}) check_case(2, T, K, causal, amp);
}

// Each path forced (automatic takes the cooperative kernels wherever they fit, so the chunked
// ones are otherwise tested only past kSinkhornCoopMaxChunks chunks): odd shapes, both scopes,
// B 1 and 2, a carried state (causal), and a batch too large to be resident at once (chunked only);
// the one-block forward where it fits (T <= 4096, K <= 8) and the one-block backward where it fits
// (T <= 1024; elsewhere the backward runs as automatic).
TEST(FocusSinkhornCuda, ChunkedAndCooperativeMatchTheReference) {
  CUDA_TEST_PREAMBLE();
  int cooperative = 0, blocks = 0, block_bwds = 0;
  for (int B : {1, 2})
    for (int T : {2, 129, 1000, 4096, 4097, 65536 + 3})
      for (int K : {1, 8, 64})
        for (bool causal : {true, false}) {
          check_case(B, T, K, causal, 10.f, SinkhornPath::chunked);
          SinkhornParams p;
          p.B = B, p.T = T, p.K = K, p.iterations = kIterations, p.causal = causal;
          if (sinkhorn_block_fits(p)) {  // the one-block forward (and backward, T <= 1024)
            ++blocks;
            if (sinkhorn_block_bwd_fits(p)) ++block_bwds;
            check_case(B, T, K, causal, 10.f, SinkhornPath::block);
            check_case(B, T, K, causal, 200.f, SinkhornPath::block);
            if (causal) check_case(B, T, K, true, 10.f, SinkhornPath::block, false);
            check_case(B, T, K, causal, 10.f, SinkhornPath::block, true, 7);
          }
          if (sinkhorn_cooperative_fits(p, false) && sinkhorn_cooperative_fits(p, true)) {
            ++cooperative;
            check_case(B, T, K, causal, 10.f, SinkhornPath::cooperative);
            check_case(B, T, K, causal, 200.f, SinkhornPath::cooperative);
            // causal without the state (training's form), and an odd iteration count (the
            // forward's double-buffered sums end on the other parity)
            if (causal) check_case(B, T, K, true, 10.f, SinkhornPath::cooperative, false);
            check_case(B, T, K, causal, 10.f, SinkhornPath::cooperative, true, 7);
          }
        }
  EXPECT_GT(cooperative, 0) << "no shape ran the cooperative kernels";
  EXPECT_GT(blocks, 0) << "no shape ran the one-block forward";
  EXPECT_GT(block_bwds, 0) << "no shape ran the one-block backward";
  // The one-block forward at odd K (its unrolled loops over kSinkhornBlockMaxK columns masked, the
  // scalar stores) and single tokens.
  for (int T : {1, 7, 1000})
    for (int K : {3, 5})
      for (bool causal : {true, false}) check_case(2, T, K, causal, 10.f, SinkhornPath::block);
  // Too many chunks for the cooperative kernels: forcing them is an error naming the limit.
  auto gpu = ExecContext::make_cuda(0);
  const int B = 1, T = 1 << 20, K = 8, N = kIterations;
  DeviceArray<float> sc(size_t(B) * T * K), g(sc.size()), it(sc.size() * (N + 1));
  EXPECT_THROW(
      ops::focus_sinkhorn_fwd(*gpu, dev(g, {B, T, K}), dev(it, {N + 1, B, T, K}),
                              dev(sc, {B, T, K}), true, Tensor(), 0, SinkhornPath::cooperative),
      Error);
  EXPECT_THROW(
      ops::focus_sinkhorn_bwd(*gpu, dev(sc, {B, T, K}), dev(sc, {B, T, K}), dev(g, {B, T, K}),
                              dev(it, {N + 1, B, T, K}), true, SinkhornPath::cooperative),
      Error);
  // ... and the one-block forward (T > kSinkhornBlockMaxT).
  EXPECT_THROW(ops::focus_sinkhorn_fwd(*gpu, dev(g, {B, T, K}), dev(it, {N + 1, B, T, K}),
                                       dev(sc, {B, T, K}), true, Tensor(), 0, SinkhornPath::block),
               Error);
}

// The automatic forward where the decision matters: at B 64 and 4K the cooperative kernels do not
// fit an H100 or H200 (B x chunks blocks not resident at once), so automatic takes the one-block
// forward (docs/focus_sinkhorn.md): its g and iterates bitwise those of the path the
// rule names on this device (forced), and within the reference's bounds.
TEST(FocusSinkhornCuda, AutomaticTakesThePathItsRuleNames) {
  CUDA_TEST_PREAMBLE();
  auto gpu = ExecContext::make_cuda(0);
  const int B = 64, T = 4096, K = 8, N = kIterations;
  const Shape s{B, T, K}, is{N + 1, B, T, K};
  const size_t n = size_t(B) * T * K;
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "sequence");
    SinkhornParams p;
    p.B = B, p.T = T, p.K = K, p.iterations = N, p.causal = causal;
    const SinkhornPath named = sinkhorn_cooperative_fits(p, false) ? SinkhornPath::cooperative
                               : sinkhorn_block_fits(p)            ? SinkhornPath::block
                                                                   : SinkhornPath::chunked;
    std::printf("B %d T %d K %d %s: automatic is path %d (cooperative 2, block 3)\n", B, T, K,
                causal ? "causal" : "sequence", int(named));
    const std::vector<float> sc = test::random_vector(n, uint32_t(T * 17 + K), -10.f, 10.f);
    DeviceArray<float> d_sc(sc);
    std::vector<float> out[2][2];  // [automatic, named][g, iterates]
    for (int v = 0; v < 2; ++v) {
      DeviceArray<float> d_g(n), d_it(n * (N + 1));
      d_g.poison();
      d_it.poison();
      ops::focus_sinkhorn_fwd(*gpu, dev(d_g, s), dev(d_it, is), dev(d_sc, s), causal, Tensor(), 0,
                              v == 0 ? SinkhornPath::automatic : named);
      out[v][0] = d_g.download();
      out[v][1] = d_it.download();
    }
    EXPECT_EQ(out[0][0], out[1][0]) << "automatic g differs from the named path's";
    EXPECT_EQ(out[0][1], out[1][1]) << "automatic iterates differ from the named path's";
  }
  check_case(B, T, K, true, 10.f, SinkhornPath::automatic, false);  // and the reference's values
}

// The one-block backward at GPT-2's training shape (B 64, T 1024, no state), K 4 and 8, both
// scopes, against the reference; automatic's forward and backward there bitwise those of the path
// its rule names (K <= kSinkhornBlockFirstMaxK: one block; K 8: cooperative where it fits).
TEST(FocusSinkhornCuda, BlockBackwardAtTheTrainingShape) {
  CUDA_TEST_PREAMBLE();
  const int B = 64, T = 1024, N = kIterations;
  auto gpu = ExecContext::make_cuda(0);
  for (int K : {4, 8})
    for (bool causal : {true, false}) {
      SCOPED_TRACE(testing::Message() << "K " << K << (causal ? " causal" : " sequence"));
      SinkhornParams p;
      p.B = B, p.T = T, p.K = K, p.iterations = N, p.causal = causal;
      ASSERT_TRUE(sinkhorn_block_bwd_fits(p));
      const SinkhornPath named[2] = {
          // [forward, backward]
          K <= kSinkhornBlockFirstMaxK          ? SinkhornPath::block
          : sinkhorn_cooperative_fits(p, false) ? SinkhornPath::cooperative
                                                : SinkhornPath::chunked,
          K <= kSinkhornBlockFirstMaxK         ? SinkhornPath::block
          : sinkhorn_cooperative_fits(p, true) ? SinkhornPath::cooperative
                                               : SinkhornPath::chunked};
      check_case(B, T, K, causal, 10.f, SinkhornPath::block, false);
      const Shape s{B, T, K}, is{N + 1, B, T, K};
      const size_t n = size_t(B) * T * K;
      const std::vector<float> sc = test::random_vector(n, 11, -10.f, 10.f);
      const std::vector<float> dg = test::random_vector(n, 12);
      DeviceArray<float> d_sc(sc), d_dg(dg);
      std::vector<float> g[2], it[2], ds[2];  // [automatic, named]
      for (int v = 0; v < 2; ++v) {
        DeviceArray<float> d_g(n), d_it(n * (N + 1)), d_ds(n);
        d_g.poison();
        d_it.poison();
        d_ds.poison();
        ops::focus_sinkhorn_fwd(*gpu, dev(d_g, s), dev(d_it, is), dev(d_sc, s), causal, Tensor(), 0,
                                v == 0 ? SinkhornPath::automatic : named[0]);
        ops::focus_sinkhorn_bwd(*gpu, dev(d_ds, s), dev(d_dg, s), dev(d_g, s), dev(d_it, is),
                                causal, v == 0 ? SinkhornPath::automatic : named[1]);
        g[v] = d_g.download();
        it[v] = d_it.download();
        ds[v] = d_ds.download();
      }
      EXPECT_EQ(g[0], g[1]) << "automatic's g differs from the named path's";
      EXPECT_EQ(it[0], it[1]) << "automatic's iterates differ from the named path's";
      EXPECT_EQ(ds[0], ds[1]) << "automatic's dscores differ from the named path's";
    }
}

TEST(FocusSinkhornCuda, MatchesTheReference64K) {
  CUDA_TEST_PREAMBLE();
  for (int K : {4, 8, 64})
    for (bool causal : {true, false}) check_case(2, 65536 + 3, K, causal, 10.f);
  check_case(2, 65536 + 3, 8, true, 200.f);
}

TEST(FocusSinkhornCuda, MatchesTheReference1M) {
  CUDA_TEST_PREAMBLE();
  for (bool causal : {true, false})
    for (float amp : {10.f, 200.f}) check_case(1, 1 << 20, 8, causal, amp);
}

// Decoding: chunks (single tokens, odd sizes, a multi-chunk piece) with the carried state give
// the rows and the final state of one forward over the whole sequence; with the chunked kernels
// and with automatic's choice (the cooperative kernels for the multi-chunk pieces).
void check_carried_state(SinkhornPath path, int T = 5000) {
  SCOPED_TRACE(testing::Message() << "path " << int(path) << " T " << T);
  auto gpu = ExecContext::make_cuda(0);
  auto cpu = ExecContext::make_cpu();
  const int B = 2, K = 8, N = kIterations;
  std::vector<float> sc = test::random_vector(size_t(B) * T * K, 3, -10, 10);
  std::vector<float> g(sc.size()), it(sc.size() * (N + 1)), state = empty_state(size_t(B) * N * K);
  ops::focus_sinkhorn_fwd(*cpu, cpu_tensor(g, {B, T, K}), cpu_tensor(it, {N + 1, B, T, K}),
                          cpu_tensor(sc, {B, T, K}), true, cpu_tensor(state, {B, N, K, 2}));
  DeviceArray<float> d_state(empty_state(size_t(B) * N * K));
  std::vector<float> out(sc.size());
  const int cuts[] = {0, 1, 2, 7, 300, T - 1, T};
  for (int c = 0; c + 1 < 7; ++c) {
    const int t0 = cuts[c], len = cuts[c + 1] - cuts[c];
    std::vector<float> part(size_t(B) * len * K);
    for (int b = 0; b < B; ++b)
      std::copy_n(sc.data() + (size_t(b) * T + t0) * K, size_t(len) * K,
                  part.data() + size_t(b) * len * K);
    DeviceArray<float> d_sc(part), d_g(part.size()), d_it(part.size() * (N + 1));
    ops::focus_sinkhorn_fwd(*gpu, dev(d_g, {B, len, K}), dev(d_it, {N + 1, B, len, K}),
                            dev(d_sc, {B, len, K}), true, dev(d_state, {B, N, K, 2}), t0, path);
    const std::vector<float> pg = d_g.download();
    for (int b = 0; b < B; ++b)
      std::copy_n(pg.data() + size_t(b) * len * K, size_t(len) * K,
                  out.data() + (size_t(b) * T + t0) * K);
  }
  EXPECT_LT(test::report("sinkhorn decode g", test::max_rel_error(out, g)), kTolG);
  EXPECT_LT(
      test::report("sinkhorn decode state",
                   test::max_rel_error(state_values(d_state.download()), state_values(state))),
      kTolState);
}

// Many one-token calls (decoding; the one-chunk kernel) against the CPU's full forward: the state
// pair, updated in double, keeps them from drifting (a float state, rounded once per call: ~1e-5
// in g after 8,000 calls, on the CPU).
TEST(FocusSinkhornCuda, OneTokenCallsDoNotDrift) {
  CUDA_TEST_PREAMBLE();
  auto gpu = ExecContext::make_cuda(0);
  auto cpu = ExecContext::make_cpu();
  const int T = 8000, K = 8, N = kIterations;
  std::vector<float> sc = test::random_vector(size_t(T) * K, 11, -3, 3);
  std::vector<float> g(sc.size()), it(sc.size() * (N + 1));
  ops::focus_sinkhorn_fwd(*cpu, cpu_tensor(g, {1, T, K}), cpu_tensor(it, {N + 1, 1, T, K}),
                          cpu_tensor(sc, {1, T, K}), true);
  DeviceArray<float> d_state(empty_state(size_t(N) * K)), d_sc(sc), d_g(sc.size()),
      d_it(size_t(K) * (N + 1));
  for (int t = 0; t < T; ++t) {
    const Tensor tok(d_sc.ptr() + size_t(t) * K, DType::f32, Device::cuda, Shape{1, 1, K});
    const Tensor out(d_g.ptr() + size_t(t) * K, DType::f32, Device::cuda, Shape{1, 1, K});
    ops::focus_sinkhorn_fwd(*gpu, out, dev(d_it, {N + 1, 1, 1, K}), tok, true,
                            dev(d_state, {1, N, K, 2}), t);
  }
  const std::vector<float> gg = d_g.download();
  double err = 0.0;
  for (size_t i = 0; i < gg.size(); ++i) err = std::max(err, double(std::fabs(gg[i] - g[i])));
  EXPECT_LT(test::report("sinkhorn one-token calls, max |g| error", err), 3e-6);
}

TEST(FocusSinkhornCuda, CarriedStateMatchesTheFullForward) {
  CUDA_TEST_PREAMBLE();
  check_carried_state(SinkhornPath::chunked);
  check_carried_state(SinkhornPath::automatic);
  SinkhornParams p;  // the largest piece of check_carried_state
  p.B = 2, p.T = 4699, p.K = 8, p.iterations = kIterations, p.causal = true;
  if (sinkhorn_cooperative_fits(p, false)) check_carried_state(SinkhornPath::cooperative);
  check_carried_state(SinkhornPath::block, 3000);  // pieces of at most 2699 tokens
}

}  // namespace
}  // namespace attnlab
