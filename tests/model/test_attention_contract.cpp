// The attention contract (nn/attention.h) proved by a test-only variant, "probe": one parameter per
// layer, reads h (so it adds to dh), and an auxiliary loss accumulated on the device with its
// weight given at forward. Finite differences check every gradient path of the model with it
// (including dh into ln_1 and the aux term), and freezing everything but its parameter proves the
// retrofit path: gradients and optimizer state only for the trainable role, frozen
// weight-gradient products skipped (counted).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/context.h"
#include "model/gpt.h"
#include "model/model_fixture.h"
#include "nn/attention.h"
#include "ops/ops.h"
#include "test_util.h"
#include "train/optimizer.h"

using namespace attnlab;

namespace {

constexpr float kAuxWeight = 0.7f;  // the probe's own weight of its auxiliary term

// out = sigmoid(h . w) * dense(q, k, v) per token; aux = kAuxWeight * mean over tokens of gate^2.
// CPU f32 only (a contract probe, not a product variant).
class ProbeAttention final : public AttentionModule {
 public:
  explicit ProbeAttention(int layer) : layer_(layer) {}
  std::string name() const override { return "probe"; }
  std::string param_name() const { return "h." + std::to_string(layer_) + ".attn.probe.gate"; }
  void declare_params(ParameterStore& store, int, const AttentionShape& s) override {
    store.declare(
        {param_name(), Shape{s.n_embd}, ParamRole::attention, ParamInit::normal, 0.5f, false});
  }
  void bind(const ParameterStore& store) override {
    w_ = store.param(param_name());
    dw_ = store.grad(param_name());
  }
  bool uses_h() const override { return true; }
  void allocate(const ExecContext&, const AttentionShape& s, DType) override {
    const size_t BT = size_t(s.B) * s.T;
    lse_.assign(BT * s.layout.n_head, 0.f);
    dense_.assign(BT * s.layout.q_width(), 0.f);
    gate_.assign(BT, 0.f);
  }
  void forward(const ExecContext& ctx, const AttentionInputs& in, const Tensor& out) override {
    ATTN_REQUIRE(ctx.device == Device::cpu, "probe attention runs on the CPU only");
    const int64_t B = in.qkv.dim(0), T = in.qkv.dim(1), C = in.h.dim(2);
    const int64_t Q = in.layout.q_width(), BT = B * T;
    Tensor dense = dense_tensor(B, T, Q), lse = lse_tensor(B, T, in.layout.n_head);
    ops::attention_fwd(ctx, dense, lse, in.qkv, in.layout);
    const float* h = in.h.ptr<float>();
    const float* w = w_.ptr<float>();
    float* o = out.ptr<float>();
    double aux = 0.0;
    for (int64_t i = 0; i < BT; ++i) {
      double z = 0.0;
      for (int64_t c = 0; c < C; ++c) z += double(h[i * C + c]) * w[c];
      const float g = float(1.0 / (1.0 + std::exp(-z)));
      gate_[size_t(i)] = g;
      aux += double(g) * g;
      for (int64_t c = 0; c < Q; ++c) o[i * Q + c] = g * dense_[size_t(i * Q + c)];
    }
    if (in.aux.total) *in.aux.total += double(in.aux.scale) * kAuxWeight * aux / double(BT);
  }
  void backward(const ExecContext& ctx, const AttentionInputs& in, const Tensor&,
                const Tensor& dout, const Tensor& dqkv, const Tensor& dh) override {
    const int64_t B = in.qkv.dim(0), T = in.qkv.dim(1), C = in.h.dim(2);
    const int64_t Q = in.layout.q_width(), BT = B * T;
    const float* d = dout.ptr<float>();
    const float* h = in.h.ptr<float>();
    const float* w = w_.ptr<float>();
    float* dhp = dh.ptr<float>();
    float* dw = dw_.empty() ? nullptr : dw_.ptr<float>();
    std::vector<float> ddense(size_t(BT * Q));
    for (int64_t i = 0; i < BT; ++i) {
      const float g = gate_[size_t(i)];
      double dg = 2.0 * double(in.aux.scale) * kAuxWeight * g / double(BT);
      for (int64_t c = 0; c < Q; ++c) {
        dg += double(d[i * Q + c]) * dense_[size_t(i * Q + c)];
        ddense[size_t(i * Q + c)] = g * d[i * Q + c];
      }
      const double dz = dg * g * (1.0 - g);
      for (int64_t c = 0; c < C; ++c) {
        dhp[i * C + c] += float(dz * w[c]);
        if (dw) dw[c] += float(dz * h[i * C + c]);
      }
    }
    Tensor dd(ddense.data(), DType::f32, Device::cpu, Shape{B, T, Q});
    ops::attention_bwd(ctx, dqkv, dd, in.qkv, dense_tensor(B, T, Q),
                       lse_tensor(B, T, in.layout.n_head), in.layout);
  }
  size_t saved_bytes(const AttentionShape& s, DType) const override {
    return size_t(s.B) * s.T * (s.layout.n_head + s.layout.q_width() + 1) * sizeof(float);
  }

