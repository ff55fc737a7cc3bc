// Fused AdamW and the deterministic sum of squares vs the CPU references.
// bf16 params with an fp32 master: the master, m and v match the reference; the bf16 param is one
// of the two bf16 neighbours of the master, chosen without bias (stochastic rounding), and the
// same seed reproduces the same rounding.
#include <gtest/gtest.h>

#include <cmath>

#include "cuda_test_util.h"
#include "kernels/optim/adamw.cuh"
#include "ops/ops.h"
#include "ref/adamw_ref.h"

namespace attnlab {
namespace {

using namespace test;

AdamWParams<float> hyper(int64_t n, int step) {
  AdamWParams<float> p;
  p.n = n, p.lr = 1e-2f, p.beta1 = 0.9f, p.beta2 = 0.95f, p.eps = 1e-8f, p.weight_decay = 0.1f;
  p.grad_scale = 0.7f, p.step = step, p.seed = 1234;
  return p;
}

TEST(AdamWCuda, MatchesReferenceF32) {
  CUDA_TEST_PREAMBLE();
  for (int64_t n : {1, 1000, 100003}) {
    auto w = random_vector(size_t(n), 1), g = random_vector(size_t(n), 2);
    auto m = random_vector(size_t(n), 3, -0.1f, 0.1f), v = random_vector(size_t(n), 4, 0.f, 0.01f);
    DeviceArray<float> dw(w), dg(g), dm(m), dv(v);
    AdamWParams<float> r = hyper(n, 3);
    r.param = w.data(), r.grad = g.data(), r.m = m.data(), r.v = v.data();
    adamw_ref(r);
    AdamWParams<float> p = hyper(n, 3);
    p.param = dw.ptr(), p.grad = dg.ptr(), p.m = dm.ptr(), p.v = dv.ptr();
    launch_adamw<float>(p, nullptr);
    const auto name = strformat("adamw f32 n=%lld", (long long)n);
    EXPECT_LT(report((name + " param").c_str(), max_rel_error(dw.download(), w)), 1e-5);
    EXPECT_LT(report((name + " m").c_str(), max_rel_error(dm.download(), m)), 1e-5);
    EXPECT_LT(report((name + " v").c_str(), max_rel_error(dv.download(), v)), 1e-5);
  }
}

void check_adamw_bf16(int64_t n) {
  auto master = random_vector(size_t(n), 1), g = to_precision<bf16>(random_vector(size_t(n), 2));
  auto m = random_vector(size_t(n), 3, -0.1f, 0.1f), v = random_vector(size_t(n), 4, 0.f, 0.01f);
  const auto master0 = master, m0 = m, v0 = v;  // adamw_ref updates master, m, v in place
  DeviceArray<bf16> dparam(to_precision<bf16>(master)), dg(g);
  DeviceArray<float> dmaster(master), dm(m), dv(v);
  AdamWParams<float> r = hyper(n, 1);
  std::vector<float> param_ref = master;
  r.param = param_ref.data(), r.master = master.data(), r.grad = g.data(), r.m = m.data();
  r.v = v.data();
  adamw_ref(r);
  AdamWParams<bf16> p;
  {
    const AdamWParams<float> h = hyper(n, 1);
    p.n = n, p.lr = h.lr, p.beta1 = h.beta1, p.beta2 = h.beta2, p.eps = h.eps;
    p.weight_decay = h.weight_decay, p.grad_scale = h.grad_scale, p.step = h.step, p.seed = h.seed;
  }
  p.param = dparam.ptr(), p.master = dmaster.ptr(), p.grad = dg.ptr(), p.m = dm.ptr();
  p.v = dv.ptr();
  launch_adamw<bf16>(p, nullptr);
  const auto got_master = dmaster.download();
  EXPECT_LT(report(strformat("adamw bf16 n=%lld master", (long long)n).c_str(),
                   max_rel_error(got_master, master)),
            1e-5);
  EXPECT_LT(report("adamw bf16 m", max_rel_error(dm.download(), m)), 1e-5);
  EXPECT_LT(report("adamw bf16 v", max_rel_error(dv.download(), v)), 1e-5);

  // Each param is the bf16 just below or above its master value; the signed rounding offset in
  // ulps averages to ~0 (round-to-nearest or truncation would give a visible bias on this data).
  const auto param = dparam.download();
  double bias = 0.0;
  int64_t not_neighbour = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float x = got_master[i];
    const float lo = __bfloat162float(__float2bfloat16_rd(x));
    const float hi = __bfloat162float(__float2bfloat16_ru(x));
    if (param[i] != lo && param[i] != hi) ++not_neighbour;
    if (hi != lo) bias += (double(param[i]) - x) / (double(hi) - lo);
  }
  EXPECT_EQ(not_neighbour, 0);
  EXPECT_LT(std::fabs(report("adamw bf16 stochastic rounding bias (ulp)", bias / n)), 0.01);

