// LoRA on c_attn inside the GPT (CPU, nn/lora.h): the scaled matmul op against plain products,
// finite differences of the whole model (dA, dB, and the base weights' gradients through the
// branch's dx), a frozen base that gets no gradient and runs no weight-gradient product, B = 0
// equal to the base model bitwise, merge (W + alpha/r B A) equal to the unmerged model, unmerge
// giving W back, decode equal to the forward.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/context.h"
#include "model/gpt.h"
#include "model/model_fixture.h"
#include "nn/lora.h"
#include "ops/ops.h"
#include "test_util.h"
#include "train/optimizer.h"
#include "train/retrofit.h"

using namespace attnlab;

namespace {

GPTConfig lora_config(int rank = 2, float alpha = 3.f) {
  GPTConfig c = test::tiny_gpt_config();
  c.lora.rank = rank;
  c.lora.alpha = alpha;
  return c;
}

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

Tensor cpu(std::vector<float>& v, Shape s) { return Tensor(v.data(), DType::f32, Device::cpu, s); }

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, double(std::fabs(a[i] - b[i])));
  return worst;
}

struct LoraModel : test::ModelFixture {
  explicit LoraModel(GPTConfig c = lora_config(),
                     std::set<ParamRole> trainable = {ParamRole::base, ParamRole::adapter})
      : ModelFixture(c, 2, 6, trainable) {}
  double loss() {
    model.forward(*ctx, store, t(tokens), t(targets), AttentionMode::eval);
    return model.take_loss(*ctx).mean();
  }
};

}  // namespace

// matmul_scaled_*: y = s x W^T (= and +=), dx = s dy W (= and +=), dW += s dy^T x, each equal to
// the plain product scaled (in float, as the op rounds).
TEST(LoraOps, ScaledMatmulEqualsTheScaledProduct) {
  auto ctx = ExecContext::make_cpu();
  const int64_t N = 13, in = 9, out = 5;
  const float s = 0.75f;
  auto x = random_vec(N * in, 1), w = random_vec(out * in, 2), y0 = random_vec(N * out, 3);
  auto dy = random_vec(N * out, 4), dx0 = random_vec(N * in, 5), dw0 = random_vec(out * in, 6);
  std::vector<float> plain(N * out), y = y0;
  ops::matmul_fwd(*ctx, cpu(plain, Shape{N, out}), cpu(x, Shape{N, in}), cpu(w, Shape{out, in}),
                  Tensor());
  ops::matmul_scaled_fwd(*ctx, cpu(y, Shape{N, out}), cpu(x, Shape{N, in}), cpu(w, Shape{out, in}),
                         s, /*accumulate=*/true);
  for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], y0[i] + s * plain[i]) << i;
  ops::matmul_scaled_fwd(*ctx, cpu(y, Shape{N, out}), cpu(x, Shape{N, in}), cpu(w, Shape{out, in}),
                         s, /*accumulate=*/false);
  for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], s * plain[i]) << i;

  std::vector<float> pdx(N * in), pdw(out * in, 0.f), dx = dx0, dw = dw0;
  ops::matmul_bwd(*ctx, cpu(pdx, Shape{N, in}), cpu(pdw, Shape{out, in}), Tensor(),
                  cpu(dy, Shape{N, out}), cpu(x, Shape{N, in}), cpu(w, Shape{out, in}));
  ops::matmul_scaled_bwd(*ctx, cpu(dx, Shape{N, in}), cpu(dw, Shape{out, in}),
                         cpu(dy, Shape{N, out}), cpu(x, Shape{N, in}), cpu(w, Shape{out, in}), s,
                         /*accumulate_dx=*/true);
  for (size_t i = 0; i < dx.size(); ++i) ASSERT_EQ(dx[i], dx0[i] + s * pdx[i]) << i;
  for (size_t i = 0; i < dw.size(); ++i) ASSERT_EQ(dw[i], dw0[i] + s * pdw[i]) << i;
  EXPECT_NE(dw, dw0);
}

