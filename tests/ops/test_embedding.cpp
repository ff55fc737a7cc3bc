#include <gtest/gtest.h>

#include "ops/ops.h"
#include "ref/embedding_ref.h"
#include "test_util.h"

namespace attnlab {
namespace {

using test::cpu_tensor;
using test::max_rel_error;
using test::random_vector;

struct EmbeddingCase {
  int64_t B;
  int T, C, vocab, max_T;
  std::vector<int32_t> tokens;
  std::vector<float> wte, wpe, out;
  EmbeddingCase(int64_t b, int t, int c, int v, int mt, uint32_t seed)
      : B(b),
        T(t),
        C(c),
        vocab(v),
        max_T(mt),
        tokens(test::random_ints(size_t(b * t), seed, v)),
        wte(random_vector(size_t(v) * c, seed + 1)),
        wpe(random_vector(size_t(mt) * c, seed + 2)),
        out(size_t(b * t * c)) {}
  EmbeddingParams<float> params() {
    EmbeddingParams<float> p;
    p.tokens = tokens.data();
    p.wte = wte.data();
    p.wpe = wpe.data();
    p.out = out.data();
    p.B = B;
    p.T_ = T;
    p.C = C;
    p.vocab = vocab;
    return p;
  }
  // params() with the gradient buffers (a null one is skipped by the backward).
  EmbeddingParams<float> bwd_params(const float* dout, float* dwte, float* dwpe) {
    EmbeddingParams<float> p = params();
    p.dout = dout;
    p.dwte = dwte;
    p.dwpe = dwpe;
    return p;
  }
};

TEST(EmbeddingRef, ForwardGathersAndAdds) {
  EmbeddingCase c(3, 13, 33, 10, 16, 1);
  embedding_fwd_ref(c.params());
  for (int64_t b = 0; b < c.B; ++b)
    for (int t = 0; t < c.T; ++t)
      for (int k = 0; k < c.C; ++k)
        ASSERT_EQ(c.out[(b * c.T + t) * c.C + k],
                  c.wte[size_t(c.tokens[b * c.T + t]) * c.C + k] + c.wpe[size_t(t) * c.C + k]);
}

TEST(EmbeddingRef, BackwardMatchesFiniteDifferencesAndAccumulates) {
  EmbeddingCase c(2, 5, 3, 4, 7, 11);  // 10 tokens over a vocab of 4: repeats are certain
  const auto dy = random_vector(c.out.size(), 12);
  auto loss = [&] {
    embedding_fwd_ref(c.params());
    return test::weighted_sum(dy, c.out);
  };
  const auto fd_wte = test::finite_difference(c.wte.data(), c.wte.size(), loss);
  const auto fd_wpe = test::finite_difference(c.wpe.data(), c.wpe.size(), loss);
  std::vector<float> dwte(c.wte.size(), 0.f), dwpe(c.wpe.size(), 0.f);
  EmbeddingParams<float> p = c.bwd_params(dy.data(), dwte.data(), dwpe.data());
  embedding_bwd_ref(p);
  EXPECT_LT(max_rel_error(dwte, fd_wte), 1e-5);
  EXPECT_LT(max_rel_error(dwpe, fd_wpe), 1e-5);
  const auto dwte1 = dwte, dwpe1 = dwpe;
  p.dwte = nullptr;  // frozen table: skipped
  embedding_bwd_ref(p);
  EXPECT_EQ(dwte, dwte1);
  for (size_t i = 0; i < dwpe.size(); ++i) EXPECT_NEAR(dwpe[i], 2 * dwpe1[i], 1e-6);
}

TEST(EmbeddingRef, BackwardDeterministicAcrossThreadCounts) {
  EmbeddingCase c(8, 128, 48, 50, 128, 21);  // large enough to run in parallel
  const auto dy = random_vector(c.out.size(), 22);
  auto run = [&](int threads) {
    const test::ScopedOmpThreads limit(threads);
    std::vector<float> dwte = random_vector(c.wte.size(), 23), dwpe(c.wpe.size(), 0.5f);
    embedding_bwd_ref(c.bwd_params(dy.data(), dwte.data(), dwpe.data()));
    dwte.insert(dwte.end(), dwpe.begin(), dwpe.end());
    return dwte;
  };
  const auto one = run(1);
  EXPECT_EQ(one, run(2));
  EXPECT_EQ(one, run(3));
}

// Without a position table (RoPE models: wpe and dwpe empty) the op gathers wte rows and the
// backward accumulates dwte alone.
TEST(EmbeddingOp, WithoutPositionTable) {
  auto ctx = ExecContext::make_cpu();
  std::vector<int32_t> tokens = {3, 1, 3, 0};
  std::vector<float> wte = test::random_vector(5 * 4, 7), out(2 * 2 * 4), dwte(5 * 4, 0.f);
  ops::embedding_fwd(*ctx, cpu_tensor(out, {2, 2, 4}), cpu_tensor(tokens, {2, 2}),
                     cpu_tensor(wte, {5, 4}), Tensor());
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) EXPECT_EQ(out[size_t(r * 4 + c)], wte[size_t(tokens[r] * 4 + c)]);
  std::vector<float> dout = test::random_vector(2 * 2 * 4, 8);
  ops::embedding_bwd(*ctx, cpu_tensor(dwte, {5, 4}), Tensor(), cpu_tensor(dout, {2, 2, 4}),
                     cpu_tensor(tokens, {2, 2}));
  for (int c = 0; c < 4; ++c) {
    EXPECT_FLOAT_EQ(dwte[size_t(3 * 4 + c)], dout[size_t(c)] + dout[size_t(8 + c)]);
    EXPECT_FLOAT_EQ(dwte[size_t(1 * 4 + c)], dout[size_t(4 + c)]);
    EXPECT_EQ(dwte[size_t(2 * 4 + c)], 0.f);
  }
}

TEST(EmbeddingOp, ChecksTokensAndShapes) {
  auto ctx = ExecContext::make_cpu();
  EmbeddingCase c(2, 4, 8, 16, 6, 31);
  ops::embedding_fwd(*ctx, cpu_tensor(c.out, {2, 4, 8}), cpu_tensor(c.tokens, {2, 4}),
                     cpu_tensor(c.wte, {16, 8}), cpu_tensor(c.wpe, {6, 8}));
  EXPECT_EQ(c.out[8], c.wte[size_t(c.tokens[1]) * 8] + c.wpe[8]);
  c.tokens[5] = 16;
  EXPECT_EQ(test::thrown_message([&] {
              ops::embedding_fwd(*ctx, cpu_tensor(c.out, {2, 4, 8}), cpu_tensor(c.tokens, {2, 4}),
                                 cpu_tensor(c.wte, {16, 8}), cpu_tensor(c.wpe, {6, 8}));
            }),
            "embedding: token id 16 at position 5 is outside the table [0, 16)");
  c.tokens[5] = 0;
  std::vector<float> short_wpe(3 * 8);
  EXPECT_EQ(test::thrown_message([&] {
              ops::embedding_fwd(*ctx, cpu_tensor(c.out, {2, 4, 8}), cpu_tensor(c.tokens, {2, 4}),
                                 cpu_tensor(c.wte, {16, 8}), cpu_tensor(short_wpe, {3, 8}));
            }),
            "embedding: wpe must be f32[rows >= 4, 8] on cpu, got f32[3, 8] on cpu");
}

}  // namespace
}  // namespace attnlab
