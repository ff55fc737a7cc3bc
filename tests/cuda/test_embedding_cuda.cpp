// Embedding CUDA kernels vs the CPU reference. The backward accumulates (+=) into dwte/dwpe, must
// be bitwise deterministic (sort + ordered per-token sums, no atomics) and skips a null dwte.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "kernels/embed/embedding.cuh"
#include "ref/embedding_ref.h"

namespace attnlab {
namespace {

using namespace test;

template <typename T>
void check_embedding(int B, int Tn, int C, int vocab, int distinct, uint32_t seed) {
  // Few distinct tokens -> long runs of repeated tokens in the backward.
  auto tokens = random_ints(size_t(B) * Tn, seed, distinct);
  for (auto& t : tokens) t = int32_t((int64_t(t) * 7919) % vocab);
  const auto wte = to_precision<T>(random_vector(size_t(vocab) * C, seed + 1));
  const auto wpe = to_precision<T>(random_vector(size_t(Tn) * C, seed + 2));
  const auto dout = to_precision<T>(random_vector(size_t(B) * Tn * C, seed + 3));
  const auto dwte0 = to_precision<T>(random_vector(size_t(vocab) * C, seed + 4));
  const auto dwpe0 = to_precision<T>(random_vector(size_t(Tn) * C, seed + 5));
  std::vector<float> out_ref(size_t(B) * Tn * C), dwte_ref = dwte0, dwpe_ref = dwpe0;
  EmbeddingParams<float> r;
  r.tokens = tokens.data(), r.wte = wte.data(), r.wpe = wpe.data(), r.out = out_ref.data();
  r.dout = dout.data(), r.dwte = dwte_ref.data(), r.dwpe = dwpe_ref.data();
  r.B = B, r.T_ = Tn, r.C = C, r.vocab = vocab;
  embedding_fwd_ref(r);
  embedding_bwd_ref(r);

  DeviceInts dtok(tokens);
  DeviceArray<T> dwte_(wte), dwpe_(wpe), dout_(dout), out(out_ref.size()), dwte(dwte0), dwpe(dwpe0);
  out.poison();
  EmbeddingParams<T> p;
  p.tokens = dtok.ptr(), p.wte = dwte_.ptr(), p.wpe = dwpe_.ptr(), p.out = out.ptr();
  p.dout = dout_.ptr(), p.dwte = dwte.ptr(), p.dwpe = dwpe.ptr();
  p.B = B, p.T_ = Tn, p.C = C, p.vocab = vocab;
  launch_embedding_fwd<T>(p, nullptr);
  launch_embedding_bwd<T>(p, nullptr);
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-2;
  const auto name = strformat("embedding %s B=%d T=%d C=%d", type_name<T>(), B, Tn, C);
  EXPECT_LT(report((name + " fwd").c_str(), max_rel_error(out.download(), out_ref)), tol);
  EXPECT_LT(report((name + " dwte").c_str(), max_rel_error(dwte.download(), dwte_ref)), tol);
  EXPECT_LT(report((name + " dwpe").c_str(), max_rel_error(dwpe.download(), dwpe_ref)), tol);

  // Determinism: the same backward from the same start gives identical bits.
  const auto first = dwte.raw();
  dwte.upload(dwte0);
  dwpe.upload(dwpe0);
  launch_embedding_bwd<T>(p, nullptr);
  EXPECT_TRUE(bitwise_equal(first, dwte.raw())) << name;

  // A frozen wte (dwte == nullptr) still accumulates dwpe.
  dwpe.upload(dwpe0);
  p.dwte = nullptr;
  launch_embedding_bwd<T>(p, nullptr);
  EXPECT_LT(max_rel_error(dwpe.download(), dwpe_ref), tol) << name;

  // No position table (RoPE models): out = wte rows, bitwise (one rounding of the same value),
  // on both the vectorised and the scalar path; a null dwpe leaves the backward to dwte.
  std::vector<float> out_nope(out_ref.size());
  r.wpe = nullptr, r.out = out_nope.data();
  embedding_fwd_ref(r);
  out.poison();
  p.wpe = nullptr;
  launch_embedding_fwd<T>(p, nullptr);
  EXPECT_EQ(max_rel_error(out.download(), out_nope), 0.0) << name << " without wpe";
  dwte.upload(dwte0);
  p.dwte = dwte.ptr(), p.dwpe = nullptr;
  launch_embedding_bwd<T>(p, nullptr);
  EXPECT_TRUE(bitwise_equal(first, dwte.raw())) << name << " without dwpe";
}

TEST(EmbeddingCuda, MatchesReferenceF32) {
  CUDA_TEST_PREAMBLE();
  check_embedding<float>(1, 1, 8, 5, 5, 1);
  check_embedding<float>(2, 5, 12, 37, 37, 2);
  check_embedding<float>(3, 17, 300, 50, 3, 3);  // long runs, C > 256 (two column chunks)
  check_embedding<float>(4, 256, 768, 1000, 200, 4);
}

TEST(EmbeddingCuda, MatchesReferenceBF16) {
  CUDA_TEST_PREAMBLE();
  check_embedding<bf16>(1, 1, 8, 5, 5, 11);
  check_embedding<bf16>(2, 5, 12, 37, 37, 12);
  check_embedding<bf16>(3, 17, 300, 50, 3, 13);
  check_embedding<bf16>(4, 256, 768, 1000, 200, 14);
}

}  // namespace
}  // namespace attnlab