// Every LoRA tensor's gradient, and the base weights' (their gradients flow through the LoRA
// branch's dx into ln_1 and the layers below), against central differences.
TEST(LoraModel, FiniteDifferenceGradientsOfTheWholeModel) {
  LoraModel m;
  m.gradients();
  const auto checked = m.expect_finite_differences(
      [&] { return m.loss(); }, [](ParamRole r) { return r == ParamRole::adapter ? 10 : 3; });
  EXPECT_GT(m.total(checked), 60);
  EXPECT_EQ(checked.at(ParamRole::adapter), 2 * 2 * 10);  // A and B of both layers
}

// Only the adapters train: the base has no gradient, no base weight-gradient product runs, and
// the LoRA gradients are bitwise those of the fully trainable model (layer 0's come through
// layer 1's LoRA dx).
TEST(LoraModel, FrozenBaseGetsNoGradientAndRunsNoWeightGradientProduct) {
  LoraModel full;
  full.gradients();
  LoraModel frozen(lora_config(), {ParamRole::adapter});
  MatmulCounts n;
  frozen.ctx->matmul_counts = &n;
  frozen.gradients();
  frozen.ctx->matmul_counts = nullptr;
  const int L = frozen.cfg.n_layer;
  EXPECT_EQ(n.weight_grad, 2 * L);  // dA and dB per layer, nothing of the base
  // The head; layer 1: mlp proj, fc, attn proj, c_attn's dx, LoRA du and dx; layer 0: mlp proj,
  // fc, attn proj and LoRA du (no dx below its lowest trainable tensor).
  EXPECT_EQ(n.data_grad, 1 + 6 + 4);
  int compared = 0;
  for (const auto& e : frozen.store.entries()) {
    if (e.spec.role != ParamRole::adapter) {
      EXPECT_TRUE(frozen.store.grad(e.spec.name).empty()) << e.spec.name;
      continue;
    }
    const Tensor a = full.store.grad(e.spec.name), b = frozen.store.grad(e.spec.name);
    double norm = 0.0;
    for (int64_t i = 0; i < a.numel(); ++i) {
      ASSERT_EQ(a.ptr<float>()[i], b.ptr<float>()[i]) << e.spec.name << "[" << i << "]";
      norm += std::fabs(b.ptr<float>()[i]);
    }
    EXPECT_GT(norm, 0.0) << e.spec.name;
    ++compared;
  }
  EXPECT_EQ(compared, 2 * L);
}

// With B = 0 (its initialisation) the LoRA model is the base model: the same logits bitwise, and
// dA = 0 (B passes no gradient back) while dB is not.
TEST(LoraModel, ZeroBEqualsTheBaseModelExactly) {
  test::ModelFixture base(test::tiny_gpt_config(), 2, 6);
  const std::vector<float> ref = base.logits();
  LoraModel m;
  m.tokens = base.tokens, m.targets = base.targets;
  for (const auto& e : base.store.entries())
    copy_tensor(m.store.param(e.spec.name), base.store.param(e.spec.name));
  int b_tensors = 0;
  for (const auto& e : m.store.entries())
    if (e.spec.name.ends_with(".lora_b")) zero_tensor(m.store.param(e.spec.name)), ++b_tensors;
  EXPECT_EQ(b_tensors, 2);
  const std::vector<float> got = m.logits();
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(got[i], ref[i]) << i;
  m.gradients();
  for (const auto& e : m.store.entries()) {
    if (e.spec.role != ParamRole::adapter) continue;
    const Tensor g = m.store.grad(e.spec.name);
    double norm = 0.0;
    for (int64_t i = 0; i < g.numel(); ++i) norm += std::fabs(g.ptr<float>()[i]);
    if (e.spec.name.ends_with(".lora_a"))
      EXPECT_EQ(norm, 0.0) << e.spec.name;
    else
      EXPECT_GT(norm, 0.0) << e.spec.name;
  }
}

