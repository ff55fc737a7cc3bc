// Group-indexed Focus decoding on CUDA (kernels/focus/focus_decode.cu) against the CPU references
// (skipped without a GPU): the index append is exact (chunked, rewound); the decode kernel matches
// the reference on the same (rounded) random caches for fp32 and bf16, D 64 and 128, K 4 and 8,
// top_k 1 and 2, GQA, windows, Tq 1 and 5, automatic and forced split-K counts (more splits than
// keys included); and a Focus GPT on CUDA decodes the logits of its own eval forward (hard
// routing). Tolerances: fp32 1e-4 (fp32 vs double accumulation), bf16 2e-2 (the output rounded
// once to bf16; cuda_test_util.h explains the scale).
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "cuda/cuda_test_util.h"
#include "kernels/focus/focus_decode.cuh"
#include "model/gpt.h"
#include "ops/focus_decode_case.h"

namespace attnlab {
namespace {

using test::cpu_tensor;
using test::DeviceArray;
using test::DeviceInts;
using test::FocusDecodeCase;

template <typename T>
constexpr DType dtype_of() {
  return std::is_same_v<T, bf16> ? DType::bf16 : DType::f32;
}
template <typename T>
Tensor dev(const DeviceArray<T>& a, Shape s) {
  return Tensor(a.ptr(), dtype_of<T>(), Device::cuda, s);
}
Tensor dev(const DeviceInts& a, Shape s) { return Tensor(a.ptr(), DType::i32, Device::cuda, s); }
std::vector<int32_t> download(const DeviceInts& a, size_t n) {
  std::vector<int32_t> h(n);
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpy(h.data(), a.ptr(), n * 4, cudaMemcpyDeviceToHost));
  return h;
}

// The first counts[l] entries of every list l agree (the rest is unused capacity).
void expect_same_lists(const std::vector<int32_t>& index, const std::vector<int32_t>& want,
                       const std::vector<int32_t>& counts, int max_T) {
  for (size_t l = 0; l < counts.size(); ++l)
    for (int e = 0; e < counts[l]; ++e)
      ASSERT_EQ(index[l * max_T + e], want[l * max_T + e]) << "list " << l << " entry " << e;
}

TEST(FocusDecodeCuda, IndexAppendMatchesTheReference) {
  CUDA_TEST_PREAMBLE();
  auto gpu = ExecContext::make_cuda(0);
  for (int top_k : {1, 2}) {
    FocusDecodeCase c(3, 1000, 2, 2, 4, 8, top_k, 16, uint32_t(top_k));
    std::vector<int32_t> want, want_counts;
    c.index_of(c.Tn, want, want_counts);
    DeviceInts groups(c.groups), index(std::vector<int32_t>(want.size(), -1));
    DeviceInts counts(std::vector<int32_t>(want_counts.size(), 0));
    const Shape is{c.B, c.K, c.Tn}, cs{c.B, c.K}, gs{c.B, c.Tn, top_k};
    auto append = [&](int pos, int n) {
      ops::focus_group_index_append(*gpu, dev(index, is), dev(counts, cs), dev(groups, gs), pos, n);
    };
    append(0, 300);  // a prefill, single tokens, chunks that cross warp boundaries
    for (int t = 300; t < 340; ++t) append(t, 1);
    for (int t0 = 340; t0 < c.Tn; t0 += 83) append(t0, std::min(83, c.Tn - t0));
    EXPECT_EQ(download(counts, want_counts.size()), want_counts);
    expect_same_lists(download(index, want.size()), want, want_counts, c.Tn);
    append(517, c.Tn - 517);  // rewound to 517 tokens, then the same tokens again
    EXPECT_EQ(download(counts, want_counts.size()), want_counts);
    expect_same_lists(download(index, want.size()), want, want_counts, c.Tn);
  }
}

template <typename T>
void decode_case(int D, int K, int top_k, int H, int Hkv, int window) {
  auto gpu = ExecContext::make_cuda(0);
  const int B = 2, Tn = 1100;
  FocusDecodeCase c(B, Tn, H, Hkv, D, K, top_k, window, uint32_t(D + K + top_k + Hkv + window));
  c.qkv = test::to_precision<T>(c.qkv);
  std::vector<float> kc, vc;
  c.cache_all(kc, vc);
  std::vector<int32_t> index, counts;
  c.index_of(Tn, index, counts);
  DeviceArray<T> gk(kc), gv(vc);
  DeviceInts gg(c.groups), gi(index), gc(counts);
  const Shape kvs = c.kv_shape(), gs{B, Tn, top_k}, is{B, K, Tn}, cs{B, K};
  const double tol = std::is_same_v<T, bf16> ? 2e-2 : 1e-4;
  for (int Tq : {1, 5}) {
    const int pos = Tn - Tq - 37;  // the lists also hold later positions: they must be skipped
    std::vector<float> q = c.rows(c.qkv, c.layout.width(), pos, Tq), want(size_t(B) * Tq * H * D);
    ops::focus_group_decode(*c.cpu, cpu_tensor(want, c.out_shape(Tq)),
                            cpu_tensor(q, c.qkv_shape(Tq)), cpu_tensor(kc, kvs),
                            cpu_tensor(vc, kvs), cpu_tensor(c.groups, gs), cpu_tensor(index, is),
                            cpu_tensor(counts, cs), pos, c.layout, window);
    DeviceArray<T> gq(q), go(want.size());
    for (int n_splits : {0, 1, 3, 32, 64}) {
      SCOPED_TRACE(std::string(test::type_name<T>()) + " D " + std::to_string(D) + " K " +
                   std::to_string(K) + " top_k " + std::to_string(top_k) + " Hkv " +
                   std::to_string(Hkv) + " window " + std::to_string(window) + " Tq " +
                   std::to_string(Tq) + " splits " + std::to_string(n_splits));
      go.poison();
      ops::focus_group_decode(*gpu, dev(go, c.out_shape(Tq)), dev(gq, c.qkv_shape(Tq)),
                              dev(gk, kvs), dev(gv, kvs), dev(gg, gs), dev(gi, is), dev(gc, cs),
                              pos, c.layout, window, n_splits);
      EXPECT_LT(test::report("focus group decode", test::max_rel_error(go.download(), want)), tol);
    }
  }
}

template <typename T>
void decode_all() {
  for (int D : {64, 128})
    for (int K : {4, 8})
      for (int top_k : {1, 2}) decode_case<T>(D, K, top_k, 4, 2, 16);
  decode_case<T>(64, 8, 2, 4, 4, 0);     // no window, no GQA
  decode_case<T>(128, 4, 1, 8, 2, 300);  // a window longer than a split-K chunk, groups of 4
}

TEST(FocusDecodeCuda, DecodeMatchesTheReferenceF32) {
  CUDA_TEST_PREAMBLE();
  decode_all<float>();
}

TEST(FocusDecodeCuda, DecodeMatchesTheReferenceBf16) {
  CUDA_TEST_PREAMBLE();
  decode_all<bf16>();
}

// A small Focus GPT (head dim 64, GQA 4 / 2 heads, 2 layers, K 8, w 16).
GPTConfig focus_gpt(int top_k) {
  GPTConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.n_embd = 256;
  c.vocab_size = 300;
  c.padded_vocab = 320;
  c.block_size = 160;
  c.attention.type = "focus";
  c.attention.focus.groups = 8;
  c.attention.focus.top_k = top_k;
  c.attention.focus.local_window = 16;
  return c;
}

// A Focus GPT on CUDA (fp32): prefill + group-indexed decode steps give the logits of the eval
// forward (hard routing) on the same prefix; sequences longer than the window, GQA, B = 2.
TEST(FocusDecodeCuda, ModelDecodeMatchesTheForward) {
  CUDA_TEST_PREAMBLE();
  for (int top_k : {1, 2}) {
    const GPTConfig c = focus_gpt(top_k);
    auto ctx = ExecContext::make_cuda(0);
    GPT model(c);
    ParameterStore store;
    model.declare_params(store);
    store.finalize(Device::cuda, DType::f32, {});
    model.init_params(store, 5);
    const int B = 2, T = 150, P = 9, Vp = c.padded_vocab;
    std::mt19937 rng(3);
    std::vector<int32_t> ids(size_t(B) * T);
    for (auto& x : ids) x = int32_t(rng() % uint32_t(c.vocab_size));
    DeviceInts all(ids);
    model.allocate(*ctx, B, T, DType::f32);
    model.forward(*ctx, store, dev(all, {B, T}), Tensor(), AttentionMode::eval);
    std::vector<float> full(size_t(B) * T * Vp);
    copy_tensor(Tensor(full.data(), DType::f32, Device::cpu, Shape{B, T, Vp}), model.logits());
    auto cols = [&](int t0, int n) {  // tokens t0 .. t0+n-1 of both sequences, [B, n]
      std::vector<int32_t> h;
      for (int b = 0; b < B; ++b)
        for (int t = t0; t < t0 + n; ++t) h.push_back(ids[size_t(b) * T + t]);
      return h;
    };
    KVCache cache = model.make_kv_cache(*ctx, B, T, DType::f32);
    DeviceInts prompt(cols(0, P));
    Tensor logits = model.prefill(*ctx, store, dev(prompt, {B, P}), cache);
    double err = 0.0;
    std::vector<float> row(size_t(B) * Vp);
    for (int t = P - 1; t < T; ++t) {
      if (t > P - 1) {
        DeviceInts step(cols(t, 1));
        logits = model.decode_step(*ctx, store, dev(step, {B, 1}), cache);
      }
      copy_tensor(Tensor(row.data(), DType::f32, Device::cpu, Shape{B, Vp}), logits);
      for (int b = 0; b < B; ++b)
        err =
            std::max(err, test::max_rel_error(row.data() + size_t(b) * Vp,
                                              full.data() + (size_t(b) * T + t) * Vp, size_t(Vp)));
    }
    EXPECT_LT(test::report("focus gpt group decode vs forward f32", err), 1e-4)
        << "top_k " << top_k;
  }
}

// Hard-routed generation on CUDA past kFocusDecodeMaxTopK is refused when the cache is made (before
// the prompt's prefill), naming the key; top_k >= K (every pair: dense decoding) is not limited.
TEST(FocusDecodeCuda, CacheRefusesTopKPastTheKernelsLimit) {
  CUDA_TEST_PREAMBLE();
  auto ctx = ExecContext::make_cuda(0);
  for (int top_k : {kFocusDecodeMaxTopK + 1, 16}) {
    GPTConfig c = focus_gpt(top_k);
    c.attention.focus.groups = 16;
    GPT model(c);
    ParameterStore store;
    model.declare_params(store);
    store.finalize(Device::cuda, DType::f32, {});
    if (top_k < c.attention.focus.groups)
      test::expect_error([&] { model.make_kv_cache(*ctx, 1, 64, DType::f32); },
                         "hard-routed generation on CUDA takes attention.focus.top_k <= 8, got 9");
    else
      EXPECT_NO_THROW(model.make_kv_cache(*ctx, 1, 64, DType::f32));
  }
}

}  // namespace
}  // namespace attnlab
