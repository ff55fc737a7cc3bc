// FlashSFA ops (kernels/sfa/sfa_flash.cuh, ops/sfa_ops.h) on the CPU, where they run the
// overlap-form reference: forward and straight-through backward equal to the reference path
// (masked copy + dense attention, itself checked by finite differences in test_sfa.cpp) for B = 2,
// GQA, T = 1, 64, 129, with ties and all-zero head vectors; the sparse form saved by the forward is
// sfa_select's; the kernel choice of attention.sfa.kernel (auto threshold, errors); bad arguments.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "core/context.h"
#include "nn/attention_sfa.h"
#include "ops/sfa_ops.h"
#include "test_util.h"

namespace attnlab {
namespace {

using test::cpu_tensor;

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

// Random qkv with some head vectors quantised (ties) and some all zero.
std::vector<float> flash_inputs(int B, int T, const QKVLayout& l, uint32_t seed) {
  std::vector<float> v = test::random_vector(size_t(B) * T * l.width(), seed, -1.5f, 1.5f);
  for (int64_t r = 0; r < int64_t(B) * T; ++r)
    for (int hv = 0; hv < l.n_head + l.n_kv_head; ++hv) {
      float* x = v.data() + r * l.width() + int64_t(hv) * l.head_dim;
      for (int c = 0; c < l.head_dim; ++c) {
        if ((r + hv) % 5 == 0) x[c] = std::round(x[c] * 2.f);
        if ((r + hv) % 11 == 0) x[c] = 0.f;
      }
    }
  return v;
}

TEST(SfaFlash, EqualsTheReferencePathForwardAndBackward) {
  auto ctx = ExecContext::make_cpu();
  for (const auto& [T, H, Hkv, D, k] : {std::tuple{1, 4, 2, 16, 3}, std::tuple{64, 4, 2, 16, 4},
                                        std::tuple{129, 6, 2, 32, 8}, std::tuple{33, 2, 2, 8, 8}}) {
    SCOPED_TRACE(testing::Message()
                 << "T " << T << " H " << H << "/" << Hkv << " D " << D << " k " << k);
    const int B = 2;
    const QKVLayout l{H, Hkv, D};
    const Shape s{B, T, l.width()}, os{B, T, l.q_width()}, ls{B, H, T};
    const Shape qs{B, T, H, k}, ks{B, T, Hkv, k};
    std::vector<float> x = flash_inputs(B, T, l, uint32_t(T * 7 + D));
    std::vector<float> w = test::random_vector(size_t(os.numel()), uint32_t(T + 3));
    // Reference path.
    std::vector<float> sparse(x.size()), o_ref(size_t(os.numel())), lse_ref(size_t(ls.numel())),
        d_ref(x.size());
    ops::sfa_attention_fwd(*ctx, cpu_tensor(o_ref, os), cpu_tensor(lse_ref, ls),
                           cpu_tensor(sparse, s), cpu_tensor(x, s), l, k);
    ops::sfa_attention_bwd(*ctx, cpu_tensor(d_ref, s), cpu_tensor(w, os), cpu_tensor(sparse, s),
                           cpu_tensor(o_ref, os), cpu_tensor(lse_ref, ls), cpu_tensor(x, s), l, k);
    // FlashSFA.
    std::vector<int32_t> qi(size_t(qs.numel())), ki(size_t(ks.numel()));
    std::vector<float> qv(qi.size()), kv(ki.size()), o(o_ref.size()), lse(lse_ref.size()),
        d(x.size(), NAN);
    ops::sfa_flash_fwd(*ctx, cpu_tensor(o, os), cpu_tensor(lse, ls), cpu_tensor(qi, qs),
                       cpu_tensor(qv, qs), cpu_tensor(ki, ks), cpu_tensor(kv, ks), cpu_tensor(x, s),
                       l);
    ops::sfa_flash_bwd(*ctx, cpu_tensor(d, s), cpu_tensor(w, os), cpu_tensor(o, os),
                       cpu_tensor(lse, ls), cpu_tensor(qi, qs), cpu_tensor(qv, qs),
                       cpu_tensor(ki, ks), cpu_tensor(kv, ks), cpu_tensor(x, s), l);
    EXPECT_LT(max_abs_diff(o, o_ref), 2e-6);
    EXPECT_LT(max_abs_diff(lse, lse_ref), 2e-6);
    EXPECT_LT(max_abs_diff(d, d_ref), 1e-5);  // NaN (an unwritten element) fails too
    // The saved state is sfa_select's sparse form.
    std::vector<int32_t> qi2(qi.size()), ki2(ki.size());
    std::vector<float> qv2(qv.size()), kv2(kv.size());
    ops::sfa_select(*ctx, cpu_tensor(x, s), l, k, cpu_tensor(qi2, qs), cpu_tensor(qv2, qs),
                    cpu_tensor(ki2, ks), cpu_tensor(kv2, ks));
    EXPECT_EQ(qi, qi2);
    EXPECT_EQ(ki, ki2);
    EXPECT_EQ(qv, qv2);
    EXPECT_EQ(kv, kv2);
    // Off the selection dq, dk are zero; some selected gradients are not.
    double nonzero = 0.0;
    for (float g : d) nonzero += std::fabs(g);
    EXPECT_GT(nonzero, 0.0);
  }
}

TEST(SfaFlash, KernelChoice) {
  auto cpu = ExecContext::make_cpu();
  using K = SfaOptions::Kernel;
  EXPECT_FALSE(sfa_use_flash(K::masked_dense, *cpu, DType::f32, 64));
  EXPECT_TRUE(sfa_use_flash(K::flash, *cpu, DType::f32, 32));
  // auto: the masked-dense path at every length (the H200 measurement, docs/sfa.md).
  EXPECT_FALSE(sfa_use_flash(K::auto_select, *cpu, DType::f32, 64));
}

TEST(SfaFlash, BadArgumentsNameTheProblem) {
  auto ctx = ExecContext::make_cpu();
  const int B = 1, T = 4, k = 2;
  const QKVLayout l{2, 1, 8};
  const Shape s{B, T, l.width()}, os{B, T, l.q_width()}, ls{B, 2, T};
  std::vector<float> x = test::random_vector(size_t(s.numel()), 5), o(size_t(os.numel())),
                     lse(size_t(ls.numel())), qv(size_t(B * T * 2 * k)), kv(size_t(B * T * k));
  std::vector<int32_t> qi(qv.size()), ki(kv.size());
  const Shape qs{B, T, 2, k}, bad_ks{B, T, 2, k};
  try {
    ops::sfa_flash_fwd(*ctx, cpu_tensor(o, os), cpu_tensor(lse, ls), cpu_tensor(qi, qs),
                       cpu_tensor(qv, qs), cpu_tensor(qi, bad_ks), cpu_tensor(kv, {B, T, 1, k}),
                       cpu_tensor(x, s), l);
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("k_idx"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace attnlab
