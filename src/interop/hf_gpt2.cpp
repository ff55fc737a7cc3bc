#include "interop/hf_gpt2.h"

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "interop/hf_files.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace attnlab {
namespace {

constexpr const char* kPrefix = "transformer.";

// The GPT-2 weights stored by Conv1D as [in, out].
bool is_conv1d_weight(const std::string& name) {
  for (const char* s :
       {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"}) {
    const size_t n = std::strlen(s);
    if (name.size() > n && name.compare(name.size() - n, n, s) == 0) return true;
  }
  return false;
}

// h.<l>.attn.bias / h.<l>.attn.masked_bias: the causal-mask buffers of older checkpoints.
bool is_mask_buffer(const std::string& name) {
  if (name.rfind("h.", 0) != 0) return false;
  const size_t dot = name.find('.', 2);
  if (dot == std::string::npos) return false;
  const std::string rest = name.substr(dot);
  return rest == ".attn.bias" || rest == ".attn.masked_bias";
}

int round_up(int v, int m) { return (v + m - 1) / m * m; }

}  // namespace

GPTConfig gpt_config_of_hf(const std::string& config_json, const std::string& path,
                           std::vector<std::string>* notes) {
  const HfConfig hc(config_json, path);
  const json& j = hc.json();
  const auto get_int = [&](const char* key, int def) { return hc.get_int(key, def); };
  const auto get_bool = [&](const char* key, bool def) { return hc.get_bool(key, def); };
  const auto get_double = [&](const char* key, double def) { return hc.get_double(key, def); };
  const auto refuse = [&](const char* key, const std::string& why) { hc.refuse(key, why); };

  if (j.contains("model_type") && j["model_type"] != "gpt2")
    refuse("model_type",
           "attnlab reads Hugging Face GPT-2, LLaMA and Mistral checkpoints (model_type \"gpt2\", "
           "\"llama\", \"mistral\")");
  if (j.contains("activation_function") && j["activation_function"] != "gelu_new" &&
      j["activation_function"] != "gelu_pytorch_tanh")
    refuse("activation_function",
           "attnlab's MLP uses the tanh approximation of GELU (gelu_new / gelu_pytorch_tanh)");
  if (!get_bool("scale_attn_weights", true))
    refuse("scale_attn_weights", "attnlab scales attention scores by 1/sqrt(head_dim)");
  if (get_bool("scale_attn_by_inverse_layer_idx", false))
    refuse("scale_attn_by_inverse_layer_idx",
           "attnlab does not scale attention scores by 1/(layer index + 1)");
  if (get_bool("reorder_and_upcast_attn", false))
    refuse("reorder_and_upcast_attn", "attnlab does not implement the reordered, upcast attention");
  if (get_bool("add_cross_attention", false))
    refuse("add_cross_attention", "attnlab models are decoder-only, without cross-attention");

  // transformers' GPT2Config also takes the generic names (its attribute_map): a config.json may
  // give a field under either; both, differing, is refused.
  const auto get_int_either = [&](const char* key, const char* alias, int def) -> int {
    const int a = get_int(key, def), b = get_int(alias, def);
    const bool has_key = j.contains(key) && !j[key].is_null(),
               has_alias = j.contains(alias) && !j[alias].is_null();
    ATTN_REQUIRE(!has_key || !has_alias || a == b,
                 "'%s': %s = %d and %s = %d name the same field and differ", path.c_str(), key, a,
                 alias, b);
    return has_key ? a : b;
  };
  GPTConfig c;
  c.n_layer = get_int_either("n_layer", "num_hidden_layers", 12);
  c.n_head = get_int_either("n_head", "num_attention_heads", 12);
  c.n_embd = get_int_either("n_embd", "hidden_size", 768);
  c.n_kv_head = 0;
  c.vocab_size = get_int("vocab_size", 50257);
  c.padded_vocab = round_up(c.vocab_size, 128);
  c.block_size = get_int_either("n_positions", "max_position_embeddings", get_int("n_ctx", 1024));
  c.norm_eps = float(get_double("layer_norm_epsilon", 1e-5));
  c.init_std = float(get_double("initializer_range", 0.02));
  c.tied_embeddings = get_bool("tie_word_embeddings", true);
  c.bias = true;
  // n_inner: the MLP width (null: 4 * n_embd).
  const int n_inner = get_int("n_inner", 0);
  if (n_inner < 0) refuse("n_inner", "the MLP width must be positive (null: 4 * n_embd)");
  c.mlp_hidden_size = n_inner == 4 * c.n_embd ? 0 : n_inner;

  // Keys read above, and keys that change nothing attnlab computes: dropouts (training only; an
  // attnlab run has none), the heads of other tasks (summary_*), generation and tokenizer
  // metadata, and PretrainedConfig's bookkeeping.
  static const std::set<std::string> known = {"model_type",
                                              "activation_function",
                                              "scale_attn_weights",
                                              "scale_attn_by_inverse_layer_idx",
                                              "reorder_and_upcast_attn",
                                              "add_cross_attention",
                                              "n_layer",
                                              "n_head",
                                              "n_embd",
                                              "num_hidden_layers",
                                              "num_attention_heads",
                                              "hidden_size",
                                              "max_position_embeddings",
                                              "vocab_size",
                                              "n_positions",
                                              "n_ctx",
                                              "layer_norm_epsilon",
                                              "initializer_range",
                                              "tie_word_embeddings",
                                              "n_inner",
                                              "resid_pdrop",
                                              "embd_pdrop",
                                              "attn_pdrop",
                                              "summary_type",
                                              "summary_use_proj",
                                              "summary_activation",
                                              "summary_proj_to_labels",
                                              "summary_first_dropout",
                                              "task_specific_params",
                                              "bos_token_id",
                                              "eos_token_id",
                                              "pad_token_id",
                                              "architectures",
                                              "transformers_version",
                                              "torch_dtype",
                                              "dtype",
                                              "use_cache",
                                              "_name_or_path",
                                              "id2label",
                                              "label2id",
                                              "gradient_checkpointing",
                                              "output_past",
                                              "return_dict",
                                              "output_hidden_states",
                                              "output_attentions",
                                              "torchscript",
                                              "tokenizer_class",
                                              "prefix",
                                              "problem_type",
                                              "n_special",
                                              "predict_special_tokens",
                                              "_attn_implementation_autoset",
                                              "use_return_dict"};
  const std::string unknown = hc.unknown_keys_note(known);
  if (notes && !unknown.empty()) notes->push_back(unknown);
  try {
    c.validate();
  } catch (const Error& e) {  // name the file the shape came from
    ATTN_FAIL("'%s': %s", path.c_str(), e.what());
  }
  return c;
}

ForeignCheckpoint read_hf_gpt2(const std::string& dir, const GPTConfig& cfg) {
  HfWeightFiles files = open_hf_weights(dir);
  auto& where = files.where;  // name in the file -> the shard that holds it
  ForeignCheckpoint out;
  out.path = files.path;

  std::string wte_origin, head_origin;
  for (const auto& [file_name, file] : where) {
    std::string name = file_name;
    if (name.rfind(kPrefix, 0) == 0) name = name.substr(std::strlen(kPrefix));
    if (is_mask_buffer(name)) continue;
    if (name == "wte.weight") wte_origin = file_name;
    if (name == "lm_head.weight" && cfg.tied_embeddings) {
      // (two of them, with and without the prefix: only the last would be compared with wte)
      ATTN_REQUIRE(head_origin.empty(),
                   "checkpoint '%s': two tensors map to 'lm_head.weight' (%s, %s)", dir.c_str(),
                   head_origin.c_str(), file_name.c_str());
      head_origin = file_name;
      continue;  // checked against wte below
    }
    const io::TensorInfo& ti = file->info(file_name);
    ForeignTensor t;
    t.name = name;
    t.origin = file_name;
    t.pad_rows = name == "wte.weight" || name == "lm_head.weight";
    if (t.pad_rows) t.min_rows = cfg.vocab_size;  // config.json's vocabulary, every id
    // One row per vocabulary entry, as transformers requires (more rows would land in attnlab's
    // padding, which no logit reads).
    ATTN_REQUIRE(!t.pad_rows || (!ti.shape.empty() && ti.shape[0] == cfg.vocab_size),
                 "'%s': tensor '%s' has shape %s; config.json's vocab_size %d asks for %d rows",
                 dir.c_str(), file_name.c_str(), ti.shape_str().c_str(), cfg.vocab_size,
                 cfg.vocab_size);
    const bool transpose = is_conv1d_weight(name) && ti.shape.size() == 2;
    t.shape = ti.shape;
    if (transpose) std::swap(t.shape[0], t.shape[1]);
    const std::vector<int64_t> file_shape = ti.shape;
    std::shared_ptr<io::SafetensorsFile> f = file;
    const std::string fname = file_name;
    if (file_shape.size() > size_t(Shape::kMaxDims)) {
      out.unmapped.push_back(file_name);
      continue;
    }
    t.read = [f, fname, file_shape, transpose](float* dst) {
      Shape s;
      s.ndim = int(file_shape.size());
      for (int i = 0; i < s.ndim; ++i) s.dims[i] = file_shape[i];
      if (!transpose) {
        f->load_into(fname, Tensor(dst, DType::f32, Device::cpu, s));
        return;
      }
      std::vector<float> tmp(size_t(s.numel()));
      f->load_into(fname, Tensor(tmp.data(), DType::f32, Device::cpu, s));
      transpose_into(tmp.data(), file_shape[0], file_shape[1], dst);
    };
    out.tensors.push_back(std::move(t));
  }
  if (!head_origin.empty()) {
    // Files written with both copies of a tied head: accepted when they are the same tensor.
    ATTN_REQUIRE(hf_same_tensor(files, head_origin, wte_origin),
                 "'%s': config.json ties the head to the embeddings (tie_word_embeddings is "
                 "true or absent), but '%s' differs from '%s'; set \"tie_word_embeddings\": false "
                 "for an untied head",
                 out.path.c_str(), head_origin.c_str(),
                 wte_origin.empty() ? "wte.weight (absent)" : wte_origin.c_str());
  }
  return out;
}

std::string hf_tokenizer_spec(const std::string& dir) {
  if (fs::exists(fs::path(dir) / "tokenizer.json"))
    return "hf:" + (fs::path(dir) / "tokenizer.json").string();
  if (fs::exists(fs::path(dir) / "vocab.json") && fs::exists(fs::path(dir) / "merges.txt"))
    return "gpt2:" + dir;
  return "";
}

void write_hf_gpt2(const ParameterStore& store, const GPTConfig& cfg, const Tokenizer* tokenizer,
                   const std::string& dir, std::vector<std::string>* notes) {
  const auto refuse = [&](const std::string& why) {
    ATTN_FAIL("cannot export to Hugging Face GPT-2: %s", why.c_str());
  };
  if (cfg.norm != NormType::layernorm || cfg.mlp != MlpType::gelu ||
      cfg.position != PositionType::learned)
    refuse(
        strformat("the model's block (norm %s, mlp %s, position %s) is not GPT-2's (layernorm, "
                  "gelu, learned)",
                  norm_name(cfg.norm), mlp_name(cfg.mlp), position_name(cfg.position)));
  if (cfg.n_kv_head != 0 && cfg.n_kv_head != cfg.n_head)
    refuse(
        strformat("the model uses grouped-query attention (n_kv_head %d, n_head %d), which "
                  "GPT2LMHeadModel does not have",
                  cfg.n_kv_head, cfg.n_head));
  if (!cfg.bias) refuse("the model has no biases (model.bias: false); GPT-2 has them everywhere");
  if (cfg.attention.window != 0)
    refuse(
        strformat("the model uses a sliding attention window (%d); GPT-2 attends to every "
                  "earlier token",
                  cfg.attention.window));
  if (cfg.attention.type != "dense")
    refuse("the model uses attention '" + cfg.attention.type + "'; GPT-2 has dense attention");

  const int V = cfg.vocab_size;
  io::SafetensorsWriter w;
  std::vector<std::vector<float>> keep;  // the writer references the data until write()
  for (const auto& e : store.entries()) {
    const std::string& name = e.spec.name;
    const Tensor t = store.param(name);
    std::vector<float> data = tensor_to_host_f32(t);
    std::vector<int64_t> shape(t.shape.dims.begin(), t.shape.dims.begin() + t.shape.ndim);
    if (name == "wte.weight" || name == "lm_head.weight") {
      data.resize(size_t(V) * size_t(shape[1]));  // drop the vocabulary padding rows
      shape[0] = V;
    } else if (is_conv1d_weight(name)) {
      std::vector<float> tr(data.size());
      transpose_into(data.data(), shape[0], shape[1], tr.data());
      data.swap(tr);
      std::swap(shape[0], shape[1]);
    } else if (name.find(".attn.") != std::string::npos &&
               name.find(".attn.c_attn.") == std::string::npos &&
               name.find(".attn.c_proj.") == std::string::npos) {
      refuse("tensor '" + name + "' (role " + role_name(e.spec.role) + ") has no place in GPT-2");
    }
    Shape s;
    s.ndim = int(shape.size());
    for (int i = 0; i < s.ndim; ++i) s.dims[i] = shape[i];
    keep.push_back(std::move(data));
    const std::string out_name = name == "lm_head.weight" ? name : kPrefix + name;
    w.add(out_name, Tensor(keep.back().data(), DType::f32, Device::cpu, s));
  }
  w.set_metadata("format", "pt");  // transformers refuses safetensors files without it
  io::ensure_dir(dir);
  w.write((fs::path(dir) / "model.safetensors").string());

  const int eot = tokenizer ? tokenizer->eot_id() : V - 1;
  json c = {
      {"architectures", {"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      {"activation_function", "gelu_new"},
      {"n_layer", cfg.n_layer},
      {"n_head", cfg.n_head},
      {"n_embd", cfg.n_embd},
      {"n_inner", cfg.mlp_hidden() == 4 * cfg.n_embd ? json(nullptr) : json(cfg.mlp_hidden())},
      {"n_positions", cfg.block_size},
      {"n_ctx", cfg.block_size},
      {"vocab_size", V},
      {"layer_norm_epsilon", shortest_double(cfg.norm_eps)},
      {"initializer_range", shortest_double(cfg.init_std)},
      {"tie_word_embeddings", cfg.tied_embeddings},
      {"scale_attn_weights", true},
      {"scale_attn_by_inverse_layer_idx", false},
      {"reorder_and_upcast_attn", false},
      {"resid_pdrop", 0.0},
      {"embd_pdrop", 0.0},
      {"attn_pdrop", 0.0},
      {"bos_token_id", tokenizer && tokenizer->bos_id() >= 0 ? tokenizer->bos_id() : eot},
      {"eos_token_id", eot},
      {"torch_dtype", "float32"}};
  io::write_file_atomic((fs::path(dir) / "config.json").string(), c.dump(2) + "\n");

  // GPT-2-form BPE: vocab.json + merges.txt; LLaMA 3 / Qwen2 / SentencePiece-style: tokenizer.json.
  if (tokenizer &&
      write_hf_tokenizer_files(*tokenizer, dir, cfg.block_size) == HfTokenizerForm::kNone && notes)
    notes->push_back("the '" + tokenizer->name() +
                     "' tokenizer has no Hugging Face form: no tokenizer files written");
}

}  // namespace attnlab
