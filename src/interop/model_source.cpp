#include "interop/model_source.h"

#include <algorithm>
#include <filesystem>
#include <optional>

#include "config/recipe.h"
#include "core/error.h"
#include "interop/hf_files.h"
#include "interop/hf_gpt2.h"
#include "interop/hf_llama.h"
#include "interop/llmc.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"
#include "train/from_recipe.h"
#include "train/retrofit.h"

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

ModelFormat parse_model_format(const std::string& name) {
  if (name == "attnlab") return ModelFormat::attnlab;
  if (name == "hf" || name == "huggingface") return ModelFormat::hf;
  if (name == "llmc" || name == "llm.c") return ModelFormat::llmc;
  ATTN_FAIL("unknown model format '%s' (valid: attnlab, hf, llmc)", name.c_str());
}

namespace {

void read_stop_ids(ModelSource& s, const std::string& dir, bool config_fallback) {
  try {
    s.stop_ids = hf_eos_token_ids(dir, config_fallback);
  } catch (const Error& e) {
    s.stop_ids_problem = e.what();
  }
}

ModelSource inspect_attnlab(const std::string& path) {
  ModelSource s;
  s.path = path;
  s.format = ModelFormat::attnlab;
  s.weights_path = resolve_checkpoint_dir(path);
  // The run's resolved recipe: recipe.yaml, held to the copy saved in the weights' metadata (a
  // recipe.yaml edited by hand built another model from the same weights, silently, for eval,
  // generate, convert and init_from), or that copy where recipe.yaml is missing.
  const std::optional<Recipe> recipe = read_checkpoint_recipe(s.weights_path);
  ATTN_REQUIRE(recipe.has_value(),
               "checkpoint '%s' has no recipe.yaml (nor a recipe in its model.safetensors' "
               "metadata)",
               s.weights_path.c_str());
  s.recipe_yaml = recipe_to_yaml(*recipe);
  s.config = gpt_config_of(*recipe);
  fs::path tj = fs::path(s.weights_path) / "tokenizer.json";
  if (fs::exists(tj)) s.tokenizer = tj.string();
  // A run directory's own generation_config.json counts where its checkpoint has none (a run
  // initialised from an Instruct model: its checkpoints do not carry the file).
  read_stop_ids(s, s.weights_path, false);
  const bool run_dir = fs::exists(fs::path(path) / "checkpoints");
  if (s.stop_ids.empty() && s.stop_ids_problem.empty() && run_dir) read_stop_ids(s, path, false);
  for (const fs::path& dir : {fs::path(s.weights_path), fs::path(run_dir ? path : "")}) {
    if (!dir.empty() && fs::exists(dir / "generation_config.json")) {
      s.generation_config = (dir / "generation_config.json").string();
      break;
    }
  }
  return s;
}

}  // namespace

ModelSource inspect_model_source(const std::string& path) {
  ATTN_REQUIRE(fs::exists(path), "model path '%s' does not exist", path.c_str());
  if (is_llmc_file(path)) {
    ModelSource s;
    s.path = path;
    s.format = ModelFormat::llmc;
    s.weights_path = path;
    s.config = gpt_config_of_llmc(path);
    s.notes.push_back("llm.c checkpoints carry no tokenizer");
    return s;
  }
  const fs::path p(path);
  ATTN_REQUIRE(fs::is_directory(p),
               "'%s' is neither an llm.c checkpoint (magic %d) nor a directory (an attnlab "
               "checkpoint or run, or a Hugging Face model)",
               path.c_str(), kLlmcMagic);
  // A checkpoint (its recipe.yaml, or its trainer_state.json where recipe.yaml went missing: the
  // weights' metadata holds the recipe too; a Hugging Face Trainer's checkpoint-N/ has a
  // trainer_state.json too, and its config.json) or a run.
  const bool attnlab = (fs::exists(p / "model.safetensors") &&
                        (fs::exists(p / "recipe.yaml") || (fs::exists(p / "trainer_state.json") &&
                                                           !fs::exists(p / "config.json")))) ||
                       fs::exists(p / "checkpoints" / "latest");
  if (attnlab) return inspect_attnlab(path);
  if (fs::exists(p / "config.json")) {
    ModelSource s;
    s.path = path;
    s.format = ModelFormat::hf;
    s.weights_path = path;
    const std::string cfg_path = (p / "config.json").string();
    const std::string text = io::read_file(cfg_path);
    const HfConfig hc(text, cfg_path);
    const std::string type = hc.get_string("model_type", "gpt2");
    s.config = type == "llama" || type == "mistral" ? gpt_config_of_hf_llama(hc, &s.notes)
                                                    : gpt_config_of_hf(text, cfg_path, &s.notes);
    s.tokenizer = hf_tokenizer_spec(path);
    read_stop_ids(s, path, true);
    if (fs::exists(p / "generation_config.json"))
      s.generation_config = (p / "generation_config.json").string();
    return s;
  }
  ATTN_FAIL(
      "'%s' is not a model: looked for recipe.yaml + model.safetensors (an attnlab checkpoint), "
      "checkpoints/latest (an attnlab run) and config.json (a Hugging Face GPT-2, LLaMA or Mistral "
      "directory)",
      path.c_str());
}

