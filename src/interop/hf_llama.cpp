#include "interop/hf_llama.h"

#include <filesystem>
#include <map>
#include <memory>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace attnlab {
namespace {

int round_up(int v, int m) { return (v + m - 1) / m * m; }

// Layer part names: "<hf suffix>" -> (attnlab suffix, row block index within it).
struct PartName {
  const char* hf;
  const char* attnlab;
  int block;
};
constexpr PartName kLayerParts[] = {
    {"input_layernorm.weight", "ln_1.weight", 0},
    {"post_attention_layernorm.weight", "ln_2.weight", 0},
    {"self_attn.q_proj.weight", "attn.c_attn.weight", 0},
    {"self_attn.k_proj.weight", "attn.c_attn.weight", 1},
    {"self_attn.v_proj.weight", "attn.c_attn.weight", 2},
    {"self_attn.q_proj.bias", "attn.c_attn.bias", 0},
    {"self_attn.k_proj.bias", "attn.c_attn.bias", 1},
    {"self_attn.v_proj.bias", "attn.c_attn.bias", 2},
    {"self_attn.o_proj.weight", "attn.c_proj.weight", 0},
    {"self_attn.o_proj.bias", "attn.c_proj.bias", 0},
    {"mlp.gate_proj.weight", "mlp.c_fc.weight", 0},
    {"mlp.up_proj.weight", "mlp.c_fc.weight", 1},
    {"mlp.gate_proj.bias", "mlp.c_fc.bias", 0},
    {"mlp.up_proj.bias", "mlp.c_fc.bias", 1},
    {"mlp.down_proj.weight", "mlp.c_proj.weight", 0},
    {"mlp.down_proj.bias", "mlp.c_proj.bias", 0},
};

// How many row blocks an attnlab layer tensor has, and each block's rows.
std::vector<int64_t> block_rows(const std::string& suffix, const GPTConfig& cfg) {
  const QKVLayout q = cfg.qkv_layout();
  if (suffix.rfind("attn.c_attn.", 0) == 0) return {q.q_width(), q.kv_width(), q.kv_width()};
  if (suffix.rfind("mlp.c_fc.", 0) == 0) return {cfg.mlp_hidden(), cfg.mlp_hidden()};
  return {-1};  // one part, any shape (the loader compares it with the model's)
}

// "model.layers.<l>.<rest>" -> (l, rest); l = -1 otherwise.
std::pair<int, std::string> split_layer(const std::string& name) {
  const std::string prefix = "model.layers.";
  if (name.rfind(prefix, 0) != 0) return {-1, ""};
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos) return {-1, ""};
  const std::string num = name.substr(prefix.size(), dot - prefix.size());
  if (num.empty() || num.find_first_not_of("0123456789") != std::string::npos) return {-1, ""};
  return {std::stoi(num), name.substr(dot + 1)};
}

