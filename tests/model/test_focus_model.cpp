// Focus attention inside the GPT (CPU): finite differences of the whole model for W_g, the
// centroids and the base weights (through dh into ln_1 and below); causality of the two Sinkhorn
// scopes; decoding with the cache (group-indexed) equal to the full forward under hard routing;
// telemetry; a few training steps lower the loss.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/context.h"
#include "core/cuda_check.h"
#include "model/gpt.h"
#include "model/model_fixture.h"
#include "nn/attention_focus.h"
#include "ops/focus_ops.h"
#include "test_util.h"
#include "train/optimizer.h"

using namespace attnlab;

namespace {

GPTConfig focus_config(FocusOptions::Scope scope = FocusOptions::Scope::causal) {
  GPTConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.vocab_size = 11;
  c.padded_vocab = 16;
  c.block_size = 12;
  c.attention.type = "focus";
  FocusOptions& f = c.attention.focus;
  f.groups = 3;
  f.d_g = 4;
  f.local_window = 2;
  f.tau = 0.5f;  // smooth enough for central differences
  f.iterations = 3;
  f.top_k = 1;
  f.gate_eps = 1e-2f;
  f.scope = scope;
  return c;
}

struct FocusModel : test::ModelFixture {
  explicit FocusModel(GPTConfig c = focus_config(), int T_ = 7) : ModelFixture(c, 2, T_) {}
  double loss(AttentionMode mode) {
    model.forward(*ctx, store, t(tokens), t(targets), mode);
    return model.take_loss(*ctx).mean();
  }
};

// The collapse warning's threshold: 50% from K 4 on; with fewer groups, where balance alone is
// 1/K >= 33%, halfway from balance to one group (K 1 never warns).
TEST(FocusModel, CollapseThresholdScalesBelowFourGroups) {
  EXPECT_EQ(FocusAttention::collapse_threshold(8), 0.5);
  EXPECT_EQ(FocusAttention::collapse_threshold(4), 0.5);
  EXPECT_NEAR(FocusAttention::collapse_threshold(3), 2.0 / 3, 1e-12);
  EXPECT_EQ(FocusAttention::collapse_threshold(2), 0.75);
  EXPECT_EQ(FocusAttention::collapse_threshold(1), 1.0);
  for (int K = 2; K <= 64; ++K) EXPECT_GT(FocusAttention::collapse_threshold(K), 1.0 / K + 1e-9);
}

// The telemetry's numbers from known assignments: the histogram of each token's largest group,
// dominance (the largest share), mean entropy; the collapse warning past the threshold only.
TEST(FocusModel, TelemetryOfKnownAssignments) {
  const std::vector<float> g = {0.7f, 0.2f, 0.1f, 0.f,   // group 0
                                0.1f, 0.8f, 0.1f, 0.f,   // group 1
                                0.6f, 0.3f, 0.1f, 0.f,   // group 0
                                1.f,  0.f,  0.f,  0.f};  // group 0, entropy 0
  std::vector<double> sums(6, 0.0);
  FocusAttention::count_rows(g.data(), 4, 4, sums);
  double entropy = 0;
  for (float v : g)
    if (v > 0) entropy -= double(v) * std::log(double(v));
  EXPECT_EQ(sums[0], 3.0);
  EXPECT_EQ(sums[1], 1.0);
  EXPECT_EQ(sums[2] + sums[3], 0.0);
  EXPECT_NEAR(sums[4], entropy, 1e-12);
  EXPECT_EQ(sums[5], 4.0);

  GPTConfig c = focus_config();
  c.attention.focus.groups = 4;
  c.attention.focus.top_k = 1;
  FocusModel m(c);
  AttentionModule& a = m.model.attention(1);
  *a.telemetry_sums() = sums;
  std::map<std::string, double> metrics;
  a.metrics(metrics);
  EXPECT_EQ(metrics.at("focus.h1.dominance"), 0.75);
  EXPECT_EQ(metrics.at("focus.h1.group_share.0"), 0.75);
  EXPECT_EQ(metrics.at("focus.h1.group_share.1"), 0.25);
  EXPECT_EQ(metrics.at("focus.h1.group_share.3"), 0.0);
  EXPECT_NEAR(metrics.at("focus.h1.entropy"), entropy / 4, 1e-12);
  EXPECT_EQ(metrics.at("focus.h1.tokens"), 4.0);
  EXPECT_EQ(a.health_warning(),
            "focus layer 1: 75% of the tokens in one group (collapse; 1/K is balance)");
  *a.telemetry_sums() = {2, 2, 0, 0, 0, 4};  // 50%: not past the threshold
  EXPECT_EQ(a.health_warning(), "");
  // A tie is shared equally: a uniform row (the causal scope's first token) counts 1/K to each
  // group, and a layer of uniform rows is balanced, not collapsed into group 0.
  const std::vector<float> tied = {0.25f, 0.25f, 0.25f, 0.25f,  // uniform: 1/4 each
                                   0.4f,  0.4f,  0.2f,  0.f,    // tie of two: 1/2 each
                                   0.1f,  0.7f,  0.1f,  0.1f};  // group 1
  std::vector<double> tied_sums(6, 0.0);
  FocusAttention::count_rows(tied.data(), 3, 4, tied_sums);
  EXPECT_DOUBLE_EQ(tied_sums[0], 0.75);
  EXPECT_DOUBLE_EQ(tied_sums[1], 1.75);
  EXPECT_DOUBLE_EQ(tied_sums[2], 0.25);
  EXPECT_DOUBLE_EQ(tied_sums[3], 0.25);
  const std::vector<float> uniform(16 * 4, 0.25f);
  *a.telemetry_sums() = std::vector<double>(6, 0.0);
  FocusAttention::count_rows(uniform.data(), 16, 4, *a.telemetry_sums());
  EXPECT_EQ(a.health_warning(), "");
  std::map<std::string, double> balanced;
  a.metrics(balanced);
  EXPECT_EQ(balanced.at("focus.h1.dominance"), 0.25);
  std::map<std::string, double> both = {{"focus.h0.dominance", 0.3},  {"focus.h0.entropy", 1.0},
                                        {"focus.h1.dominance", 0.75}, {"focus.h1.entropy", 0.5},
                                        {"focus.h10.dominance", 0.5}, {"focus.h10.entropy", 0.0}};
  EXPECT_EQ(a.summarize(both),
            "max dominance 0.750 (layer 1; 1/K = 0.250) | dominance % by layer 30 75 50 | entropy "
            "0.500 (ln K = 1.386)");
}

// Settings under which the grouping does nothing are named at the start of training.
TEST(FocusModel, CudaLimitsNameTheRecipeKeys) {
  FocusOptions o;  // the defaults (K 8, d_g 16) are within every limit
  EXPECT_EQ(focus_cuda_limits_error(o), "");
  o.d_g = 64;
  o.groups = 16;
  EXPECT_EQ(focus_cuda_limits_error(o), "");  // 16 x 64 = 1024: the edge
  o.d_g = 65;
  o.groups = 1;
  EXPECT_EQ(focus_cuda_limits_error(o),
            "attention.focus.d_g (65) must be <= 64 and attention.focus.groups x d_g (1 x 65 = "
            "65) <= 1024 on CUDA (the group scores kernel's limits)");
  o.d_g = 4;
  o.groups = 257;
  EXPECT_NE(focus_cuda_limits_error(o).find("groups x d_g (257 x 4 = 1028) <= 1024"),
            std::string::npos);
  o.d_g = 1;
  EXPECT_EQ(focus_cuda_limits_error(o),
            "attention.focus.groups (257) must be <= 256 on CUDA with assign: sinkhorn (the "
            "Sinkhorn kernels' limit)");
  o.assign = FocusOptions::Assign::softmax;
  EXPECT_EQ(focus_cuda_limits_error(o), "");
}

// The start-of-training warnings, one string per warning ("" when none).
std::string warnings(const AttentionModule& a, int64_t T) {
  std::string all;
  for (const std::string& w : a.config_warnings(T)) all += (all.empty() ? "" : " | ") + w;
  return all;
}

TEST(FocusModel, ConfigWarningWhereTheGroupsDoNothing) {
  GPTConfig c = focus_config();  // local_window 2, 3 groups
  FocusModel m(c);
  const AttentionModule& a = m.model.attention(0);
  EXPECT_EQ(warnings(a, 12), "");
  EXPECT_EQ(warnings(a, 4), "");
  EXPECT_EQ(warnings(a, 3),
            "attention.focus.local_window (2) >= the sequence length - 1 (2): every pair is in the "
            "local band, so Focus is dense attention here (its groups do nothing)");
  c.attention.focus.groups = 1;
  FocusModel one(c);
  EXPECT_EQ(warnings(one.model.attention(1), 12).find("attention.focus.groups is 1"), 0u);
  // The multiplicative gate's bf16 gradient error (docs/focus.md): a warning in bf16 only.
  auto ctx = ExecContext::make_cpu();
  AttentionOptions o;
  o.type = "focus";
  o.n_layer = 1;
  o.focus.local_window = 2;
  o.focus.gate = FocusOptions::Gate::multiplicative;
  FocusAttention mul(o, 0);
  const AttentionShape s{1, 16, QKVLayout{2, 2, 8}, 16};
  for (DType dt : {DType::f32, DType::bf16}) {
    mul.allocate(*ctx, s, dt);
    EXPECT_EQ(warnings(mul, 16).find("attention.focus.gate multiplicative in bf16"),
              dt == DType::bf16 ? size_t(0) : std::string::npos)
        << dtype_name(dt);
  }
  o.focus.gate = FocusOptions::Gate::additive;
  FocusAttention add(o, 0);
  add.allocate(*ctx, s, DType::bf16);
  EXPECT_EQ(warnings(add, 16), "");
  // The CPU path is deterministic whatever the flag says.
  ctx->deterministic = true;
  add.allocate(*ctx, s, DType::bf16);
  EXPECT_EQ(warnings(add, 16), "");
}

// train.deterministic on CUDA: the wgmma backward (bf16, the additive gate or route_training
// hard, head dim 64 / 128, Hopper) has a deterministic form at K <= 8; the other kernels add with
// atomics, and a run that asked for bitwise-reproducible kernels is told so at its start (the
// module reads allocate's context: a CUDA context with deterministic set).
TEST(FocusModelCuda, DeterministicWarnsWhereTheKernelHasNoDeterministicForm) {
  AttentionOptions o;
  o.type = "focus";
  o.n_layer = 1;
  o.focus.local_window = 2;
  const FocusAttention f(o, 0);
  EXPECT_TRUE(f.config_warnings(16).empty());  // not allocated: no context seen
  if (!cuda_available()) GTEST_SKIP() << "the CUDA allocation needs a GPU";
  auto gpu = ExecContext::make_cuda(0);
  const AttentionShape s{1, 16, QKVLayout{2, 2, 64}, 128};
  const std::string atomic =
      "train.deterministic is true, but this Focus layer's CUDA backward "
      "adds gradients with fp32 atomics";
  const bool wgmma = ops::focus_soft_wgmma_available(64, o.focus.groups);
  struct Case {
    FocusOptions::Gate gate;
    FocusOptions::Routing route;
    DType dtype;
    int groups;
    bool deterministic_form;
  };
  using G = FocusOptions::Gate;
  using R = FocusOptions::Routing;
  for (const Case& c : {Case{G::additive, R::soft, DType::bf16, 8, wgmma},
                        Case{G::additive, R::soft, DType::bf16, 4, wgmma},
                        Case{G::multiplicative, R::hard, DType::bf16, 8, wgmma},
                        Case{G::additive, R::soft, DType::bf16, 16, false},  // K > 8
                        Case{G::multiplicative, R::soft, DType::bf16, 8, false},
                        Case{G::additive, R::soft, DType::f32, 8, false}}) {
    o.focus.gate = c.gate;
    o.focus.route_training = c.route;
    o.focus.groups = c.groups;
    FocusAttention g(o, 0);
    for (bool det : {false, true}) {
      SCOPED_TRACE(testing::Message()
                   << "gate " << int(c.gate) << " route " << int(c.route) << " "
                   << dtype_name(c.dtype) << " K " << c.groups << " deterministic " << det);
      gpu->deterministic = det;
      g.allocate(*gpu, s, c.dtype);
      EXPECT_EQ(warnings(g, 16).find(atomic) != std::string::npos, det && !c.deterministic_form);
    }
  }
}

}  // namespace

