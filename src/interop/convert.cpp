#include "interop/convert.h"

#include <filesystem>

#include "core/error.h"
#include "interop/hf_gpt2.h"
#include "interop/hf_llama.h"
#include "interop/llmc.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "model/gpt.h"
#include "tokenizer/tokenizer.h"
#include "train/retrofit.h"

namespace fs = std::filesystem;

namespace attnlab {
namespace {

void write_attnlab(const ParameterStore& store, const ModelSource& src, const Recipe& recipe,
                   const Tokenizer* tok, const std::string& dst, ConvertResult& res) {
  const std::string recipe_yaml = recipe_to_yaml(recipe);
  io::ensure_dir(dst);
  io::SafetensorsWriter w;
  for (const auto& e : store.entries()) w.add(e.spec.name, store.param(e.spec.name));
  w.set_metadata("format", "attnlab");
  w.set_metadata("converted_from", std::string(model_format_name(src.format)) + ":" + src.path);
  w.set_metadata("recipe", recipe_yaml);
  const auto out = [&](const char* name) {
    res.written.push_back((fs::path(dst) / name).string());
    return res.written.back();
  };
  w.write(out("model.safetensors"));
  io::write_file_atomic(out("recipe.yaml"), recipe_yaml);
  if (tok) io::write_file_atomic(out("tokenizer.json"), tok->to_json());
}

// The source's generation_config.json (generation_config_of) goes with the model, so that
// `generate` on the converted model stops where it did on the source.
void carry_generation_config(const ModelSource& s, const std::string& dst, ConvertResult& res) {
  const std::string text = generation_config_of(s);
  if (text.empty()) return;
  res.written.push_back((fs::path(dst) / "generation_config.json").string());
  io::write_file_atomic(res.written.back(), text);
}

// The model in the requested format (options.to) at dst.
void write_converted(const ParameterStore& out, const ModelSource& s, const Recipe& recipe,
                     const GPTConfig& config, const Tokenizer* tok, const std::string& dst,
                     const ConvertOptions& options, ConvertResult& res) {
  switch (options.to) {
    case ModelFormat::attnlab:
      write_attnlab(out, s, recipe, tok, dst, res);
      carry_generation_config(s, dst, res);
      break;
    case ModelFormat::hf:
      // GPT-2's block to GPT2LMHeadModel, LLaMA's to LlamaForCausalLM (MistralForCausalLM with a
      // sliding window); each writer refuses a block of neither kind.
      if (config.norm == NormType::rmsnorm || config.mlp == MlpType::swiglu ||
          config.position == PositionType::rope) {
        write_hf_llama(out, config, tok, dst, &res.notes);
      } else {
        write_hf_gpt2(out, config, tok, dst, &res.notes);
      }
      for (const char* f : {"config.json", "model.safetensors", "vocab.json", "merges.txt",
                            "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"})
        if (fs::exists(fs::path(dst) / f)) res.written.push_back((fs::path(dst) / f).string());
      carry_generation_config(s, dst, res);
      break;
    case ModelFormat::llmc:
      write_llmc(out, config, dst, options.llmc_bf16);
      res.written.push_back(dst);
      if (tok) res.notes.push_back("llm.c checkpoints hold no tokenizer: not written");
      break;
  }
}

}  // namespace

ConvertResult convert_model(const std::string& src, const std::string& dst,
                            const ConvertOptions& options) {
  ConvertResult res;
  res.source = options.adapter.empty() ? inspect_model_source(src)
                                       : with_adapter(inspect_model_source(src), options.adapter);
  const ModelSource& s = res.source;
  res.notes = s.notes;
  std::error_code ec;
  ATTN_REQUIRE(!fs::exists(dst, ec) || (fs::is_directory(dst, ec) && fs::is_empty(dst, ec)),
               "convert: '%s' already exists; choose a new destination", dst.c_str());
  ATTN_REQUIRE(options.to != ModelFormat::llmc || !fs::is_directory(dst, ec),
               "convert: '%s' is a directory; --to llmc writes one file (e.g. '%s/model.bin')",
               dst.c_str(), dst.c_str());

  // The whole model on the host in f32: every tensor from the source (so none needs an
  // initialisation), nothing left over.
  GPT model(s.config);
  ParameterStore store;
  model.declare_params(store);
  store.finalize(Device::cpu, DType::f32,
                 {ParamRole::base, ParamRole::attention, ParamRole::adapter});
  load_model_source(s, store, whole_model_load());
  // A LoRA adapter is merged into the base weights (W += alpha / r B A): the result is a plain
  // model of the base's architecture, without LoRA tensors.
  Recipe recipe = recipe_of_model_source(s);
  // A retrofit's attention variant has no form in the foreign formats; its base may (taken before
  // a LoRA merge resets the retrofit).
  const std::string retrofit_base = recipe.retrofit.enabled && s.config.attention.type != "dense"
                                        ? recipe.retrofit.checkpoint
                                        : "";
  GPTConfig config = s.config;
  ParameterStore merged;
  if (config.lora.enabled()) {
    config = merge_lora(s.config, store, merged);
    // A plain model now, no retrofit of anything: its recipe trains as written (every weight).
    recipe.retrofit = RetrofitConfig{};
    res.notes.push_back(strformat("LoRA of rank %d (alpha %g) merged into c_attn.weight",
                                  s.config.lora.rank, double(s.config.lora.alpha)));
  }
  const ParameterStore& out = s.config.lora.enabled() ? merged : store;

  std::unique_ptr<Tokenizer> tok;
  try {
    if (!s.tokenizer.empty()) tok = make_tokenizer(s.tokenizer);
  } catch (const Error& e) {
    // (a LLaMA 2 / Mistral SentencePiece tokenizer.json: the weights convert, the tokenizer not)
    if (s.format != ModelFormat::hf) throw;
    res.notes.push_back(strformat("the tokenizer was not carried over: %s", e.what()));
  }
  try {
    write_converted(out, s, recipe, config, tok.get(), dst, options, res);
  } catch (const Error& e) {
    if (retrofit_base.empty() || options.to == ModelFormat::attnlab) throw;
    throw Error(
        strformat("%s (this is a retrofit of '%s': convert that base instead, or keep the "
                  "retrofit as an attnlab checkpoint or adapter)",
                  e.what(), retrofit_base.c_str()));
  }
  return res;
}

}  // namespace attnlab
