// A pretrained model from any source, for eval, score, generate, convert and train.init_from:
//   attnlab   a run directory (its checkpoints/latest) or a checkpoint directory
//   hf        a Hugging Face GPT-2 directory (config.json + model.safetensors or a sharded
//             model.safetensors.index.json)
//   llmc      an llm.c checkpoint file (gpt2_124M.bin style)
// inspect_model_source reads what the model is without loading weights; load_model_source loads
// them into a store declared from GPT(source.config) (or from a model that adds tensors of other
// roles, e.g. Focus centroids), converting names and layouts.
#pragma once
#include <string>
#include <vector>

#include "config/recipe.h"
#include "core/parameters.h"
#include "model/model_config.h"
#include "train/checkpoint.h"

namespace attnlab {

enum class ModelFormat { attnlab, hf, llmc };
const char* model_format_name(ModelFormat f);  // "attnlab", "hf", "llmc"
// "attnlab", "hf" (also "huggingface"), "llmc" (also "llm.c"); else throws listing the names.
ModelFormat parse_model_format(const std::string& name);

struct ModelSource {
  std::string path;  // as given
  ModelFormat format = ModelFormat::attnlab;
  std::string weights_path;  // attnlab: the checkpoint directory; hf: the directory; llmc: the file
  GPTConfig config;          // the model the weights are for
  std::string recipe_yaml;   // attnlab: the run's resolved recipe; "" for other formats
  std::string tokenizer;     // make_tokenizer() spec of the tokenizer that travels with it, or ""
  // Ids generation stops at besides the tokenizer's end-of-text (hf_eos_token_ids: the
  // directory's generation_config.json, which `convert` carries, or a Hugging Face config.json).
  std::vector<int32_t> stop_ids;
  // Why those files could not be read (a malformed eos_token_id), for `generate` to refuse with;
  // the commands that do not generate go on without them.
  std::string stop_ids_problem;
  // The generation_config.json that goes with the model (its directory's; for an attnlab
  // checkpoint without one, its run directory's), "" for none: generate's sampling defaults
  // (interop/generation_config.h).
  std::string generation_config;
  // With an adapter (train/retrofit.h with_adapter): its file and the recipe of the run that made
  // it; config is then the adapter's model (e.g. Focus on the base's weights).
  std::string adapter;
  std::string adapter_recipe_yaml;
  // Things the caller should show the user (e.g. config.json keys that were not interpreted).
  std::vector<std::string> notes;
};

// Detects the format of `path` and reads the model's configuration. Throws naming the path and
// what was looked for when it is none of the formats. Detection:
//   a file starting with the llm.c magic 20240326                    -> llmc
//   a directory with recipe.yaml + model.safetensors, or a run
//   directory (checkpoints/latest)                                   -> attnlab
//   a directory with config.json                                     -> hf
ModelSource inspect_model_source(const std::string& path);

// The generation_config.json that goes with a model made from `s` (convert's output, the
// checkpoints of a run initialised from it or resumed): the source's file as it is, else
// {"eos_token_id": ids} where its stop ids come from elsewhere (a Hugging Face config.json, a
// run directory's file); "" when it has none.
std::string generation_config_of(const ModelSource& s);

// The precision `eval`, `score` and `generate` run a model in on CUDA by default: an attnlab
// run's as it computed (trainer_state.json: fp32 for a run on the CPU path whatever its
// train.precision says; without one, as a converted model, the weights' dtype); with an adapter,
// the adapter's run's (the trainer_state.json beside it, else its recipe); fp32 for Hugging Face
// and llm.c models (their published numbers and lm-eval's are fp32; bf16 logits move GPT-2's
// log-probabilities by up to ~0.1 nats).
Precision source_precision(const ModelSource& s);

// Loads the source's tensors into `store` (shape-checked; f32 <-> bf16 converted). Every tensor of
// the file must be used (else refused, naming the extras) unless options.allow_extra; tensors of
// the required roles must be in the file; others missing keep their initialisation (listed).
// With an adapter, the base tensors come from the source and the others from the adapter, after
// the base's hash was checked against the adapter's.
WeightLoadReport load_model_source(const ModelSource& source, const ParameterStore& store,
                                   const WeightLoadOptions& options = {});

// The recipe that describes the source's model: an attnlab checkpoint's own recipe; for other
// formats the default recipe with the source's model.* and attention.* keys (and data.tokenizer
// left at its default: the tokenizer travels as a file).
Recipe recipe_of_model_source(const ModelSource& source);

}  // namespace attnlab
