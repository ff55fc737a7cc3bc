// The comparison of a recipe's model with an existing one (config/model_keys.h): keys compared
// resolved, so that a default and the value it stands for are the same model.
#include <gtest/gtest.h>

#include <string>

#include "config/model_keys.h"
#include "config/recipe.h"

namespace attnlab {
namespace {

// An SFA model of head dim 32 (n_embd 64, 2 heads): attention.sfa.k's default is 4.
Recipe sfa_recipe(const std::string& k_line) {
  return parse_recipe(
      "model:\n  n_layer: 1\n  n_head: 2\n  n_embd: 64\n  vocab_size: 1024\n  block_size: 16\n"
      "train:\n  seq_len: 16\nattention:\n  type: sfa\n  sfa:\n" +
          k_line,
      "x.yaml");
}

// k 0 (the default) and k 4 are the same model at head dim 32; k 3 is not. A resume
// (model_function_conflicts) and a new run on the weights (attention_changes_from) agree.
TEST(ModelKeys, SfaDefaultKEqualsItsResolvedValue) {
  ASSERT_EQ(sfa_default_k(32), 4);
  const Recipe zero = sfa_recipe("    k: 0\n"), four = sfa_recipe("    k: 4\n"),
               three = sfa_recipe("    k: 3\n"), none = sfa_recipe("");
  EXPECT_EQ(model_function_conflicts(zero, four, "the checkpoint"), "");
  EXPECT_EQ(model_function_conflicts(four, zero, "the checkpoint"), "");
  EXPECT_EQ(model_function_conflicts(none, four, "the checkpoint"), "");
  EXPECT_EQ(attention_changes_from(none, four, "the base"), "");
  EXPECT_EQ(attention_changes_from(four, zero, "the base"), "");
  const std::string diff = model_function_conflicts(three, four, "the checkpoint");
  EXPECT_NE(diff.find("attention.sfa.k: 3 in the recipe"), std::string::npos) << diff;
  EXPECT_NE(diff.find("4 in the checkpoint"), std::string::npos) << diff;
  EXPECT_NE(attention_changes_from(three, zero, "the base").find("attention.sfa.k"),
            std::string::npos);
  // The default resolves per head dim: k 0 is 8 at head dim 64, so not k 4.
  Recipe wide = zero;
  wide.model.n_head = 1;  // head dim 64
  EXPECT_NE(attention_changes_from(four, wide, "the base").find("attention.sfa.k: 4"),
            std::string::npos);
  // A dense run on SFA weights: the type is the change; the SFA keys mean nothing to it.
  Recipe dense = three;
  dense.attention.type = "dense";
  const std::string to_dense = attention_changes_from(dense, four, "the base");
  EXPECT_NE(to_dense.find("attention.type: dense in the recipe"), std::string::npos) << to_dense;
  EXPECT_EQ(to_dense.find("attention.sfa.k"), std::string::npos) << to_dense;
  // The same for a recipe's keys against a model (eval --recipe): a Focus recipe on a dense model
  // names the type, not the Focus keys the dense model does not have.
  const Recipe focus = parse_recipe("attention:\n  type: focus\n  focus: {groups: 4}\n", "f.yaml");
  const std::string on_dense = given_attention_key_conflicts(
      focus.attention, focus.given, dense.attention, "the model", head_dim_of(dense.model));
  EXPECT_NE(on_dense.find("attention.type: focus in the recipe (f.yaml:2), dense in the model"),
            std::string::npos)
      << on_dense;
  EXPECT_EQ(on_dense.find("attention.focus.groups"), std::string::npos) << on_dense;
}

// model.rope_scaling's keys are compared by value (a model's unread keys hold their defaults): a
// resume with another factor or type is refused.
TEST(ModelKeys, RopeScalingComparedWhereRead) {
  auto r = [](const std::string& scaling) {
    return parse_recipe("model:\n  family: llama\n  n_layer: 1\n" + scaling, "x.yaml");
  };
  const Recipe none = r(""), l8 = r("  rope_scaling: {type: llama3, factor: 8}\n"),
               l16 = r("  rope_scaling: {type: llama3, factor: 16}\n"),
               none_factor = r("  rope_scaling: {factor: 3}\n");
  EXPECT_NE(model_function_conflicts(none_factor, none, "the checkpoint")
                .find("model.rope_scaling.factor: 3 in the recipe"),
            std::string::npos);
  // ... and such a factor is refused before training: type none reads none.
  EXPECT_NE(rope_scaling_key_problem(none_factor, false)
                .find("model.rope_scaling.factor (x.yaml:4) is not read by "
                      "model.rope_scaling.type none"),
            std::string::npos)
      << rope_scaling_key_problem(none_factor, false);
  EXPECT_EQ(rope_scaling_key_problem(l8, true), "");
  EXPECT_EQ(model_function_conflicts(l8, l8, "the checkpoint"), "");
  const std::string diff = model_function_conflicts(l16, l8, "the checkpoint");
  EXPECT_NE(diff.find("model.rope_scaling.factor: 16 in the recipe"), std::string::npos) << diff;
  EXPECT_NE(diff.find("8 in the checkpoint"), std::string::npos) << diff;
  const std::string typed = model_function_conflicts(none, l8, "the checkpoint");
  EXPECT_NE(typed.find("model.rope_scaling.type: none in the recipe"), std::string::npos) << typed;
}

// A resume with another LoRA scale (alpha) or placement is another model: refused, naming the
// key; recipes without adapters compare none of them.
TEST(ModelKeys, LoraKeysAreComparedWhereAdaptersExist) {
  const Recipe plain = sfa_recipe("");
  EXPECT_EQ(model_function_conflicts(plain, plain, "the checkpoint"), "");
  Recipe a = plain;
  a.retrofit.lora.rank = 4;
  a.retrofit.lora.alpha = 16;
  Recipe b = a;
  EXPECT_EQ(model_function_conflicts(a, b, "the checkpoint"), "");
  b.retrofit.lora.alpha = 1000;
  EXPECT_EQ(model_function_conflicts(b, a, "the checkpoint"),
            "\n  retrofit.lora.alpha: 1000 in the recipe (default), 16 in the checkpoint");
  b = a;
  b.retrofit.lora.rank = 8;
  b.retrofit.lora.targets = {"c_attn", "c_proj"};
  const std::string diff = model_function_conflicts(b, a, "the checkpoint");
  EXPECT_NE(diff.find("retrofit.lora.rank: 8 in the recipe"), std::string::npos) << diff;
  EXPECT_NE(diff.find("retrofit.lora.targets: c_attn,c_proj in the recipe (default), c_attn in"),
            std::string::npos)
      << diff;
  EXPECT_NE(model_function_conflicts(plain, a, "the checkpoint").find("retrofit.lora.rank: 0"),
            std::string::npos);
}

}  // namespace
}  // namespace attnlab