// Soft routing in training: every parameter's gradient, the Focus ones (role attention) included.
// Their part is small beside the base weights' (the tolerance here is absolute); each Focus
// gradient is checked on its own scale in test_focus_module.cpp.
TEST(FocusModel, FiniteDifferenceGradientsOfTheWholeModel) {
  for (auto gate : {FocusOptions::Gate::additive, FocusOptions::Gate::multiplicative}) {
    GPTConfig c = focus_config();
    c.attention.focus.gate = gate;
    c.attention.focus.eval_routing = FocusOptions::Routing::soft;  // eval == the train forward
    FocusModel m(c);
    m.gradients();
    const auto checked =
        m.expect_finite_differences([&] { return m.loss(AttentionMode::eval); },
                                    [](ParamRole r) { return r == ParamRole::attention ? 8 : 3; });
    EXPECT_GT(m.total(checked), 60);
    EXPECT_EQ(checked.at(ParamRole::attention), 2 * 2 * 8);  // w_g and centroids of both layers
  }
}

// Focus on the LLaMA block: the group projection reads the RMSNorm output, q and k are rotated
// before the gate; every gradient, and the hard-routed decode (rotated keys in the group cache).
TEST(FocusModel, LlamaBlockGradientsAndDecode) {
  GPTConfig c = focus_config();
  c.norm = NormType::rmsnorm;
  c.mlp = MlpType::swiglu;
  c.position = PositionType::rope;
  c.rope_theta = 100.f;
  c.bias = false;
  c.tied_embeddings = false;
  c.attention.focus.eval_routing = FocusOptions::Routing::soft;
  FocusModel m(c);
  m.gradients();
  const auto checked =
      m.expect_finite_differences([&] { return m.loss(AttentionMode::eval); },
                                  [](ParamRole r) { return r == ParamRole::attention ? 8 : 3; });
  EXPECT_EQ(checked.at(ParamRole::attention), 2 * 2 * 8);
  c.attention.focus.eval_routing = FocusOptions::Routing::hard;
  FocusModel d(c, 12);
  d.expect_decode_matches(d.logits(AttentionMode::eval), {1, 5}, 1e-5, "llama block");
}

