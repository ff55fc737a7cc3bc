// Hugging Face LLaMA / Mistral directories (interop/hf_llama.h) written here with known values:
// q/k/v and gate/up assembled into c_attn and c_fc in their row order, the config mapping
// (GQA, RoPE base, RMSNorm eps, Mistral's window, biases), the refusals by key, and the export
// and `convert` round trip. transformers itself is the oracle on the GPU host
// (scripts/hf_llama_check.py: logits and loss of LlamaForCausalLM / MistralForCausalLM).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "interop/convert.h"
#include "interop/hf_gpt2.h"
#include "interop/hf_llama.h"
#include "interop/interop_test_util.h"
#include "interop/llmc.h"
#include "interop/model_source.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "test_util.h"
#include "train/from_recipe.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace attnlab;
using namespace attnlab::interop_test;

namespace {

// 2 layers, hidden 8, 4 heads of dim 2 over 2 KV heads, SwiGLU width 12, vocabulary 80.
constexpr int kL = 2, kC = 8, kH = 4, kKV = 2, kD = 2, kF = 12, kV = 80;

json llama_config() {
  return {{"model_type", "llama"},
          {"architectures", {"LlamaForCausalLM"}},
          {"hidden_act", "silu"},
          {"hidden_size", kC},
          {"intermediate_size", kF},
          {"num_hidden_layers", kL},
          {"num_attention_heads", kH},
          {"num_key_value_heads", kKV},
          {"max_position_embeddings", 64},
          {"vocab_size", kV},
          {"rms_norm_eps", 1e-6},
          {"rope_theta", 500000.0},
          {"rope_scaling", nullptr},
          {"tie_word_embeddings", false},
          {"attention_bias", false},
          {"attention_dropout", 0.0},
          {"bos_token_id", 1},
          {"torch_dtype", "float32"}};
}

std::vector<HfTensor> llama_tensors(bool bias) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> specs = {
      {"model.embed_tokens.weight", {kV, kC}},
      {"model.norm.weight", {kC}},
      {"lm_head.weight", {kV, kC}}};
  for (int l = 0; l < kL; ++l) {
    const std::string h = "model.layers." + std::to_string(l) + ".";
    specs.push_back({h + "input_layernorm.weight", {kC}});
    specs.push_back({h + "post_attention_layernorm.weight", {kC}});
    specs.push_back({h + "self_attn.q_proj.weight", {kH * kD, kC}});
    specs.push_back({h + "self_attn.k_proj.weight", {kKV * kD, kC}});
    specs.push_back({h + "self_attn.v_proj.weight", {kKV * kD, kC}});
    specs.push_back({h + "self_attn.o_proj.weight", {kC, kH * kD}});
    specs.push_back({h + "mlp.gate_proj.weight", {kF, kC}});
    specs.push_back({h + "mlp.up_proj.weight", {kF, kC}});
    specs.push_back({h + "mlp.down_proj.weight", {kC, kF}});
    if (bias) {
      specs.push_back({h + "self_attn.q_proj.bias", {kH * kD}});
      specs.push_back({h + "self_attn.k_proj.bias", {kKV * kD}});
      specs.push_back({h + "self_attn.v_proj.bias", {kKV * kD}});
      specs.push_back({h + "self_attn.o_proj.bias", {kC}});
      specs.push_back({h + "mlp.gate_proj.bias", {kF}});
      specs.push_back({h + "mlp.up_proj.bias", {kF}});
      specs.push_back({h + "mlp.down_proj.bias", {kC}});
    }
  }
  std::vector<HfTensor> out;
  int k = 0;
  for (auto& [n, shape] : specs) {
    int64_t numel = 1;
    for (auto d : shape) numel *= d;
    HfTensor t{n, shape, std::vector<float>(size_t(numel))};
    for (int64_t i = 0; i < numel; ++i) t.data[size_t(i)] = pattern(k, i);
    ++k;
    out.push_back(std::move(t));
  }
  return out;
}