// W' = W + (alpha / r) B A in a model without LoRA gives the LoRA model's logits; unmerging
// (W' - (alpha / r) B A) gives W back.
TEST(LoraModel, MergedModelEqualsTheUnmergedOne) {
  LoraModel m(lora_config(3, 5.f));
  const std::vector<float> unmerged = m.logits();
  std::vector<std::vector<float>> w0;
  for (int l = 0; l < m.cfg.n_layer; ++l) {
    const Tensor w = m.store.param(lora_linear_name(l, "c_attn") + ".weight");
    w0.emplace_back(w.ptr<float>(), w.ptr<float>() + w.numel());
  }
  ParameterStore merged_store;
  const GPTConfig mc = merge_lora(m.cfg, m.store, merged_store);
  EXPECT_FALSE(mc.lora.enabled());
  for (const auto& e : merged_store.entries())
    EXPECT_EQ(e.spec.name.find("lora"), std::string::npos) << e.spec.name;
  GPT plain(mc);
  plain.allocate(*m.ctx, m.B, m.T, DType::f32);
  plain.forward(*m.ctx, merged_store, m.t(m.tokens), Tensor(), AttentionMode::eval);
  const Tensor l = plain.logits();
  const std::vector<float> merged(l.ptr<float>(), l.ptr<float>() + l.numel());
  double scale = 0.0;
  for (float v : unmerged) scale = std::max(scale, double(std::fabs(v)));
  const double diff = max_abs_diff(merged, unmerged);
  std::printf("[lora merge] max |logit diff| merged vs unmerged %.3g (max |logit| %.3g)\n", diff,
              scale);
  EXPECT_LT(diff, 1e-5 * scale);
  EXPECT_GT(max_abs_diff(w0[0],
                         [&] {
                           const Tensor w = m.store.param("h.0.attn.c_attn.weight");
                           return std::vector<float>(w.ptr<float>(), w.ptr<float>() + w.numel());
                         }()),
            1e-3);  // the merge changed W
  for (int l = 0; l < m.cfg.n_layer; ++l) {
    const std::string linear = lora_linear_name(l, "c_attn");
    lora_merge(m.store, linear, m.cfg.lora, -1.f);
    const Tensor w = m.store.param(linear + ".weight");
    const std::vector<float> back(w.ptr<float>(), w.ptr<float>() + w.numel());
    EXPECT_LT(max_abs_diff(back, w0[size_t(l)]), 1e-6) << linear;
  }
}

TEST(LoraModel, DecodeEqualsTheForward) {
  LoraModel m;
  m.expect_decode_matches(m.logits(), {1, 3}, 1e-5, "lora");
}

TEST(LoraModel, ParametersHaveTheirNamesShapesAndRole) {
  LoraModel m(lora_config(4, 8.f));
  const ParameterStore::Entry& a = m.store.entry("h.1.attn.c_attn.lora_a");
  const ParameterStore::Entry& b = m.store.entry("h.1.attn.c_attn.lora_b");
  EXPECT_EQ(a.spec.shape, (Shape{4, 8}));
  EXPECT_EQ(b.spec.shape, (Shape{24, 4}));
  EXPECT_EQ(a.spec.role, ParamRole::adapter);
  EXPECT_EQ(b.spec.init, ParamInit::zeros);
  EXPECT_FLOAT_EQ(a.spec.init_std, 1.f / std::sqrt(24.f));
  EXPECT_FLOAT_EQ(m.cfg.lora.scale(), 2.f);
}

