// RoPE CUDA kernel (through the host op on a CUDA context) vs the CPU reference, fp32 and bf16:
// forward and backward, v bitwise untouched, forward then backward gives the input back; MHA and
// GQA layouts, D from 2 to the CUDA maximum (512), positions up to 100000 (both sides take the
// same fp32 inv_freq, so the angles agree bitwise and only cos / sin may differ by an ulp), also
// under the linear and llama3 frequency scaling.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "kernels/position/rope.cuh"
#include "ops/ops.h"

namespace attnlab {
namespace {

using namespace test;

template <typename T>
void check_rope(int B, int Tn, QKVLayout l, int pos, float theta, uint32_t seed,
                const RopeScaling& sc = {}) {
  const int64_t W = l.width();
  const Shape shape{B, Tn, W};
  const auto x = to_precision<T>(random_vector(size_t(B * Tn * W), seed, -2.f, 2.f));
  auto cpu = ExecContext::make_cpu();
  auto gpu = ExecContext::make_cuda(0);
  std::vector<float> fwd_ref = x, bwd_ref = x;
  ops::rope_fwd(*cpu, cpu_tensor(fwd_ref, shape), l, pos, theta, sc);
  ops::rope_bwd(*cpu, cpu_tensor(bwd_ref, shape), l, pos, theta, sc);

  const auto name =
      strformat("rope %s B%d T%d H%d Hkv%d D%d pos %d%s", type_name<T>(), B, Tn, l.n_head,
                l.n_kv_head, l.head_dim, pos, sc.type == RopeScalingType::none ? "" : " scaled");
  DeviceArray<T> d(x);
  ops::rope_fwd(*gpu, dev_tensor(d, shape), l, pos, theta, sc);
  const auto fwd = d.download();
  EXPECT_LT(report((name + " fwd").c_str(), max_rel_error(fwd, fwd_ref)),
            same_precision_tolerance<T>(fwd_ref))
      << name;
  for (int64_t r = 0; r < int64_t(B) * Tn; ++r)
    for (int64_t j = l.v_offset(); j < W; ++j)
      ASSERT_EQ(fwd[r * W + j], x[r * W + j]) << name << ": v changed at row " << r;

  // Forward then backward on the device: the input again, within two roundings to T.
  ops::rope_bwd(*gpu, dev_tensor(d, shape), l, pos, theta, sc);
  EXPECT_LT(report((name + " fwd+bwd").c_str(), max_rel_error(d.download(), x)),
            2 * same_precision_tolerance<T>(fwd_ref))
      << name;

  d.upload(x);
  ops::rope_bwd(*gpu, dev_tensor(d, shape), l, pos, theta, sc);
  EXPECT_LT(report((name + " bwd").c_str(), max_rel_error(d.download(), bwd_ref)),
            same_precision_tolerance<T>(bwd_ref))
      << name;
}

template <typename T>
void check_all(uint32_t seed) {
  check_rope<T>(1, 1, {1, 1, 2}, 0, 10000.f, seed);
  check_rope<T>(2, 17, {4, 4, 64}, 0, 10000.f, seed + 1);       // MHA (GPT-2-like)
  check_rope<T>(3, 33, {8, 2, 128}, 1000, 500000.f, seed + 2);  // GQA, LLaMA-3 theta
  check_rope<T>(1, 5, {2, 1, 6}, 100000, 10000.f, seed + 3);    // D/2 odd, far position
  check_rope<T>(2, 9, {2, 2, kRopeMaxHeadDim}, 7, 1e6f, seed + 4);
  check_rope<T>(1, 4097, {4, 1, 64}, 0, 10000.f, seed + 5);  // many tokens
  RopeScaling llama3;  // LLaMA 3.1's (all three bands at D 128), past the original context
  llama3.type = RopeScalingType::llama3;
  llama3.factor = 8.f;
  check_rope<T>(2, 33, {8, 2, 128}, 20000, 500000.f, seed + 6, llama3);
  RopeScaling linear;
  linear.type = RopeScalingType::linear;
  linear.factor = 4.f;
  check_rope<T>(1, 17, {4, 4, 64}, 3, 10000.f, seed + 7, linear);
}

TEST(RopeCuda, MatchesReferenceF32) {
  CUDA_TEST_PREAMBLE();
  check_all<float>(1);
}

TEST(RopeCuda, MatchesReferenceBF16) {
  CUDA_TEST_PREAMBLE();
  check_all<bf16>(11);
}

TEST(RopeCuda, RejectsHeadDimAboveTheKernelMaximum) {
  CUDA_TEST_PREAMBLE();
  auto gpu = ExecContext::make_cuda(0);
  const QKVLayout l{1, 1, kRopeMaxHeadDim + 2};
  DeviceArray<float> d(size_t(l.width()));
  expect_error(
      [&] {
        ops::rope_fwd(*gpu, dev_tensor(d, {1, 1, l.width()}), l, 0, 1e4f);
      },
      strformat("rope: head dim must be <= %d on CUDA, got %d", kRopeMaxHeadDim,
                kRopeMaxHeadDim + 2));
}

}  // namespace
}  // namespace attnlab
