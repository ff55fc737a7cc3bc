// Attention at T = 1M tokens (batch 1, 12 heads x 64, bf16), the length the Focus benchmarks claim:
// qkv holds 1M x 2304 = 2.4e9 elements, so the rows past t = 932,068 sit at offsets a 32-bit index
// would wrap. Dense, Focus soft (additive gate) and Focus hard (top_k 1) forwards on the GPU; rows
// on both sides of that boundary against a CPU computation in double on the same bf16 inputs.
// Every other test stays below 2^31 elements; the 1M benchmarks check no values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "cuda_test_util.h"
#include "ops/focus_ops.h"
#include "ops/ops.h"

namespace attnlab {
namespace {

constexpr int64_t kT = int64_t(1) << 20;
constexpr int kH = 12, kD = 64, kK = 8, kWindow = 128;
constexpr int64_t kW = 3 * kH * kD;

// A value in [-1, 1) from its index (a fast hash: 2.4e9 of them).
float hashed(uint64_t i) {
  i = (i ^ (i >> 31)) * 0x9E3779B97F4A7C15ull;
  i ^= i >> 29;
  return float((i >> 40) & 0xFFFF) / 32768.f - 1.f;
}

// The attention of query row t, head h, over keys j <= t where attend(j), with the logit's extra
// term bias(j) (log(a + eps) for Focus's soft gate): out[kD] and lse, in double.
template <typename Attend, typename Bias>
void reference_row(const std::vector<bf16>& qkv, int64_t t, int h, Attend attend, Bias bias,
                   double* out, double* lse) {
  const bf16* q = qkv.data() + t * kW + h * kD;
  const double scale = 1.0 / std::sqrt(double(kD));
  std::vector<double> s(size_t(t) + 1, -INFINITY);
  double mx = -INFINITY;
  for (int64_t j = 0; j <= t; ++j) {
    if (!attend(j)) continue;
    const bf16* k = qkv.data() + j * kW + (kH + h) * kD;
    double dot = 0.0;
    for (int d = 0; d < kD; ++d) dot += double(__bfloat162float(q[d])) * __bfloat162float(k[d]);
    s[size_t(j)] = dot * scale + bias(j);
    mx = std::max(mx, s[size_t(j)]);
  }
  double sum = 0.0;
  for (int d = 0; d < kD; ++d) out[d] = 0.0;
  for (int64_t j = 0; j <= t; ++j) {
    if (s[size_t(j)] == -INFINITY) continue;
    const double p = std::exp(s[size_t(j)] - mx);
    sum += p;
    const bf16* v = qkv.data() + j * kW + (2 * kH + h) * kD;
    for (int d = 0; d < kD; ++d) out[d] += p * __bfloat162float(v[d]);
  }
  for (int d = 0; d < kD; ++d) out[d] /= sum;
  *lse = mx + std::log(sum);
}

}  // namespace

TEST(Attention1MCuda, RowsPastTwoToThe31MatchTheCpu) {
  CUDA_TEST_PREAMBLE();
  auto ctx = ExecContext::make_cuda(0);
  const QKVLayout layout{kH, kH, kD};
  std::vector<bf16> qkv(size_t(kT * kW));
#pragma omp parallel for
  for (int64_t i = 0; i < kT * kW; ++i) qkv[size_t(i)] = __float2bfloat16(hashed(uint64_t(i)));
  // g: rows of positive values summing to 1; the hard groups their argmax (top_k 1).
  std::vector<float> g(size_t(kT * kK));
  std::vector<int32_t> groups(static_cast<size_t>(kT));
  for (int64_t t = 0; t < kT; ++t) {
    float sum = 0.f;
    for (int k = 0; k < kK; ++k)
      sum += g[size_t(t * kK + k)] = hashed(uint64_t(t * kK + k) + (1ull << 40)) + 1.001f;
    int best = 0;
    for (int k = 0; k < kK; ++k) {
      g[size_t(t * kK + k)] /= sum;
      if (g[size_t(t * kK + k)] > g[size_t(t * kK + best)]) best = k;
    }
    groups[size_t(t)] = best;
  }
  Buffer d_qkv(Device::cuda, qkv.size() * sizeof(bf16)),
      d_out(Device::cuda, size_t(kT) * kH * kD * 2);
  Buffer d_lse(Device::cuda, size_t(kT) * kH * 4), d_g(Device::cuda, g.size() * 4);
  Buffer d_groups(Device::cuda, groups.size() * 4);
  CUDA_CHECK(cudaMemcpy(d_qkv.data(), qkv.data(), d_qkv.bytes(), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_g.data(), g.data(), d_g.bytes(), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_groups.data(), groups.data(), d_groups.bytes(), cudaMemcpyHostToDevice));
  const Tensor tq = d_qkv.as(DType::bf16, Shape{1, kT, kW});
  const Tensor to = d_out.as(DType::bf16, Shape{1, kT, kH * kD});
  const Tensor tl = d_lse.as(DType::f32, Shape{1, kH, kT});
  const Tensor tg = d_g.as(DType::f32, Shape{1, kT, kK});
  const Tensor tgr = d_groups.as(DType::i32, Shape{1, kT, 1});

  const std::vector<int64_t> rows = {1000, 932000, 932100, 1000000, kT - 1};
  auto affinity = [&](int64_t i, int64_t j) {
    double a = 0.0;
    for (int k = 0; k < kK; ++k) a += double(g[size_t(i * kK + k)]) * g[size_t(j * kK + k)];
    return a;
  };
  for (const char* variant : {"dense", "focus soft", "focus hard"}) {
    SCOPED_TRACE(variant);
    const std::string v = variant;
    FocusGateParams gate;
    gate.local_window = kWindow;
    gate.kind = v == "focus hard" ? FocusGateKind::hard : FocusGateKind::additive;
    if (v == "dense")
      ops::attention_fwd(*ctx, to, tl, tq, layout);
    else
      ops::focus_attention_fwd(*ctx, to, tl, tq, layout, tg, tgr, gate);
    CUDA_CHECK(cudaDeviceSynchronize());
    for (int64_t t : rows) {
      std::vector<bf16> got(size_t(kH) * kD);
      CUDA_CHECK(cudaMemcpy(got.data(), static_cast<const bf16*>(d_out.data()) + t * kH * kD,
                            got.size() * sizeof(bf16), cudaMemcpyDeviceToHost));
      std::vector<float> got_lse(kH);
      for (int h = 0; h < kH; ++h)
        CUDA_CHECK(cudaMemcpy(&got_lse[size_t(h)],
                              static_cast<const float*>(d_lse.data()) + int64_t(h) * kT + t,
                              sizeof(float), cudaMemcpyDeviceToHost));
      double err = 0.0, scale = 0.0, lse_err = 0.0;
#pragma omp parallel for reduction(max : err, scale, lse_err)
      for (int h = 0; h < kH; ++h) {
        double out[kD], lse = 0.0;
        auto attend = [&](int64_t j) {
          return v != "focus hard" || t - j <= kWindow || groups[size_t(j)] == groups[size_t(t)];
        };
        auto bias = [&](int64_t j) {
          return v == "focus soft" && t - j > kWindow ? std::log(affinity(t, j) + gate.eps) : 0.0;
        };
        reference_row(qkv, t, h, attend, bias, out, &lse);
        for (int d = 0; d < kD; ++d) {
          err =
              std::max(err, std::fabs(double(__bfloat162float(got[size_t(h * kD + d)])) - out[d]));
          scale = std::max(scale, std::fabs(out[d]));
        }
        lse_err = std::max(lse_err, std::fabs(double(got_lse[size_t(h)]) - lse) / std::fabs(lse));
      }
      // bf16 output and P (the tests' 1e-2 of the largest value); lse in fp32 (Focus's affinity
      // in fp16 operands moves it by up to ~1e-4 relative).
      EXPECT_LT(
          test::report(strformat("%s row %lld out", variant, (long long)t).c_str(), err / scale),
          1e-2);
      EXPECT_LT(lse_err, 1e-3) << "row " << t;
    }
  }
}

}  // namespace attnlab
