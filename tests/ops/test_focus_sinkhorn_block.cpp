// The one-block Sinkhorn backward (kernels/focus/focus_sinkhorn_block.cu) replayed on the CPU: a
// block of 512 threads of kRows = 2 tokens each, with the per-column steps of
// focus_sinkhorn_segment.h (the kernel's own functions) and the block's scan and composition done
// in thread order (the kernel's shuffles sum the same terms in another order), against the CPU
// backward (ops::focus_sinkhorn_bwd): both scopes, T from 1 to 1024 (a partial last thread, threads
// without tokens), odd K, scores of +-200 (the w > 1/2 form). A replay that ignores the later
// segments' carry must fail the same bound.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/focus/focus_sinkhorn_segment.h"
#include "ops/focus_ops.h"
#include "test_util.h"

namespace attnlab {
namespace {

using focus_sinkhorn::Affine;
using focus_sinkhorn::AffineOp;
using focus_sinkhorn::Lse;
using focus_sinkhorn::LseOp;
using test::cpu_tensor;

constexpr int kThreads = 512, kRows = 2, kIterations = 10;

// dscores of one call, as the kernel computes them (with_carry = false: Q = 0, a mutation).
std::vector<float> replay(const std::vector<float>& dg, const std::vector<float>& g,
                          const std::vector<float>& it, int B, int T, int K, bool causal,
                          bool with_carry = true) {
  const size_t all = size_t(B) * T * K;
  std::vector<float> out(all);
  for (int b = 0; b < B; ++b) {
    auto at = [&](int t, int k) { return (size_t(b) * T + t) * K + k; };
    std::vector<float> d(size_t(T) * K), xp(size_t(T) * K), x(size_t(T) * K);
    for (int t = 0; t < T; ++t)
      for (int k = 0; k < K; ++k) {
        d[size_t(t) * K + k] = dg[at(t, k)] * g[at(t, k)];
        xp[size_t(t) * K + k] = it[kIterations * all + at(t, k)];
      }
    for (int n = kIterations - 1; n >= 0; --n) {
      for (int t = 0; t < T; ++t) {  // the row step's backward
        float sum = 0.f;
        for (int k = 0; k < K; ++k) sum += d[size_t(t) * K + k];
        for (int k = 0; k < K; ++k) d[size_t(t) * K + k] -= expf(xp[size_t(t) * K + k]) * sum;
        for (int k = 0; k < K; ++k) x[size_t(t) * K + k] = it[n * all + at(t, k)];
      }
      for (int k = 0; k < K; ++k) {
        // Thread th's column: its valid tokens, E (the exclusive prefix), its map.
        float xc[kThreads][kRows] = {}, dc[kThreads][kRows] = {};
        int nv[kThreads];
        Lse E[kThreads];
        Affine f[kThreads];
        Lse run = LseOp::identity();
        for (int th = 0; th < kThreads; ++th) {
          nv[th] = std::max(0, std::min(kRows, T - th * kRows));
          Lse pre = LseOp::identity();
          for (int i = 0; i < nv[th]; ++i) {
            xc[th][i] = x[size_t(th * kRows + i) * K + k];
            dc[th][i] = d[size_t(th * kRows + i) * K + k];
            pre = focus_sinkhorn::add(pre, xc[th][i]);
          }
          E[th] = run;
          run = LseOp::combine(run, pre);
        }
        for (int th = 0; th < kThreads; ++th) {
          float sum = 0.f;
          for (int i = 0; i < nv[th]; ++i) sum += dc[th][i];
          f[th] = causal ? focus_sinkhorn::segment_map_of(E[th], xc[th], dc[th], nv[th])
                         : Affine{1.f, sum};
        }
        // Q of thread th: the maps of the threads after it, the last applied first.
        std::vector<float> Q(kThreads);
        Affine acc = AffineOp::identity();
        for (int th = kThreads - 1; th >= 0; --th) {
          Q[size_t(th)] = acc.b;
          acc = AffineOp::combine(acc, f[th]);
        }
        for (int th = 0; th < kThreads; ++th) {
          if (causal)
            focus_sinkhorn::segment_dx_causal(E[th], xc[th], dc[th], nv[th],
                                              with_carry ? Q[size_t(th)] : 0.f);
          else
            focus_sinkhorn::segment_dx_sequence(run, acc.b, xc[th], dc[th], nv[th]);
          for (int i = 0; i < nv[th]; ++i) d[size_t(th * kRows + i) * K + k] = dc[th][i];
        }
      }
      xp = x;
    }
    for (int t = 0; t < T; ++t)
      for (int k = 0; k < K; ++k) out[at(t, k)] = d[size_t(t) * K + k];
  }
  return out;
}

TEST(FocusSinkhornBlock, BackwardReplayMatchesTheReference) {
  auto cpu = ExecContext::make_cpu();
  int mutants_caught = 0, mutants = 0;
  for (int T : {1, 2, 7, 129, 1000, 1024})
    for (int K : {1, 3, 8})
      for (bool causal : {true, false})
        for (float amp : {10.f, 200.f}) {
          SCOPED_TRACE(testing::Message() << "T " << T << " K " << K
                                          << (causal ? " causal" : " sequence") << " +-" << amp);
          const int B = 2, N = kIterations;
          const size_t n = size_t(B) * T * K;
          const Shape s{B, T, K}, is{N + 1, B, T, K};
          std::vector<float> sc = test::random_vector(n, uint32_t(T * 13 + K), -amp, amp);
          std::vector<float> dg = test::random_vector(n, uint32_t(T + 5));
          std::vector<float> g(n), it(n * (N + 1)), ds(n);
          ops::focus_sinkhorn_fwd(*cpu, cpu_tensor(g, s), cpu_tensor(it, is), cpu_tensor(sc, s),
                                  causal);
          ops::focus_sinkhorn_bwd(*cpu, cpu_tensor(ds, s), cpu_tensor(dg, s), cpu_tensor(g, s),
                                  cpu_tensor(it, is), causal);
          const double err = test::max_rel_error(replay(dg, g, it, B, T, K, causal), ds);
          EXPECT_LT(err, 1e-5);
          // The carry matters once a sequence spans two threads (and K > 1: with one group every
          // row step leaves 0, so dscores is 0).
          if (causal && T > kRows && K > 1) {
            ++mutants;
            if (test::max_rel_error(replay(dg, g, it, B, T, K, causal, false), ds) > 1e-3)
              ++mutants_caught;
          }
        }
  EXPECT_EQ(mutants_caught, mutants) << "a replay without the later segments' carry passed";
}

}  // namespace
}  // namespace attnlab
