#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>

#include "ops/ops.h"
#include "ref/attention_ref.h"
#include "test_util.h"

namespace attnlab {
namespace {

using test::cpu_tensor;
using test::max_rel_error;
using test::random_vector;

// q, k, v interleaved per token row as [q: H*D | k: Hkv*D | v: Hkv*D | 2 pad], with a gap between
// batches; o likewise padded. Odd strides check that the reference honours them.
struct AttentionCase {
  int B, T, H, Hkv, D;
  bool causal;
  int window;
  int64_t row, batch, orow, obatch;
  std::vector<float> qkv, o, lse;

  AttentionCase(int b, int t, int h, int hkv, int d, bool c, int w, uint32_t seed)
      : B(b), T(t), H(h), Hkv(hkv), D(d), causal(c), window(w) {
    row = int64_t(H + 2 * Hkv) * D + 2;
    batch = T * row + 5;
    orow = int64_t(H) * D + 1;
    obatch = T * orow + 3;
    qkv = random_vector(size_t(B * batch), seed, -1.5f, 1.5f);
    o.assign(size_t(B * obatch), 0.f);
    lse.assign(size_t(B) * H * T, 0.f);
  }
  int64_t q_at(int b, int t, int h, int d) const { return b * batch + t * row + h * D + d; }
  int64_t k_at(int b, int t, int h, int d) const { return q_at(b, t, H + h, d); }
  int64_t v_at(int b, int t, int h, int d) const { return q_at(b, t, H + Hkv + h, d); }
  int64_t o_at(int b, int t, int h, int d) const { return b * obatch + t * orow + h * D + d; }
  bool visible(int t, int s) const {
    if (causal && s > t) return false;
    return window == 0 || s > t - window;
  }

  AttentionParams<float> params() {
    AttentionParams<float> p;
    p.q = qkv.data();
    p.k = qkv.data() + int64_t(H) * D;
    p.v = qkv.data() + int64_t(H + Hkv) * D;
    p.o = o.data();
    p.lse = lse.data();
    p.qkv_batch_stride = batch;
    p.qkv_row_stride = row;
    p.o_batch_stride = obatch;
    p.o_row_stride = orow;
    p.B = B;
    p.seq_len = T;
    p.n_head = H;
    p.n_kv_head = Hkv;
    p.D = D;
    p.scale = float(1.0 / std::sqrt(double(D)));
    p.mask.causal = causal;
    p.mask.window = window;
    return p;
  }
  // params() with dout and dq, dk, dv pointing into dqkv, which has the layout of qkv.
  AttentionParams<float> bwd_params(const float* dout, float* dqkv) {
    AttentionParams<float> p = params();
    p.dout = dout;
    p.dq = dqkv;
    p.dk = dqkv + int64_t(H) * D;
    p.dv = dqkv + int64_t(H + Hkv) * D;
    return p;
  }