  // Same seed, same start: bitwise the same params.
  const auto first = dparam.raw();
  dparam.upload(to_precision<bf16>(master0));
  dmaster.upload(master0);
  dm.upload(m0);
  dv.upload(v0);
  launch_adamw<bf16>(p, nullptr);
  EXPECT_TRUE(bitwise_equal(first, dparam.raw()));
}

TEST(AdamWCuda, BF16WithMasterUsesUnbiasedStochasticRounding) {
  CUDA_TEST_PREAMBLE();
  for (int64_t n : {200003, 200000}) check_adamw_bf16(n);  // scalar and vectorized (n % 4 == 0)
}

// Multi-tensor AdamW: ranges with odd sizes and offsets (scalar and quad paths), several work
// blocks, decay on and off, a gap between ranges that must stay untouched. The result must be
// bitwise what one launch per range gives, and within fp32 rounding of the CPU reference.
template <typename T>
void check_adamw_multi(bool with_master) {
  const std::vector<ops::AdamWRangeSpec> spec = {
      {0, 4096 * 3 + 8, true, 11},  // quad path, four work blocks
      {12296, 7, false, 22},        // odd size: scalar path
      {12303, 1001, true, 33},      // odd offset: scalar path
      {13400, 2048, false, 44},     // after a gap of 96 untouched elements
      {15448, 1, true, 55}};
  const int64_t n = 15449;
  const auto w0 = to_precision<T>(random_vector(size_t(n), 1));
  const auto g = to_precision<T>(random_vector(size_t(n), 2));
  const auto m0 = random_vector(size_t(n), 3, -0.1f, 0.1f);
  const auto v0 = random_vector(size_t(n), 4, 0.f, 0.01f);
  auto gpu = ExecContext::make_cuda(0);
  ops::AdamWStep st;
  st.lr = 1e-2f, st.weight_decay = 0.1f, st.grad_scale = 0.7f, st.step = 2, st.seed = 0xABCD;
  const DType dt = std::is_same_v<T, bf16> ? DType::bf16 : DType::f32;
  struct State {
    DeviceArray<T> param, grad;
    DeviceArray<float> master, m, v;
  };
  auto make = [&] {
    return State{DeviceArray<T>(w0), DeviceArray<T>(g), DeviceArray<float>(w0),
                 DeviceArray<float>(m0), DeviceArray<float>(v0)};
  };
  const auto flat = [n](void* ptr, DType t) { return Tensor(ptr, t, Device::cuda, Shape{n}); };
  State multi = make(), single = make();
  const ops::AdamWRangeTable table(*gpu, spec);
  ops::adamw_update_multi(*gpu, flat(multi.param.ptr(), dt),
                          with_master ? flat(multi.master.ptr(), DType::f32) : Tensor(),
                          flat(multi.grad.ptr(), dt), flat(multi.m.ptr(), DType::f32),
                          flat(multi.v.ptr(), DType::f32), table, st);
  for (const auto& r : spec) {
    const auto at = [&](const Tensor& t) { return t.slice0(r.offset, r.offset + r.numel); };
    ops::AdamWStep rs = st;
    rs.weight_decay = r.decay ? st.weight_decay : 0.f;
    rs.seed = st.seed ^ r.seed;
    ops::adamw_update(*gpu, at(flat(single.param.ptr(), dt)),
                      with_master ? at(flat(single.master.ptr(), DType::f32)) : Tensor(),
                      at(flat(single.grad.ptr(), dt)), at(flat(single.m.ptr(), DType::f32)),
                      at(flat(single.v.ptr(), DType::f32)), rs);
  }
  gpu->synchronize();
  const char* name = with_master ? "with master" : "no master";
  EXPECT_TRUE(bitwise_equal(multi.param.raw(), single.param.raw())) << type_name<T>() << name;
  EXPECT_TRUE(bitwise_equal(multi.m.raw(), single.m.raw())) << type_name<T>() << name;
  EXPECT_TRUE(bitwise_equal(multi.v.raw(), single.v.raw())) << type_name<T>() << name;
  if (with_master) {
    EXPECT_TRUE(bitwise_equal(multi.master.raw(), single.master.raw()));
  }

  // CPU reference, range by range (f32 weights: for bf16 the fp32 update before rounding).
  std::vector<float> w = w0, m = m0, v = v0;
  for (const auto& r : spec) {
    AdamWParams<float> p;
    p.param = w.data() + r.offset, p.grad = g.data() + r.offset, p.m = m.data() + r.offset;
    p.v = v.data() + r.offset, p.n = r.numel, p.lr = st.lr, p.beta1 = st.beta1;
    p.beta2 = st.beta2, p.eps = st.eps, p.weight_decay = r.decay ? st.weight_decay : 0.f;
    p.grad_scale = st.grad_scale, p.step = st.step;
    adamw_ref(p);
  }
  const auto got_w =
      std::is_same_v<T, bf16> && with_master ? multi.master.download() : multi.param.download();
  // bf16 without a master: the weight is rounded once into bf16 (stochastically).
  const double wtol = std::is_same_v<T, bf16> && !with_master ? 1e-2 : 1e-5;
  const auto label = strformat("adamw multi %s %s", type_name<T>(), name);
  EXPECT_LT(report((label + " weights").c_str(), max_rel_error(got_w, w)), wtol);
  EXPECT_LT(report((label + " m").c_str(), max_rel_error(multi.m.download(), m)), 1e-5);
  EXPECT_LT(report((label + " v").c_str(), max_rel_error(multi.v.download(), v)), 1e-5);
  const auto gap = multi.param.download();
  for (int64_t i = 13304; i < 13400; ++i) ASSERT_EQ(gap[size_t(i)], w0[size_t(i)]) << "gap " << i;
}

TEST(AdamWCuda, MultiTensorIsBitwiseThePerRangeUpdate) {
  CUDA_TEST_PREAMBLE();
  check_adamw_multi<float>(false);
  check_adamw_multi<bf16>(true);
  check_adamw_multi<bf16>(false);
}

template <typename T>
void check_sumsq(int64_t n, uint32_t seed) {
  const auto g = to_precision<T>(random_vector(size_t(n), seed));
  DeviceArray<T> dg(g);
  DeviceArray<float> out(1);
  launch_sumsq<T>(dg.ptr(), n, out.ptr(), nullptr);
  const double ref = sumsq_ref(g.data(), n);
  const float got = out.download()[0];
  const auto name = strformat("sumsq %s n=%lld", type_name<T>(), (long long)n);
  EXPECT_LT(report(name.c_str(), std::fabs(got - ref) / ref), 1e-5);
  launch_sumsq<T>(dg.ptr(), n, out.ptr(), nullptr);
  EXPECT_EQ(got, out.download()[0]) << "sumsq must be deterministic";
}

TEST(AdamWCuda, SumOfSquaresMatchesReference) {
  CUDA_TEST_PREAMBLE();
  for (int64_t n : {1, 1000, 4103, (1 << 20) + 5}) {  // packs (unrolled) and a scalar tail
    check_sumsq<float>(n, uint32_t(n));
    check_sumsq<bf16>(n, uint32_t(n) + 1);
  }
}

}  // namespace
}  // namespace attnlab
