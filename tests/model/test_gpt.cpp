// The whole GPT on the CPU reference: finite-difference gradients, gradient accumulation, frozen
// parameters.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "core/context.h"
#include "model/gpt.h"
#include "model/model_fixture.h"
#include "test_util.h"

using namespace attnlab;

namespace {

GPTConfig tiny_config() { return test::tiny_gpt_config(); }

struct Fixture {
  std::unique_ptr<ExecContext> ctx = ExecContext::make_cpu();
  GPTConfig cfg;
  GPT model;
  ParameterStore store;
  std::vector<int32_t> tokens, targets;
  int B, T;

  Fixture(int B_, int T_, std::set<ParamRole> trainable = {ParamRole::base, ParamRole::attention},
          const GPTConfig& c = tiny_config())
      : cfg(c), model(c), B(B_), T(T_) {
    model.declare_params(store);
    store.finalize(Device::cpu, DType::f32, trainable);
    model.init_params(store, 42);
    // Larger random weights than GPT-2's init so every path carries a visible gradient.
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.f, 0.3f);
    float* w = store.all_params().ptr<float>();
    for (int64_t i = 0; i < store.param_buffer_numel(); ++i) w[i] += nd(rng);
    zero_tensor(store.param("wte.weight").slice0(cfg.vocab_size, cfg.padded_vocab));
    if (!cfg.tied_embeddings)
      zero_tensor(store.param("lm_head.weight").slice0(cfg.vocab_size, cfg.padded_vocab));
    model.allocate(*ctx, B, T, DType::f32);
    std::uniform_int_distribution<int> tok(0, tiny_config().vocab_size - 1);
    for (int i = 0; i < B * T; ++i) tokens.push_back(tok(rng)), targets.push_back(tok(rng));
    targets[1] = GPT::kIgnoreIndex;  // ignored targets must not contribute
  }
  Tensor t(std::vector<int32_t>& v, int b0, int nb) {
    return Tensor(v.data() + size_t(b0) * T, DType::i32, Device::cpu, Shape{nb, T});
  }
  double loss() {
    model.forward(*ctx, store, t(tokens, 0, B), t(targets, 0, B), AttentionMode::eval);
    return model.take_loss(*ctx).mean();
  }
};

}  // namespace