TEST(FocusModel, ParametersHaveTheirNamesShapesAndRole) {
  FocusModel m;
  for (int l = 0; l < 2; ++l) {
    const std::string p = "h." + std::to_string(l) + ".attn.focus.";
    EXPECT_EQ(m.store.param(p + "w_g").shape, (Shape{4, 8}));
    EXPECT_EQ(m.store.param(p + "centroids").shape, (Shape{3, 4}));
  }
  for (const auto& e : m.store.entries())
    EXPECT_EQ(e.spec.role == ParamRole::attention,
              e.spec.name.find(".attn.focus.") != std::string::npos)
        << e.spec.name;
}

// Changing the last tokens must leave earlier logits unchanged with the causal scope; the
// sequence scope (the paper's form) lets the future move the groups of the past.
TEST(FocusModel, CausalScopeDoesNotLeakTheFuture) {
  for (auto scope : {FocusOptions::Scope::causal, FocusOptions::Scope::sequence}) {
    GPTConfig c = focus_config(scope);
    c.attention.focus.local_window = 0;  // every earlier pair is gated
    FocusModel m(c, 12);
    const std::vector<float> before = m.logits(AttentionMode::train);
    for (int b = 0; b < m.B; ++b)
      for (int t = 8; t < m.T; ++t) m.tokens[size_t(b * m.T + t)] = (t * 7 + b) % 11;
    const std::vector<float> after = m.logits(AttentionMode::train);
    double diff = 0.0;
    const int Vp = c.padded_vocab;
    for (int b = 0; b < m.B; ++b)
      for (int t = 0; t < 8; ++t)
        for (int v = 0; v < Vp; ++v) {
          const size_t i = (size_t(b) * m.T + t) * Vp + v;
          diff = std::max(diff, double(std::fabs(after[i] - before[i])));
        }
    if (scope == FocusOptions::Scope::causal) {
      EXPECT_EQ(diff, 0.0);
    } else {
      EXPECT_GT(diff, 1e-4) << "the sequence scope leaks";
    }
  }
}