// The scaling of a rope_scaling object (transformers 4) or of rope_parameters (transformers 5,
// which also holds rope_theta), `key` naming it: rope_type (or type) default, linear or llama3,
// with the factors that type reads, as transformers' rope init reads them. attention_factor is
// not read by those types (transformers ignores it for them too).
RopeScaling rope_scaling_of_hf(const HfConfig& hc, const char* key) {
  const json& rs = hc.json()[key];
  if (!rs.is_object()) hc.refuse(key, "expected an object with rope_type");
  // The type first (an unsupported one is named as such); `type` is transformers 4's older
  // spelling: both given and different is refused.
  auto type_of = [&](const char* k) {
    if (!rs.contains(k)) return std::string();
    if (!rs[k].is_string()) hc.refuse(key, strformat("its %s must be a string", k));
    return rs[k].get<std::string>();
  };
  const std::string rope_type = type_of("rope_type"), old_type = type_of("type");
  if (!rope_type.empty() && !old_type.empty() && rope_type != old_type)
    hc.refuse(key, "its rope_type and type differ");
  const std::string type =
      !rope_type.empty() ? rope_type : (!old_type.empty() ? old_type : std::string("default"));
  if (type != "default" && type != "linear" && type != "llama3")
    hc.refuse(key, "attnlab's RoPE takes rope_type default, linear and llama3 (not " + type + ")");
  for (const auto& [k, v] : rs.items()) {
    static const std::set<std::string> known = {
        "rope_type",        "type",
        "factor",           "low_freq_factor",
        "high_freq_factor", "original_max_position_embeddings",
        "rope_theta",       "attention_factor"};
    if (!known.count(k))
      hc.refuse(key, strformat("its key '%s' is not read by attnlab (linear and llama3 scaling "
                               "read factor, low_freq_factor, high_freq_factor, "
                               "original_max_position_embeddings)",
                               k.c_str()));
  }
  RopeScaling s;
  if (type == "default") return s;
  auto number = [&](const char* name) {
    if (!rs.contains(name) || !rs[name].is_number())
      hc.refuse(key, strformat("rope_type %s needs a number %s", type.c_str(), name));
    return rs[name].get<double>();
  };
  s.type = type == "linear" ? RopeScalingType::linear : RopeScalingType::llama3;
  s.factor = float(number("factor"));
  if (s.type == RopeScalingType::llama3) {
    s.low_freq_factor = float(number("low_freq_factor"));
    s.high_freq_factor = float(number("high_freq_factor"));
    const json& L = rs.value("original_max_position_embeddings", json());
    if (!L.is_number_integer() || L.get<int64_t>() < 1 || L.get<int64_t>() > INT32_MAX)
      hc.refuse(key, "rope_type llama3 needs an integer original_max_position_embeddings >= 1");
    s.original_context = int(L.get<int64_t>());
  }
  if (!(s.factor > 0.f) || (s.type == RopeScalingType::llama3 &&
                            !(s.low_freq_factor > 0.f && s.high_freq_factor > s.low_freq_factor)))
    hc.refuse(key, "needs factor > 0 (llama3: 0 < low_freq_factor < high_freq_factor)");
  return s;
}

// config.json's rope_scaling for `s` (null without scaling).
json hf_rope_scaling(const RopeScaling& s) {
  switch (s.type) {
    case RopeScalingType::none:
      return nullptr;
    case RopeScalingType::linear:
      return {{"rope_type", "linear"}, {"factor", shortest_double(s.factor)}};
    case RopeScalingType::llama3:
      return {{"rope_type", "llama3"},
              {"factor", shortest_double(s.factor)},
              {"low_freq_factor", shortest_double(s.low_freq_factor)},
              {"high_freq_factor", shortest_double(s.high_freq_factor)},
              {"original_max_position_embeddings", s.original_context}};
  }
  return nullptr;
}

}  // namespace

