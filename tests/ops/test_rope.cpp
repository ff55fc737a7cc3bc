// RoPE CPU reference: a hand-computed case, the formula on a GQA layout (v untouched), position
// offsets, the inverse and the adjoint (the backward), gradients vs finite differences; the host
// op's argument checks.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/ops.h"
#include "ref/rope_ref.h"
#include "test_util.h"

namespace attnlab {
namespace {

using test::cpu_tensor;
using test::expect_error;
using test::max_rel_error;
using test::random_vector;

struct RopeCase {
  int B, T;
  QKVLayout layout;
  std::vector<float> qkv;

  RopeCase(int b, int t, int n_head, int n_kv_head, int head_dim, uint32_t seed)
      : B(b), T(t), layout{n_head, n_kv_head, head_dim} {
    qkv = random_vector(size_t(int64_t(b) * t * layout.width()), seed, -2.f, 2.f);
  }
  Tensor tensor() { return cpu_tensor(qkv, {B, T, layout.width()}); }
  RopeParams<float> params(std::vector<float>& data, int pos, float theta = 10000.f) const {
    RopeParams<float> p;
    p.qkv = data.data();
    p.tokens = int64_t(B) * T;
    p.seq_len = T;
    p.width = layout.width();
    p.heads = layout.n_head + layout.n_kv_head;
    p.head_dim = layout.head_dim;
    p.pos = pos;
    p.theta = theta;
    return p;
  }
};

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

// D = 4, theta = 10000, one token at position 1: angles 1 and 1/100 (cos and sin in double).
TEST(RopeRef, HandComputedHeadDim4) {
  std::vector<float> qkv = {1, 2, 3, 4, -1, 0.5f, 2, -3, 9, 8, 7, 6};  // q | k | v
  const QKVLayout layout{1, 1, 4};
  auto ctx = ExecContext::make_cpu();
  ops::rope_fwd(*ctx, cpu_tensor(qkv, {1, 1, 12}), layout, 1, 10000.f);
  const std::vector<double> expect = {-1.98411065, 1.95990067, 2.4623779,   4.01979967,
                                      -2.22324428, 0.5299745,  0.239133627, -2.99485008,
                                      9,           8,          7,           6};
  for (size_t i = 0; i < qkv.size(); ++i) EXPECT_NEAR(qkv[i], expect[i], 2e-6) << i;
}

// The contract's formula written out per head on a GQA layout (4 q heads, 2 kv heads), with the
// fp32 inv_freq and angle of transformers; v bitwise untouched.
TEST(RopeRef, MatchesFormulaGqaAndLeavesVUntouched) {
  RopeCase c(2, 5, 4, 2, 8, 1);
  const int pos = 3, D = 8, W = int(c.layout.width());
  const float theta = 500000.f;
  const auto x = c.qkv;
  rope_fwd_ref(c.params(c.qkv, pos, theta));
  std::vector<double> expect(x.begin(), x.end());
  for (int b = 0; b < c.B; ++b)
    for (int t = 0; t < c.T; ++t)
      for (int h = 0; h < 6; ++h)  // q heads 0..3, k heads 4..5 (contiguous from column 0)
        for (int i = 0; i < D / 2; ++i) {
          const float inv_freq = 1.0f / powf(theta, float(2 * i) / float(D));
          const float angle = float(pos + t) * inv_freq;
          const double cs = cosf(angle), sn = sinf(angle);
          const int64_t at = (int64_t(b) * c.T + t) * W + h * D + i;
          expect[at] = x[at] * cs - x[at + D / 2] * sn;
          expect[at + D / 2] = x[at + D / 2] * cs + x[at] * sn;
        }
  EXPECT_LT(max_rel_error(c.qkv, expect), 1e-6);
  for (int64_t r = 0; r < int64_t(c.B) * c.T; ++r)
    for (int64_t j = c.layout.v_offset(); j < W; ++j) ASSERT_EQ(c.qkv[r * W + j], x[r * W + j]);
  // And the q / k parts did move (pos + t > 0 everywhere).
  EXPECT_GT(max_rel_error(c.qkv, x), 1e-2);
}

// RoPE at pos p on T tokens is positions p .. p+T-1 of RoPE at pos 0 on p+T tokens (bitwise:
// both compute float(p + t) * inv_freq).
TEST(RopeRef, PositionOffsetMatchesLongerSequence) {
  for (int p : {1, 7, 100000}) {
    const int T = 5, L = p + T;
    RopeCase longer(1, L, 2, 1, 6, 2);
    RopeCase shifted(1, T, 2, 1, 6, 3);
    const int64_t W = longer.layout.width();
    std::copy(longer.qkv.begin() + int64_t(p) * W, longer.qkv.end(), shifted.qkv.begin());
    rope_fwd_ref(longer.params(longer.qkv, 0));
    rope_fwd_ref(shifted.params(shifted.qkv, p));
    const std::vector<float> tail(longer.qkv.begin() + int64_t(p) * W, longer.qkv.end());
    EXPECT_EQ(shifted.qkv, tail) << "pos " << p;
  }
}

// The backward is the inverse rotation: fwd then bwd gives the input back, and each rotated head
// vector keeps its norm.
TEST(RopeRef, BackwardInvertsForwardAndNormsArePreserved) {
  for (int D : {2, 4, 64, 128}) {
    RopeCase c(3, 7, 4, 1, D, uint32_t(D));
    const auto x = c.qkv;
    rope_fwd_ref(c.params(c.qkv, 11));
    const int W = int(c.layout.width());
    for (int64_t r = 0; r < 21; ++r)
      for (int h = 0; h < 5; ++h) {
        double n0 = 0, n1 = 0;
        for (int j = 0; j < D; ++j) {
          n0 += double(x[r * W + h * D + j]) * x[r * W + h * D + j];
          n1 += double(c.qkv[r * W + h * D + j]) * c.qkv[r * W + h * D + j];
        }
        EXPECT_NEAR(n1, n0, 1e-6 * n0) << "D " << D << " row " << r << " head " << h;
      }
    rope_bwd_ref(c.params(c.qkv, 11));
    EXPECT_LT(max_rel_error(c.qkv, x), 1e-6) << "D " << D;
  }
}

// rope_bwd is the adjoint (transpose) of rope_fwd: <rope(x), y> == <x, rope_bwd(y)>.
TEST(RopeRef, BackwardIsAdjoint) {
  for (int pos : {0, 5, 4097}) {
    RopeCase c(2, 9, 6, 2, 16, 4);
    const auto x = c.qkv;
    auto y = random_vector(c.qkv.size(), 5);
    rope_fwd_ref(c.params(c.qkv, pos));
    const double lhs = dot(c.qkv, y);
    auto ry = y;
    rope_bwd_ref(c.params(ry, pos));
    const double rhs = dot(x, ry);
    EXPECT_NEAR(lhs, rhs, 1e-5 * std::fabs(lhs)) << "pos " << pos;
    EXPECT_GT(max_rel_error(ry, y), 1e-2);  // the backward did rotate
  }
}

// The gradient of sum w * rope(x) w.r.t. x, by central differences, is rope_bwd(w).
TEST(RopeRef, BackwardMatchesFiniteDifferences) {
  RopeCase c(1, 3, 2, 1, 6, 6);
  const auto w = random_vector(c.qkv.size(), 7);
  std::vector<float> out;
  auto loss = [&] {
    out = c.qkv;
    rope_fwd_ref(c.params(out, 2));
    return test::weighted_sum(w, out);
  };
  const auto fd = test::finite_difference(c.qkv.data(), c.qkv.size(), loss);
  auto grad = w;
  rope_bwd_ref(c.params(grad, 2));
  EXPECT_LT(max_rel_error(grad, fd), 1e-4);
}

// LLaMA 3.1's scaling (factor 8, low 1, high 4, L 8192) at D 128, theta 500000, against the
// formula written out in double: high frequencies (wavelength < L / 4) unchanged bitwise, low
// ones (> L) divided by the factor bitwise, the band between interpolated (within fp32 rounding
// of the double formula) and strictly between the two; all three bands occur at this shape.
TEST(RopeScalingRef, Llama3BandsMatchTheFormula) {
  RopeScaling s;
  s.type = RopeScalingType::llama3;
  s.factor = 8.f;
  s.low_freq_factor = 1.f;
  s.high_freq_factor = 4.f;
  s.original_context = 8192;
  const int D = 128;
  const float theta = 500000.f;
  int high = 0, low = 0, mid = 0;
  for (int i = 0; i < D / 2; ++i) {
    const float f = rope_inv_freq(i, D, theta);
    const float g = rope_inv_freq(i, D, theta, s);
    const double wavelen = 2 * M_PI / f;
    if (wavelen < 8192.0 / 4) {
      EXPECT_EQ(g, f) << i;
      ++high;
    } else if (wavelen > 8192.0) {
      EXPECT_EQ(g, f / 8.f) << i;
      ++low;
    } else {
      const double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
      const double expect = (1 - smooth) * f / 8.0 + smooth * f;
      EXPECT_NEAR(g, expect, 4e-7 * expect) << i;
      EXPECT_GT(g, f / 8.f) << i;
      EXPECT_LT(g, f) << i;
      ++mid;
    }
  }
  EXPECT_GT(high, 0);
  EXPECT_GT(low, 0);
  EXPECT_GT(mid, 0);
  // No scaling and linear scaling.
  EXPECT_EQ(rope_inv_freq(5, D, theta, RopeScaling{}), rope_inv_freq(5, D, theta));
  RopeScaling lin;
  lin.type = RopeScalingType::linear;
  lin.factor = 2.5f;
  EXPECT_EQ(rope_inv_freq(5, D, theta, lin), rope_inv_freq(5, D, theta) / 2.5f);
}

// Linear scaling by 4 is position interpolation: a token at position 4 p rotates as an unscaled
// token at position p, bitwise (inv_freq / 4 is exact, so float(4 p) * (f / 4) == float(p) * f).
TEST(RopeScalingRef, LinearScalingInterpolatesPositions) {
  auto ctx = ExecContext::make_cpu();
  RopeCase c(1, 1, 4, 2, 16, 21);
  auto plain = c.qkv;
  RopeScaling lin;
  lin.type = RopeScalingType::linear;
  lin.factor = 4.f;
  ops::rope_fwd(*ctx, c.tensor(), c.layout, 4 * 37, 10000.f, lin);
  ops::rope_fwd(*ctx, cpu_tensor(plain, {1, 1, c.layout.width()}), c.layout, 37, 10000.f);
  EXPECT_EQ(c.qkv, plain);
  // And the scaling reaches the reference through the op: unscaled at 4 p differs.
  auto unscaled = c.qkv;
  ops::rope_bwd(*ctx, c.tensor(), c.layout, 4 * 37, 10000.f, lin);  // back to the input
  ops::rope_fwd(*ctx, c.tensor(), c.layout, 4 * 37, 10000.f);
  EXPECT_GT(max_rel_error(c.qkv, unscaled), 1e-2);
}

TEST(RopeOp, RunsOnCpuAndChecksArguments) {
  auto ctx = ExecContext::make_cpu();
  RopeCase c(2, 3, 4, 2, 8, 8);  // width (4 + 2 x 2) x 8 = 64
  auto ref = c.qkv;
  ops::rope_fwd(*ctx, c.tensor(), c.layout, 4, 10000.f);
  rope_fwd_ref(c.params(ref, 4));
  EXPECT_EQ(c.qkv, ref);
  ops::rope_bwd(*ctx, c.tensor(), c.layout, 4, 10000.f);
  rope_bwd_ref(c.params(ref, 4));
  EXPECT_EQ(c.qkv, ref);

  expect_error(
      [&] {
        ops::rope_fwd(*ctx, c.tensor(), QKVLayout{4, 2, 7}, 0, 1e4f);
      },
      "rope: head dim must be even (dims i and i + D/2 rotate together), got 7");
  expect_error(
      [&] {
        ops::rope_fwd(*ctx, c.tensor(), QKVLayout{4, 1, 8}, 0, 1e4f);
      },
      "rope: qkv must be [B, T, 48] ((n_head 4 + 2 x n_kv_head 1) x head_dim 8), got f32[2, 3, "
      "64] on cpu");
  expect_error(
      [&] {
        ops::rope_bwd(*ctx, cpu_tensor(c.qkv, {6, 64}), c.layout, 0, 1e4f);
      },
      "rope: dqkv must have at least 3 dimension(s), got f32[6, 64] on cpu");
  expect_error(
      [&] {
        ops::rope_bwd(*ctx, cpu_tensor(c.qkv, {2, 3, 1, 64}), c.layout, 0, 1e4f);
      },
      "rope: dqkv must be [B, T, 64]");
  expect_error(
      [&] {
        ops::rope_fwd(*ctx, c.tensor(), QKVLayout{4, 3, 8}, 0, 1e4f);
      },
      "rope: n_kv_head (3) must divide n_head (4)");
  expect_error([&] { ops::rope_fwd(*ctx, c.tensor(), c.layout, -1, 1e4f); },
               "rope: pos must be >= 0, got -1");
  expect_error([&] { ops::rope_fwd(*ctx, c.tensor(), c.layout, 0, 0.f); },
               "rope: theta must be finite and > 0, got 0");
  expect_error([&] { ops::rope_fwd(*ctx, Tensor(), c.layout, 0, 1e4f); }, "rope: qkv is required");
  RopeScaling bad;
  bad.type = RopeScalingType::linear;
  bad.factor = 0.f;
  expect_error([&] { ops::rope_fwd(*ctx, c.tensor(), c.layout, 0, 1e4f, bad); },
               "rope: the scaling factor must be finite and > 0, got 0");
  bad.type = RopeScalingType::llama3;
  bad.factor = 8.f;
  bad.high_freq_factor = 1.f;
  expect_error([&] { ops::rope_bwd(*ctx, c.tensor(), c.layout, 0, 1e4f, bad); },
               "rope: llama3 scaling needs original_context > 0 and 0 < low_freq_factor < "
               "high_freq_factor, got 8192, 1, 1");
  EXPECT_EQ(c.qkv, ref);  // rejected calls leave qkv alone
}

}  // namespace
}  // namespace attnlab