// prefill + decode_step (hard routing, the default of generate) equals the full eval forward.
// top_k 2 with 5 groups (two 2-sets of 3 groups always meet: that would be dense attention).
TEST(FocusModel, DecodeEqualsTheForwardWithHardRouting) {
  for (int top_k : {1, 2}) {
    GPTConfig c = focus_config();
    c.attention.focus.top_k = top_k;
    if (top_k == 2) c.attention.focus.groups = 5;
    FocusModel m(c, 12);
    m.expect_decode_matches(m.logits(AttentionMode::eval), {1, 5}, 1e-5,
                            "top_k " + std::to_string(top_k));
  }
  GPTConfig seq = focus_config(FocusOptions::Scope::sequence);
  FocusModel s(seq, 4);
  test::expect_error([&] { s.model.make_kv_cache(*s.ctx, 1, 4, DType::f32); },
                     {"generation needs attention.focus.sinkhorn_scope causal"});
}

// The group-indexed decode (the window plus the cached tokens of the query's groups) against the
// full eval forward: sequences longer than the window, K 4 and 8 (some groups empty in 24
// tokens), top_k 1 and 2, GQA, B = 2, prefills of 1, 5 and 13 tokens. The paths it does not take
// still match: soft eval routing (the masked cache decode) and top_k = K (dense decode).
TEST(FocusModel, GroupIndexedDecodeEqualsTheForward) {
  auto config = [](int K, int top_k) {
    GPTConfig c = focus_config();
    c.n_head = 4;
    c.n_kv_head = 2;
    c.n_embd = 16;
    c.block_size = 24;
    c.attention.focus.groups = K;
    c.attention.focus.top_k = top_k;
    c.attention.focus.local_window = 3;
    return c;
  };
  for (int K : {4, 8})
    for (int top_k : {1, 2}) {
      FocusModel m(config(K, top_k), 24);
      m.expect_decode_matches(m.logits(AttentionMode::eval), {1, 5, 13}, 1e-5,
                              "K " + std::to_string(K) + " top_k " + std::to_string(top_k));
    }
  GPTConfig soft = config(4, 2);
  soft.attention.focus.eval_routing = FocusOptions::Routing::soft;
  FocusModel s(soft, 24);
  s.expect_decode_matches(s.logits(AttentionMode::eval), {1, 13}, 1e-5, "soft routing");
  FocusModel every(config(4, 4), 24);
  every.expect_decode_matches(every.logits(AttentionMode::eval), {1, 13}, 1e-5, "top_k = K");
}

