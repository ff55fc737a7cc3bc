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

#include "core/parameters.h"
#include "model/model_config.h"
#include "train/checkpoint.h"

namespace attnlab {

enum class ModelFormat { attnlab, hf, llmc };
const char* model_format_name(ModelFormat f);  // "attnlab", "hf", "llmc"

struct ModelSource {
  std::string path;  // as given
  ModelFormat format = ModelFormat::attnlab;
  std::string weights_path;  // attnlab: the checkpoint directory; hf: the directory; llmc: the file
  GPTConfig config;          // the model the weights are for
  std::string recipe_yaml;   // attnlab: the run's resolved recipe; "" for other formats
  std::string tokenizer;     // make_tokenizer() spec of the tokenizer that travels with it, or ""
};

// Detects the format of `path` and reads the model's configuration. Throws naming the path and
// what was looked for when it is none of the formats.
ModelSource inspect_model_source(const std::string& path);

// Loads the source's tensors into `store` (shape-checked; f32 <-> bf16 converted). Every tensor of
// the file must be used (else refused, naming the extras) unless options.allow_extra; tensors of
// the required roles must be in the file; others missing keep their initialisation (listed).
WeightLoadReport load_model_source(const ModelSource& source, const ParameterStore& store,
                                   const WeightLoadOptions& options = {});

}  // namespace attnlab