GPTConfig gpt_config_of_hf_llama(const HfConfig& hc, std::vector<std::string>* notes) {
  const std::string type = hc.get_string("model_type", "llama");
  const bool mistral = type == "mistral";
  if (type != "llama" && !mistral)
    hc.refuse("model_type", "this reader takes \"llama\" and \"mistral\" checkpoints");
  if (hc.get_string("hidden_act", "silu") != "silu")
    hc.refuse("hidden_act", "attnlab's SwiGLU gates with silu");
  double theta = hc.get_double("rope_theta", 10000.0);
  RopeScaling scaling;
  if (hc.has("rope_scaling")) scaling = rope_scaling_of_hf(hc, "rope_scaling");
  if (hc.has("rope_parameters")) {  // transformers 5's form of rope_theta and rope_scaling
    if (hc.has("rope_scaling"))
      hc.refuse("rope_parameters", "give rope_scaling or rope_parameters, not both");
    scaling = rope_scaling_of_hf(hc, "rope_parameters");
    const json& rp = hc.json()["rope_parameters"];
    if (rp.contains("rope_theta") && rp["rope_theta"].is_number())
      theta = rp["rope_theta"].get<double>();
  }
  if (hc.get_int("pretraining_tp", 1) != 1)
    hc.refuse("pretraining_tp", "attnlab computes the projections unsplit (pretraining_tp 1)");
  const bool attention_bias = hc.get_bool("attention_bias", false);
  if (hc.get_bool("mlp_bias", false) != attention_bias)
    hc.refuse("mlp_bias",
              "attnlab's model.bias covers every linear layer: attention_bias and mlp_bias must "
              "agree");

  // The shape: save_pretrained writes every one of these; a file without them is no LLaMA config
  // (the classes' defaults would make a 7B model of it).
  for (const char* key : {"hidden_size", "num_hidden_layers", "num_attention_heads",
                          "intermediate_size", "vocab_size"})
    ATTN_REQUIRE(hc.has(key),
                 "'%s': %s is missing; a LlamaConfig / MistralConfig config.json has it",
                 hc.path().c_str(), key);
  GPTConfig c;
  c.norm = NormType::rmsnorm;
  c.mlp = MlpType::swiglu;
  c.position = PositionType::rope;
  c.n_layer = hc.get_int("num_hidden_layers", 32);
  c.n_head = hc.get_int("num_attention_heads", 32);
  c.n_embd = hc.get_int("hidden_size", 4096);
  c.n_kv_head = hc.get_int("num_key_value_heads", mistral ? 8 : c.n_head);
  if (c.n_kv_head == c.n_head) c.n_kv_head = 0;
  c.mlp_hidden_size = hc.get_int("intermediate_size", mistral ? 14336 : 11008);
  c.vocab_size = hc.get_int("vocab_size", 32000);
  c.padded_vocab = round_up(c.vocab_size, 128);
  c.block_size = hc.get_int("max_position_embeddings", mistral ? 32768 : 2048);
  c.norm_eps = float(hc.get_double("rms_norm_eps", 1e-6));
  c.rope_theta = float(theta);
  c.rope_scaling = scaling;
  c.init_std = float(hc.get_double("initializer_range", 0.02));
  c.tied_embeddings = hc.get_bool("tie_word_embeddings", false);
  c.bias = attention_bias;
  if (c.n_head > 0 && hc.has("head_dim") && hc.get_int("head_dim", 0) != c.n_embd / c.n_head)
    hc.refuse("head_dim", strformat("attnlab's head dim is hidden_size / num_attention_heads = %d",
                                    c.n_embd / std::max(c.n_head, 1)));
  if (mistral) {
    // (absent: MistralConfig's default, 4096; null: full attention)
    const json& j = hc.json();
    if (!j.contains("sliding_window")) {
      c.attention.window = 4096;
    } else if (!j["sliding_window"].is_null()) {
      c.attention.window = hc.get_int("sliding_window", 0);
    }
  }
  static const std::set<std::string> known = {
      "model_type", "hidden_act", "rope_scaling", "rope_theta", "rope_parameters", "pretraining_tp",
      "attention_bias", "mlp_bias", "num_hidden_layers", "num_attention_heads", "hidden_size",
      "num_key_value_heads", "intermediate_size", "vocab_size", "max_position_embeddings",
      "rms_norm_eps", "initializer_range", "tie_word_embeddings", "head_dim", "sliding_window",
      // training-only, generation and tokenizer metadata, PretrainedConfig's bookkeeping
      "attention_dropout", "bos_token_id", "eos_token_id", "pad_token_id", "architectures",
      "transformers_version", "torch_dtype", "dtype", "use_cache", "_name_or_path", "id2label",
      "label2id", "output_attentions", "output_hidden_states", "return_dict", "tokenizer_class",
      "_attn_implementation_autoset", "use_return_dict", "max_window_layers"};
  const std::string unknown = hc.unknown_keys_note(known);
  if (notes && !unknown.empty()) notes->push_back(unknown);
  try {
    c.validate();
  } catch (const Error& e) {
    ATTN_FAIL("'%s': %s", hc.path().c_str(), e.what());
  }
  return c;
}

