// SFA kernels (kernels/sfa/*.cu) and the CUDA reference path against the CPU references (skipped
// without a GPU). Inputs are rounded to the kernel's precision first, so the selection is the same
// on both sides (indices, values and masks must match exactly) and the bounds cover only the
// kernels' own rounding: fp32 1e-4, bf16 2e-2 (as tests/cuda/test_focus_cuda.cpp: outputs and
// gradients rounded once to bf16; cuda_test_util.h explains the scale).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cuda_test_util.h"
#include "nn/attention_sfa.h"
#include "ops/ops.h"
#include "ops/sfa_ops.h"

namespace attnlab {
namespace {

using test::cpu_tensor;
using test::dev_tensor;
using test::DeviceArray;

// Device index storage (i32, or u8: the decode cache's key coordinates) read back as a vector.
template <typename I = int32_t>
struct DeviceIdx {
  Buffer buf;
  size_t n;
  explicit DeviceIdx(size_t n_) : buf(Device::cuda, std::max<size_t>(n_, 1) * sizeof(I)), n(n_) {}
  Tensor t(Shape s) const { return Tensor(buf.data(), dtype_of<I>(), Device::cuda, s); }
  std::vector<I> download() const {
    std::vector<I> h(n);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(h.data(), buf.data(), n * sizeof(I), cudaMemcpyDeviceToHost));
    return h;
  }
};

template <typename T>
double tol() {
  return std::is_same_v<T, bf16> ? 2e-2 : 1e-4;
}

// Random q/k/v with some head vectors quantised (many ties) and some all zero.
std::vector<float> sfa_inputs(int B, int T, const QKVLayout& l, uint32_t seed) {
  std::vector<float> v = test::random_vector(size_t(B) * T * l.width(), seed, -1.5f, 1.5f);
  const int64_t W = l.width(), D = l.head_dim;
  for (int64_t r = 0; r < int64_t(B) * T; ++r)
    for (int64_t hv = 0; hv < l.n_head + l.n_kv_head; ++hv) {
      float* x = v.data() + r * W + hv * D;
      if ((r + hv) % 5 == 0)
        for (int64_t c = 0; c < D; ++c) x[c] = std::round(x[c] * 2.f);  // ties
      if ((r + hv) % 11 == 0)
        for (int64_t c = 0; c < D; ++c) x[c] = 0.f;  // all zero
    }
  return v;
}

template <typename T>
void select_matches(int B, int T_, int H, int Hkv, int D, int k) {
  SCOPED_TRACE(testing::Message() << test::type_name<T>() << " T " << T_ << " D " << D << " k "
                                  << k);
  auto cpu = ExecContext::make_cpu();
  auto gpu = ExecContext::make_cuda(0);
  const QKVLayout l{H, Hkv, D};
  const Shape s{B, T_, l.width()}, qs{B, T_, H, k}, ks{B, T_, Hkv, k};
  std::vector<float> x = test::to_precision<T>(sfa_inputs(B, T_, l, uint32_t(T_ + D)));
  std::vector<int32_t> qi(size_t(qs.numel())), ki(size_t(ks.numel()));
  std::vector<float> qv(qi.size()), kv(ki.size()), m(x.size());
  ops::sfa_select(*cpu, cpu_tensor(x, s), l, k, cpu_tensor(qi, qs), cpu_tensor(qv, qs),
                  cpu_tensor(ki, ks), cpu_tensor(kv, ks));
  ops::sfa_sparsify(*cpu, cpu_tensor(m, s), cpu_tensor(x, s), cpu_tensor(x, s), l, k);
  DeviceArray<T> dx(x), dqv(qv.size()), dkv(kv.size()), dm(m.size());
  DeviceIdx<> dqi(qi.size()), dki(ki.size());
  ops::sfa_select(*gpu, dev_tensor(dx, s), l, k, dqi.t(qs), dev_tensor(dqv, qs), dki.t(ks),
                  dev_tensor(dkv, ks));
  ops::sfa_sparsify(*gpu, dev_tensor(dm, s), dev_tensor(dx, s), dev_tensor(dx, s), l, k);
  EXPECT_EQ(dqi.download(), qi);
  EXPECT_EQ(dki.download(), ki);
  EXPECT_EQ(dqv.download(), qv);
  EXPECT_EQ(dkv.download(), kv);
  EXPECT_EQ(dm.download(), m);
  // In place (the backward's masking of dqkv).
  ops::sfa_sparsify(*gpu, dev_tensor(dx, s), dev_tensor(dx, s), dev_tensor(dx, s), l, k);
  EXPECT_EQ(dx.download(), m);
}

TEST(SfaCuda, SelectionMatchesTheReferenceWithTiesAndZeros) {
  CUDA_TEST_PREAMBLE();
  select_matches<float>(2, 129, 4, 2, 32, 4);
  select_matches<float>(1, 1, 2, 2, 128, 16);
  select_matches<float>(1, 33, 3, 1, 20, 3);
  select_matches<bf16>(2, 129, 4, 2, 64, 8);
  select_matches<bf16>(1, 1000, 2, 1, 128, 16);
}

template <typename T>
void attention_matches(int B, int T_, int H, int Hkv, int D, int k) {
  SCOPED_TRACE(testing::Message() << test::type_name<T>() << " T " << T_ << " D " << D << " k "
                                  << k);
  auto cpu = ExecContext::make_cpu();
  auto gpu = ExecContext::make_cuda(0);
  const QKVLayout l{H, Hkv, D};
  const Shape s{B, T_, l.width()}, os{B, T_, l.q_width()}, ls{B, H, T_};
  std::vector<float> x = test::to_precision<T>(sfa_inputs(B, T_, l, uint32_t(T_)));
  std::vector<float> w = test::to_precision<T>(test::random_vector(size_t(os.numel()), 3));
  std::vector<float> sp(x.size()), o(w.size()), lse(size_t(ls.numel())), dq(x.size());
  ops::sfa_attention_fwd(*cpu, cpu_tensor(o, os), cpu_tensor(lse, ls), cpu_tensor(sp, s),
                         cpu_tensor(x, s), l, k);
  ops::sfa_attention_bwd(*cpu, cpu_tensor(dq, s), cpu_tensor(w, os), cpu_tensor(sp, s),
                         cpu_tensor(o, os), cpu_tensor(lse, ls), cpu_tensor(x, s), l, k);
  DeviceArray<T> dx(x), dw(w), dsp(x.size()), dout(o.size()), ddq(x.size());
  DeviceArray<float> dlse(lse.size());
  ops::sfa_attention_fwd(*gpu, dev_tensor(dout, os), dev_tensor(dlse, ls), dev_tensor(dsp, s),
                         dev_tensor(dx, s), l, k);
  ops::sfa_attention_bwd(*gpu, dev_tensor(ddq, s), dev_tensor(dw, os), dev_tensor(dsp, s),
                         dev_tensor(dout, os), dev_tensor(dlse, ls), dev_tensor(dx, s), l, k);
  EXPECT_EQ(dsp.download(), sp);
  EXPECT_LT(test::report("sfa out", test::max_rel_error(dout.download(), o)), tol<T>());
  EXPECT_LT(test::report("sfa lse", test::max_rel_error(dlse.download(), lse)), tol<T>());
  const std::vector<float> g = ddq.download();
  EXPECT_LT(test::report("sfa dqkv", test::max_rel_error(g, dq)), tol<T>());
  for (size_t i = 0; i < g.size(); ++i) {  // off the selection exactly zero
    if (int64_t(i) % l.width() < l.v_offset() && sp[i] == 0.f && dq[i] == 0.f) {
      ASSERT_EQ(g[i], 0.f) << i;
    }
  }
}

TEST(SfaCuda, ReferencePathForwardBackwardMatchTheReference) {
  CUDA_TEST_PREAMBLE();
  attention_matches<float>(2, 129, 4, 2, 32, 4);
  attention_matches<float>(1, 1, 2, 1, 64, 8);
  attention_matches<bf16>(2, 129, 4, 2, 64, 8);
  attention_matches<bf16>(1, 1000, 2, 1, 128, 16);
}

// The CPU's sparse cache [B, Hkv, max_T, *] of inputs x [B, max_T, W], decoded chunk by chunk.
struct CpuSparseCache {
  int B, max_T, H, k;
  QKVLayout l;
  const std::vector<float>& x;
  Shape ks{B, l.n_kv_head, max_T, k}, vs{B, l.n_kv_head, max_T, l.head_dim};
  std::vector<uint8_t> ki = std::vector<uint8_t>(size_t(ks.numel()));
  std::vector<float> kv = std::vector<float>(ki.size()), v = std::vector<float>(size_t(vs.numel()));
  std::vector<int32_t> qi;  // the last chunk's q~
  std::vector<float> qv;