// A directory with config.json (+ edits) and model.safetensors (tensors named in `drop` left out).
std::string write_llama(const fs::path& dir, const json& edits = json::object(), bool bias = false,
                        const std::string& drop = "") {
  fs::create_directories(dir);
  json cfg = llama_config();
  for (auto& [k, v] : edits.items()) cfg[k] = v;
  io::write_file_atomic((dir / "config.json").string(), cfg.dump(2));
  static std::vector<HfTensor> keep;  // the writer references the data until write()
  keep = llama_tensors(bias);
  io::SafetensorsWriter w;
  for (const auto& t : keep)
    if (t.name != drop)
      w.add(t.name,
            Tensor(const_cast<float*>(t.data.data()), DType::f32, Device::cpu, shape_of(t.shape)));
  w.set_metadata("format", "pt");
  w.write((dir / "model.safetensors").string());
  return dir.string();
}

// The concatenation of HF tensors, in order (a c_attn or c_fc of attnlab).
std::vector<float> concat(const std::vector<HfTensor>& ts, std::initializer_list<std::string> ns) {
  std::vector<float> out;
  for (const auto& n : ns) {
    const auto& d = find(ts, n).data;
    out.insert(out.end(), d.begin(), d.end());
  }
  return out;
}

}  // namespace

TEST(HfLlama, ConfigIsMapped) {
  const test::TempDir tmp("llama");
  const ModelSource s = inspect_model_source(write_llama(tmp.path() / "m"));
  const GPTConfig& c = s.config;
  EXPECT_EQ(c.norm, NormType::rmsnorm);
  EXPECT_EQ(c.mlp, MlpType::swiglu);
  EXPECT_EQ(c.position, PositionType::rope);
  EXPECT_EQ(c.n_layer, kL);
  EXPECT_EQ(c.n_head, kH);
  EXPECT_EQ(c.kv_heads(), kKV);
  EXPECT_EQ(c.mlp_hidden(), kF);
  EXPECT_EQ(c.vocab_size, kV);
  EXPECT_EQ(c.padded_vocab, 128);
  EXPECT_EQ(c.block_size, 64);
  EXPECT_FLOAT_EQ(c.norm_eps, 1e-6f);
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.f);
  EXPECT_FALSE(c.bias);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_EQ(c.attention.window, 0);
  // Mistral: the sliding window becomes attention.window; null is full attention.
  const ModelSource m = inspect_model_source(
      write_llama(tmp.path() / "mistral", {{"model_type", "mistral"}, {"sliding_window", 16}}));
  EXPECT_EQ(m.config.attention.window, 16);
  const ModelSource m0 = inspect_model_source(write_llama(
      tmp.path() / "mistral0", {{"model_type", "mistral"}, {"sliding_window", nullptr}}));
  EXPECT_EQ(m0.config.attention.window, 0);
}

TEST(HfLlama, WeightsAreAssembledInRowOrder) {
  for (bool bias : {false, true}) {
    SCOPED_TRACE(bias ? "with biases" : "without biases");
    const test::TempDir tmp("llama");
    const std::string dir =
        write_llama(tmp.path() / "m", {{"attention_bias", bias}, {"mlp_bias", bias}}, bias);
    const ModelSource s = inspect_model_source(dir);
    ASSERT_EQ(s.config.bias, bias);
    Model m(s.config, 1);
    load_model_source(s, m.store);
    const auto ts = llama_tensors(bias);
    for (int l = 0; l < kL; ++l) {
      const std::string h = "model.layers." + std::to_string(l) + ".";
      const std::string a = "h." + std::to_string(l) + ".";
      EXPECT_EQ(m.get(a + "attn.c_attn.weight"),
                concat(ts, {h + "self_attn.q_proj.weight", h + "self_attn.k_proj.weight",
                            h + "self_attn.v_proj.weight"}));
      EXPECT_EQ(m.get(a + "mlp.c_fc.weight"),
                concat(ts, {h + "mlp.gate_proj.weight", h + "mlp.up_proj.weight"}));
      EXPECT_EQ(m.get(a + "attn.c_proj.weight"), find(ts, h + "self_attn.o_proj.weight").data);
      EXPECT_EQ(m.get(a + "mlp.c_proj.weight"), find(ts, h + "mlp.down_proj.weight").data);
      EXPECT_EQ(m.get(a + "ln_1.weight"), find(ts, h + "input_layernorm.weight").data);
      EXPECT_EQ(m.get(a + "ln_2.weight"), find(ts, h + "post_attention_layernorm.weight").data);
      if (bias) {
        EXPECT_EQ(m.get(a + "attn.c_attn.bias"),
                  concat(ts, {h + "self_attn.q_proj.bias", h + "self_attn.k_proj.bias",
                              h + "self_attn.v_proj.bias"}));
        EXPECT_EQ(m.get(a + "mlp.c_fc.bias"),
                  concat(ts, {h + "mlp.gate_proj.bias", h + "mlp.up_proj.bias"}));
      }
    }
    EXPECT_EQ(m.get("ln_f.weight"), find(ts, "model.norm.weight").data);
    std::vector<float> wte = find(ts, "model.embed_tokens.weight").data;
    wte.resize(size_t(128 * kC), 0.f);  // the vocabulary padding, zero
    EXPECT_EQ(m.get("wte.weight"), wte);
  }
}