 private:
  Tensor dense_tensor(int64_t B, int64_t T, int64_t Q) {
    return Tensor(dense_.data(), DType::f32, Device::cpu, Shape{B, T, Q});
  }
  Tensor lse_tensor(int64_t B, int64_t T, int64_t H) {
    return Tensor(lse_.data(), DType::f32, Device::cpu, Shape{B, H, T});
  }
  int layer_;
  Tensor w_, dw_;
  std::vector<float> lse_, dense_, gate_;
};

void register_probe() {
  static bool done = false;
  if (done) return;
  register_test_attention("probe", [](const AttentionOptions&, int layer) {
    return std::unique_ptr<AttentionModule>(new ProbeAttention(layer));
  });
  done = true;
}

GPTConfig probe_config() {
  register_probe();
  GPTConfig c = test::tiny_gpt_config();
  c.attention.type = "probe";
  return c;
}

struct ProbeModel : test::ModelFixture {
  explicit ProbeModel(std::set<ParamRole> trainable = {ParamRole::base, ParamRole::attention})
      : ModelFixture(probe_config(), 2, 5, trainable) {
    aux_scale = 0.5f;
  }
  // The objective backward() differentiates: mean LM loss + aux_scale * auxiliary losses.
  double objective() {
    model.forward(*ctx, store, t(tokens), t(targets), AttentionMode::eval, 0.f, aux_scale);
    const LossTotals l = model.take_loss(*ctx);
    return l.mean() + l.aux;
  }
};

}  // namespace

// The aux loss reaches the totals with its scale, on the device, with no per-layer read.
TEST(AttentionContract, AuxLossIsAccumulatedWithItsScale) {
  ProbeModel m;
  m.aux_scale = 1.f;
  m.model.forward(*m.ctx, m.store, m.t(m.tokens), m.t(m.targets), AttentionMode::eval, 0.f, 1.f);
  const double one = m.model.take_loss(*m.ctx).aux;
  EXPECT_GT(one, 0.0);
  EXPECT_LT(one, 2 * kAuxWeight);  // two layers, each kAuxWeight * mean(g^2) with g in (0, 1)
  m.model.forward(*m.ctx, m.store, m.t(m.tokens), m.t(m.targets), AttentionMode::eval, 0.f, 0.25f);
  m.model.forward(*m.ctx, m.store, m.t(m.tokens), m.t(m.targets), AttentionMode::eval, 0.f, 0.25f);
  EXPECT_NEAR(m.model.take_loss(*m.ctx).aux, 0.5 * one, 1e-12);
  // A forward without targets adds nothing to the totals, the auxiliary term included.
  m.model.forward(*m.ctx, m.store, m.t(m.tokens), Tensor(), AttentionMode::eval, 0.f, 1.f);
  const LossTotals none = m.model.take_loss(*m.ctx);
  EXPECT_EQ(none.aux, 0.0);
  EXPECT_EQ(none.valid, 0);
}

