// The Hopper wgmma attention kernels (kernels/attention/attention_wgmma.cuh) vs the CPU reference,
// on a packed qkv [B, T, (H + 2 Hkv) D] activation rounded to bf16. Forward: o within 1e-2 and lse
// within 1e-3 (the bounds of the mma.sync forward's test, test_attention_cuda.cpp). Backward: dq,
// dk, dv within 1e-2 of the largest reference gradient (the mma.sync backward's bound), both for
// the deterministic mma.sync backward on the wgmma forward's o and lse and for the fast backward
// through the dispatcher (the wgmma kernel), whose dk and dv must also be bitwise the same on a
// second run, and for the wgmma backward called directly. Outputs are poisoned with NaN first.
// Shapes cover T = 1, odd T, T not a multiple of the 128-row blocks, several key and query tiles,
// GQA (groups of 2 and 4), D = 64 and 128 (each with its own forward schedule and backward loop),
// sliding windows and the non-causal case. Skipped without a GPU or on a device other than
// compute capability 9.0 (sm_90a code runs nowhere else).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "attention_test_case.h"
#include "cuda_test_util.h"
#include "kernels/attention/attention.cuh"
#include "kernels/attention/attention_wgmma.cuh"
#include "ref/attention_ref.h"

namespace attnlab {
namespace {

using namespace test;

using WgmmaCase = AttnCase;

// max |a - b| / max |b| over the elements of one strided part of an interleaved [rows, row] array.
double part_error(const std::vector<float>& a, const std::vector<float>& b, int64_t rows,
                  int64_t row, int64_t begin, int64_t width) {
  double err = 0.0, scale = 0.0;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < width; ++j) {
      const double x = a[i * row + begin + j], y = b[i * row + begin + j];
      const double d = std::fabs(x - y);
      err = d == d ? std::max(err, d) : INFINITY;
      scale = std::max(scale, std::fabs(y));
    }
  }
  return err / std::max(scale, 1e-30);
}

// dq, dk, dv (the parts of the packed gradient) vs the reference, relative to the largest reference
// value of each part. T = 1: dq = dk = 0 analytically, where relative errors would measure rounding
// noise; only dv is compared.
void check_grads(const WgmmaCase& c, const std::string& name, const std::vector<float>& got,
                 const std::vector<float>& ref) {
  const int64_t rows = int64_t(c.B) * c.T, row = int64_t(c.H + 2 * c.Hkv) * c.D;
  const int64_t begin[3] = {0, int64_t(c.H) * c.D, int64_t(c.H + c.Hkv) * c.D};
  const int64_t width[3] = {int64_t(c.H) * c.D, int64_t(c.Hkv) * c.D, int64_t(c.Hkv) * c.D};
  const char* part[3] = {" dq", " dk", " dv"};
  for (int k = c.T == 1 ? 2 : 0; k < 3; ++k) {
    EXPECT_LT(report((name + part[k]).c_str(), part_error(got, ref, rows, row, begin[k], width[k])),
              1e-2);
  }
}