TEST(HfLlama, UnsupportedKeysAndMissingPartsAreRefusedByName) {
  const test::TempDir tmp("llama");
  int i = 0;
  auto refused = [&](const json& edits, std::initializer_list<std::string> needles) {
    const fs::path d = tmp.path() / std::to_string(i++);
    test::expect_error([&] { inspect_model_source(write_llama(d, edits)); }, needles);
  };
  refused(
      {{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}}},
      {"rope_scaling = {", "is not supported: rope_type llama3 needs a number low_freq_factor"});
  refused({{"rope_scaling", {{"rope_type", "dynamic"}, {"factor", 2.0}}}},
          {"attnlab's RoPE takes rope_type default, linear and llama3 (not dynamic)"});
  refused({{"rope_scaling", {{"type", "yarn"}, {"factor", 4.0}, {"beta_fast", 32}}}},
          {"attnlab's RoPE takes rope_type default, linear and llama3 (not yarn)"});
  refused({{"rope_scaling", {{"type", "linear"}, {"factor", 4.0}, {"beta_fast", 32}}}},
          {"its key 'beta_fast' is not read by attnlab"});
  refused({{"rope_scaling",
            {{"rope_type", "llama3"},
             {"factor", 8.0},
             {"low_freq_factor", 1.0},
             {"high_freq_factor", 4.0},
             {"original_max_position_embeddings", 8192.5}}}},
          {"needs an integer original_max_position_embeddings"});
  refused({{"rope_scaling", {{"rope_type", "llama3"}, {"type", "linear"}, {"factor", 8.0}}}},
          {"its rope_type and type differ"});
  refused({{"rope_scaling", {{"rope_type", "linear"}, {"factor", 0.0}}}}, {"needs factor > 0"});
  refused({{"rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}}},
           {"rope_parameters", {{"rope_type", "default"}}}},
          {"give rope_scaling or rope_parameters, not both"});
  refused({{"hidden_act", "gelu"}}, {"hidden_act = \"gelu\" is not supported"});
  refused({{"head_dim", 4}}, {"head_dim = 4 is not supported", "= 2"});
  refused({{"attention_bias", true}}, {"mlp_bias = (absent) is not supported", "must agree"});
  refused({{"pretraining_tp", 2}}, {"pretraining_tp = 2 is not supported"});
  refused({{"model_type", "falcon"}}, {"model_type = \"falcon\""});
  // A config.json without the shape keys (a GPT-2 config relabelled) is refused, not defaulted.
  refused({{"hidden_size", nullptr}}, {"hidden_size is missing"});
  refused({{"num_key_value_heads", 3}}, {"model.n_kv_head (3) must divide model.n_head (4)"});
  // A tied config with an lm_head.weight that is not the embeddings' copy.
  const ModelSource tied =
      inspect_model_source(write_llama(tmp.path() / "tied", {{"tie_word_embeddings", true}}));
  Model mt(tied.config, 1);
  test::expect_error([&] { load_model_source(tied, mt.store); },
                     {"ties the head to the embeddings", "differs from model.embed_tokens.weight"});
  // A missing k_proj is named, not left to a shape error.
  const std::string dir = write_llama(tmp.path() / "drop", json::object(), false,
                                      "model.layers.1.self_attn.k_proj.weight");
  const ModelSource s = inspect_model_source(dir);
  Model m(s.config, 1);
  test::expect_error([&] { load_model_source(s, m.store); },
                     {"'h.1.attn.c_attn.weight' is assembled from 3 tensors, but 'k_proj' is "
                      "missing"});
}

