// The architecture keys of a recipe's model section, and the one comparison of a recipe with an
// existing model (train.init_from, attnlab eval): a key the recipe gives (Recipe::given: the file,
// --set or model.preset) must equal the model's; keys it does not give are taken from the model.
#pragma once
#include <string>

#include "config/recipe.h"

namespace attnlab {

// "\n  model.n_layer: 3 in the recipe (r.yaml:8), 2 in <other>" for every architecture key that
// `given` holds and whose value differs from `model`'s; "" when none. n_kv_head compares the
// resolved head counts (0 and n_head are the same model).
std::string given_model_key_conflicts(const ModelConfig& recipe_model, const GivenKeys& given,
                                      const ModelConfig& model, const char* other);

// The same for the attention keys that fix the trained function: attention.type and window, the
// attention.focus keys but the evaluation-time top_k and eval_routing and the training-only
// route_training, and attention.sfa.k, resolved for the model's head dim `head_dim` (sfa.k 0 is
// sfa_default_k(head_dim); head_dim 0: compared as given).
std::string given_attention_key_conflicts(const AttentionConfig& recipe_attention,
                                          const GivenKeys& given, const AttentionConfig& model,
                                          const char* other, int head_dim);

// m's head dim (n_embd / n_head), 0 where n_head is not set.
int head_dim_of(const ModelConfig& m);

// The LoRA keys that shape the trained function (retrofit.lora.rank, alpha, targets: the
// adapters' scale and where they sit) whose resolved values differ between `recipe` and `model`,
// where either has adapters (rank > 0); with `only`, just the keys it holds.
std::string lora_key_conflicts(const Recipe& recipe, const Recipe& model, const char* other,
                               const GivenKeys* only = nullptr);

// Every architecture and attention key above whose resolved value differs between `recipe` and
// `model` (`other` names it; a key the recipe does not give is reported as its default; the
// attention keys resolved for `model`'s head dim), and the LoRA keys (rank, alpha, targets)
// where either has adapters: what a resume must not change, since the checkpoint's weights were
// trained as `model`.
std::string model_function_conflicts(const Recipe& recipe, const Recipe& model, const char* other);

// The attention keys of a new model on the weights of `source` (train.init_from, a retrofit's
// base) that change the function those weights were trained with: attention.type, window and the
// source type's own keys, resolved, defaults included; a dense source may take any variant (the
// type is then not compared; the variant's keys are new), but not lose or change its window.
// `source`: the recipe of the weights' model (its attention, and its head dim to resolve with).
std::string attention_changes_from(const Recipe& recipe, const Recipe& source, const char* other);

// Copies from `model` into `recipe_model` every architecture key that `given` does not hold.
void take_model_keys(ModelConfig& recipe_model, const GivenKeys& given, const ModelConfig& model);

}  // namespace attnlab