// The wgmma forward on one case (the reference computed once); then the dispatcher.
void check_wgmma(const WgmmaCase& c, uint32_t seed) {
  const size_t n_qkv = size_t(c.B) * c.T * (c.H + 2 * c.Hkv) * c.D;
  const size_t n_o = size_t(c.B) * c.T * c.H * c.D, n_lse = size_t(c.B) * c.H * c.T;
  const auto qkv = to_precision<bf16>(random_vector(n_qkv, seed, -2.f, 2.f));
  const auto dout = to_precision<bf16>(random_vector(n_o, seed + 1));
  const AttnReference ref(c, qkv, dout);
  const std::vector<float>&o_ref = ref.o, &lse_ref = ref.lse, &dqkv_ref = ref.dqkv;

  DeviceArray<bf16> dqkv_in(qkv), ddout(dout), o(n_o), dqkv(n_qkv);
  DeviceArray<float> lse(n_lse);
  AttentionParams<bf16> p;
  set_layout(p, c, dqkv_in.ptr(), o.ptr(), ddout.ptr(), dqkv.ptr());
  p.lse = lse.ptr();
  p.deterministic = true;
  ASSERT_TRUE(attention_fwd_wgmma_supported(p));
  const auto shape = strformat("B=%d T=%d H=%d Hkv=%d D=%d w=%d%s", c.B, c.T, c.H, c.Hkv, c.D,
                               c.window, c.causal ? "" : " noncausal");
  {
    const auto name = strformat("attention bf16/wgmma fwd %s", shape.c_str());
    o.poison();
    lse.poison();
    launch_attention_fwd_wgmma(p, nullptr);
    EXPECT_LT(report((name + " o").c_str(), max_rel_error(o.download(), o_ref)), 1e-2);
    EXPECT_LT(report((name + " lse").c_str(), max_rel_error(lse.download(), lse_ref)), 1e-3);
    // The deterministic (mma.sync) backward on this forward's o and lse (causal cases: the
    // training path; T = 1 has dq = dk = 0 analytically, where relative errors would measure
    // rounding noise).
    if (c.causal && c.T > 1) {
      dqkv.poison();
      launch_attention_bwd<bf16>(p, nullptr);
      check_grads(c, name, dqkv.download(), dqkv_ref);
    }
  }
  const std::vector<bf16> o_direct = o.raw();
  // Through the dispatcher (use_wgmma): the same kernel again, bitwise the same o.
  o.poison();
  p.use_wgmma = true;
  launch_attention_fwd<bf16>(p, nullptr);
  EXPECT_TRUE(bitwise_equal(o.raw(), o_direct)) << shape << ": dispatch or rerun differs";

  // The fast backward through the dispatcher: the wgmma kernel on this o and lse.
  ASSERT_TRUE(attention_bwd_wgmma_supported(p));
  p.deterministic = false;
  dqkv.poison();
  launch_attention_bwd<bf16>(p, nullptr);
  const auto first = dqkv.raw();
  check_grads(c, "attention bf16/wgmma bwd " + shape, dqkv.download(), dqkv_ref);
  dqkv.poison();
  launch_attention_bwd<bf16>(p, nullptr);
  const auto second = dqkv.raw();
  const int64_t rows = int64_t(c.B) * c.T, row = int64_t(c.H + 2 * c.Hkv) * c.D;
  const int64_t kv_begin = int64_t(c.H) * c.D;
  bool same = true;
  for (int64_t i = 0; i < rows && same; ++i) {
    same = std::memcmp(&first[i * row + kv_begin], &second[i * row + kv_begin],
                       (row - kv_begin) * sizeof(bf16)) == 0;
  }
  EXPECT_TRUE(same) << shape << ": wgmma backward dk/dv differ between runs";

  // The kernel called directly with delta = rowsum(dO * O) from the host (on the device's o) and a
  // zeroed dQ accumulator.
  const auto o_dev = o.download();
  std::vector<float> delta_h(n_lse);
  for (int b = 0; b < c.B; ++b) {
    for (int h = 0; h < c.H; ++h) {
      for (int t = 0; t < c.T; ++t) {
        const size_t off = (size_t(b) * c.T + t) * c.H * c.D + size_t(h) * c.D;
        double acc = 0.0;
        for (int d = 0; d < c.D; ++d) acc += double(dout[off + d]) * o_dev[off + d];
        delta_h[(size_t(b) * c.H + h) * c.T + t] = float(acc);
      }
    }
  }
  DeviceArray<float> delta(delta_h), dq_accum(n_o);
  dqkv.poison();
  CUDA_CHECK(cudaMemset(dq_accum.ptr(), 0, n_o * sizeof(float)));
  launch_attention_bwd_wgmma(p, delta.ptr(), dq_accum.ptr(), nullptr);
  check_grads(c, strformat("attention bf16/wgmma bwd-direct %s", shape.c_str()), dqkv.download(),
              dqkv_ref);
}

TEST(AttentionCuda, WgmmaForwardBackwardMatchReference) {
  CUDA_TEST_PREAMBLE();
  int dev = 0, major = 0, minor = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  if (major != 9 || minor != 0) GTEST_SKIP() << "wgmma kernel needs compute capability 9.0";
  AttentionParams<bf16> probe;
  probe.D = 64;
  if (!attention_fwd_wgmma_supported(probe)) {
    GTEST_SKIP() << "this build has no sm_90a code (configure with CMAKE_CUDA_ARCHITECTURES=90)";
  }
  const WgmmaCase cases[] = {
      {2, 1, 2, 2, 64, 0, true},    {1, 64, 4, 2, 64, 0, true},     {2, 127, 4, 1, 128, 0, true},
      {1, 129, 2, 2, 64, 0, true},  {1, 1024, 2, 2, 64, 0, true},   {1, 1024, 4, 2, 128, 0, true},
      {2, 200, 4, 4, 64, 37, true}, {1, 300, 2, 1, 128, 100, true}, {1, 777, 2, 1, 128, 300, true},
      {1, 333, 3, 3, 64, 0, false}, {1, 257, 2, 1, 128, 0, false},  {1, 515, 8, 2, 64, 0, true},
      {1, 390, 4, 1, 128, 0, true}, {1, 300, 4, 2, 64, 37, true},   {1, 257, 4, 1, 128, 100, true},
  };
  uint32_t seed = 7;
  for (const auto& c : cases) check_wgmma(c, seed += 10);
}

}  // namespace
}  // namespace attnlab