  // Tokens pos .. pos + n - 1 of every sequence, [B, n, W].
  std::vector<float> chunk(int pos, int n) const {
    const int64_t W = l.width();
    std::vector<float> c;
    for (int b = 0; b < B; ++b)
      c.insert(c.end(), x.begin() + (int64_t(b) * max_T + pos) * W,
               x.begin() + (int64_t(b) * max_T + pos + n) * W);
    return c;
  }
  // Writes the chunk into the cache and returns its attention output [B, n, n_head D].
  std::vector<float> decode(std::vector<float>& c, int pos, int n) {
    auto cpu = ExecContext::make_cpu();
    const Shape cs{B, n, l.width()}, qs{B, n, H, k}, os{B, n, l.q_width()};
    qi.assign(size_t(qs.numel()), 0);
    qv.assign(qi.size(), 0.f);
    std::vector<float> o(size_t(os.numel()));
    ops::sfa_cache_write(*cpu, cpu_tensor(qi, qs), cpu_tensor(qv, qs), cpu_tensor(ki, ks),
                         cpu_tensor(kv, ks), cpu_tensor(v, vs), cpu_tensor(c, cs), pos, l);
    ops::sfa_attention_decode(*cpu, cpu_tensor(o, os), Tensor(), cpu_tensor(qi, qs),
                              cpu_tensor(qv, qs), cpu_tensor(ki, ks), cpu_tensor(kv, ks),
                              cpu_tensor(v, vs), pos, l);
    return o;
  }
};

template <typename T>
void decode_matches(int B, int T_, int H, int Hkv, int D, int k, int chunk) {
  SCOPED_TRACE(testing::Message() << test::type_name<T>() << " T " << T_ << " chunk " << chunk);
  auto gpu = ExecContext::make_cuda(0);
  const QKVLayout l{H, Hkv, D};
  const std::vector<float> x = test::to_precision<T>(sfa_inputs(B, T_, l, 9));
  CpuSparseCache ref{B, T_, H, k, l, x};
  const Shape &ks = ref.ks, &vs = ref.vs;
  DeviceIdx<uint8_t> dki(ref.ki.size());
  DeviceArray<T> dkv(ref.kv.size()), dv(ref.v.size());
  for (int pos = 0; pos < T_; pos += chunk) {
    const int n = std::min(chunk, T_ - pos);
    std::vector<float> c = ref.chunk(pos, n);
    const std::vector<float> o = ref.decode(c, pos, n);
    const Shape cs{B, n, l.width()}, qs{B, n, H, k}, os{B, n, l.q_width()};
    DeviceArray<T> dc(c), dqv(ref.qv.size()), dout(o.size());
    DeviceIdx<> dqi(ref.qi.size());
    ops::sfa_cache_write(*gpu, dqi.t(qs), dev_tensor(dqv, qs), dki.t(ks), dev_tensor(dkv, ks),
                         dev_tensor(dv, vs), dev_tensor(dc, cs), pos, l);
    ops::sfa_attention_decode(*gpu, dev_tensor(dout, os), Tensor(), dqi.t(qs), dev_tensor(dqv, qs),
                              dki.t(ks), dev_tensor(dkv, ks), dev_tensor(dv, vs), pos, l);
    EXPECT_EQ(dqi.download(), ref.qi);
    EXPECT_LT(test::report("sfa decode out", test::max_rel_error(dout.download(), o)), tol<T>());
  }
  EXPECT_EQ(dki.download(), ref.ki);
  EXPECT_EQ(dkv.download(), ref.kv);
  EXPECT_EQ(dv.download(), ref.v);
}

TEST(SfaCuda, SparseCacheDecodeMatchesTheReference) {
  CUDA_TEST_PREAMBLE();
  decode_matches<float>(2, 129, 4, 2, 32, 4, 129);  // prefill in one chunk
  decode_matches<float>(1, 40, 2, 1, 64, 8, 7);
  decode_matches<bf16>(2, 1000, 4, 2, 64, 8, 1000);
  decode_matches<bf16>(1, 33, 2, 2, 128, 16, 1);  // token by token
}

// The module in generate mode on a bf16 CUDA cache: a prefill runs the masked-dense forward
// (prefill_on_forward), the decode steps after it the sparse cache's rows it wrote; both against
// the CPU's sparse decode of the same rounded inputs (fp32, chunk by chunk as decode_matches).
void module_prefill_matches(int D) {
  SCOPED_TRACE(testing::Message() << "module prefill D " << D);
  auto gpu = ExecContext::make_cuda(0);
  const int B = 2, P = 300, T_ = P + 3, H = 4, k = D / 8;
  const QKVLayout l{H, 2, D};
  const std::vector<float> x = test::to_precision<bf16>(sfa_inputs(B, T_, l, 21));
  CpuSparseCache ref{B, T_, H, k, l, x};
  AttentionOptions o;
  o.type = "sfa";
  o.sfa.k = k;
  SfaAttention module(o);
  std::unique_ptr<AttentionCache> cache = module.make_cache(*gpu, B, T_, l, DType::bf16);
  GrowingBuffer scratch(Device::cuda);
  // The prefill's scratch holds the masked q~, k~, v of the forward's path (more than the q~ that
  // a chunk decoded from the sparse cache takes).
  const size_t prefill_bytes = module.decode_scratch_bytes(*gpu, B, P, 0, l, DType::bf16);
  EXPECT_GE(prefill_bytes, size_t(B) * P * l.width() * sizeof(bf16));
  EXPECT_GT(prefill_bytes, module.decode_scratch_bytes(*gpu, B, P, 1, l, DType::bf16));
  for (int pos = 0; pos < T_; pos += pos == 0 ? P : 1) {
    const int n = pos == 0 ? P : 1;  // the prefill, then decode steps
    std::vector<float> c = ref.chunk(pos, n);
    const std::vector<float> want = ref.decode(c, pos, n);
    DeviceArray<bf16> dc(c), dout(want.size());
    AttentionInputs in;
    in.qkv = dev_tensor(dc, Shape{B, n, l.width()});
    in.layout = l;
    in.pos = pos;
    in.mode = AttentionMode::generate;
    in.cache = cache.get();
    in.scratch = &scratch;
    module.forward(*gpu, in, dev_tensor(dout, Shape{B, n, l.q_width()}));
    EXPECT_EQ(scratch.bytes(), prefill_bytes);  // the prefill's, never grown after it
    EXPECT_LT(test::report(pos == 0 ? "sfa module prefill" : "sfa module decode step",
                           test::max_rel_error(dout.download(), want)),
              tol<bf16>())
        << "at " << pos;
  }
}

TEST(SfaCuda, ModulePrefillOnTheForwardMatchesTheSparseDecode) {
  CUDA_TEST_PREAMBLE();
  module_prefill_matches(64);
  module_prefill_matches(128);
}

template <typename T>
void distill_matches(int64_t n) {
  SCOPED_TRACE(testing::Message() << test::type_name<T>() << " n " << n);
  auto cpu = ExecContext::make_cpu();
  auto gpu = ExecContext::make_cuda(0);
  std::vector<float> s = test::to_precision<T>(test::random_vector(size_t(n), 1));
  std::vector<float> t = test::to_precision<T>(test::random_vector(size_t(n), 2));
  std::vector<float> d = test::to_precision<T>(test::random_vector(size_t(n), 3)), ds(s.size());
  double total = 0.5;
  ops::sfa_distill_fwd(*cpu, &total, cpu_tensor(s, {n}), cpu_tensor(t, {n}), 0.3f);
  ops::sfa_distill_bwd(*cpu, cpu_tensor(ds, {n}), cpu_tensor(d, {n}), cpu_tensor(s, {n}),
                       cpu_tensor(t, {n}), 0.3f);
  DeviceArray<T> dsd(s), dtd(t), ddd(d), dds(s.size());
  Buffer tot(Device::cuda, sizeof(double));
  double got[2] = {0.5, 0.0};
  for (int run = 0; run < 2; ++run) {  // deterministic: the same bits twice
    CUDA_CHECK(cudaMemcpy(tot.data(), &got[0], sizeof(double), cudaMemcpyHostToDevice));
    ops::sfa_distill_fwd(*gpu, static_cast<double*>(tot.data()), dev_tensor(dsd, {n}),
                         dev_tensor(dtd, {n}), 0.3f);
    CUDA_CHECK(cudaDeviceSynchronize());
    double r;
    CUDA_CHECK(cudaMemcpy(&r, tot.data(), sizeof(double), cudaMemcpyDeviceToHost));
    if (run == 0) got[1] = r;
    EXPECT_EQ(r, got[1]);
  }
  EXPECT_NEAR(got[1], total, 1e-9 * std::fabs(total));
  ops::sfa_distill_bwd(*gpu, dev_tensor(dds, {n}), dev_tensor(ddd, {n}), dev_tensor(dsd, {n}),
                       dev_tensor(dtd, {n}), 0.3f);
  EXPECT_LT(test::report("sfa distill grad", test::max_rel_error(dds.download(), ds)), tol<T>());
}

TEST(SfaCuda, DistillationTermMatchesAndIsDeterministic) {
  CUDA_TEST_PREAMBLE();
  distill_matches<float>(1);
  distill_matches<float>(100003);
  distill_matches<bf16>(4 * 1024 * 64);
}

}  // namespace
}  // namespace attnlab