std::string generation_config_of(const ModelSource& s) {
  const fs::path file = fs::path(s.weights_path) / "generation_config.json";
  if (s.format != ModelFormat::llmc && fs::exists(file)) return io::read_file(file.string());
  if (s.stop_ids.empty()) return "";
  return nlohmann::json{{"eos_token_id", s.stop_ids}}.dump(2) + "\n";
}

WeightLoadReport load_model_source(const ModelSource& source, const ParameterStore& store,
                                   const WeightLoadOptions& options) {
  if (!source.adapter.empty()) {
    ModelSource base = source;
    base.adapter.clear();
    WeightLoadOptions o = options;
    o.required_roles = {ParamRole::base};
    WeightLoadReport rep = load_model_source(base, store, o);
    load_adapter_tensors(source.adapter, store, source.path, source.config.vocab_size);
    rep.initialised.clear();
    for (const auto& e : store.entries())
      if (e.spec.role != ParamRole::base) rep.loaded.push_back(e.spec.name);
    return rep;
  }
  switch (source.format) {
    case ModelFormat::attnlab:
      return load_model_weights_by_role(source.weights_path, store, options);
    case ModelFormat::hf:
      // (the block says which layout: config.json gave one or the other)
      return load_foreign_checkpoint(source.config.norm == NormType::rmsnorm
                                         ? read_hf_llama(source.weights_path, source.config)
                                         : read_hf_gpt2(source.weights_path, source.config),
                                     store, options);
    case ModelFormat::llmc:
      return load_foreign_checkpoint(read_llmc(source.weights_path, source.config), store, options);
  }
  ATTN_FAIL("internal: unknown model format");
}

namespace {

std::optional<Precision> trainer_state_precision(const fs::path& ckpt_dir) {
  if (!fs::exists(ckpt_dir / "trainer_state.json")) return std::nullopt;
  const std::string p = load_trainer_state(ckpt_dir.string()).precision;
  if (p == "f32") return Precision::fp32;
  if (p == "bf16") return Precision::bf16;
  return std::nullopt;  // older checkpoints
}

}  // namespace

Precision source_precision(const ModelSource& s) {
  if (!s.adapter.empty()) {
    if (const auto p = trainer_state_precision(fs::path(s.adapter).parent_path())) return *p;
    const Recipe r = parse_recipe(s.adapter_recipe_yaml, s.adapter + ":recipe", {});
    return r.train.device == DeviceChoice::cpu ? Precision::fp32 : r.train.precision;
  }
  if (s.format != ModelFormat::attnlab) return Precision::fp32;
  if (const auto p = trainer_state_precision(s.weights_path)) return *p;
  const io::SafetensorsFile f((fs::path(s.weights_path) / "model.safetensors").string(),
                              io::SafetensorsFile::DataCheck::header_only);
  return f.contains("wte.weight") && f.info("wte.weight").dtype == io::StDType::BF16
             ? Precision::bf16
             : Precision::fp32;
}

Recipe recipe_of_model_source(const ModelSource& source) {
  if (!source.adapter.empty())
    return parse_recipe(source.adapter_recipe_yaml, source.adapter + ":recipe", {});
  if (source.format == ModelFormat::attnlab)
    return parse_recipe(source.recipe_yaml, source.weights_path + "/recipe.yaml", {});
  Recipe r;
  set_model_config(source.config, r);
  // Defaults of other sections that the model could contradict.
  r.train.seq_len = std::min(r.train.seq_len, source.config.block_size);
  r.data.synthetic.vocab_size = std::min(r.data.synthetic.vocab_size, source.config.vocab_size);
  r.validate();
  return r;
}

}  // namespace attnlab