TEST(FocusModel, TelemetryAndTrainingLowersTheLoss) {
  for (auto route : {FocusOptions::Routing::soft, FocusOptions::Routing::hard}) {
    GPTConfig c = focus_config();
    c.attention.focus.route_training = route;
    FocusModel m(c, 12);
    AdamWConfig oc;
    oc.lr = 1e-2f;
    AdamW opt(*m.ctx, m.store, oc);
    const double first = m.loss(AttentionMode::train);
    for (int step = 1; step <= 15; ++step) {
      m.gradients();
      opt.step(1e-2f, step);
    }
    EXPECT_LT(m.loss(AttentionMode::train), first - 0.1);
    std::map<std::string, double> metrics;
    ASSERT_NE(dynamic_cast<FocusAttention*>(&m.model.attention(0)), nullptr);
    m.model.reset_attention_telemetry();
    m.model.attention_metrics(metrics);
    EXPECT_TRUE(metrics.empty());  // nothing counted yet
    m.loss(AttentionMode::eval);
    m.model.count_attention_telemetry({1, 0});  // sequence 0 of 2 scored: its 12 tokens
    m.model.attention_metrics(metrics);
    EXPECT_EQ(metrics.at("focus.h1.tokens"), 12.0);
    m.loss(AttentionMode::eval);
    m.model.count_attention_telemetry({1, 1});
    m.model.attention_metrics(metrics);
    EXPECT_EQ(metrics.at("focus.h1.tokens"), 36.0);
    EXPECT_EQ(metrics.count("focus.h1.dominance"), 1u);
    EXPECT_GE(metrics.at("focus.h0.dominance"), 1.0 / 3 - 1e-9);
    EXPECT_LE(metrics.at("focus.h0.dominance"), 1.0);
    EXPECT_GT(metrics.at("focus.h0.entropy"), 0.0);
    double shares = 0;
    for (int k = 0; k < 3; ++k) shares += metrics.at("focus.h0.group_share." + std::to_string(k));
    EXPECT_NEAR(shares, 1.0, 1e-12);
  }
}
