// The attention variants' recipe keys (attention.focus, attention.sfa): defaults, enums, range
// errors with their messages, the YAML round trip, and Focus keys the chosen options do not read.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/recipe.h"
#include "config/recipe_test_util.h"
#include "test_util.h"
#include "train/from_recipe.h"

namespace attnlab {
namespace {

using test::parse_error;
using test::thrown_message;

// attention.focus: the paper's defaults, enum keys, and a clear error for every bad value.
TEST(RecipeFocus, DefaultsEnumsAndErrors) {
  const FocusConfig d;
  EXPECT_EQ(d.groups, 8);
  EXPECT_EQ(d.d_g, 16);
  EXPECT_EQ(d.local_window, 128);
  EXPECT_DOUBLE_EQ(d.tau, 0.1);
  EXPECT_EQ(d.iterations, 10);
  EXPECT_EQ(d.top_k, 2);
  EXPECT_EQ(d.assign, FocusAssign::sinkhorn);
  EXPECT_EQ(d.sinkhorn_scope, FocusScope::causal);
  EXPECT_EQ(d.gate, FocusGate::additive);
  EXPECT_EQ(d.route_training, FocusRouting::soft);
  EXPECT_EQ(d.eval_routing, FocusRouting::hard);

  Recipe r = parse_recipe(
      "attention:\n  type: focus\n  focus:\n    groups: 4\n    assign: softmax\n"
      "    sinkhorn_scope: sequence\n    gate: multiplicative\n    route_training: hard\n"
      "    eval_routing: soft\n    local_window: 0\n",
      "x.yaml");
  EXPECT_EQ(r.attention.focus.groups, 4);
  EXPECT_EQ(r.attention.focus.assign, FocusAssign::softmax);
  EXPECT_EQ(r.attention.focus.sinkhorn_scope, FocusScope::sequence);
  EXPECT_EQ(r.attention.focus.gate, FocusGate::multiplicative);
  EXPECT_EQ(r.attention.focus.route_training, FocusRouting::hard);
  EXPECT_EQ(r.attention.focus.eval_routing, FocusRouting::soft);
  EXPECT_EQ(r.attention.focus.local_window, 0);

  auto err = [](const std::string& key_value) {
    return parse_error("attention:\n  focus:\n    " + key_value + "\n");
  };
  EXPECT_EQ(err("groups: 0"), "x.yaml:3: attention.focus.groups must be >= 1, got 0");
  EXPECT_EQ(err("d_g: 0"), "x.yaml:3: attention.focus.d_g must be >= 1, got 0");
  EXPECT_EQ(err("local_window: -1"), "x.yaml:3: attention.focus.local_window must be >= 0, got -1");
  EXPECT_EQ(err("tau: 0"), "x.yaml:3: attention.focus.tau must be > 0, got 0");
  EXPECT_EQ(err("iterations: 0"), "x.yaml:3: attention.focus.iterations must be >= 1, got 0");
  EXPECT_EQ(err("top_k: 0"), "x.yaml:3: attention.focus.top_k must be >= 1, got 0");
  EXPECT_EQ(err("top_k: 9"),
            "x.yaml:3: attention.focus.top_k (9) must be <= attention.focus.groups (8)");
  EXPECT_EQ(err("gate_eps: 0"), "x.yaml:3: attention.focus.gate_eps must be > 0, got 0");
  // Values the model's float would turn into 0 or infinity (the module runs in float).
  EXPECT_EQ(err("gate_eps: 1.0e-50"),
            "x.yaml:3: attention.focus.gate_eps must be > 0, got 1e-50 (0 as a float, the type "
            "it is used as)");
  EXPECT_HAS(err("tau: 1.0e-46"), "attention.focus.tau must be > 0, got 1e-46 (0 as a float");
  // A float tau whose scores (cos / tau) overflow: positive, but too small.
  EXPECT_EQ(err("tau: 1.0e-39"),
            "x.yaml:3: attention.focus.tau must be >= 5.87747e-39 (2 / tau is used as a float), "
            "got 1e-39");
  EXPECT_EQ(parse_error("attention:\n  focus:\n    tau: 1.0e-37\n"), "");
  EXPECT_EQ(err("gate_scale: 1.0e39"),
            "x.yaml:3: attention.focus.gate_scale must be finite, got 1e+39 (inf as a float, the "
            "type it is used as)");
  EXPECT_HAS(err("gate_bias: -1.0e39"), "attention.focus.gate_bias must be finite");
  EXPECT_EQ(err("assign: kmeans"),
            "x.yaml:3: attention.focus.assign 'kmeans' is not a valid value (valid: sinkhorn, "
            "softmax)");
  EXPECT_EQ(err("sinkhorn_scope: global"),
            "x.yaml:3: attention.focus.sinkhorn_scope 'global' is not a valid value (valid: "
            "causal, sequence)");
  EXPECT_EQ(err("gate: additiv"),
            "x.yaml:3: attention.focus.gate 'additiv' is not a valid value (valid: additive, "
            "multiplicative); did you mean 'additive'?");
  EXPECT_EQ(err("eval_routing: topk"),
            "x.yaml:3: attention.focus.eval_routing 'topk' is not a valid value (valid: soft, "
            "hard)");
  EXPECT_EQ(err("K: 8"),
            "x.yaml:3: unknown key 'attention.focus.K'; did you mean "
            "'attention.focus.groups'?");
  EXPECT_EQ(parse_error("attention:\n  type: focus\n  window: 64\n"),
            "x.yaml:3: attention.window (64) does not apply to attention.type focus: its local "
            "band is attention.focus.local_window");
}

TEST(RecipeSfa, DefaultsRoundTripAndErrors) {
  const SfaConfig d;
  EXPECT_EQ(d.k, 0);
  EXPECT_DOUBLE_EQ(d.distill, 0.0);
  EXPECT_EQ(sfa_default_k(64), 8);
  EXPECT_EQ(sfa_default_k(128), 16);
  EXPECT_EQ(sfa_default_k(32), 4);
  EXPECT_EQ(sfa_default_k(20), 3);

  Recipe r =
      parse_recipe("attention:\n  type: sfa\n  sfa:\n    k: 4\n    distill: 0.5\n", "x.yaml");
  EXPECT_EQ(r.attention.sfa.k, 4);
  EXPECT_DOUBLE_EQ(r.attention.sfa.distill, 0.5);
  EXPECT_EQ(parse_recipe(recipe_to_yaml(r), "y.yaml"), r);
  const GPTConfig c = gpt_config_of(r);
  EXPECT_EQ(c.attention.type, "sfa");
  EXPECT_EQ(c.attention.sfa.k, 4);
  EXPECT_FLOAT_EQ(c.attention.sfa.distill, 0.5f);

  EXPECT_EQ(parse_error("attention:\n  sfa:\n    k: -1\n"),
            "x.yaml:3: attention.sfa.k must be >= 0, got -1");
  EXPECT_EQ(parse_error("attention:\n  sfa:\n    distill: -0.1\n"),
            "x.yaml:3: attention.sfa.distill must be >= 0, got -0.1");
  EXPECT_EQ(parse_error("attention:\n  sfa:\n    topk: 4\n"),
            "x.yaml:3: unknown key 'attention.sfa.topk'; did you mean 'attention.sfa.k'?");
  // The head dim is known only with the model: 768 / 12 = 64.
  EXPECT_EQ(parse_error("attention:\n  type: sfa\n  sfa:\n    k: 65\n"),
            "x.yaml:4: attention.sfa.k (65) must be <= the head dim (model.n_embd / model.n_head "
            "= 64); 0 picks the default (8)");
  EXPECT_NO_THROW(parse_recipe("attention:\n  sfa:\n    k: 65\n", "x.yaml"));  // not used
  EXPECT_EQ(parse_error("attention:\n  type: sfa\n  window: 16\n"),
            "x.yaml:3: attention.window (16) does not apply to attention.type sfa (full causal "
            "only); set attention.window=0");
}

TEST(RecipeSfa, KernelKey) {
  EXPECT_EQ(SfaConfig{}.kernel, SfaKernel::auto_select);
  for (const auto& [text, kernel, option] :
       {std::tuple{"auto", SfaKernel::auto_select, SfaOptions::Kernel::auto_select},
        std::tuple{"flash", SfaKernel::flash, SfaOptions::Kernel::flash},
        std::tuple{"masked_dense", SfaKernel::masked_dense, SfaOptions::Kernel::masked_dense}}) {
    SCOPED_TRACE(text);
    const Recipe r = parse_recipe(
        std::string("attention:\n  type: sfa\n  sfa:\n    kernel: ") + text + "\n", "x.yaml");
    EXPECT_EQ(r.attention.sfa.kernel, kernel);
    EXPECT_EQ(parse_recipe(recipe_to_yaml(r), "y.yaml"), r);
    EXPECT_EQ(gpt_config_of(r).attention.sfa.kernel, option);
  }
  EXPECT_EQ(parse_error("attention:\n  sfa:\n    kernel: sparse\n"),
            "x.yaml:3: attention.sfa.kernel 'sparse' is not a valid value (valid: auto, flash, "
            "masked_dense)");
}

// The Focus keys that the chosen gate or assignment does not read are named (the trainer warns
// for those a recipe gives); the others are used.
TEST(RecipeFocus, UnusedKeysAreNamedWithTheSettingThatIgnoresThem) {
  FocusConfig f;  // additive gate, Sinkhorn
  EXPECT_NE(f.unused_key_reason("attention.focus.gate_scale").find("gate is additive"),
            std::string::npos);
  EXPECT_NE(f.unused_key_reason("attention.focus.gate_bias"), "");
  for (const char* used :
       {"attention.focus.gate_eps", "attention.focus.iterations", "attention.focus.sinkhorn_scope",
        "attention.focus.top_k", "attention.focus.tau", "attention.focus.groups"})
    EXPECT_EQ(f.unused_key_reason(used), "") << used;
  f.gate = FocusGate::multiplicative;
  f.assign = FocusAssign::softmax;
  EXPECT_NE(f.unused_key_reason("attention.focus.gate_eps").find("gate is multiplicative"),
            std::string::npos);
  EXPECT_EQ(f.unused_key_reason("attention.focus.gate_scale"), "");
  EXPECT_NE(f.unused_key_reason("attention.focus.iterations").find("assign is softmax"),
            std::string::npos);
  EXPECT_NE(f.unused_key_reason("attention.focus.sinkhorn_scope"), "");
  EXPECT_EQ(f.unused_key_reason("attention.focus.tau"), "");
}

}  // namespace
}  // namespace attnlab
