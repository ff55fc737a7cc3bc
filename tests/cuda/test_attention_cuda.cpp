// Attention CUDA kernels vs the CPU reference, on a packed qkv [B, T, (H + 2 Hkv) D] activation.
// fp32 uses the simple kernels (tight bound); bf16 the tensor-core kernels, checked against the
// reference run on bf16-rounded inputs: 1e-2 for o, dq, dk, dv (measured on an H200: at most
// 3e-3 for o and 5.2e-3 for the gradients, which also see P and dS rounded to bf16). Every output
// is poisoned with NaN first. bf16 runs both backward paths: deterministic (bitwise identical on
// a second run) and the default fast one (fp32 atomics for dq: dk, dv bitwise identical, dq within
// rounding of the first run).
// The host op (QKVLayout, window) on CUDA against the CPU op, with GQA and sliding windows (one of
// INT_MAX).
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>

#include "attention_test_case.h"
#include "cuda_test_util.h"
#include "kernels/attention/attention.cuh"
#include "ops/ops.h"
#include "ref/attention_ref.h"

namespace attnlab {
namespace {

using namespace test;

template <typename T>
void check_attention(const AttnCase& c, uint32_t seed, bool deterministic = true) {
  const size_t n_qkv = size_t(c.B) * c.T * (c.H + 2 * c.Hkv) * c.D;
  const size_t n_o = size_t(c.B) * c.T * c.H * c.D, n_lse = size_t(c.B) * c.H * c.T;
  const auto qkv = to_precision<T>(random_vector(n_qkv, seed, -2.f, 2.f));
  const auto dout = to_precision<T>(random_vector(n_o, seed + 1));
  // Reference on the same (rounded) inputs.
  const AttnReference ref(c, qkv, dout);
  const std::vector<float>&o_ref = ref.o, &lse_ref = ref.lse, &dqkv_ref = ref.dqkv;

  DeviceArray<T> dqkv_in(qkv), ddout(dout), o(n_o), dqkv(n_qkv);
  DeviceArray<float> lse(n_lse);
  o.poison();
  lse.poison();
  dqkv.poison();
  AttentionParams<T> p;
  set_layout(p, c, dqkv_in.ptr(), o.ptr(), ddout.ptr(), dqkv.ptr());
  p.lse = lse.ptr();
  p.deterministic = deterministic;
  p.use_wgmma = false;  // the mma.sync forward (the wgmma one: test_attention_wgmma_cuda.cpp)
  launch_attention_fwd<T>(p, nullptr);
  launch_attention_bwd<T>(p, nullptr);
  const bool f32 = std::is_same_v<T, float>;
  const auto name =
      strformat("attention %s%s B=%d T=%d H=%d Hkv=%d D=%d w=%d", type_name<T>(),
                f32 ? "" : (deterministic ? "/det" : "/fast"), c.B, c.T, c.H, c.Hkv, c.D, c.window);
  EXPECT_LT(report((name + " o").c_str(), max_rel_error(o.download(), o_ref)), f32 ? 1e-5 : 1e-2);
  EXPECT_LT(report((name + " lse").c_str(), max_rel_error(lse.download(), lse_ref)),
            f32 ? 1e-5 : 1e-3);
  // dq, dk, dv are interleaved in dqkv; compare each part separately.
  const auto got = dqkv.download();
  const int64_t row = int64_t(c.H + 2 * c.Hkv) * c.D;
  const int64_t begin[3] = {0, int64_t(c.H) * c.D, int64_t(c.H + c.Hkv) * c.D};
  const int64_t width[3] = {int64_t(c.H) * c.D, int64_t(c.Hkv) * c.D, int64_t(c.Hkv) * c.D};
  const char* part[3] = {" dq", " dk", " dv"};
  // Each part relative to its own scale, floored at 1% of the largest part: parts that vanish
  // analytically (T = 1: dS = P (dP - delta) = 0, so dq = dk = 0) are then measured against the
  // gradient's scale instead of against rounding noise.
  std::vector<float> a[3], b[3];
  double part_scale[3] = {0, 0, 0};
  for (int k = 0; k < 3; ++k) {
    for (int64_t i = 0; i < int64_t(c.B) * c.T; ++i) {
      for (int64_t j = 0; j < width[k]; ++j) {
        a[k].push_back(got[i * row + begin[k] + j]);
        b[k].push_back(dqkv_ref[i * row + begin[k] + j]);
        part_scale[k] = std::max(part_scale[k], std::fabs(double(b[k].back())));
      }
    }
  }
  const double floor = 1e-2 * std::max({part_scale[0], part_scale[1], part_scale[2]});
  for (int k = 0; k < 3; ++k) {
    double err = 0.0;
    for (size_t i = 0; i < a[k].size(); ++i) {
      const double d = std::fabs(double(a[k][i]) - b[k][i]);
      err = d == d ? std::max(err, d) : INFINITY;
    }
    err /= std::max(part_scale[k], floor);
    EXPECT_LT(report((name + part[k]).c_str(), err), f32 ? 1e-5 : 1e-2);
  }
  const auto first = dqkv.raw();
  dqkv.poison();
  launch_attention_bwd<T>(p, nullptr);
  if (deterministic) {
    EXPECT_TRUE(bitwise_equal(first, dqkv.raw())) << name << ": backward not deterministic";
    return;
  }
  // Fast path: dk and dv still bitwise identical; dq only up to the fp32 addition order (a bf16
  // rounding flip here and there, far below the 1e-2 tolerance against the reference).
  const auto again = dqkv.raw(), again_f = dqkv.download(), first_f = got;
  std::vector<T> kv1, kv2;
  std::vector<float> q1, q2;
  for (int64_t i = 0; i < int64_t(c.B) * c.T; ++i) {
    for (int64_t j = 0; j < row; ++j) {
      if (j < width[0]) {
        q1.push_back(first_f[i * row + j]);
        q2.push_back(again_f[i * row + j]);
      } else {
        kv1.push_back(first[i * row + j]);
        kv2.push_back(again[i * row + j]);
      }
    }
  }
  EXPECT_TRUE(bitwise_equal(kv1, kv2)) << name << ": dk/dv not deterministic";
  EXPECT_LT(max_rel_error(q2, q1), 1e-2) << name << ": dq differs between runs";
}

const AttnCase kCases[] = {
    {2, 1, 2, 2, 64, 0},      {1, 64, 4, 2, 64, 0},    {2, 127, 4, 1, 128, 0},
    {1, 1024, 2, 2, 64, 0},   {1, 1024, 4, 2, 128, 0}, {2, 200, 4, 4, 64, 37},
    {1, 300, 2, 1, 128, 100}, {1, 300, 4, 2, 64, 37},  {1, 257, 4, 1, 128, 100},
};

TEST(AttentionCuda, SimpleKernelsMatchReferenceF32) {
  CUDA_TEST_PREAMBLE();
  uint32_t seed = 1;
  for (const auto& c : kCases) check_attention<float>(c, seed += 10);
  check_attention<float>({1, 77, 3, 3, 40, 0}, 99);  // any D <= 128 in fp32
}

TEST(AttentionCuda, TensorCoreKernelsMatchReferenceBF16) {
  CUDA_TEST_PREAMBLE();
  uint32_t seed = 3;
  for (const auto& c : kCases) {
    seed += 10;
    check_attention<bf16>(c, seed, /*deterministic=*/true);
    check_attention<bf16>(c, seed, /*deterministic=*/false);
  }
}

// ExecContext::deterministic (train.deterministic) reaches the kernel through the host op: with
// it set, two backward passes give bitwise identical dq at a shape with many key blocks per
// query row (where the fp32-atomic dQ sums in a run-dependent order).
TEST(AttentionCuda, ContextDeterministicSelectsReproducibleBackward) {
  CUDA_TEST_PREAMBLE();
  auto ctx = ExecContext::make_cuda(0);
  ctx->deterministic = true;
  const int B = 2, T = 1024, H = 4, D = 64, C = H * D;
  DeviceArray<bf16> qkv(to_precision<bf16>(random_vector(size_t(B) * T * 3 * C, 91)));
  DeviceArray<bf16> dout(to_precision<bf16>(random_vector(size_t(B) * T * C, 92)));
  DeviceArray<bf16> out(size_t(B) * T * C), dqkv(size_t(B) * T * 3 * C);
  DeviceArray<float> lse(size_t(B) * H * T);
  auto t = [](auto& a, Shape s, DType dt) { return Tensor(a.ptr(), dt, Device::cuda, s); };
  const Tensor tq = t(qkv, Shape{B, T, 3 * C}, DType::bf16),
               to = t(out, Shape{B, T, C}, DType::bf16);
  const Tensor tl = t(lse, Shape{B, H, T}, DType::f32), td = t(dout, Shape{B, T, C}, DType::bf16);
  const Tensor tg = t(dqkv, Shape{B, T, 3 * C}, DType::bf16);
  const QKVLayout layout{H, H, D};
  ops::attention_fwd(*ctx, to, tl, tq, layout);
  ops::attention_bwd(*ctx, tg, td, tq, to, tl, layout);
  const auto first = dqkv.raw();
  for (int rep = 0; rep < 3; ++rep) {
    ops::attention_bwd(*ctx, tg, td, tq, to, tl, layout);
    EXPECT_TRUE(bitwise_equal(first, dqkv.raw())) << "rerun " << rep;
  }
}

// The host op on CUDA (what the model calls), with GQA (groups of 2 and 4) and sliding windows,
// against the CPU op on the same rounded inputs: fp32 (the simple kernels) and bf16 (the default
// kernels: wgmma on an sm_90a build and an H200, else mma.sync). Bounds as in check_attention;
// the gradient relative to its largest reference value.
template <typename T>
void check_op(int Hkv, int D, int T_len, int window, uint32_t seed) {
  const int B = 2, H = 4;
  const QKVLayout layout{H, Hkv, D};
  const int64_t W = layout.width(), C = layout.q_width();
  const Shape qs{B, T_len, W}, os{B, T_len, C}, ls{B, H, T_len};
  auto qkv = to_precision<T>(random_vector(size_t(B) * T_len * W, seed, -2.f, 2.f));
  auto dout = to_precision<T>(random_vector(size_t(B) * T_len * C, seed + 1));
  auto cpu = ExecContext::make_cpu();
  std::vector<float> o_ref(size_t(B) * T_len * C), lse_ref(size_t(B) * H * T_len),
      dqkv_ref(qkv.size());
  auto c = [](std::vector<float>& v, Shape s) {
    return Tensor(v.data(), DType::f32, Device::cpu, s);
  };
  ops::attention_fwd(*cpu, c(o_ref, os), c(lse_ref, ls), c(qkv, qs), layout, window);
  ops::attention_bwd(*cpu, c(dqkv_ref, qs), c(dout, os), c(qkv, qs), c(o_ref, os), c(lse_ref, ls),
                     layout, window);

  auto ctx = ExecContext::make_cuda(0);
  constexpr DType dt = std::is_same_v<T, bf16> ? DType::bf16 : DType::f32;
  DeviceArray<T> dqkv_in(qkv), ddout(dout), o(o_ref.size()), dqkv(qkv.size());
  DeviceArray<float> lse(lse_ref.size());
  o.poison();
  lse.poison();
  dqkv.poison();
  auto g = [](auto& a, Shape s, DType t) { return Tensor(a.ptr(), t, Device::cuda, s); };
  ops::attention_fwd(*ctx, g(o, os, dt), g(lse, ls, DType::f32), g(dqkv_in, qs, dt), layout,
                     window);
  ops::attention_bwd(*ctx, g(dqkv, qs, dt), g(ddout, os, dt), g(dqkv_in, qs, dt), g(o, os, dt),
                     g(lse, ls, DType::f32), layout, window);
  const bool f32 = std::is_same_v<T, float>;
  const auto name = strformat("attention op %s B=%d T=%d H=%d Hkv=%d D=%d w=%d", type_name<T>(), B,
                              T_len, H, Hkv, D, window);
  EXPECT_LT(report((name + " o").c_str(), max_rel_error(o.download(), o_ref)), f32 ? 1e-5 : 1e-2);
  EXPECT_LT(report((name + " lse").c_str(), max_rel_error(lse.download(), lse_ref)),
            f32 ? 1e-5 : 1e-3);
  const auto got = dqkv.download();
  double err = 0.0, scale = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(double(got[i]) - dqkv_ref[i]);
    err = d == d ? std::max(err, d) : INFINITY;
    scale = std::max(scale, std::fabs(double(dqkv_ref[i])));
  }
  EXPECT_LT(report((name + " dqkv").c_str(), err / scale), f32 ? 1e-5 : 1e-2);
}

TEST(AttentionCuda, OpGroupedQueryAndWindowMatchReference) {
  CUDA_TEST_PREAMBLE();
  uint32_t seed = 201;
  for (int Hkv : {2, 1}) {
    // INT_MAX: the kernels' 32-bit window arithmetic wrapped there (zero gradients) until the op
    // passed a window >= T as 0.
    for (int window : {0, 37, 200, INT_MAX}) {
      check_op<float>(Hkv, 64, 300, window, seed += 10);
      check_op<float>(Hkv, 40, 77, window, seed += 10);  // any D <= 128 in fp32
      check_op<bf16>(Hkv, 64, 300, window, seed += 10);
      check_op<bf16>(Hkv, 128, 257, window, seed += 10);
    }
  }
}

}  // namespace
}  // namespace attnlab
