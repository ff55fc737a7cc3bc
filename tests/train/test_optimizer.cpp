// AdamW: the CPU reference and optimizer against the formula evaluated in double in the test,
// weight decay only where declared, global-norm clipping, frozen tensors, non-finite gradients,
// the deterministic sum of squares, state round trips and error messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "ops/ops.h"
#include "test_util.h"
#include "train/optimizer.h"

namespace attnlab {
namespace {

using test::expect_error;

void expect_close(double expected, float actual, double rel, const std::string& what) {
  EXPECT_NEAR(actual, expected, rel * std::abs(expected) + 1e-12) << what;
}

// Store: a decayed matrix, a non-decayed bias, another decayed matrix (so ranges split and merge),
// and a frozen attention-role tensor.
void declare_model(ParameterStore& store) {
  store.declare({"w1", Shape{2, 3}, ParamRole::base, ParamInit::normal, 0.5f, true});
  store.declare({"b1", Shape{3}, ParamRole::base, ParamInit::normal, 0.5f, false});
  store.declare({"w2", Shape{3, 2}, ParamRole::base, ParamInit::normal, 0.5f, true});
  store.declare({"frozen", Shape{4}, ParamRole::attention, ParamInit::normal, 0.5f, true});
}

std::vector<float> to_vec(const Tensor& t) {
  std::vector<float> out(size_t(t.numel()));
  copy_tensor(Tensor(out.data(), DType::f32, Device::cpu, t.shape), t);
  return out;
}

void fill_random(const Tensor& t, std::mt19937& rng, float scale) {
  std::normal_distribution<float> dist(0.f, scale);
  float* p = t.ptr<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
}

// Random gradients for the trainable tensors only: the store's alignment padding stays zero, as
// backward leaves it.
void fill_grads(const ParameterStore& store, std::mt19937& rng, float scale) {
  for (const auto& e : store.entries())
    if (e.trainable) fill_random(store.grad(e.spec.name), rng, scale);
}

// The AdamW formula in double, one tensor at a time.
struct DoubleAdam {
  std::vector<double> w, m, v;
  void step(const std::vector<float>& g, double scale, double lr, double b1, double b2, double eps,
            double wd, int t) {
    for (size_t i = 0; i < w.size(); ++i) {
      const double gi = g[i] * scale;
      m[i] = b1 * m[i] + (1 - b1) * gi;
      v[i] = b2 * v[i] + (1 - b2) * gi * gi;
      const double mhat = m[i] / (1 - std::pow(b1, t)), vhat = v[i] / (1 - std::pow(b2, t));
      w[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + wd * w[i]);
    }
  }
};

// Runs three optimizer steps with random gradients and checks every trainable value, the moments,
// the returned norm and clip factor against DoubleAdam. Returns the clip scales seen.
std::vector<float> run_against_formula(const AdamWConfig& cfg, float grad_std) {
  auto ctx = ExecContext::make_cpu();
  ParameterStore store;
  declare_model(store);
  store.finalize(Device::cpu, DType::f32, {ParamRole::base});
  store.initialize(7);
  const std::vector<float> frozen_before = to_vec(store.param("frozen"));
  AdamW opt(*ctx, store, cfg);

  const std::vector<std::string> names{"w1", "b1", "w2"};
  std::map<std::string, DoubleAdam> ref;
  for (const auto& n : names) {
    auto w = to_vec(store.param(n));
    ref[n] = DoubleAdam{std::vector<double>(w.begin(), w.end()), std::vector<double>(w.size()),
                        std::vector<double>(w.size())};
  }
  std::mt19937 rng(123);
  std::vector<float> scales;
  const float lrs[3] = {1e-2f, 2e-2f, 5e-3f};
  for (int t = 1; t <= 3; ++t) {
    fill_grads(store, rng, grad_std);
    double sumsq = 0;
    for (const auto& n : {"w1", "b1", "w2"})
      for (float g : to_vec(store.grad(n))) sumsq += double(g) * g;
    const double norm = std::sqrt(sumsq);
    const double scale =
        cfg.grad_clip > 0 ? cfg.grad_clip / std::max(norm, double(cfg.grad_clip)) : 1;

    const StepStats st = opt.step(lrs[t - 1], t);
    EXPECT_TRUE(st.finite);
    EXPECT_NEAR(st.grad_norm, norm, 1e-12 * norm);
    EXPECT_NEAR(st.clip_scale, scale, 1e-7 * scale);
    scales.push_back(st.clip_scale);
    for (const auto& n : names) {
      const bool decay = store.entry(n).spec.weight_decay;
      ref[n].step(to_vec(store.grad(n)), scale, lrs[t - 1], cfg.beta1, cfg.beta2, cfg.eps,
                  decay ? cfg.weight_decay : 0.0, t);
    }
    // Moments live in one flat f32 buffer over the trainable range, at the entries' offsets.
    const auto state = opt.state_tensors();
    const std::vector<float> m = to_vec(state[0].second), v = to_vec(state[1].second);
    for (const auto& n : names) {
      const std::vector<float> w = to_vec(store.param(n));
      const int64_t off = store.entry(n).offset;
      // m is a sum of gradients of both signs and can cancel: its float rounding is relative to
      // the tensor's largest moment, not to the element.
      double m_scale = 0;
      for (double x : ref[n].m) m_scale = std::max(m_scale, std::abs(x));
      for (size_t i = 0; i < w.size(); ++i) {
        const std::string at = n + "[" + std::to_string(i) + "] step " + std::to_string(t);
        expect_close(ref[n].w[i], w[i], 1e-6, "w " + at);
        EXPECT_NEAR(m[size_t(off) + i], ref[n].m[i], 1e-6 * m_scale) << "m " << at;
        expect_close(ref[n].v[i], v[size_t(off) + i], 1e-6, "v " + at);
      }
    }
  }
  EXPECT_EQ(to_vec(store.param("frozen")), frozen_before);
  return scales;
}

TEST(AdamW, MatchesFormulaWithDecayOnlyOnDecayTensors) {
  AdamWConfig cfg;
  cfg.weight_decay = 0.5f;  // large, so decaying the bias by mistake is far outside tolerance
  cfg.grad_clip = 0.f;
  cfg.eps = 1e-3f;  // comparable to sqrt(vhat), so the eps term is exercised
  const auto scales = run_against_formula(cfg, 0.01f);
  for (float s : scales) EXPECT_EQ(s, 1.f);
}

TEST(AdamW, ClipsWhenNormExceedsClip) {
  AdamWConfig cfg;
  cfg.grad_clip = 0.1f;
  cfg.eps = 1e-2f;  // Adam is nearly scale invariant; a large eps makes the scale visible in w too
  const auto scales = run_against_formula(cfg, 1.f);  // norm ~ sqrt(15) >> 0.1
  for (float s : scales) EXPECT_LT(s, 0.1f);
}

TEST(AdamW, LeavesGradientsUnscaledBelowClip) {
  AdamWConfig cfg;
  cfg.grad_clip = 100.f;
  const auto scales = run_against_formula(cfg, 0.1f);
  for (float s : scales) EXPECT_EQ(s, 1.f);
}

TEST(AdamW, DecayFlagDecidesDecay) {
  // Same weights and gradients; only b1's flag differs between the two stores.
  auto ctx = ExecContext::make_cpu();
  std::vector<float> b1_result[2];
  for (int flag = 0; flag < 2; ++flag) {
    ParameterStore store;
    store.declare({"w1", Shape{2, 3}, ParamRole::base, ParamInit::normal, 0.5f, true});
    store.declare({"b1", Shape{3}, ParamRole::base, ParamInit::normal, 0.5f, flag == 1});
    store.finalize(Device::cpu, DType::f32, {ParamRole::base});
    store.initialize(3);
    std::mt19937 rng(5);
    fill_grads(store, rng, 0.1f);
    AdamWConfig cfg;
    cfg.weight_decay = 0.5f;
    AdamW opt(*ctx, store, cfg);
    const std::vector<float> before = to_vec(store.param("b1"));
    opt.step(1e-2f, 1);
    b1_result[flag] = to_vec(store.param("b1"));
    // Decay shrinks the weight by lr*wd*w on top of the Adam step: exactly 5e-3 * w here.
    for (size_t i = 0; i < before.size(); ++i) {
      const double g = store.grad("b1").ptr<float>()[i];
      const double adam = 1e-2 * g / (std::abs(g) + 1e-8);  // first step: mhat/sqrt(vhat) = sign
      const double expected = before[i] - adam - (flag ? 5e-3 * before[i] : 0.0);
      expect_close(expected, b1_result[flag][i], 1e-6, "b1 flag " + std::to_string(flag));
    }
  }
  EXPECT_NE(b1_result[0], b1_result[1]);
}

TEST(AdamW, FrozenEntriesHaveNoStateAndNoUpdate) {
  auto ctx = ExecContext::make_cpu();
  ParameterStore store;
  declare_model(store);
  store.finalize(Device::cpu, DType::f32, {ParamRole::base});
  store.initialize(11);
  EXPECT_TRUE(store.grad("frozen").empty());
  AdamW opt(*ctx, store, AdamWConfig{});
  // The state covers the trainable range: w1, b1, w2 at aligned offsets 0, 64, 128, padded.
  EXPECT_EQ(store.num_trainable(), 6 + 3 + 6);
  for (const auto& [name, t] : opt.state_tensors())
    EXPECT_EQ(t.numel(), 3 * kParamAlignElements) << name;
  EXPECT_EQ(opt.state_tensors().size(), 2u);  // f32 store: no master copy
  const auto frozen = to_vec(store.param("frozen"));
  const auto w1 = to_vec(store.param("w1"));
  std::mt19937 rng(1);
  fill_grads(store, rng, 0.1f);
  opt.step(1e-2f, 1);
  EXPECT_EQ(to_vec(store.param("frozen")), frozen);
  EXPECT_NE(to_vec(store.param("w1")), w1);
}

// A bf16 run's state (m, v and the fp32 master) loaded into an f32 store (its resume on the
// CPU): the trainable weights take the master's values, which the model file holds only rounded
// to bf16; the frozen ones stay.
TEST(AdamW, Bf16StateIntoAnF32StoreTakesTheMaster) {
  auto ctx = ExecContext::make_cpu();
  ParameterStore store;
  declare_model(store);
  store.finalize(Device::cpu, DType::f32, {ParamRole::base});
  store.initialize(3);
  AdamW opt(*ctx, store, AdamWConfig{});
  const int64_t n = store.trainable_buffer_numel();
  std::vector<float> m(size_t(n), 0.01f), v(size_t(n), 0.02f), master(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) master[size_t(i)] = 0.001f * float(i) + 1.0f / 3.0f;
  const auto frozen = to_vec(store.param("frozen"));
  const std::vector<std::pair<std::string, Tensor>> state = {
      {"adamw.m", Tensor(m.data(), DType::f32, Device::cpu, Shape{n})},
      {"adamw.v", Tensor(v.data(), DType::f32, Device::cpu, Shape{n})},
      {"adamw.master", Tensor(master.data(), DType::f32, Device::cpu, Shape{n})}};
  opt.load_state(state);
  EXPECT_EQ(to_vec(store.trainable_params()), master);
  EXPECT_EQ(to_vec(store.param("frozen")), frozen);
  EXPECT_EQ(to_vec(opt.state_tensors()[0].second), m);
}

TEST(AdamW, NonFiniteGradientSkipsTheUpdate) {
  auto ctx = ExecContext::make_cpu();
  ParameterStore store;
  declare_model(store);
  store.finalize(Device::cpu, DType::f32, {ParamRole::base});
  store.initialize(2);
  AdamW opt(*ctx, store, AdamWConfig{});
  std::mt19937 rng(9);
  for (float bad : {NAN, INFINITY}) {
    fill_grads(store, rng, 0.1f);
    store.grad("b1").ptr<float>()[1] = bad;
    const auto params = to_vec(store.all_params());
    const StepStats st = opt.step(1e-2f, 1);
    EXPECT_FALSE(st.finite);
    EXPECT_FALSE(std::isfinite(st.grad_norm));
    EXPECT_EQ(st.clip_scale, 0.f);
    EXPECT_EQ(to_vec(store.all_params()), params);
    for (float m : to_vec(opt.state_tensors()[0].second)) EXPECT_EQ(m, 0.f);
  }
}

TEST(AdamW, StateRoundTrip) {
  // Two optimizers: one runs 2 steps, its state and weights go to the second, then both run a
  // third step with the same gradients and must agree bit for bit.
  auto ctx = ExecContext::make_cpu();
  ParameterStore a, b;
  declare_model(a);
  declare_model(b);
  a.finalize(Device::cpu, DType::f32, {ParamRole::base});
  b.finalize(Device::cpu, DType::f32, {ParamRole::base});
  a.initialize(4);
  b.initialize(99);
  AdamW oa(*ctx, a, AdamWConfig{}), ob(*ctx, b, AdamWConfig{});
  std::mt19937 rng(3);
  for (int t = 1; t <= 2; ++t) {
    fill_grads(a, rng, 0.1f);
    oa.step(1e-2f, t);
  }
  copy_tensor(b.all_params(), a.all_params());
  ob.load_state(oa.state_tensors());
  fill_grads(a, rng, 0.1f);
  copy_tensor(b.grads(), a.grads());
  oa.step(1e-2f, 3);
  ob.step(1e-2f, 3);
  EXPECT_EQ(to_vec(a.all_params()), to_vec(b.all_params()));
  EXPECT_EQ(to_vec(oa.state_tensors()[1].second), to_vec(ob.state_tensors()[1].second));

  auto state = oa.state_tensors();
  state.pop_back();
  expect_error([&] { ob.load_state(state); }, "missing tensor 'adamw.v'");
  state = oa.state_tensors();
  state.emplace_back("adamw.bogus", state[0].second);
  expect_error([&] { ob.load_state(state); }, "unexpected tensor 'adamw.bogus'");
  state = oa.state_tensors();
  state[0].second = state[0].second.slice0(0, 3);
  expect_error([&] { ob.load_state(state); }, "'adamw.m' must be f32 with 192 elements");
  // A NaN or an infinity in the state is refused, named (it became NaN weights after one step).
  for (const float bad : {std::nanf(""), INFINITY}) {
    std::vector<float> v = to_vec(oa.state_tensors()[1].second);
    v[7] = bad;
    state = oa.state_tensors();
    state[1].second = Tensor(v.data(), DType::f32, Device::cpu, state[1].second.shape);
    expect_error([&] { ob.load_state(state); },
                 {"'adamw.v' holds", std::isnan(bad) ? "NaN" : "an infinity", "element 7"});
  }
  // The moments swapped (m has negative entries): v < 0 is refused (it became NaN after steps).
  state = oa.state_tensors();
  std::swap(state[0].second, state[1].second);
  expect_error([&] { ob.load_state(state); }, {"'adamw.v' (the second moment", "< 0 at element"});
}

TEST(AdamW, ConfigAndStepErrors) {
  auto ctx = ExecContext::make_cpu();
  ParameterStore store;
  declare_model(store);
  store.finalize(Device::cpu, DType::f32, {ParamRole::base});
  AdamWConfig cfg;
  cfg.beta2 = 1.f;
  expect_error([&] { AdamW(*ctx, store, cfg); }, "optimizer.beta2");
  cfg = AdamWConfig{};
  cfg.eps = 0.f;
  expect_error([&] { AdamW(*ctx, store, cfg); }, "optimizer.eps");
  AdamW opt(*ctx, store, AdamWConfig{});
  expect_error([&] { opt.step(1e-3f, 0); }, "step counts from 1");
  ParameterStore unfinalized;
  expect_error([&] { AdamW(*ctx, unfinalized, AdamWConfig{}); }, "must be finalized");
}

// ---- the host ops ------------------------------------------------------------------------------

struct HostTensor {
  std::vector<float> data;
  Tensor t;
  HostTensor(int64_t n, std::mt19937& rng, float scale = 1.f) : data(size_t(n)) {
    t = Tensor(data.data(), DType::f32, Device::cpu, Shape{n});
    fill_random(t, rng, scale);
  }
};

TEST(AdamWOp, ShapeDtypeAndDeviceErrors) {
  auto ctx = ExecContext::make_cpu();
  std::mt19937 rng(1);
  HostTensor p(8, rng), g(8, rng), m(8, rng), v(8, rng), small(4, rng);
  for (float& x : v.data) x = std::abs(x);
  ops::AdamWStep s;
  ops::adamw_update(*ctx, p.t, Tensor(), g.t, m.t, v.t, s);  // valid
  expect_error([&] { ops::adamw_update(*ctx, p.t, Tensor(), small.t, m.t, v.t, s); },
               "grad must match param f32[8] on cpu, got f32[4] on cpu");
  expect_error([&] { ops::adamw_update(*ctx, p.t, Tensor(), g.t, small.t, v.t, s); },
               "m must have as many elements as param");
  expect_error([&] { ops::adamw_update(*ctx, p.t, small.t, g.t, m.t, v.t, s); },
               "master must have as many elements");
  Tensor as_i32 = v.t;
  as_i32.dtype = DType::i32;
  expect_error([&] { ops::adamw_update(*ctx, p.t, Tensor(), g.t, m.t, as_i32, s); },
               "v must be f32");
  Tensor on_cuda = g.t;
  on_cuda.device = Device::cuda;
  expect_error([&] { ops::adamw_update(*ctx, p.t, Tensor(), on_cuda, m.t, v.t, s); },
               "grad is f32[8] on cuda but the context runs on cpu");
  Tensor p_bf16 = p.t.view(Shape{8}), g_bf16 = g.t;
  p_bf16.dtype = g_bf16.dtype = DType::bf16;
  expect_error([&] { ops::adamw_update(*ctx, p_bf16, Tensor(), g_bf16, m.t, v.t, s); },
               "the CPU supports f32 only");
  s.step = 0;
  expect_error([&] { ops::adamw_update(*ctx, p.t, Tensor(), g.t, m.t, v.t, s); },
               "step counts from 1");
  s.step = 1;
  s.beta1 = 1.f;
  expect_error([&] { ops::adamw_update(*ctx, p.t, Tensor(), g.t, m.t, v.t, s); }, "beta1");
  expect_error([&] { ops::sum_of_squares(*ctx, as_i32); }, "grad must be f32 or bf16");
}

TEST(AdamWOp, MasterCopyIsUpdatedAndCopiedIntoParam) {
  auto ctx = ExecContext::make_cpu();
  std::mt19937 rng(2);
  HostTensor p(16, rng), g(16, rng), m(16, rng, 0.1f), v(16, rng, 0.1f), master(16, rng);
  for (float& x : v.data) x = x * x;
  HostTensor p2(16, rng), m2(16, rng), v2(16, rng);
  std::copy(master.data.begin(), master.data.end(), p2.data.begin());  // same weight, as param
  std::copy(m.data.begin(), m.data.end(), m2.data.begin());
  std::copy(v.data.begin(), v.data.end(), v2.data.begin());
  ops::AdamWStep s;
  s.lr = 1e-2f;
  s.weight_decay = 0.1f;
  s.step = 3;
  ops::adamw_update(*ctx, p.t, master.t, g.t, m.t, v.t, s);
  ops::adamw_update(*ctx, p2.t, Tensor(), g.t, m2.t, v2.t, s);
  EXPECT_EQ(master.data, p2.data);
  EXPECT_EQ(p.data, p2.data);
  EXPECT_EQ(m.data, m2.data);
}

TEST(AdamWOp, MultiRangeIsExactlyThePerRangeUpdate) {
  auto ctx = ExecContext::make_cpu();
  std::mt19937 rng(3);
  const int64_t n = 40;
  HostTensor p(n, rng), g(n, rng), m(n, rng, 0.1f), v(n, rng, 0.1f);
  for (float& x : v.data) x = x * x;
  HostTensor p2(n, rng), m2(n, rng), v2(n, rng);
  p2.data = p.data, m2.data = m.data, v2.data = v.data;
  const std::vector<float> p0 = p.data;
  const std::vector<ops::AdamWRangeSpec> spec = {
      {0, 13, true, 1}, {13, 5, false, 2}, {30, 9, true, 3}};
  ops::AdamWStep s;
  s.lr = 1e-2f, s.weight_decay = 0.1f, s.step = 2, s.seed = 7;
  ops::adamw_update_multi(*ctx, p.t, Tensor(), g.t, m.t, v.t, ops::AdamWRangeTable(*ctx, spec), s);
  for (const auto& r : spec) {
    const auto at = [&](const Tensor& t) { return t.slice0(r.offset, r.offset + r.numel); };
    ops::AdamWStep rs = s;
    rs.weight_decay = r.decay ? s.weight_decay : 0.f;
    ops::adamw_update(*ctx, at(p2.t), Tensor(), at(g.t), at(m2.t), at(v2.t), rs);
  }
  EXPECT_EQ(p.data, p2.data);  // elements 18..29 (no range) untouched in both
  EXPECT_EQ(m.data, m2.data);
  EXPECT_EQ(v.data, v2.data);
  EXPECT_NE(p.data[0], p0[0]);    // updated
  EXPECT_EQ(p.data[20], p0[20]);  // in the gap between ranges

  expect_error(
      [&] {
        ops::AdamWRangeTable(*ctx, {{0, 10, true, 0}, {9, 3, true, 0}});
      },
      "ranges [0, 10) and [9, 12) overlap");
  expect_error([&] { ops::AdamWRangeTable(*ctx, {{0, 0, true, 0}}); }, "numel > 0");
  expect_error(
      [&] {
        ops::adamw_update_multi(*ctx, p.t.slice0(0, 20), Tensor(), g.t.slice0(0, 20),
                                m.t.slice0(0, 20), v.t.slice0(0, 20),
                                ops::AdamWRangeTable(*ctx, spec), s);
      },
      "the ranges need 39 elements but param f32[20] on cpu has 20");
}

TEST(SumOfSquares, DeterministicAcrossThreadCountsAndAccurate) {
  auto ctx = ExecContext::make_cpu();
  std::mt19937 rng(8);
  const int64_t n = 3 * (int64_t(1) << 16) + 1237;  // several chunks plus a partial one
  HostTensor g(n, rng, 3.f);
  long double exact = 0;
  for (float x : g.data) exact += (long double)x * x;
  std::vector<double> results;
  for (int threads : {1, 2, 3, 4}) {
    const test::ScopedOmpThreads limit(threads);
    results.push_back(ops::sum_of_squares(*ctx, g.t));
  }
  for (double r : results) EXPECT_EQ(r, results[0]);  // bit-identical
  EXPECT_NEAR(results[0], double(exact), 1e-13 * double(exact));
  EXPECT_EQ(ops::sum_of_squares(*ctx, g.t.slice0(0, 0)), 0.0);
  EXPECT_NEAR(
      ops::sum_of_squares(*ctx, g.t.slice0(0, 3)),
      double(g.data[0]) * g.data[0] + double(g.data[1]) * g.data[1] + double(g.data[2]) * g.data[2],
      1e-15);
}

TEST(SumOfSquares, SpansSkipThePaddingAndGiveThePackedSumBitForBit) {
  // The parameter store's padding moves the tensors but must not move the CPU's fixed chunks of
  // partial sums: the gradient norm (and so clipping) stays bit-identical to the packed layout.
  auto ctx = ExecContext::make_cpu();
  std::mt19937 rng(4);
  const int64_t n = 3 * (int64_t(1) << 16) + 1237;
  HostTensor packed(n, rng, 3.f);
  const int64_t sizes[] = {1, 65535, 70000, 3, 64, 60000, n - (1 + 65535 + 70000 + 3 + 64 + 60000)};
  std::vector<float> spread;
  std::vector<ops::FlatSpan> spans;
  int64_t at = 0;
  for (int64_t size : sizes) {
    spread.resize(spread.size() + 37, 1e3f);  // padding; non-zero here to show it is skipped
    spans.push_back(ops::FlatSpan{int64_t(spread.size()), size});
    spread.insert(spread.end(), packed.data.begin() + at, packed.data.begin() + at + size);
    at += size;
  }
  ASSERT_EQ(at, n);
  const Tensor spread_t(spread.data(), DType::f32, Device::cpu, Shape{int64_t(spread.size())});
  const double want = ops::sum_of_squares(*ctx, packed.t);
  for (int threads : {1, 2, 3}) {
    const test::ScopedOmpThreads limit(threads);
    EXPECT_EQ(ops::sum_of_squares(*ctx, spread_t, spans), want) << threads << " threads";
  }
  EXPECT_EQ(ops::sum_of_squares(*ctx, spread_t, {}), 0.0);
  expect_error(
      [&] {
        ops::sum_of_squares(*ctx, spread_t, {{10, 5}, {12, 3}});
      },
      "span 1 [12, 15) must lie after the previous one (ending at 15)");
  expect_error([&] { ops::sum_of_squares(*ctx, packed.t, {{n - 1, 2}}); }, "inside grad");
}

TEST(AdamW, PaddedLayoutGivesThePackedResultBitForBit) {
  // The same three steps (clipping active) on the store's aligned layout and on packed buffers
  // updated tensor by tensor: the weights and moments agree bit for bit.
  auto ctx = ExecContext::make_cpu();
  ParameterStore store;
  declare_model(store);
  store.finalize(Device::cpu, DType::f32, {ParamRole::base});
  store.initialize(6);
  AdamWConfig cfg;
  cfg.grad_clip = 0.05f;
  AdamW opt(*ctx, store, cfg);
  const std::vector<std::string> names{"w1", "b1", "w2"};
  const int64_t n = store.num_trainable();
  std::vector<float> w, g(static_cast<size_t>(n)), m(static_cast<size_t>(n), 0.f),
      v(static_cast<size_t>(n), 0.f);
  for (const auto& name : names)
    for (float x : to_vec(store.param(name))) w.push_back(x);
  const auto flat = [](std::vector<float>& x) {
    return Tensor(x.data(), DType::f32, Device::cpu, Shape{int64_t(x.size())});
  };
  std::mt19937 rng(12);
  for (int t = 1; t <= 3; ++t) {
    fill_grads(store, rng, 1.f);
    int64_t at = 0;
    for (const auto& name : names)
      for (float x : to_vec(store.grad(name))) g[size_t(at++)] = x;
    const StepStats st = opt.step(1e-2f, t);
    const double norm = std::sqrt(ops::sum_of_squares(*ctx, flat(g)));
    ASSERT_EQ(st.grad_norm, norm);
    ops::AdamWStep s;
    s.lr = 1e-2f, s.beta1 = cfg.beta1, s.beta2 = cfg.beta2, s.eps = cfg.eps, s.step = t;
    s.grad_scale = float(cfg.grad_clip / std::max(norm, double(cfg.grad_clip)));
    ASSERT_LT(s.grad_scale, 1.f);
    at = 0;
    for (const auto& name : names) {
      const int64_t k = store.entry(name).spec.shape.numel();
      const auto part = [&](std::vector<float>& x) { return flat(x).slice0(at, at + k); };
      s.weight_decay = store.entry(name).spec.weight_decay ? cfg.weight_decay : 0.f;
      ops::adamw_update(*ctx, part(w), Tensor(), part(g), part(m), part(v), s);
      at += k;
    }
  }
  const auto state = opt.state_tensors();
  const std::vector<float> sm = to_vec(state[0].second), sv = to_vec(state[1].second);
  int64_t at = 0;
  for (const auto& name : names) {
    const std::vector<float> got = to_vec(store.param(name));
    const int64_t off = store.entry(name).offset;
    for (size_t i = 0; i < got.size(); ++i, ++at) {
      ASSERT_EQ(got[i], w[size_t(at)]) << name << "[" << i << "]";
      ASSERT_EQ(sm[size_t(off) + i], m[size_t(at)]) << "m " << name;
      ASSERT_EQ(sv[size_t(off) + i], v[size_t(at)]) << "v " << name;
    }
  }
}

// ---- CUDA vs CPU (skipped without a GPU) -------------------------------------------------------

TEST(AdamWCuda, MatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  auto cpu = ExecContext::make_cpu();
  auto gpu = ExecContext::make_cuda(0);
  for (DType dtype : {DType::f32, DType::bf16}) {
    ParameterStore ref, dev;
    declare_model(ref);
    declare_model(dev);
    ref.finalize(Device::cpu, DType::f32, {ParamRole::base});
    dev.finalize(Device::cuda, dtype, {ParamRole::base});
    ref.initialize(5);
    dev.initialize(5);
    if (dtype == DType::bf16) {  // start the reference from the same (bf16-rounded) weights
      float* w = ref.all_params().ptr<float>();
      for (int64_t i = 0; i < ref.param_buffer_numel(); ++i)
        w[i] = __bfloat162float(__float2bfloat16(w[i]));
    }
    AdamWConfig cfg;
    cfg.grad_clip = 0.5f;
    AdamW oref(*cpu, ref, cfg), odev(*gpu, dev, cfg);
    std::mt19937 rng(21);
    for (int t = 1; t <= 3; ++t) {
      fill_grads(ref, rng, 0.2f);
      std::vector<float> g = to_vec(ref.grads());
      if (dtype == DType::bf16) {
        std::vector<bf16> gb(g.size());
        for (size_t i = 0; i < g.size(); ++i) {
          gb[i] = __float2bfloat16(g[i]);
          ref.grads().ptr<float>()[i] = __bfloat162float(gb[i]);
        }
        copy_tensor(dev.grads(), Tensor(gb.data(), DType::bf16, Device::cpu, ref.grads().shape));
      } else {
        copy_tensor(dev.grads(), ref.grads());
      }
      const StepStats a = oref.step(1e-2f, t), b = odev.step(1e-2f, t);
      EXPECT_NEAR(b.grad_norm, a.grad_norm, 1e-5 * a.grad_norm);
      EXPECT_NEAR(b.clip_scale, a.clip_scale, 1e-5 * a.clip_scale);
    }
    gpu->synchronize();
    // f32: same formula, float rounding only. bf16: compare the fp32 master, then the weights to
    // within one bf16 rounding step of the master.
    const std::vector<float> want = to_vec(ref.trainable_params());
    const Tensor got_t =
        dtype == DType::f32 ? dev.trainable_params() : odev.state_tensors()[2].second;
    const std::vector<float> got = to_vec(got_t);
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-5 * std::abs(want[i]) + 1e-6)
          << dtype_name(dtype) << " " << i;
  }
}

}  // namespace
}  // namespace attnlab
