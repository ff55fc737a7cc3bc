// Fused cross-entropy vs the CPU reference: losses (fp32) and dlogits, padded vocabulary masked,
// ignore_index rows zero, and dlogits aliasing the logits buffer; every kernel path: the row in
// shared memory (fits), re-reads from global memory (too large) and the scalar path (unaligned).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "cuda_test_util.h"
#include "kernels/loss/crossentropy.cuh"
#include "ref/crossentropy_ref.h"

namespace attnlab {
namespace {

using namespace test;

template <typename T>
void check_ce(int64_t N, int V, int Vp, bool alias, uint32_t seed) {
  const auto logits = to_precision<T>(random_vector(size_t(N) * Vp, seed, -6.f, 6.f));
  auto targets = random_ints(size_t(N), seed + 1, V);
  for (int64_t i = 1; i < N; i += 7) targets[size_t(i)] = -1;  // ignored rows
  const float dloss = 1.f / float(N);
  std::vector<float> loss_ref(N), dl_ref(logits.size());
  CrossEntropyParams<float> r;
  r.logits = logits.data(), r.targets = targets.data(), r.losses = loss_ref.data();
  r.dlogits = dl_ref.data(), r.N = N, r.V = V, r.Vp = Vp, r.ignore_index = -1, r.dloss = dloss;
  crossentropy_fwd_bwd_ref(r);

  DeviceInts dtg(targets);
  DeviceArray<T> dlog(logits), ddl(logits.size());
  DeviceArray<float> losses{size_t(N)};
  CrossEntropyParams<T> p;
  p.logits = dlog.ptr(), p.targets = dtg.ptr(), p.losses = losses.ptr();
  p.dlogits = alias ? dlog.ptr() : ddl.ptr();
  p.N = N, p.V = V, p.Vp = Vp, p.ignore_index = -1, p.dloss = dloss;
  const auto name = strformat("crossentropy %s N=%lld V=%d Vp=%d%s", type_name<T>(), (long long)N,
                              V, Vp, alias ? " aliased" : "");
  losses.poison();
  launch_crossentropy_fwd<T>(p, nullptr);
  EXPECT_LT(report((name + " fwd loss").c_str(), max_rel_error(losses.download(), loss_ref)), 1e-5);
  losses.poison();
  ddl.poison();
  launch_crossentropy_fwd_bwd<T>(p, nullptr);
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-2;
  EXPECT_LT(report((name + " loss").c_str(), max_rel_error(losses.download(), loss_ref)), 1e-5);
  const auto dl = alias ? dlog.download() : ddl.download();
  EXPECT_LT(report((name + " dlogits").c_str(), max_rel_error(dl, dl_ref)), tol);
}

TEST(CrossEntropyCuda, MatchesReferenceF32) {
  CUDA_TEST_PREAMBLE();
  check_ce<float>(1, 1, 1, false, 1);
  check_ce<float>(3, 10, 16, false, 2);
  check_ce<float>(5, 1000, 1003, true, 3);  // Vp not a multiple of the pack: scalar path
  check_ce<float>(16, 50257, 50304, true, 4);
  check_ce<float>(4, 59990, 60000, true, 5);  // row larger than shared memory: global re-reads
  check_ce<float>(1000, 1000, 1008, true, 6);
}

TEST(CrossEntropyCuda, MatchesReferenceBF16) {
  CUDA_TEST_PREAMBLE();
  check_ce<bf16>(1, 1, 8, false, 11);
  check_ce<bf16>(3, 10, 16, false, 12);
  check_ce<bf16>(5, 1000, 1003, true, 13);
  check_ce<bf16>(16, 50257, 50304, true, 14);
  check_ce<bf16>(1000, 1000, 1008, true, 15);    // several rows per block (pipelined)
  check_ce<bf16>(300, 50257, 50304, false, 16);  // GPT-2 rows, not aliased
}

// Device loss totals (sum over valid rows, count) vs the host sum in double: accumulated (+=) over
// two calls, bitwise reproducible.
TEST(CrossEntropyCuda, LossSumMatchesReference) {
  CUDA_TEST_PREAMBLE();
  for (int64_t N : {1, 1000, 65536 + 3}) {
    const auto losses = random_vector(size_t(N), uint32_t(N), 0.f, 11.f);
    auto targets = random_ints(size_t(N), uint32_t(N) + 1, 50257);
    for (int64_t i = 1; i < N; i += 5) targets[size_t(i)] = -1;  // ignored rows
    double ref[2] = {0.0, 0.0};
    crossentropy_loss_sum_ref(losses.data(), targets.data(), N, -1, ref);
    const auto second = random_vector(size_t(N), uint32_t(N) + 2, 0.f, 11.f);
    crossentropy_loss_sum_ref(second.data(), targets.data(), N, -1, ref);
    DeviceInts dtg(targets);
    DeviceArray<float> dl(losses), dl2(second);
    Buffer totals(Device::cuda, 2 * sizeof(double));
    std::vector<double> got[2];
    for (auto& g : got) {
      totals.zero();
      double* t = static_cast<double*>(totals.data());
      launch_crossentropy_loss_sum(dl.ptr(), dtg.ptr(), N, -1, t, nullptr);
      launch_crossentropy_loss_sum(dl2.ptr(), dtg.ptr(), N, -1, t, nullptr);
      g.resize(2);
      CUDA_CHECK(cudaMemcpy(g.data(), t, 2 * sizeof(double), cudaMemcpyDeviceToHost));
    }
    const auto name = strformat("loss sum N=%lld", (long long)N);
    EXPECT_EQ(got[0][1], ref[1]) << name;  // valid count
    EXPECT_GT(ref[1], 0.0);
    EXPECT_LT(report(name.c_str(), std::fabs(got[0][0] - ref[0]) / ref[0]), 1e-12);
    EXPECT_TRUE(std::memcmp(got[0].data(), got[1].data(), 2 * sizeof(double)) == 0) << name;
  }
}

}  // namespace
}  // namespace attnlab