// LLaMA 3.1's rope_scaling (and transformers 5's rope_parameters, and linear scaling) in, and
// back out through convert: the same config values, compared as the recipe's keys.
TEST(HfLlama, RopeScalingInAndOut) {
  const test::TempDir tmp("llama");
  const json llama3 = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  const ModelSource s =
      inspect_model_source(write_llama(tmp.path() / "l3", {{"rope_scaling", llama3}}));
  EXPECT_EQ(s.config.rope_scaling.type, RopeScalingType::llama3);
  EXPECT_EQ(s.config.rope_scaling.factor, 8.f);
  EXPECT_EQ(s.config.rope_scaling.low_freq_factor, 1.f);
  EXPECT_EQ(s.config.rope_scaling.high_freq_factor, 4.f);
  EXPECT_EQ(s.config.rope_scaling.original_context, 8192);
  json params = llama3;
  params["rope_theta"] = 123456.0;
  const ModelSource p = inspect_model_source(
      write_llama(tmp.path() / "p", {{"rope_scaling", nullptr}, {"rope_parameters", params}}));
  EXPECT_EQ(p.config.rope_scaling, s.config.rope_scaling);
  EXPECT_EQ(p.config.rope_theta, 123456.f);
  const ModelSource lin = inspect_model_source(
      write_llama(tmp.path() / "lin", {{"rope_scaling", {{"type", "linear"}, {"factor", 4.0}}}}));
  EXPECT_EQ(lin.config.rope_scaling.type, RopeScalingType::linear);
  EXPECT_EQ(lin.config.rope_scaling.factor, 4.f);
  const ModelSource none = inspect_model_source(
      write_llama(tmp.path() / "d", {{"rope_scaling", {{"rope_type", "default"}}}}));
  EXPECT_EQ(none.config.rope_scaling.type, RopeScalingType::none);

  // hf -> attnlab (the recipe's model.rope_scaling) -> hf (config.json's rope_scaling).
  ConvertOptions o;
  o.to = ModelFormat::attnlab;
  const std::string ours = (tmp.path() / "ours").string(), back = (tmp.path() / "back").string();
  convert_model((tmp.path() / "l3").string(), ours, o);
  const Recipe r = parse_recipe(io::read_file(ours + "/recipe.yaml"), "recipe.yaml");
  EXPECT_EQ(r.model.rope_scaling.type, RopeScalingKind::llama3);
  EXPECT_EQ(r.model.rope_scaling.factor, 8.0);
  EXPECT_EQ(r.model.rope_scaling.original_context, 8192);
  EXPECT_EQ(inspect_model_source(ours).config.rope_scaling, s.config.rope_scaling);
  o.to = ModelFormat::hf;
  convert_model(ours, back, o);
  const json cfg = json::parse(io::read_file(back + "/config.json"));
  EXPECT_EQ(cfg["rope_scaling"], llama3);
  // Without scaling the exporter writes null, as LlamaConfig does.
  ConvertOptions to_ours;
  to_ours.to = ModelFormat::attnlab;
  convert_model((tmp.path() / "d").string(), (tmp.path() / "d_ours").string(), to_ours);
  convert_model((tmp.path() / "d_ours").string(), (tmp.path() / "d_back").string(), o);
  EXPECT_TRUE(
      json::parse(io::read_file((tmp.path() / "d_back" / "config.json").string()))["rope_scaling"]
          .is_null());
}