ForeignCheckpoint read_hf_llama(const std::string& dir, const GPTConfig& cfg) {
  HfWeightFiles files = open_hf_weights(dir);
  ForeignCheckpoint out;
  out.path = files.path;
  // attnlab name -> its parts by block index
  std::map<std::string, std::map<int, std::string>> assemblies;
  std::string head_origin;
  for (const auto& [file_name, file] : files.where) {
    auto [layer, rest] = split_layer(file_name);
    if (layer >= 0) {
      if (rest == "self_attn.rotary_emb.inv_freq") continue;  // a buffer, no parameter
      const PartName* part = nullptr;
      for (const PartName& p : kLayerParts)
        if (rest == p.hf) part = &p;
      if (!part) {
        out.unmapped.push_back(file_name);
        continue;
      }
      assemblies["h." + std::to_string(layer) + "." + part->attnlab][part->block] = file_name;
      continue;
    }
    if (file_name == "model.embed_tokens.weight") {
      assemblies["wte.weight"][0] = file_name;
    } else if (file_name == "model.norm.weight") {
      assemblies["ln_f.weight"][0] = file_name;
    } else if (file_name == "lm_head.weight") {
      if (cfg.tied_embeddings) {
        head_origin = file_name;  // compared with the embeddings below
      } else {
        assemblies["lm_head.weight"][0] = file_name;
      }
    } else {
      out.unmapped.push_back(file_name);
    }
  }
  for (const auto& [name, parts] : assemblies) {
    const std::string suffix = name.rfind("h.", 0) == 0 ? name.substr(name.find('.', 2) + 1) : name;
    const std::vector<int64_t> rows = block_rows(suffix, cfg);
    // Every block present (q, k and v; gate and up), each with the rows the config gives it.
    for (int b = 0; b < int(rows.size()); ++b)
      ATTN_REQUIRE(parts.count(b),
                   "'%s': '%s' is assembled from %zu tensors, but '%s' is missing (has %s)",
                   dir.c_str(), name.c_str(), rows.size(),
                   rows.size() == 3   ? (b == 0   ? "q_proj"
                                         : b == 1 ? "k_proj"
                                                  : "v_proj")
                   : rows.size() == 2 ? (b == 0 ? "gate_proj" : "up_proj")
                                      : "the tensor",
                   parts.begin()->second.c_str());
    ForeignTensor t;
    t.name = name;
    t.pad_rows = name == "wte.weight" || name == "lm_head.weight";
    if (t.pad_rows) t.min_rows = cfg.vocab_size;
    std::vector<std::string> part_names;
    std::vector<std::vector<int64_t>> part_shapes;
    for (const auto& [b, file_name] : parts) {
      const io::TensorInfo& ti = files.where[file_name]->info(file_name);
      ATTN_REQUIRE(ti.shape.size() >= 1 && ti.shape.size() <= 2,
                   "'%s': tensor '%s' has shape %s; a weight or a bias was expected", dir.c_str(),
                   file_name.c_str(), ti.shape_str().c_str());
      ATTN_REQUIRE(rows[size_t(b)] < 0 || ti.shape[0] == rows[size_t(b)],
                   "'%s': tensor '%s' has shape %s; config.json gives it %lld rows", dir.c_str(),
                   file_name.c_str(), ti.shape_str().c_str(), (long long)rows[size_t(b)]);
      ATTN_REQUIRE(!t.pad_rows || ti.shape[0] == cfg.vocab_size,
                   "'%s': tensor '%s' has shape %s; config.json's vocab_size %d asks for %d rows",
                   dir.c_str(), file_name.c_str(), ti.shape_str().c_str(), cfg.vocab_size,
                   cfg.vocab_size);
      if (!part_shapes.empty())
        ATTN_REQUIRE(part_shapes[0].size() == ti.shape.size() &&
                         (ti.shape.size() == 1 || part_shapes[0][1] == ti.shape[1]),
                     "'%s': '%s' and '%s' (parts of %s) have different columns (%s)", dir.c_str(),
                     part_names[0].c_str(), file_name.c_str(), name.c_str(),
                     ti.shape_str().c_str());
      part_names.push_back(file_name);
      part_shapes.push_back(ti.shape);
      t.origin += (t.origin.empty() ? "" : " + ") + file_name;
    }
    t.shape = part_shapes[0];
    for (size_t i = 1; i < part_shapes.size(); ++i) t.shape[0] += part_shapes[i][0];
    std::vector<std::shared_ptr<io::SafetensorsFile>> part_files;
    for (const std::string& n : part_names) part_files.push_back(files.where[n]);
    t.read = [part_files, part_names, part_shapes](float* dst) {
      for (size_t i = 0; i < part_names.size(); ++i) {
        Shape s;
        s.ndim = int(part_shapes[i].size());
        for (int d = 0; d < s.ndim; ++d) s.dims[d] = part_shapes[i][size_t(d)];
        part_files[i]->load_into(part_names[i], Tensor(dst, DType::f32, Device::cpu, s));
        dst += s.numel();
      }
    };
    out.tensors.push_back(std::move(t));
  }
  if (!head_origin.empty()) {
    ATTN_REQUIRE(hf_same_tensor(files, head_origin, "model.embed_tokens.weight"),
                 "'%s': config.json ties the head to the embeddings (tie_word_embeddings: true), "
                 "but lm_head.weight differs from model.embed_tokens.weight",
                 out.path.c_str());
  }
  return out;
}

