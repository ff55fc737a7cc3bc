// FlashSFA on CUDA (kernels/sfa/sfa_flash.cu, bf16) against the CPU fp32 reference (the overlap
// form, src/ref/sfa_flash_ref.cpp, on the same bf16-rounded inputs, so the selections agree
// exactly) and against the masked-dense bf16 path (ops::sfa_attention_fwd/bwd on the dense
// kernels). The bound is derived from a same-precision reference: the masked-dense path's error
// against the CPU for the same case, times 2, plus 1e-3 for the smaller errors of tiny cases
// (cuda_test_util.h). Outputs are poisoned (NaN) first, so an unwritten element fails.
// B = 2, GQA; D = 64 (k 4, 8, 16) and 128 (k 8, 16, 32); T 1, 64, 129, 1000 and 2049 (one k per
// D: the CPU backward is O(T^2)); head vectors with ties and all-zero ones; k = D equals dense;
// two runs bitwise equal; fp32 on CUDA refused naming attention.sfa.kernel.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cuda_test_util.h"
#include "ops/ops.h"
#include "ops/sfa_ops.h"

namespace attnlab {
namespace {

using test::cpu_tensor;
using test::DeviceArray;

Tensor dev(const DeviceArray<bf16>& a, Shape s) {
  return Tensor(a.ptr(), DType::bf16, Device::cuda, s);
}
Tensor dev(const DeviceArray<float>& a, Shape s) {
  return Tensor(a.ptr(), DType::f32, Device::cuda, s);
}
struct DeviceIdx {
  Buffer buf;
  size_t n;
  explicit DeviceIdx(size_t n_) : buf(Device::cuda, std::max<size_t>(n_, 1) * 4), n(n_) {}
  Tensor t(Shape s) const { return Tensor(buf.data(), DType::i32, Device::cuda, s); }
  std::vector<int32_t> download() const {
    std::vector<int32_t> h(n);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(h.data(), buf.data(), n * 4, cudaMemcpyDeviceToHost));
    return h;
  }
};

// Random qkv, some head vectors quantised (ties), some all zero.
std::vector<float> inputs(int B, int T, const QKVLayout& l, uint32_t seed) {
  std::vector<float> v = test::random_vector(size_t(B) * T * l.width(), seed, -1.5f, 1.5f);
  for (int64_t r = 0; r < int64_t(B) * T; ++r)
    for (int hv = 0; hv < l.n_head + l.n_kv_head; ++hv) {
      float* x = v.data() + r * l.width() + int64_t(hv) * l.head_dim;
      for (int c = 0; c < l.head_dim; ++c) {
        if ((r + hv) % 5 == 0) x[c] = std::round(x[c] * 2.f);
        if ((r + hv) % 11 == 0) x[c] = 0.f;
      }
    }
  return test::to_precision<bf16>(v);
}

// The columns [c0, c0 + n) of every row of width W.
std::vector<float> cols(const std::vector<float>& x, int64_t W, int64_t c0, int64_t n) {
  std::vector<float> r;
  for (size_t i = 0; i < x.size(); i += size_t(W))
    r.insert(r.end(), x.begin() + int64_t(i) + c0, x.begin() + int64_t(i) + c0 + n);
  return r;
}

struct Outputs {
  std::vector<float> o, lse, dq, dk, dv;
};

Outputs split(const QKVLayout& l, std::vector<float> o, std::vector<float> lse,
              const std::vector<float>& d) {
  const int64_t W = l.width();
  return {std::move(o), std::move(lse), cols(d, W, 0, l.q_width()),
          cols(d, W, l.k_offset(), l.kv_width()), cols(d, W, l.v_offset(), l.kv_width())};
}

// Elements of g (head vectors of D, in order) outside the selection idx (k per vector) not zero.
int off_selection_nonzeros(const std::vector<float>& g, const std::vector<int32_t>& idx, int D,
                           int k) {
  int n = 0;
  for (size_t v = 0; v * D < g.size(); ++v) {
    std::vector<char> sel(size_t(D), 0);
    for (int i = 0; i < k; ++i) sel[size_t(idx[v * k + i])] = 1;
    for (int c = 0; c < D; ++c) n += !sel[size_t(c)] && g[v * D + c] != 0.f;
  }
  return n;
}

void check_case(int T, int H, int Hkv, int D, int k) {
  SCOPED_TRACE(testing::Message() << "T " << T << " H " << H << "/" << Hkv << " D " << D << " k "
                                  << k);
  const int B = 2;
  const QKVLayout l{H, Hkv, D};
  const Shape s{B, T, l.width()}, os{B, T, l.q_width()}, ls{B, H, T};
  const Shape qs{B, T, H, k}, ks{B, T, Hkv, k};
  std::vector<float> x = inputs(B, T, l, uint32_t(T * 31 + D + k));
  std::vector<float> w =
      test::to_precision<bf16>(test::random_vector(size_t(os.numel()), uint32_t(T + k), -1.f, 1.f));
  auto cpu = ExecContext::make_cpu();
  auto gpu = ExecContext::make_cuda(0);

  // CPU fp32 reference (FlashSFA's overlap form).
  std::vector<int32_t> qi(size_t(qs.numel())), ki(size_t(ks.numel()));
  std::vector<float> qv(qi.size()), kv(ki.size()), o(size_t(os.numel())), lse(size_t(ls.numel())),
      d(x.size());
  ops::sfa_flash_fwd(*cpu, cpu_tensor(o, os), cpu_tensor(lse, ls), cpu_tensor(qi, qs),
                     cpu_tensor(qv, qs), cpu_tensor(ki, ks), cpu_tensor(kv, ks), cpu_tensor(x, s),
                     l);
  ops::sfa_flash_bwd(*cpu, cpu_tensor(d, s), cpu_tensor(w, os), cpu_tensor(o, os),
                     cpu_tensor(lse, ls), cpu_tensor(qi, qs), cpu_tensor(qv, qs),
                     cpu_tensor(ki, ks), cpu_tensor(kv, ks), cpu_tensor(x, s), l);
  const Outputs ref = split(l, o, lse, d);

  DeviceArray<bf16> dx(x), dw(w);
  // FlashSFA on the GPU.
  DeviceIdx gqi(qi.size()), gki(ki.size());
  DeviceArray<bf16> gqv(qv.size()), gkv(kv.size()), go(o.size()), gd(d.size());
  DeviceArray<float> glse(lse.size());
  go.poison();
  glse.poison();
  gd.poison();
  ops::sfa_flash_fwd(*gpu, dev(go, os), dev(glse, ls), gqi.t(qs), dev(gqv, qs), gki.t(ks),
                     dev(gkv, ks), dev(dx, s), l);
  ops::sfa_flash_bwd(*gpu, dev(gd, s), dev(dw, os), dev(go, os), dev(glse, ls), gqi.t(qs),
                     dev(gqv, qs), gki.t(ks), dev(gkv, ks), dev(dx, s), l);
  EXPECT_EQ(gqi.download(), qi);
  EXPECT_EQ(gki.download(), ki);
  const Outputs fl = split(l, go.download(), glse.download(), gd.download());

  // The masked-dense bf16 path: the same-precision reference.
  DeviceArray<bf16> msparse(x.size()), mo(o.size()), md(d.size());
  DeviceArray<float> mlse(lse.size());
  ops::sfa_attention_fwd(*gpu, dev(mo, os), dev(mlse, ls), dev(msparse, s), dev(dx, s), l, k);
  ops::sfa_attention_bwd(*gpu, dev(md, s), dev(dw, os), dev(msparse, s), dev(mo, os), dev(mlse, ls),
                         dev(dx, s), l, k);
  const Outputs mdn = split(l, mo.download(), mlse.download(), md.download());

  const char* names[] = {"o", "lse", "dq", "dk", "dv"};
  const std::vector<float>* r[] = {&ref.o, &ref.lse, &ref.dq, &ref.dk, &ref.dv};
  const std::vector<float>* f[] = {&fl.o, &fl.lse, &fl.dq, &fl.dk, &fl.dv};
  const std::vector<float>* m[] = {&mdn.o, &mdn.lse, &mdn.dq, &mdn.dk, &mdn.dv};
  for (int i = 0; i < 5; ++i) {
    const double err_md = test::max_rel_error(*m[i], *r[i]);
    const double bound = 2.0 * err_md + 1e-3;
    const std::string what = std::string("sfa_flash ") + names[i] + " D" + std::to_string(D) +
                             " k" + std::to_string(k) + " T" + std::to_string(T);
    EXPECT_LE(test::report(what.c_str(), test::max_rel_error(*f[i], *r[i])), bound)
        << names[i] << " vs the CPU reference; masked-dense bf16 error " << err_md;
    EXPECT_LE(test::max_rel_error(*f[i], *m[i]), bound + err_md)
        << names[i] << " vs the masked-dense bf16 path";
  }
  // Off the selection dq and dk are exactly zero.
  EXPECT_EQ(off_selection_nonzeros(fl.dq, qi, D, k), 0);
  EXPECT_EQ(off_selection_nonzeros(fl.dk, ki, D, k), 0);
}

TEST(SfaFlashCuda, MatchesTheReferenceD64) {
  CUDA_TEST_PREAMBLE();
  for (int k : {4, 8, 16})
    for (int T : {1, 64, 129, 1000}) check_case(T, 4, 2, 64, k);
  check_case(2049, 4, 2, 64, 8);
}

TEST(SfaFlashCuda, MatchesTheReferenceD128) {
  CUDA_TEST_PREAMBLE();
  for (int k : {8, 16, 32})
    for (int T : {1, 64, 129, 1000}) check_case(T, 4, 2, 128, k);
  check_case(2049, 2, 1, 128, 16);
}

// k = D keeps every coordinate: FlashSFA is dense attention (compared with the dense bf16 op
// within the bound of that op's own error against the CPU, as above).
TEST(SfaFlashCuda, KEqualToTheHeadDimIsDense) {
  CUDA_TEST_PREAMBLE();
  for (int D : {64, 128}) {
    SCOPED_TRACE(D);
    const int B = 2, T = 200, H = 4, Hkv = 2;
    const QKVLayout l{H, Hkv, D};
    const Shape s{B, T, l.width()}, os{B, T, l.q_width()}, ls{B, H, T}, qs{B, T, H, D},
        ks{B, T, Hkv, D};
    std::vector<float> x = inputs(B, T, l, uint32_t(D)), o(size_t(os.numel())),
                       lse(size_t(ls.numel()));
    auto cpu = ExecContext::make_cpu();
    auto gpu = ExecContext::make_cuda(0);
    ops::attention_fwd(*cpu, cpu_tensor(o, os), cpu_tensor(lse, ls), cpu_tensor(x, s), l);
    DeviceArray<bf16> dx(x), go(o.size()), dgo(o.size()), gqv(size_t(qs.numel())),
        gkv(size_t(ks.numel()));
    DeviceArray<float> glse(lse.size()), dglse(lse.size());
    DeviceIdx gqi(size_t(qs.numel())), gki(size_t(ks.numel()));
    ops::sfa_flash_fwd(*gpu, dev(go, os), dev(glse, ls), gqi.t(qs), dev(gqv, qs), gki.t(ks),
                       dev(gkv, ks), dev(dx, s), l);
    ops::attention_fwd(*gpu, dev(dgo, os), dev(dglse, ls), dev(dx, s), l);
    const double err_dense = test::max_rel_error(dgo.download(), o);
    EXPECT_LE(test::report("sfa_flash k=D vs dense", test::max_rel_error(go.download(), o)),
              2.0 * err_dense + 1e-3);
  }
}

// No atomics: two runs give bitwise equal o, lse and dqkv. fp32 on CUDA is refused with the key.
TEST(SfaFlashCuda, DeterministicAndFp32Refused) {
  CUDA_TEST_PREAMBLE();
  const int B = 2, T = 300, H = 4, Hkv = 2, D = 64, k = 8;
  const QKVLayout l{H, Hkv, D};
  const Shape s{B, T, l.width()}, os{B, T, l.q_width()}, ls{B, H, T}, qs{B, T, H, k},
      ks{B, T, Hkv, k};
  auto gpu = ExecContext::make_cuda(0);
  DeviceArray<bf16> dx(inputs(B, T, l, 9)),
      dw(test::to_precision<bf16>(test::random_vector(size_t(os.numel()), 10)));
  std::vector<bf16> first[2];
  std::vector<float> first_lse;
  for (int run = 0; run < 2; ++run) {
    DeviceIdx gqi(size_t(qs.numel())), gki(size_t(ks.numel()));
    DeviceArray<bf16> gqv(size_t(qs.numel())), gkv(size_t(ks.numel())), go(size_t(os.numel())),
        gd(size_t(s.numel()));
    DeviceArray<float> glse(size_t(ls.numel()));
    ops::sfa_flash_fwd(*gpu, dev(go, os), dev(glse, ls), gqi.t(qs), dev(gqv, qs), gki.t(ks),
                       dev(gkv, ks), dev(dx, s), l);
    ops::sfa_flash_bwd(*gpu, dev(gd, s), dev(dw, os), dev(go, os), dev(glse, ls), gqi.t(qs),
                       dev(gqv, qs), gki.t(ks), dev(gkv, ks), dev(dx, s), l);
    if (run == 0) {
      first[0] = go.raw();
      first[1] = gd.raw();
      first_lse = glse.download();
    } else {
      EXPECT_TRUE(test::bitwise_equal(go.raw(), first[0]));
      EXPECT_TRUE(test::bitwise_equal(gd.raw(), first[1]));
      EXPECT_TRUE(test::bitwise_equal(glse.download(), first_lse));
    }
  }
  DeviceArray<float> fx(inputs(B, T, l, 9)), fo(size_t(os.numel())), fqv(size_t(qs.numel())),
      fkv(size_t(ks.numel())), flse(size_t(ls.numel()));
  DeviceIdx fqi(size_t(qs.numel())), fki(size_t(ks.numel()));
  test::expect_error(
      [&] {
        ops::sfa_flash_fwd(*gpu, dev(fo, os), dev(flse, ls), fqi.t(qs), dev(fqv, qs), fki.t(ks),
                           dev(fkv, ks), dev(fx, s), l);
      },
      {"sfa_flash_fwd", "attention.sfa.kernel: masked_dense"});
}

}  // namespace
}  // namespace attnlab
