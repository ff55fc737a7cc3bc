#include "interop/model_source.h"

#include <filesystem>

#include "config/recipe.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "train/from_recipe.h"

namespace fs = std::filesystem;

namespace attnlab {

const char* model_format_name(ModelFormat f) {
  switch (f) {
    case ModelFormat::attnlab:
      return "attnlab";
    case ModelFormat::hf:
      return "hf";
    case ModelFormat::llmc:
      return "llmc";
  }
  return "?";
}

ModelSource inspect_model_source(const std::string& path) {
  ModelSource s;
  s.path = path;
  s.format = ModelFormat::attnlab;
  s.weights_path = resolve_checkpoint_dir(path);
  // Every checkpoint directory holds the resolved recipe of its run.
  fs::path recipe = fs::path(s.weights_path) / "recipe.yaml";
  ATTN_REQUIRE(fs::exists(recipe), "checkpoint '%s' has no recipe.yaml", s.weights_path.c_str());
  s.recipe_yaml = io::read_file(recipe.string());
  s.config = gpt_config_of(parse_recipe(s.recipe_yaml, recipe.string(), {}));
  fs::path tj = fs::path(s.weights_path) / "tokenizer.json";
  if (fs::exists(tj)) s.tokenizer = tj.string();
  return s;
}

WeightLoadReport load_model_source(const ModelSource& source, const ParameterStore& store,
                                   const WeightLoadOptions& options) {
  return load_model_weights_by_role(source.weights_path, store, options);
}

}  // namespace attnlab
