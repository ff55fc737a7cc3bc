// `attnlab eval`: the evaluation harness. One model (any source) against any of: the validation
// windows of a recipe (the checkpoint's own by default), perplexity of token shards or text files
// with sliding windows, and zero-shot tasks (eval/tasks.h). docs/eval.md has the commands, the
// conventions and the output format.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "config/recipe.h"
#include "eval/eval_model.h"
#include "eval/tasks.h"
#include "model/model_config.h"

namespace attnlab {

struct EvalOptions {
  std::string model;                   // run dir, checkpoint dir, Hugging Face dir, llm.c .bin
  std::string adapter;                 // optional: a retrofit's adapter.safetensors on `model`
  std::string recipe;                  // optional: data and eval keys (its model must agree)
  std::vector<std::string> overrides;  // --set a.b=v (on --recipe, else on the checkpoint's)
  std::vector<std::pair<std::string, std::string>> tasks;  // (name, jsonl file)
  std::string task_dir;                                    // every *.jsonl in it, named by its stem
  TaskPrompt prompt = TaskPrompt::lm_eval;                 // multiple_choice prompts (eval/tasks.h)
  std::string shards;       // glob of token shards: perplexity, one document a file
  std::string text;         // glob of text files: perplexity, tokenised on the fly
  std::string delimiter;    // text: document separator ("" = one document a file)
  std::string tokenizer;    // "" = the model's own
  int context = 0;          // perplexity window; 0 = model.block_size
  int stride = 0;           // 0 = context (non-overlapping windows)
  int64_t limit = 0;        // > 0: first N examples per task / documents per source
  bool validation = false;  // score the recipe's validation set even with other data
  EvalDeviceOptions device;
  bool progress = true;  // progress lines on stderr
};

struct EvalReport {
  nlohmann::json json;  // the --out document (docs/eval.md)
  std::string table;    // the terminal summary
};

EvalReport run_evaluation(const EvalOptions& options);

// Throws when a model.* or attention.* key that the recipe gives (`given`: Recipe::given or a
// part of it; model.preset stands for the keys it sets) disagrees with the model being evaluated,
// naming each key, where it was set, and both values.
void check_recipe_model(const Recipe& recipe, const GivenKeys& given, const ModelSource& source,
                        const std::string& model_path);

// The evaluation-time attention keys (attention.focus.top_k, eval_routing) that `given` holds
// replace `model`'s (top_k checked against the model's groups).
void apply_eval_attention_keys(const Recipe& recipe, const GivenKeys& given, GPTConfig& model);

// --set for commands that run a model as it is (score, generate): only the evaluation-time
// attention keys may be given (others are refused, naming the command and the key); they are
// checked against the source's recipe (top_k within its groups) and applied to `model`. No
// overrides: nothing happens.
void apply_eval_overrides(const std::vector<std::string>& overrides, const ModelSource& source,
                          GPTConfig& model, const char* command);

}  // namespace attnlab
