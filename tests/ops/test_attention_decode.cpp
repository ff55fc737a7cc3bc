// Attention against a KV cache on the CPU reference: rows decoded one by one, or in chunks after
// a prefix, equal the rows of the full causal attention_fwd, with GQA and sliding windows; GQA
// with arbitrary strides against a naive double loop; argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/context.h"
#include "kernels/attention/attention_decode.cuh"
#include "kernels/focus/focus_decode.cuh"
#include "ops/ops.h"
#include "ref/attention_decode_ref.h"
#include "test_util.h"

namespace attnlab {
namespace {

using test::cpu_tensor;
using test::max_rel_error;
using test::random_vector;

// Full causal attention over qkv [B, T, (H + 2 Hkv) D] vs the cache path: the first `prefix`
// tokens in one chunk, then chunks of `step` tokens; both must agree row by row.
void check_against_full(int B, int T, int H, int D, int prefix, int step, uint32_t seed,
                        int Hkv = 0, int window = 0) {
  auto ctx = ExecContext::make_cpu();
  if (Hkv == 0) Hkv = H;
  const QKVLayout layout{H, Hkv, D};
  const int C = H * D, W = int(layout.width());
  std::vector<float> qkv = random_vector(size_t(B) * T * W, seed, -2.f, 2.f);
  std::vector<float> full(size_t(B) * T * C), lse(size_t(B) * H * T);
  ops::attention_fwd(*ctx, cpu_tensor(full, Shape{B, T, C}), cpu_tensor(lse, Shape{B, H, T}),
                     cpu_tensor(qkv, Shape{B, T, W}), layout, window);

  const int max_T = T + 3;  // slack: the cache is longer than what is used
  std::vector<float> kc = random_vector(size_t(B) * Hkv * max_T * D, seed + 1);  // garbage beyond
  std::vector<float> vc = random_vector(size_t(B) * Hkv * max_T * D, seed + 2);
  Tensor k = cpu_tensor(kc, Shape{B, Hkv, max_T, D}), v = cpu_tensor(vc, Shape{B, Hkv, max_T, D});
  std::vector<float> out(size_t(B) * T * C, 0.f);
  for (int pos = 0; pos < T;) {
    const int n = pos == 0 ? prefix : std::min(step, T - pos);
    // The chunk's tokens, gathered into their own [B, n, 3C] / [B, n, C] tensors.
    std::vector<float> chunk(size_t(B) * n * W), o(size_t(B) * n * C);
    for (int b = 0; b < B; ++b)
      std::copy_n(qkv.begin() + (int64_t(b) * T + pos) * W, size_t(n) * W,
                  chunk.begin() + int64_t(b) * n * W);
    Tensor ct = cpu_tensor(chunk, Shape{B, n, W});
    ops::kv_cache_write(*ctx, k, v, ct, pos, layout);
    ops::attention_decode(*ctx, cpu_tensor(o, Shape{B, n, C}), ct, k, v, pos, layout, 0, window);
    for (int b = 0; b < B; ++b)
      std::copy_n(o.begin() + int64_t(b) * n * C, size_t(n) * C,
                  out.begin() + (int64_t(b) * T + pos) * C);
    pos += n;
  }
  EXPECT_LT(max_rel_error(out.data(), full.data(), out.size()), 2e-6)
      << "B=" << B << " T=" << T << " H=" << H << " Hkv=" << Hkv << " D=" << D
      << " prefix=" << prefix << " window=" << window;
}

TEST(AttentionDecode, MatchesFullAttentionTokenByToken) {
  check_against_full(1, 17, 2, 8, 1, 1, 1);
  check_against_full(2, 33, 3, 16, 5, 1, 2);
  check_against_full(1, 70, 2, 64, 1, 1, 3);
}

TEST(AttentionDecode, MatchesFullAttentionInChunks) {
  check_against_full(2, 40, 2, 8, 40, 1, 4);  // one prefill covering everything
  check_against_full(3, 41, 4, 8, 7, 6, 5);   // prefix, then chunks of 6
}

// GQA (groups of 2 and 4) and sliding windows shorter than a chunk, than the prefix, and longer
// than the sequence.
TEST(AttentionDecode, GroupedQueryHeadsAndWindowsMatchFullAttention) {
  check_against_full(1, 17, 4, 8, 1, 1, 21, 2);
  check_against_full(2, 23, 4, 8, 5, 3, 22, 1);
  check_against_full(1, 30, 4, 8, 1, 1, 23, 2, 4);
  check_against_full(2, 41, 4, 8, 7, 6, 24, 1, 5);    // window < chunk after the prefix
  check_against_full(1, 40, 2, 16, 40, 1, 25, 2, 9);  // one prefill, window 9
  check_against_full(1, 12, 2, 8, 3, 2, 26, 1, 50);   // window longer than T: full causal
}

TEST(AttentionDecode, GroupedQueryHeadsAgainstNaive) {
  // The reference honours n_kv_head < n_head and arbitrary strides.
  const int B = 2, Tq = 3, H = 4, Hkv = 2, D = 5, max_T = 9, pos = 4;
  std::vector<float> q = random_vector(size_t(B) * Tq * H * D + 7, 11, -2.f, 2.f);
  std::vector<float> kc = random_vector(size_t(B) * Hkv * max_T * D, 12);
  std::vector<float> vc = random_vector(size_t(B) * Hkv * max_T * D, 13);
  std::vector<float> o(size_t(B) * Tq * H * D + 5, 0.f);
  AttentionDecodeParams<float> p;
  p.q = q.data();
  p.q_row_stride = H * D + 1;
  p.q_batch_stride = Tq * p.q_row_stride;
  p.k_cache = kc.data();
  p.v_cache = vc.data();
  p.o = o.data();
  p.o_row_stride = H * D;
  p.o_batch_stride = Tq * H * D + 2;
  p.B = B, p.Tq = Tq, p.n_head = H, p.n_kv_head = Hkv, p.D = D, p.max_T = max_T, p.pos = pos;
  p.scale = 0.37f;
  attention_decode_ref(p);
  double err = 0.0;
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < Tq; ++i)
      for (int h = 0; h < H; ++h) {
        const int g = h / (H / Hkv), len = pos + i + 1;
        const float* qr = q.data() + b * p.q_batch_stride + i * p.q_row_stride + h * D;
        std::vector<double> w(len);
        double mx = -1e300, sum = 0.0;
        for (int s = 0; s < len; ++s) {
          double d = 0.0;
          for (int c = 0; c < D; ++c) d += qr[c] * kc[((b * Hkv + g) * max_T + s) * D + c];
          w[s] = d * p.scale;
          mx = std::max(mx, w[s]);
        }
        for (auto& x : w) sum += (x = std::exp(x - mx));
        for (int c = 0; c < D; ++c) {
          double ref = 0.0;
          for (int s = 0; s < len; ++s) ref += w[s] / sum * vc[((b * Hkv + g) * max_T + s) * D + c];
          err = std::max(err,
                         std::fabs(ref - o[b * p.o_batch_stride + i * p.o_row_stride + h * D + c]));
        }
      }
  EXPECT_LT(err, 1e-6);
}

// The CUDA launchers' split-K chunk counts (host rules, measured on an H100: docs/generate.md): one
// chunk per 128 keys, at most 64 and about 1024 blocks (rows x chunks) in all, 1 from 256 rows.
TEST(AttentionDecode, SplitCountsFollowTheMeasuredRule) {
  EXPECT_EQ(attention_decode_splits(12, 65536), 64);  // 12 heads, B 1
  EXPECT_EQ(attention_decode_splits(32, 65536), 32);  // 32 heads
  EXPECT_EQ(attention_decode_splits(12, 1000), 8);    // fewer keys than the cap
  EXPECT_EQ(attention_decode_splits(1, 1 << 20), 64);
  EXPECT_EQ(attention_decode_splits(200, 1 << 20), 5);
  EXPECT_EQ(attention_decode_splits(256, 1 << 20), 1);  // prefill
  EXPECT_EQ(attention_decode_splits(12, 1), 1);
  // Focus: the window plus top_k / K of the cache (129 + 16384 keys here), the same cap.
  EXPECT_EQ(focus_group_decode_splits(12, 65536, 128, 8, 2), 64);
  EXPECT_EQ(focus_group_decode_splits(32, 65536, 128, 8, 2), 32);
  EXPECT_EQ(focus_group_decode_splits(12, 1024, 128, 8, 2), 4);  // 129 + 256 keys
}

TEST(AttentionDecode, RejectsBadArguments) {
  auto ctx = ExecContext::make_cpu();
  std::vector<float> qkv = random_vector(2 * 3 * 24, 1), out(2 * 3 * 8);
  std::vector<float> kc(2 * 2 * 4 * 4), vc(kc.size());
  Tensor q = cpu_tensor(qkv, Shape{2, 3, 24});
  Tensor k = cpu_tensor(kc, Shape{2, 2, 4, 4}), v = cpu_tensor(vc, Shape{2, 2, 4, 4});
  Tensor o = cpu_tensor(out, Shape{2, 3, 8});
  const QKVLayout mha{2, 2, 4};  // width 24
  EXPECT_NO_THROW(ops::attention_decode(*ctx, o, q, k, v, 1, mha));
  std::string msg = test::thrown_message([&] { ops::attention_decode(*ctx, o, q, k, v, 2, mha); });
  EXPECT_NE(msg.find("do not fit a cache of 4 positions"), std::string::npos) << msg;
  // The cache has n_kv_head heads.
  std::vector<float> qkv_gqa = random_vector(2 * 3 * 16, 2);
  Tensor q_gqa = cpu_tensor(qkv_gqa, Shape{2, 3, 16});
  msg = test::thrown_message([&] {
    ops::kv_cache_write(*ctx, k, v, q_gqa, 0, QKVLayout{2, 1, 4});
  });
  EXPECT_EQ(msg,
            "kv_cache_write: k_cache must be [B = 2, n_kv_head = 1, max_T, D = 4], got "
            "f32[2, 2, 4, 4] on cpu");
  msg = test::thrown_message([&] { ops::kv_cache_write(*ctx, k, v, q, 0, QKVLayout{4, 2, 3}); });
  EXPECT_EQ(msg,
            "kv_cache_write: k_cache must be [B = 2, n_kv_head = 2, max_T, D = 3], got "
            "f32[2, 2, 4, 4] on cpu");
  msg = test::thrown_message([&] {
    ops::attention_decode(*ctx, o, q, k, v, 0, QKVLayout{3, 2, 4});
  });
  EXPECT_EQ(msg, "attention_decode: n_kv_head (2) must divide n_head (3)");
  msg = test::thrown_message([&] {
    ops::attention_decode(*ctx, o, q, k, v, 0, QKVLayout{2, 1, 4});
  });
  EXPECT_EQ(msg,
            "attention_decode: qkv must be [B, T, 16] ((n_head 2 + 2 x n_kv_head 1) x head_dim "
            "4), got f32[2, 3, 24] on cpu");
  msg = test::thrown_message([&] { ops::attention_decode(*ctx, o, q, k, v, 0, mha, 0, -1); });
  EXPECT_EQ(msg, "attention_decode: window must be >= 0 (0 = full causal), got -1");
  msg = test::thrown_message([&] { ops::attention_decode(*ctx, k, q, k, v, 0, mha); });
  EXPECT_NE(msg.find("out must be"), std::string::npos) << msg;
}

}  // namespace
}  // namespace attnlab