  // softmax(scale q k^T + mask) v with the full score matrix, in double; also the lse.
  void naive(std::vector<double>* out, std::vector<double>* out_lse) const {
    out->assign(o.size(), 0.0);
    out_lse->assign(lse.size(), 0.0);
    const double scale = 1.0 / std::sqrt(double(D));
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h) {
        const int hk = h / (H / Hkv);
        for (int t = 0; t < T; ++t) {
          std::vector<double> s(T, -std::numeric_limits<double>::infinity());
          double mx = -std::numeric_limits<double>::infinity();
          for (int j = 0; j < T; ++j) {
            if (!visible(t, j)) continue;
            double dot = 0;
            for (int d = 0; d < D; ++d)
              dot += double(qkv[q_at(b, t, h, d)]) * qkv[k_at(b, j, hk, d)];
            s[j] = dot * scale;
            mx = std::max(mx, s[j]);
          }
          double sum = 0;
          for (int j = 0; j < T; ++j) sum += std::exp(s[j] - mx);
          (*out_lse)[(b * H + h) * T + t] = mx + std::log(sum);
          for (int j = 0; j < T; ++j) {
            const double pj = std::exp(s[j] - mx) / sum;
            for (int d = 0; d < D; ++d) (*out)[o_at(b, t, h, d)] += pj * qkv[v_at(b, j, hk, d)];
          }
        }
      }
  }
};

TEST(AttentionRef, ForwardMatchesNaiveSoftmax) {
  struct Shape {
    int B, T, H, Hkv, D;
    bool causal;
    int window;
  };
  // GQA (groups of 2 and 4) and windows smaller than, equal to and larger than T.
  const Shape shapes[] = {
      {2, 13, 4, 4, 8, true, 0}, {1, 1, 2, 2, 4, true, 0},   {2, 13, 4, 2, 8, true, 0},
      {2, 13, 4, 1, 8, true, 4}, {1, 9, 2, 2, 16, false, 0}, {1, 7, 3, 3, 5, true, 1},
      {2, 11, 4, 2, 6, true, 3}, {1, 9, 4, 1, 4, true, 9},   {1, 8, 4, 2, 4, true, 20}};
  for (const auto& s : shapes) {
    AttentionCase c(s.B, s.T, s.H, s.Hkv, s.D, s.causal, s.window, 5);
    attention_fwd_ref(c.params());
    std::vector<double> o, lse;
    c.naive(&o, &lse);
    EXPECT_LT(max_rel_error(c.o, o), 1e-6) << s.T << " " << s.Hkv << " " << s.window;
    EXPECT_LT(max_rel_error(c.lse, lse), 1e-6) << s.T << " " << s.Hkv << " " << s.window;
  }
}

// The analytic backward (recomputed from the saved lse) against central differences of
// sum(dout * o) w.r.t. every element of the qkv buffer (padding included: its gradient is 0).
void check_backward(AttentionCase c, uint32_t seed) {
  const auto dout = random_vector(c.o.size(), seed);
  auto loss = [&] {
    attention_fwd_ref(c.params());
    return test::weighted_sum(dout, c.o);
  };
  const auto fd = test::finite_difference(c.qkv.data(), c.qkv.size(), loss);
  attention_fwd_ref(c.params());
  std::vector<float> dqkv(c.qkv.size(), 0.f);
  const AttentionParams<float> p = c.bwd_params(dout.data(), dqkv.data());
  attention_bwd_ref(p);
  EXPECT_LT(max_rel_error(dqkv, fd), 1e-4)
      << "T=" << c.T << " H=" << c.H << " Hkv=" << c.Hkv << " window=" << c.window;
  // dq, dk, dv are written (=): a second call over stale values gives the same bits.
  const auto first = dqkv;
  for (int b = 0; b < c.B; ++b)
    for (int t = 0; t < c.T; ++t)
      for (int d = 0; d < c.D; ++d) dqkv[c.k_at(b, t, 0, d)] += 3.f;
  attention_bwd_ref(p);
  EXPECT_EQ(dqkv, first);
}

TEST(AttentionRef, BackwardMatchesFiniteDifferences) {
  check_backward(AttentionCase(2, 5, 2, 2, 4, true, 0, 11), 12);
  check_backward(AttentionCase(1, 6, 4, 2, 3, true, 0, 13), 14);   // GQA
  check_backward(AttentionCase(1, 6, 2, 1, 4, true, 2, 15), 16);   // GQA + window
  check_backward(AttentionCase(1, 4, 2, 2, 4, false, 0, 17), 18);  // bidirectional
  check_backward(AttentionCase(2, 1, 2, 2, 4, true, 0, 19), 20);   // T = 1
  check_backward(AttentionCase(1, 7, 4, 1, 3, true, 3, 25), 26);   // group of 4 + window
  check_backward(AttentionCase(1, 5, 4, 2, 4, true, 1, 27), 28);   // window 1: each row sees itself
}

TEST(AttentionRef, DeterministicAcrossThreadCounts) {
  AttentionCase c(2, 64, 4, 2, 16, true, 0, 21);
  const auto dout = random_vector(c.o.size(), 22);
  auto run = [&](int threads) {
    const test::ScopedOmpThreads limit(threads);
    std::vector<float> dqkv(c.qkv.size(), 0.f);
    attention_fwd_ref(c.params());
    attention_bwd_ref(c.bwd_params(dout.data(), dqkv.data()));
    dqkv.insert(dqkv.end(), c.o.begin(), c.o.end());
    dqkv.insert(dqkv.end(), c.lse.begin(), c.lse.end());
    return dqkv;
  };
  const auto one = run(1);
  EXPECT_EQ(one, run(2));
  EXPECT_EQ(one, run(3));
}

TEST(AttentionRef, RejectsUnsupportedParams) {
  AttentionCase c(1, 4, 3, 2, 4, true, 0, 23);
  EXPECT_EQ(test::thrown_message([&] { attention_fwd_ref(c.params()); }),
            "attention: n_kv_head (2) must divide n_head (3)");
  AttentionCase w(1, 4, 2, 2, 4, false, 2, 24);
  EXPECT_EQ(test::thrown_message([&] { attention_fwd_ref(w.params()); }),
            "attention: a sliding window requires causal attention");
  AttentionCase n(1, 4, 2, 2, 4, true, -1, 24);
  EXPECT_EQ(test::thrown_message([&] { attention_fwd_ref(n.params()); }),
            "attention: window must be >= 0, got -1");
}

// The op on a packed [B, T, (H + 2 Hkv) D] qkv (QKVLayout) equals the reference called with the
// packed strides, for multi-head, GQA and a sliding window.
void check_op_layout(int H, int Hkv, int window, uint32_t seed) {
  auto ctx = ExecContext::make_cpu();
  const int B = 2, T = 7, D = 4;
  const QKVLayout layout{H, Hkv, D};
  const int W = int(layout.width()), C = H * D;
  auto qkv = random_vector(size_t(B * T * W), seed);
  std::vector<float> out(size_t(B * T * C)), lse(size_t(B * H * T)), dqkv(qkv.size());
  const auto dout = random_vector(out.size(), seed + 1);
  auto dout_v = dout;
  ops::attention_fwd(*ctx, cpu_tensor(out, {B, T, C}), cpu_tensor(lse, {B, H, T}),
                     cpu_tensor(qkv, {B, T, W}), layout, window);
  ops::attention_bwd(*ctx, cpu_tensor(dqkv, {B, T, W}), cpu_tensor(dout_v, {B, T, C}),
                     cpu_tensor(qkv, {B, T, W}), cpu_tensor(out, {B, T, C}),
                     cpu_tensor(lse, {B, H, T}), layout, window);

  std::vector<float> out_ref(out.size()), lse_ref(lse.size()), dqkv_ref(qkv.size());
  AttentionParams<float> p;
  p.q = qkv.data();
  p.k = qkv.data() + C;
  p.v = qkv.data() + C + Hkv * D;
  p.o = out_ref.data();
  p.lse = lse_ref.data();
  p.qkv_batch_stride = T * W;
  p.qkv_row_stride = W;
  p.o_batch_stride = T * C;
  p.o_row_stride = C;
  p.B = B;
  p.seq_len = T;
  p.n_head = H;
  p.n_kv_head = Hkv;
  p.D = D;
  p.scale = 0.5f;
  p.mask.window = window;
  attention_fwd_ref(p);
  p.dout = dout.data();
  p.dq = dqkv_ref.data();
  p.dk = dqkv_ref.data() + C;
  p.dv = dqkv_ref.data() + C + Hkv * D;
  attention_bwd_ref(p);
  EXPECT_EQ(out, out_ref) << H << " " << Hkv << " " << window;
  EXPECT_EQ(lse, lse_ref) << H << " " << Hkv << " " << window;
  EXPECT_EQ(dqkv, dqkv_ref) << H << " " << Hkv << " " << window;
}

TEST(AttentionOp, PackedLayoutMatchesReference) {
  check_op_layout(3, 3, 0, 31);
  check_op_layout(4, 2, 0, 33);
  check_op_layout(4, 1, 3, 35);
  check_op_layout(4, 2, 9, 37);  // window longer than T: full causal
}

// The window reaches the op: window >= T gives full causal attention bit for bit, a shorter one
// changes every row past the window (rows t < window see all their keys and are unchanged).
TEST(AttentionOp, WindowReachesTheKernel) {
  auto ctx = ExecContext::make_cpu();
  const int B = 1, T = 9, H = 2, D = 4;
  const QKVLayout layout{H, H, D};
  auto qkv = random_vector(size_t(B * T * layout.width()), 41);
  auto run = [&](int window) {
    std::vector<float> out(size_t(B * T * H * D)), lse(size_t(B * H * T));
    ops::attention_fwd(*ctx, cpu_tensor(out, {B, T, H * D}), cpu_tensor(lse, {B, H, T}),
                       cpu_tensor(qkv, {B, T, 3 * H * D}), layout, window);
    return out;
  };
  const auto full = run(0);
  EXPECT_EQ(run(T), full);
  EXPECT_EQ(run(INT_MAX), full);
  // The backward too: a window near INT_MAX wrapped in the 32-bit window arithmetic and gave
  // zero gradients (the op now passes any window >= T as 0).
  auto grads = [&](int window) {
    std::vector<float> out(size_t(B * T * H * D)), lse(size_t(B * H * T));
    std::vector<float> dqkv(qkv.size());
    auto dout = random_vector(out.size(), 42);
    ops::attention_fwd(*ctx, cpu_tensor(out, {B, T, H * D}), cpu_tensor(lse, {B, H, T}),
                       cpu_tensor(qkv, {B, T, 3 * H * D}), layout, window);
    ops::attention_bwd(*ctx, cpu_tensor(dqkv, {B, T, 3 * H * D}), cpu_tensor(dout, {B, T, H * D}),
                       cpu_tensor(qkv, {B, T, 3 * H * D}), cpu_tensor(out, {B, T, H * D}),
                       cpu_tensor(lse, {B, H, T}), layout, window);
    return dqkv;
  };
  EXPECT_EQ(grads(INT_MAX), grads(0));
  const auto w3 = run(3);
  for (int t = 0; t < T; ++t) {
    const bool same = std::equal(full.begin() + t * H * D, full.begin() + (t + 1) * H * D,
                                 w3.begin() + t * H * D);
    EXPECT_EQ(same, t < 3) << "row " << t;
  }
}

TEST(AttentionOp, ArgumentChecks) {
  auto ctx = ExecContext::make_cpu();
  const int B = 2, T = 7, H = 4, D = 4, C = H * D;
  const QKVLayout layout{H, 2, D};  // width (4 + 2 * 2) * 4 = 32
  auto qkv = random_vector(size_t(B * T * layout.width()), 51);
  std::vector<float> out(size_t(B * T * C)), lse(size_t(B * H * T));
  const Shape qkv_shape{B, T, 32}, lse_shape{B, H, T};
  auto fwd = [&](const QKVLayout& l, int window, const Shape& lse_s) {
    ops::attention_fwd(*ctx, cpu_tensor(out, {B, T, C}), cpu_tensor(lse, lse_s),
                       cpu_tensor(qkv, qkv_shape), l, window);
  };
  EXPECT_NO_THROW(fwd(layout, 0, lse_shape));
  EXPECT_EQ(test::thrown_message([&] {
              fwd(QKVLayout{H, 3, D}, 0, lse_shape);
            }),
            "attention: n_kv_head (3) must divide n_head (4)");
  EXPECT_EQ(test::thrown_message([&] {
              fwd(QKVLayout{H, 0, D}, 0, lse_shape);
            }),
            "attention: n_head, n_kv_head and head_dim must be positive, got 4, 0 and 4");
  EXPECT_EQ(test::thrown_message([&] {
              fwd(QKVLayout{H, H, D}, 0, lse_shape);
            }),
            "attention: qkv must be [B, T, 48] ((n_head 4 + 2 x n_kv_head 4) x head_dim 4), got "
            "f32[2, 7, 32] on cpu");
  EXPECT_EQ(test::thrown_message([&] { fwd(layout, -2, lse_shape); }),
            "attention: window must be >= 0 (0 = full causal), got -2");
  EXPECT_EQ(test::thrown_message([&] {
              fwd(layout, 0, Shape{B, T, H});
            }),
            "attention: lse must be f32[2, 4, 7] on cpu, got f32[2, 7, 4] on cpu");
}

}  // namespace
}  // namespace attnlab