// Every parameter's gradient, through dqkv, dh (ln_1 and below) and the aux term.
TEST(AttentionContract, FiniteDifferenceGradientsWithHAndAuxLoss) {
  ProbeModel m;
  m.gradients();
  const auto checked = m.expect_finite_differences([&] { return m.objective(); },
                                                   [](ParamRole) { return 4; }, 1e-2f, 2e-2);
  EXPECT_GT(m.total(checked), 60);
  EXPECT_EQ(checked.at(ParamRole::attention), 8);
  // The aux term carries gradient: without it the probe's gradient changes.
  std::vector<float> with_aux(m.store.grads().ptr<float>(),
                              m.store.grads().ptr<float>() + m.store.num_trainable());
  m.aux_scale = 0.f;
  m.gradients();
  double diff = 0.0;
  for (int64_t i = 0; i < m.store.num_trainable(); ++i)
    diff += std::fabs(with_aux[size_t(i)] - m.store.grads().ptr<float>()[i]);
  EXPECT_GT(diff, 1e-4);
}

// Retrofit: only the probe's role trains. Gradients and optimizer state exist for its tensors
// only, equal to those of the fully trainable model; every weight-gradient product of the frozen
// base is skipped (counted); an optimizer step moves the probe and nothing else.
TEST(AttentionContract, FrozenBaseTrainsOnlyTheVariantParameters) {
  ProbeModel full, probe_only({ParamRole::attention});
  const int64_t C = probe_only.cfg.n_embd, L = probe_only.cfg.n_layer;
  EXPECT_EQ(probe_only.store.grads().numel() >= L * C, true);
  int64_t trainable = 0;
  for (const auto& e : probe_only.store.entries()) {
    EXPECT_EQ(e.trainable, e.spec.role == ParamRole::attention) << e.spec.name;
    EXPECT_EQ(probe_only.store.grad(e.spec.name).empty(), e.spec.role != ParamRole::attention);
    if (e.trainable) trainable += e.spec.shape.numel();
  }
  EXPECT_EQ(trainable, L * C);

  MatmulCounts full_counts, probe_counts;
  full.ctx->matmul_counts = &full_counts;
  probe_only.ctx->matmul_counts = &probe_counts;
  full.gradients();
  probe_only.gradients();
  // Per layer 4 weight products (qkv, attn proj, fc, mlp proj), plus the LM head.
  EXPECT_EQ(full_counts.weight_grad, 4 * L + 1);
  EXPECT_EQ(probe_counts.weight_grad, 0);
  // dx still reaches layer 0's probe; only layer 0's q/k/v data gradient (into ln_1, below the
  // lowest trainable tensor) is skipped.
  EXPECT_EQ(probe_counts.data_grad, full_counts.data_grad - 1);
  for (int l = 0; l < L; ++l) {
    const std::string n = "h." + std::to_string(l) + ".attn.probe.gate";
    const float* a = full.store.grad(n).ptr<float>();
    const float* b = probe_only.store.grad(n).ptr<float>();
    for (int64_t c = 0; c < C; ++c) EXPECT_EQ(a[c], b[c]) << n << "[" << c << "]";
  }

  std::vector<float> before(
      probe_only.store.all_params().ptr<float>(),
      probe_only.store.all_params().ptr<float>() + probe_only.store.all_params().numel());
  AdamWConfig oc;
  oc.lr = 1e-2f;
  AdamW opt(*probe_only.ctx, probe_only.store, oc);
  opt.step(1e-2f, 1);
  for (const auto& e : probe_only.store.entries()) {
    const float* now = probe_only.store.param(e.spec.name).ptr<float>();
    int moved = 0;
    for (int64_t i = 0; i < e.spec.shape.numel(); ++i)
      moved += now[i] != before[size_t(e.offset + i)];
    if (e.trainable)
      EXPECT_GT(moved, 0) << e.spec.name;
    else
      EXPECT_EQ(moved, 0) << e.spec.name;
  }
}