void expect_finite_difference_gradients(Fixture& f) {
  f.model.forward(*f.ctx, f.store, f.t(f.tokens, 0, 2), f.t(f.targets, 0, 2), AttentionMode::train,
                  1.f / 9.f);
  const LossTotals fr = f.model.take_loss(*f.ctx);
  ASSERT_EQ(fr.valid, 9);
  f.store.zero_grads();
  f.model.forward(*f.ctx, f.store, f.t(f.tokens, 0, 2), f.t(f.targets, 0, 2), AttentionMode::train,
                  float(1.0 / fr.valid));
  f.model.backward(*f.ctx, f.store, f.t(f.tokens, 0, 2));
  f.model.take_loss(*f.ctx);  // f.loss() below reads the totals of its own forward only
  std::mt19937 rng(5);
  int checked = 0;
  for (const auto& e : f.store.entries()) {
    float* w = f.store.param(e.spec.name).ptr<float>();
    float* g = f.store.grad(e.spec.name).ptr<float>();
    const int64_t n = e.spec.shape.numel();
    std::uniform_int_distribution<int64_t> pick(0, n - 1);
    for (int k = 0; k < 6; ++k) {
      int64_t i = pick(rng);
      const bool vocab = e.spec.name == "wte.weight" || e.spec.name == "lm_head.weight";
      if (vocab && i >= 11 * 8) continue;                       // padding rows: no gradient
      if (e.spec.name == "wpe.weight" && i >= 5 * 8) continue;  // positions beyond T
      const float h = 1e-2f, w0 = w[i];
      w[i] = w0 + h;
      double lp = f.loss();
      w[i] = w0 - h;
      double lm = f.loss();
      w[i] = w0;
      double fd = (lp - lm) / (2.0 * h);
      EXPECT_NEAR(g[i], fd, 2e-3 + 2e-2 * std::fabs(fd)) << e.spec.name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 80);
}

TEST(GPTModel, FiniteDifferenceGradients) {
  Fixture f(2, 5);
  expect_finite_difference_gradients(f);
}

TEST(GPTModel, FiniteDifferenceGradientsWithoutBiasUntied) {
  GPTConfig c = tiny_config();
  c.bias = false;
  c.tied_embeddings = false;
  Fixture f(2, 5, {ParamRole::base, ParamRole::attention}, c);
  expect_finite_difference_gradients(f);
}

TEST(GPTModel, FiniteDifferenceGradientsGqaWindow) {
  GPTConfig c = tiny_config();
  c.n_kv_head = 1;
  c.attention.window = 3;
  Fixture f(2, 5, {ParamRole::base, ParamRole::attention}, c);
  EXPECT_EQ(f.store.param("h.1.attn.c_attn.weight").shape, (Shape{8 + 2 * 4, 8}));
  expect_finite_difference_gradients(f);
}

// The LLaMA block (RMSNorm, SwiGLU, RoPE, GQA, no biases, an untied head): the same check, every
// tensor's gradient through the rotation and the gated MLP.
TEST(GPTModel, FiniteDifferenceGradientsLlamaBlock) {
  GPTConfig c = tiny_config();
  c.norm = NormType::rmsnorm;
  c.mlp = MlpType::swiglu;
  c.position = PositionType::rope;
  c.rope_theta = 100.f;  // angles that turn visibly within 5 positions
  c.n_kv_head = 1;
  c.bias = false;
  c.tied_embeddings = false;
  c.mlp_hidden_size = 12;
  Fixture f(2, 5, {ParamRole::base, ParamRole::attention}, c);
  EXPECT_FALSE(f.store.contains("wpe.weight"));
  EXPECT_FALSE(f.store.contains("h.0.ln_1.bias"));
  EXPECT_EQ(f.store.param("h.0.mlp.c_fc.weight").shape, (Shape{24, 8}));
  EXPECT_EQ(f.store.param("h.0.mlp.c_proj.weight").shape, (Shape{8, 12}));
  expect_finite_difference_gradients(f);
}

// RMSNorm keeps no bias even with model.bias (the linear layers keep theirs, as Qwen2's do).
TEST(GPTModel, RmsNormHasNoBiasWithBiasedLinears) {
  GPTConfig c = tiny_config();
  c.norm = NormType::rmsnorm;
  c.position = PositionType::rope;
  Fixture f(2, 5, {ParamRole::base, ParamRole::attention}, c);
  EXPECT_FALSE(f.store.contains("h.0.ln_1.bias"));
  EXPECT_FALSE(f.store.contains("ln_f.bias"));
  EXPECT_TRUE(f.store.contains("h.0.attn.c_attn.bias"));
  expect_finite_difference_gradients(f);
}

// RoPE makes the model see order without a position table: the same earlier tokens in another
// order change the last position's logits. The control: one layer of causal attention without
// positions sums over the same set of embeddings whatever their order.
TEST(GPTModel, RopeMakesTheOutputDependOnPositions) {
  GPTConfig c = tiny_config();
  c.n_layer = 1;
  c.position = PositionType::rope;
  c.rope_theta = 100.f;
  Fixture f(1, 5, {ParamRole::base, ParamRole::attention}, c);
  auto last_logits = [&](std::vector<int32_t> ids) {
    f.model.forward(*f.ctx, f.store, test::cpu_tensor(ids, Shape{1, 5}), Tensor(),
                    AttentionMode::eval);
    const float* l = f.model.logits().ptr<float>() + 4 * c.padded_vocab;
    return std::vector<float>(l, l + c.vocab_size);
  };
  // The same multiset of earlier tokens in another order, the same last token.
  const auto a = last_logits({1, 2, 3, 4, 5}), b = last_logits({4, 3, 2, 1, 5});
  EXPECT_GT(test::max_rel_error(a, b), 1e-3);
  c.position = PositionType::learned;  // the control: no positions at all, the same logits
  GPTConfig none = c;
  Fixture g(1, 5, {ParamRole::base, ParamRole::attention}, none);
  zero_tensor(g.store.param("wpe.weight"));
  auto last_logits_g = [&](std::vector<int32_t> ids) {
    g.model.forward(*g.ctx, g.store, test::cpu_tensor(ids, Shape{1, 5}), Tensor(),
                    AttentionMode::eval);
    const float* l = g.model.logits().ptr<float>() + 4 * c.padded_vocab;
    return std::vector<float>(l, l + c.vocab_size);
  };
  EXPECT_LT(test::max_rel_error(last_logits_g({1, 2, 3, 4, 5}), last_logits_g({4, 3, 2, 1, 5})),
            1e-5);
}

TEST(GPTModel, AccumulationEqualsOneBatch) {
  Fixture big(4, 6), small(1, 6);
  small.tokens = big.tokens;
  small.targets = big.targets;
  int valid = 0;
  for (int32_t t : big.targets) valid += t != GPT::kIgnoreIndex;
  const float dloss = 1.f / float(valid);
  big.store.zero_grads();
  big.model.forward(*big.ctx, big.store, big.t(big.tokens, 0, 4), big.t(big.targets, 0, 4),
                    AttentionMode::train, dloss);
  big.model.backward(*big.ctx, big.store, big.t(big.tokens, 0, 4));
  small.store.zero_grads();
  for (int b = 0; b < 4; ++b) {
    small.model.forward(*small.ctx, small.store, small.t(small.tokens, b, 1),
                        small.t(small.targets, b, 1), AttentionMode::train, dloss);
    small.model.backward(*small.ctx, small.store, small.t(small.tokens, b, 1));
  }
  const float* ga = big.store.grads().ptr<float>();
  const float* gb = small.store.grads().ptr<float>();
  double num = 0, den = 0;
  for (int64_t i = 0; i < big.store.num_trainable(); ++i) {
    num += (ga[i] - gb[i]) * double(ga[i] - gb[i]);
    den += double(ga[i]) * ga[i];
  }
  EXPECT_GT(den, 0.0);
  EXPECT_LT(std::sqrt(num / den), 1e-5);
}

// The loss totals add up over forwards in call order and take_loss resets them; a forward without
// targets adds nothing; the mean is the mean over valid targets.
TEST(GPTModel, LossTotalsAccumulateUntilTaken) {
  Fixture f(2, 5);
  f.model.forward(*f.ctx, f.store, f.t(f.tokens, 0, 1), f.t(f.targets, 0, 1), AttentionMode::eval);
  const LossTotals first = f.model.take_loss(*f.ctx);
  f.model.forward(*f.ctx, f.store, f.t(f.tokens, 1, 1), f.t(f.targets, 1, 1), AttentionMode::eval);
  const LossTotals second = f.model.take_loss(*f.ctx);
  EXPECT_EQ(first.valid, 4);  // target 1 is ignored
  EXPECT_EQ(second.valid, 5);
  f.model.forward(*f.ctx, f.store, f.t(f.tokens, 0, 1), f.t(f.targets, 0, 1), AttentionMode::eval);
  f.model.forward(*f.ctx, f.store, f.t(f.tokens, 1, 1), Tensor(), AttentionMode::eval);
  f.model.forward(*f.ctx, f.store, f.t(f.tokens, 1, 1), f.t(f.targets, 1, 1), AttentionMode::eval);
  const LossTotals both = f.model.take_loss(*f.ctx);
  EXPECT_EQ(both.valid, 9);
  EXPECT_EQ(both.sum, first.sum + second.sum);
  f.model.forward(*f.ctx, f.store, f.t(f.tokens, 0, 2), f.t(f.targets, 0, 2), AttentionMode::eval);
  const LossTotals batch = f.model.take_loss(*f.ctx);
  EXPECT_EQ(batch.valid, 9);
  EXPECT_NEAR(batch.mean(), both.sum / 9.0, 1e-12);
  EXPECT_GT(batch.mean(), 0.5);  // random model on 11 tokens: about log(11)
  const LossTotals empty = f.model.take_loss(*f.ctx);
  EXPECT_EQ(empty.valid, 0);
  EXPECT_EQ(empty.sum, 0.0);
  EXPECT_TRUE(std::isnan(empty.mean()));
}

TEST(GPTModel, FrozenBaseHasNoGradients) {
  Fixture f(1, 4, {ParamRole::attention});
  EXPECT_EQ(f.store.num_trainable(), 0);  // dense attention has no variant parameters
  for (const auto& e : f.store.entries()) EXPECT_TRUE(f.store.grad(e.spec.name).empty());
  const std::vector<float> before(f.store.all_params().ptr<float>(),
                                  f.store.all_params().ptr<float>() + f.store.param_buffer_numel());
  MatmulCounts counts;
  f.ctx->matmul_counts = &counts;
  f.model.forward(*f.ctx, f.store, f.t(f.tokens, 0, 1), f.t(f.targets, 0, 1), AttentionMode::train,
                  0.25f);
  f.model.backward(*f.ctx, f.store, f.t(f.tokens, 0, 1));
  EXPECT_EQ(counts.weight_grad, 0);  // every weight-gradient product skipped
  EXPECT_EQ(counts.data_grad, 0);    // and every data-gradient product: nothing needs one
  for (int64_t i = 0; i < f.store.param_buffer_numel(); ++i)
    ASSERT_EQ(f.store.all_params().ptr<float>()[i], before[size_t(i)]) << i;
}

// FLOPs per token: PaLM's 6 N (N the matmul weights: c_attn, c_proj, the MLP, the tied output
// layer at the unpadded vocabulary) plus 6 L C T for causal attention; a frozen base counts 4 per
// weight (no weight gradient); a variant's matrices (Focus: W_g, centroids) count too.
TEST(GPTModel, FlopsPerTokenCountsTheMatricesThatRun) {
  GPTConfig c = tiny_config();
  const double C = c.n_embd, L = c.n_layer, F = c.mlp_hidden(), V = c.vocab_size, T = 8;
  const double n = L * (C * 3 * C + C * C + 2 * C * F) + V * C;
  const std::set<ParamRole> all = {ParamRole::base, ParamRole::attention, ParamRole::adapter};
  {
    GPT m(c);
    ParameterStore st;
    m.declare_params(st);
    EXPECT_DOUBLE_EQ(m.flops_per_token(int(T), st, all), 6 * n + 6 * L * C * T);
    EXPECT_DOUBLE_EQ(m.flops_per_token(int(T), st, {ParamRole::attention}), 4 * n + 6 * L * C * T);
  }
  c.attention.type = "focus";
  c.attention.focus.groups = 3;
  c.attention.focus.d_g = 4;
  GPT m(c);
  ParameterStore st;
  m.declare_params(st);
  const double focus = L * (C * 4 + 3 * 4);  // W_g [C, d_g] and the centroids [K, d_g] per layer
  EXPECT_DOUBLE_EQ(m.flops_per_token(int(T), st, all), 6 * (n + focus) + 6 * L * C * T);
  // the retrofit: the base frozen, the Focus matrices trained
  EXPECT_DOUBLE_EQ(m.flops_per_token(int(T), st, {ParamRole::attention}),
                   4 * n + 6 * focus + 6 * L * C * T);
}

// The trainable count shown to users leaves out the padded vocabulary rows of a trainable wte /
// lm_head (tied and untied), and nothing of a retrofit whose embeddings are frozen.
TEST(GPTModel, TrainableCountLeavesOutTheVocabularyPadding) {
  for (const bool tied : {true, false}) {
    GPTConfig c = tiny_config();
    c.tied_embeddings = tied;
    ASSERT_GT(c.padded_vocab, c.vocab_size);
    GPT m(c);
    ParameterStore all, none;
    m.declare_params(all);
    m.declare_params(none);
    all.finalize(Device::cpu, DType::f32, {ParamRole::base});
    EXPECT_EQ(m.num_trainable_unpadded(all), m.num_params_unpadded(all)) << "tied " << tied;
    none.finalize(Device::cpu, DType::f32, {ParamRole::attention});  // a dense model: none
    EXPECT_EQ(m.num_trainable_unpadded(none), none.num_trainable()) << "tied " << tied;
  }
}

// model.bias: false and model.tied_embeddings: false change the parameters (and train: finite
// differences below), nothing else.
TEST(GPTModel, BiasAndTiedEmbeddingsChangeTheParameters) {
  auto count = [](GPTConfig c) {
    GPT m(c);
    ParameterStore s;
    m.declare_params(s);
    s.finalize(Device::cpu, DType::f32, {ParamRole::base});
    return std::make_pair(s.num_params(), m.num_params_unpadded(s));
  };
  GPTConfig c = tiny_config();
  const int64_t C = c.n_embd, L = c.n_layer, Vp = c.padded_vocab, V = c.vocab_size;
  const auto base = count(c);
  c.bias = false;
  const auto no_bias = count(c);
  // Per layer: ln_1, ln_2 (C each), c_attn (3C), c_proj (C), c_fc (4C), mlp c_proj (C); ln_f (C).
  EXPECT_EQ(base.second - no_bias.second, L * (C + C + 3 * C + C + 4 * C + C) + C);
  c.bias = true;
  c.tied_embeddings = false;
  const auto untied = count(c);
  EXPECT_EQ(untied.first - base.first, Vp * C);
  EXPECT_EQ(untied.second - base.second, V * C);
  GPT m(c);
  ParameterStore s;
  m.declare_params(s);
  EXPECT_TRUE(s.contains("lm_head.weight"));
  c.tied_embeddings = true;
  c.bias = false;
  GPT nb(c);
  ParameterStore s2;
  nb.declare_params(s2);
  EXPECT_FALSE(s2.contains("h.0.attn.c_attn.bias"));
  EXPECT_FALSE(s2.contains("ln_f.bias"));
  EXPECT_FALSE(s2.contains("lm_head.weight"));
}

TEST(GPTModel, ShorterMicroBatchThanAllocated) {
  // Allocated for 4 sequences, run on 1: the same gradients as a model allocated for exactly 1.
  Fixture big(4, 6), small(1, 6);
  const float dloss = 1.f / 5.f;
  big.store.zero_grads();
  big.model.forward(*big.ctx, big.store, big.t(big.tokens, 0, 1), big.t(big.targets, 0, 1),
                    AttentionMode::train, dloss);
  big.model.backward(*big.ctx, big.store, big.t(big.tokens, 0, 1));
  small.store.zero_grads();
  small.model.forward(*small.ctx, small.store, small.t(small.tokens, 0, 1),
                      small.t(small.targets, 0, 1), AttentionMode::train, dloss);
  small.model.backward(*small.ctx, small.store, small.t(small.tokens, 0, 1));
  const float* ga = big.store.grads().ptr<float>();
  const float* gb = small.store.grads().ptr<float>();
  for (int64_t i = 0; i < big.store.num_trainable(); ++i) ASSERT_EQ(ga[i], gb[i]) << i;
}

TEST(GPTModel, UnsupportedAttentionOptionsAreRejected) {
  GPTConfig c = tiny_config();
  c.attention.type = "flash9";
  test::expect_error([&] { GPT m(c); }, "valid: dense");
}

// Which tensors AdamW decays (docs/recipes.md, optim.weight_decay): the 2-D matrices of the base
// (wte, wpe, an untied lm_head, every linear weight) and the LoRA adapters; never a bias or a
// LayerNorm vector, nor Focus's W_g and centroids (normalised, so only directions matter:
// docs/focus.md).
TEST(GPTModel, WeightDecayFallsOnTheMatricesOnly) {
  GPTConfig c = tiny_config();
  c.tied_embeddings = false;
  c.attention.type = "focus";
  c.attention.focus.groups = 3;
  c.attention.focus.d_g = 4;
  c.lora.rank = 2;
  GPT m(c);
  ParameterStore st;
  m.declare_params(st);
  int decayed = 0;
  for (const auto& e : st.entries()) {
    const std::string& n = e.spec.name;
    const bool focus = n.find(".attn.focus.") != std::string::npos;
    const bool expected = e.spec.shape.ndim == 2 && !focus;
    EXPECT_EQ(e.spec.weight_decay, expected) << n;
    decayed += e.spec.weight_decay;
    if (n.ends_with(".bias") || n.find("ln_") != std::string::npos) {
      EXPECT_FALSE(e.spec.weight_decay) << n;
    }
  }
  // wte, wpe, lm_head, and per layer c_attn, c_proj, c_fc, mlp c_proj and the two LoRA tensors
  EXPECT_EQ(decayed, 3 + c.n_layer * 6);
}