TEST(HfLlama, ConvertRoundTripsAndExportRefusesOtherBlocks) {
  const test::TempDir tmp("llama");
  const std::string hf =
      write_llama(tmp.path() / "hf", {{"model_type", "mistral"}, {"sliding_window", 16}});
  const std::string ours = (tmp.path() / "ours").string(), back = (tmp.path() / "back").string();
  ConvertOptions o;
  o.to = ModelFormat::attnlab;
  convert_model(hf, ours, o);
  const ModelSource s = inspect_model_source(ours);
  EXPECT_EQ(s.config.position, PositionType::rope);
  EXPECT_EQ(s.config.attention.window, 16);
  // A tokenizer attnlab does not read (LLaMA 2's SentencePiece BPE with byte fallback): the
  // weights convert, the tokenizer is left out with a note.
  io::write_file_atomic(
      hf + "/tokenizer.json",
      R"({"model": {"type": "BPE", "byte_fallback": true, "vocab": {}, "merges": []}})");
  const ConvertResult rt = convert_model(hf, (tmp.path() / "ours2").string(), o);
  bool noted = false;
  for (const auto& n : rt.notes) noted |= n.find("the tokenizer was not carried over") == 0;
  EXPECT_TRUE(noted);
  EXPECT_FALSE(fs::exists(tmp.path() / "ours2" / "tokenizer.json"));
  o.to = ModelFormat::hf;
  convert_model(ours, back, o);
  io::SafetensorsFile f(back + "/model.safetensors");
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const auto ts = llama_tensors(false);
  EXPECT_EQ(f.names().size(), ts.size());
  for (const auto& t : ts) {
    ASSERT_TRUE(f.contains(t.name)) << t.name;
    EXPECT_EQ(f.info(t.name).shape, t.shape) << t.name;
    const Tensor v = f.view(t.name);
    EXPECT_EQ(std::vector<float>(v.ptr<float>(), v.ptr<float>() + v.numel()), t.data) << t.name;
  }
  const json cfg = json::parse(io::read_file(back + "/config.json"));
  EXPECT_EQ(cfg["model_type"], "mistral");
  EXPECT_EQ(cfg["architectures"][0], "MistralForCausalLM");
  EXPECT_EQ(cfg["sliding_window"], 16);
  EXPECT_EQ(cfg["num_key_value_heads"], kKV);
  EXPECT_EQ(cfg["intermediate_size"], kF);
  EXPECT_EQ(cfg["rope_theta"].get<double>(), 500000.0);
  EXPECT_EQ(cfg["rms_norm_eps"].get<double>(), 1e-6);
  EXPECT_EQ(cfg["tie_word_embeddings"], false);

  // The GPT-2 formats refuse the LLaMA block, the LLaMA exporter refuses GPT-2's and mixed blocks.
  Model m(s.config, 1);
  test::expect_error(
      [&] { write_hf_gpt2(m.store, s.config, nullptr, (tmp.path() / "g").string(), nullptr); },
      {"cannot export to Hugging Face GPT-2", "norm rmsnorm, mlp swiglu, position rope"});
  test::expect_error([&] { write_llmc(m.store, s.config, (tmp.path() / "x.bin").string(), false); },
                     {"cannot export to llm.c", "norm rmsnorm"});
  // A sliding window exports as MistralForCausalLM, which has no biases: refused, not dropped.
  GPTConfig biased = s.config;
  biased.bias = true;
  Model mb(biased, 1);
  test::expect_error(
      [&] { write_hf_llama(mb.store, biased, nullptr, (tmp.path() / "mb").string(), nullptr); },
      {"sliding window (16), which only MistralForCausalLM has, and biases"});
  // The attnlab checkpoint's recipe names the family it came from.
  const Recipe r = parse_recipe(io::read_file(ours + "/recipe.yaml"), "recipe.yaml");
  EXPECT_EQ(r.model.family, ModelFamily::mistral);
  EXPECT_EQ(r.model.mlp_hidden_width(), kF);

  // A GELU MLP of another width than 4 C: n_inner both ways; llm.c has no place for it.
  GPTConfig wide = interop_test::tiny_config();
  wide.mlp_hidden_size = 20;
  Model mw(wide, 3);
  write_hf_gpt2(mw.store, wide, nullptr, (tmp.path() / "wide").string(), nullptr);
  EXPECT_EQ(json::parse(io::read_file((tmp.path() / "wide" / "config.json").string()))["n_inner"],
            20);
  const ModelSource ws = inspect_model_source((tmp.path() / "wide").string());
  EXPECT_EQ(ws.config.mlp_hidden(), 20);
  Model mw2(ws.config, 4);
  load_model_source(ws, mw2.store);
  EXPECT_EQ(mw2.get("h.1.mlp.c_fc.weight"), mw.get("h.1.mlp.c_fc.weight"));
  test::expect_error([&] { write_llmc(mw.store, wide, (tmp.path() / "w.bin").string(), false); },
                     {"cannot export to llm.c", "20 wide (model.mlp_hidden)"});

  GPTConfig mixed = interop_test::tiny_config();
  mixed.position = PositionType::rope;
  Model mm(mixed, 1);
  test::expect_error(
      [&] { write_hf_llama(mm.store, mixed, nullptr, (tmp.path() / "h").string(), nullptr); },
      {"cannot export to Hugging Face LLaMA", "norm layernorm, mlp gelu, position rope"});
}