// A few AdamW steps on the adapters alone (frozen base, B = 0 at the start: the base model's
// loss) lower the loss on a fixed batch, and leave every base tensor as it was.
TEST(LoraModel, TrainingLowersTheLossOnAFixedBatch) {
  LoraModel m(lora_config(2, 4.f), {ParamRole::adapter});
  for (const auto& e : m.store.entries())
    if (e.spec.name.ends_with(".lora_b")) zero_tensor(m.store.param(e.spec.name));
  std::vector<float> base_before;
  for (const auto& e : m.store.entries())
    if (e.spec.role == ParamRole::base) {
      const Tensor p = m.store.param(e.spec.name);
      base_before.insert(base_before.end(), p.ptr<float>(), p.ptr<float>() + p.numel());
    }
  AdamWConfig oc;
  oc.lr = 1e-2f;
  oc.weight_decay = 0.f;
  AdamW opt(*m.ctx, m.store, oc);
  const double first = m.loss();
  for (int step = 1; step <= 20; ++step) {
    m.gradients();
    opt.step(1e-2f, step);
  }
  const double last = m.loss();
  std::printf("[lora training] fixed-batch loss %.4f -> %.4f after 20 adapter-only steps\n", first,
              last);
  EXPECT_LT(last, first - 0.05);
  std::vector<float> base_after;
  for (const auto& e : m.store.entries())
    if (e.spec.role == ParamRole::base) {
      const Tensor p = m.store.param(e.spec.name);
      base_after.insert(base_after.end(), p.ptr<float>(), p.ptr<float>() + p.numel());
    }
  EXPECT_EQ(base_after, base_before);
}

// The activation recompute modes re-run the LoRA branch (u) with the block: the same gradients,
// bitwise on the CPU.
TEST(LoraModel, RecomputeModesGiveTheSameGradients) {
  LoraModel ref;
  ref.gradients();
  for (auto mode : {ActivationRecompute::gelu, ActivationRecompute::block}) {
    GPTConfig c = lora_config();
    c.recompute = mode;
    LoraModel m(c);
    m.gradients();
    for (const auto& e : m.store.entries()) {
      const Tensor a = ref.store.grad(e.spec.name), b = m.store.grad(e.spec.name);
      for (int64_t i = 0; i < a.numel(); ++i)
        ASSERT_EQ(a.ptr<float>()[i], b.ptr<float>()[i])
            << recompute_name(mode) << " " << e.spec.name << "[" << i << "]";
    }
  }
}

// LoRA on a Focus model: Focus adds its dh into d(ln1) before the q/k/v products, the LoRA's dx
// is added after; finite differences of the LoRA tensors and of ln_1 (which sees both).
TEST(LoraModel, FiniteDifferencesWithFocusAttention) {
  GPTConfig c = lora_config();
  c.block_size = 12;
  c.attention.type = "focus";
  FocusOptions& f = c.attention.focus;
  f.groups = 3;
  f.d_g = 4;
  f.local_window = 2;
  f.tau = 0.5f;
  f.iterations = 3;
  f.top_k = 1;
  f.gate_eps = 1e-2f;
  f.eval_routing = FocusOptions::Routing::soft;  // eval == the train forward
  LoraModel m(c, {ParamRole::base, ParamRole::attention, ParamRole::adapter});
  m.gradients();
  std::mt19937 rng(9);
  int checked = 0;
  for (const auto& e : m.store.entries()) {
    const bool lora = e.spec.role == ParamRole::adapter;
    if (!lora && e.spec.name.find("ln_1") == std::string::npos) continue;
    float* w = m.store.param(e.spec.name).ptr<float>();
    const float* g = m.store.grad(e.spec.name).ptr<float>();
    std::uniform_int_distribution<int64_t> pick(0, e.spec.shape.numel() - 1);
    for (int k = 0; k < 5; ++k) {
      const int64_t i = pick(rng);
      const float h = 1e-2f, w0 = w[i];
      w[i] = w0 + h;
      const double lp = m.loss();
      w[i] = w0 - h;
      const double lm = m.loss();
      w[i] = w0;
      const double fd = (lp - lm) / (2.0 * h);
      EXPECT_NEAR(g[i], fd, 2e-3 + 3e-2 * std::fabs(fd)) << e.spec.name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_EQ(checked, 5 * (4 + 4));  // A, B and ln_1's weight and bias of both layers
}