void write_hf_llama(const ParameterStore& store, const GPTConfig& cfg, const Tokenizer* tokenizer,
                    const std::string& dir, std::vector<std::string>* notes) {
  const auto refuse = [&](const std::string& why) {
    ATTN_FAIL("cannot export to Hugging Face LLaMA: %s", why.c_str());
  };
  if (cfg.norm != NormType::rmsnorm || cfg.mlp != MlpType::swiglu ||
      cfg.position != PositionType::rope)
    refuse(
        strformat("the model's block (norm %s, mlp %s, position %s) is not LLaMA's (rmsnorm, "
                  "swiglu, rope)",
                  norm_name(cfg.norm), mlp_name(cfg.mlp), position_name(cfg.position)));
  if (cfg.attention.type != "dense")
    refuse("the model uses attention '" + cfg.attention.type + "'; LLaMA has dense attention");
  const bool mistral = cfg.attention.window != 0;
  if (mistral && cfg.bias)
    refuse(
        strformat("the model has a sliding window (%d), which only MistralForCausalLM has, and "
                  "biases (model.bias), which it lacks (it would drop them)",
                  cfg.attention.window));
  const int V = cfg.vocab_size;
  const QKVLayout q = cfg.qkv_layout();
  const int64_t F = cfg.mlp_hidden();
  io::SafetensorsWriter w;
  std::vector<std::vector<float>> keep;  // the writer references the data until write()
  auto add = [&](const std::string& name, std::vector<float> data, std::vector<int64_t> shape) {
    Shape s;
    s.ndim = int(shape.size());
    for (int i = 0; i < s.ndim; ++i) s.dims[i] = shape[size_t(i)];
    keep.push_back(std::move(data));
    w.add(name, Tensor(keep.back().data(), DType::f32, Device::cpu, s));
  };
  // Rows [r0, r0 + n) of a [rows, cols] (or [rows]) tensor.
  auto rows_of = [](const std::vector<float>& d, const std::vector<int64_t>& shape, int64_t r0,
                    int64_t n) {
    const int64_t cols = shape.size() == 2 ? shape[1] : 1;
    std::vector<float> out(d.begin() + r0 * cols, d.begin() + (r0 + n) * cols);
    std::vector<int64_t> s = shape;
    s[0] = n;
    return std::make_pair(out, s);
  };
  for (const auto& e : store.entries()) {
    const std::string& name = e.spec.name;
    const Tensor t = store.param(name);
    std::vector<float> data = tensor_to_host_f32(t);
    std::vector<int64_t> shape(t.shape.dims.begin(), t.shape.dims.begin() + t.shape.ndim);
    if (name == "wte.weight" || name == "lm_head.weight") {
      data.resize(size_t(V) * size_t(shape[1]));  // drop the vocabulary padding rows
      shape[0] = V;
      add(name == "wte.weight" ? "model.embed_tokens.weight" : "lm_head.weight", data, shape);
      continue;
    }
    if (name == "ln_f.weight") {
      add("model.norm.weight", data, shape);
      continue;
    }
    const auto [layer, rest] = [&] {
      if (name.rfind("h.", 0) != 0) return std::make_pair(-1, std::string());
      const size_t dot = name.find('.', 2);
      return std::make_pair(std::stoi(name.substr(2, dot - 2)), name.substr(dot + 1));
    }();
    if (layer < 0)
      refuse("tensor '" + name + "' (role " + role_name(e.spec.role) + ") has no place in LLaMA");
    const std::string hf = "model.layers." + std::to_string(layer) + ".";
    if (rest == "attn.c_attn.weight" || rest == "attn.c_attn.bias") {
      const std::string kind = rest.substr(rest.rfind('.') + 1);
      const int64_t qw = q.q_width(), kw = q.kv_width();
      auto [qd, qs] = rows_of(data, shape, 0, qw);
      auto [kd, ks] = rows_of(data, shape, qw, kw);
      auto [vd, vs] = rows_of(data, shape, qw + kw, kw);
      add(hf + "self_attn.q_proj." + kind, qd, qs);
      add(hf + "self_attn.k_proj." + kind, kd, ks);
      add(hf + "self_attn.v_proj." + kind, vd, vs);
    } else if (rest == "mlp.c_fc.weight" || rest == "mlp.c_fc.bias") {
      const std::string kind = rest.substr(rest.rfind('.') + 1);
      auto [gd, gs] = rows_of(data, shape, 0, F);
      auto [ud, us] = rows_of(data, shape, F, F);
      add(hf + "mlp.gate_proj." + kind, gd, gs);
      add(hf + "mlp.up_proj." + kind, ud, us);
    } else {
      static const std::map<std::string, std::string> single = {
          {"ln_1.weight", "input_layernorm.weight"},
          {"ln_2.weight", "post_attention_layernorm.weight"},
          {"attn.c_proj.weight", "self_attn.o_proj.weight"},
          {"attn.c_proj.bias", "self_attn.o_proj.bias"},
          {"mlp.c_proj.weight", "mlp.down_proj.weight"},
          {"mlp.c_proj.bias", "mlp.down_proj.bias"}};
      const auto it = single.find(rest);
      if (it == single.end())
        refuse("tensor '" + name + "' (role " + role_name(e.spec.role) + ") has no place in LLaMA");
      add(hf + it->second, data, shape);
    }
  }
  w.set_metadata("format", "pt");  // transformers refuses safetensors files without it
  io::ensure_dir(dir);
  w.write((fs::path(dir) / "model.safetensors").string());

  const int eot = tokenizer ? tokenizer->eot_id() : V - 1;
  const int bos = tokenizer && tokenizer->bos_id() >= 0 ? tokenizer->bos_id() : eot;
  json c = {{"architectures", {mistral ? "MistralForCausalLM" : "LlamaForCausalLM"}},
            {"model_type", mistral ? "mistral" : "llama"},
            {"hidden_act", "silu"},
            {"hidden_size", cfg.n_embd},
            {"intermediate_size", F},
            {"num_hidden_layers", cfg.n_layer},
            {"num_attention_heads", cfg.n_head},
            {"num_key_value_heads", cfg.kv_heads()},
            {"head_dim", cfg.head_dim()},
            {"max_position_embeddings", cfg.block_size},
            {"vocab_size", V},
            {"rms_norm_eps", shortest_double(cfg.norm_eps)},
            {"rope_theta", shortest_double(cfg.rope_theta)},
            {"rope_scaling", hf_rope_scaling(cfg.rope_scaling)},
            {"attention_bias", cfg.bias},
            {"mlp_bias", cfg.bias},
            {"attention_dropout", 0.0},
            {"initializer_range", shortest_double(cfg.init_std)},
            {"tie_word_embeddings", cfg.tied_embeddings},
            {"bos_token_id", bos},
            {"eos_token_id", eot},
            {"torch_dtype", "float32"}};
  if (mistral) c["sliding_window"] = cfg.attention.window;
  io::write_file_atomic((fs::path(dir) / "config.json").string(), c.dump(2) + "\n");
  if (!tokenizer) return;
  // LLaMA 3 / Qwen2 and SentencePiece-style tokenizers: tokenizer.json and its config;
  // GPT-2-form BPE: vocab.json + merges.txt, and the config below.
  const HfTokenizerForm form = write_hf_tokenizer_files(*tokenizer, dir, cfg.block_size);
  if (form == HfTokenizerForm::kNone) {
    if (notes)
      notes->push_back("the '" + tokenizer->name() +
                       "' tokenizer has no Hugging Face form: no tokenizer files written");
    return;
  }
  if (form == HfTokenizerForm::kTokenizerJson) return;
  // AutoTokenizer would take a LLaMA config's tokenizer for SentencePiece; this one is BPE.
  const std::string eot_text = tokenizer->piece(eot);
  const json tc = {{"tokenizer_class", "GPT2Tokenizer"},
                   {"model_max_length", cfg.block_size},
                   {"bos_token", eot_text},
                   {"eos_token", eot_text},
                   {"unk_token", eot_text}};
  io::write_file_atomic((fs::path(dir) / "tokenizer_config.json").string(), tc.dump(2) + "\n");
}

}  // namespace attnlab
