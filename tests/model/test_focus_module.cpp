// The Focus attention module alone (CPU): its gradients to h (through the group scores only: q, k,
// v come in separately), to W_g and to the centroids against central differences of every entry,
// for both gates, both Sinkhorn scopes and the softmax assignment. The whole-model test
// (test_focus_model.cpp) sees these gradients beside the base weights' far larger ones; here each
// tensor is compared by its own largest value, and that value is asserted to be well above the
// differences' noise, so a dropped or transposed term fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/parameters.h"
#include "nn/attention_focus.h"
#include "test_util.h"

using namespace attnlab;

namespace {

struct ModuleCase {
  static constexpr int B = 2, T = 9, C = 8;
  const QKVLayout layout{2, 2, 4};
  std::unique_ptr<ExecContext> ctx = ExecContext::make_cpu();
  FocusAttention module;
  ParameterStore store;
  std::vector<float> h, qkv, out, w;

  explicit ModuleCase(const FocusOptions& f) : module(options(f), 0) {
    const AttentionShape shape{B, T, layout, C};
    module.declare_params(store, 0, shape);
    store.finalize(Device::cpu, DType::f32, {ParamRole::attention});
    store.initialize(3);
    module.bind(store);
    module.allocate(*ctx, shape, DType::f32);
    h = test::random_vector(size_t(B) * T * C, 4);
    qkv = test::random_vector(size_t(B) * T * layout.width(), 5, -1.5f, 1.5f);
    out.resize(size_t(B) * T * layout.q_width());
    w = test::random_vector(out.size(), 6);
  }
  static AttentionOptions options(const FocusOptions& f) {
    AttentionOptions o;
    o.type = "focus";
    o.focus = f;
    return o;
  }
  AttentionInputs inputs() {
    AttentionInputs in;
    in.h = test::cpu_tensor(h, {B, T, C});
    in.qkv = test::cpu_tensor(qkv, {B, T, layout.width()});
    in.layout = layout;
    in.mode = AttentionMode::train;
    return in;
  }
  double objective() {
    module.forward(*ctx, inputs(), test::cpu_tensor(out, {B, T, layout.q_width()}));
    return test::weighted_sum(w, out);
  }
  // dh (the module's own: through g only) and the store's gradients of W_g and C.
  std::vector<float> backward() {
    objective();
    store.zero_grads();
    std::vector<float> dqkv(qkv.size()), dh(h.size());
    module.backward(*ctx, inputs(), test::cpu_tensor(out, {B, T, layout.q_width()}),
                    test::cpu_tensor(w, {B, T, layout.q_width()}),
                    test::cpu_tensor(dqkv, {B, T, layout.width()}),
                    test::cpu_tensor(dh, {B, T, C}));
    return dh;
  }
  std::vector<float> grad(const std::string& name) const {
    const Tensor g = store.grad(name);
    return std::vector<float>(g.ptr<float>(), g.ptr<float>() + g.numel());
  }
};

// |analytic - fd| within 1% of the tensor's largest |fd|, which itself must be far above the
// central differences' error (~1e-5 here), so that the comparison can fail.
void expect_matches(const std::vector<float>& analytic, const std::vector<double>& fd,
                    const std::string& what) {
  double largest = 0.0;
  for (double x : fd) largest = std::max(largest, std::fabs(x));
  EXPECT_GT(largest, 1e-2) << what << ": too small to test";
  EXPECT_LT(test::max_rel_error(analytic, fd), 1e-2) << what;
}

FocusOptions small_options() {
  FocusOptions f;
  f.groups = 3;
  f.d_g = 4;
  f.local_window = 1;
  f.tau = 0.5f;  // smooth enough for central differences
  f.iterations = 3;
  f.gate_eps = 1e-2f;
  return f;
}

}  // namespace

TEST(FocusModule, GradientsToHWgAndCentroidsMatchFiniteDifferences) {
  struct Variant {
    const char* name;
    FocusOptions::Gate gate;
    FocusOptions::Assign assign;
    FocusOptions::Scope scope;
  };
  using F = FocusOptions;
  for (const Variant& v :
       {Variant{"additive, sinkhorn causal", F::Gate::additive, F::Assign::sinkhorn,
                F::Scope::causal},
        Variant{"multiplicative, sinkhorn causal", F::Gate::multiplicative, F::Assign::sinkhorn,
                F::Scope::causal},
        Variant{"additive, sinkhorn sequence", F::Gate::additive, F::Assign::sinkhorn,
                F::Scope::sequence},
        Variant{"additive, softmax", F::Gate::additive, F::Assign::softmax, F::Scope::causal}}) {
    SCOPED_TRACE(v.name);
    FocusOptions f = small_options();
    f.gate = v.gate;
    f.assign = v.assign;
    f.scope = v.scope;
    if (v.gate == F::Gate::multiplicative) f.gate_scale = 4.f, f.gate_bias = -1.f;
    ModuleCase c(f);
    const std::vector<float> dh = c.backward();
    const std::string wg = c.module.w_g_name(), cn = c.module.centroids_name();
    const std::vector<float> dwg = c.grad(wg), dcn = c.grad(cn);
    auto objective = [&] { return c.objective(); };
    expect_matches(dh, test::finite_difference(c.h.data(), c.h.size(), objective, 1e-3f), "dh");
    expect_matches(
        dwg, test::finite_difference(c.store.param(wg).ptr<float>(), dwg.size(), objective, 1e-3f),
        "dW_g");
    expect_matches(
        dcn, test::finite_difference(c.store.param(cn).ptr<float>(), dcn.size(), objective, 1e-3f),
        "dC");
  }
}
