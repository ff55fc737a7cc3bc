// Models from other formats (interop/): Hugging Face GPT-2 directories written here with known
// values, loaded through load_model_source: the Conv1D transposes, the tied head, both key
// layouts, the config mapping and the refusals; the exporter and `convert` round trips; the
// strict load's refusal of a checkpoint of another shape; train.init_from's model keys. llm.c
// files: test_llmc.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "interop/convert.h"
#include "interop/hf_gpt2.h"
#include "interop/interop_test_util.h"
#include "interop/llmc.h"
#include "interop/model_source.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "model/gpt.h"
#include "test_util.h"
#include "tokenizer/bpe.h"
#include "train/from_recipe.h"
#include "train/init_from.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace attnlab;

namespace {

using namespace attnlab::interop_test;

json hf_config_json() {
  return {{"model_type", "gpt2"},
          {"architectures", {"GPT2LMHeadModel"}},
          {"activation_function", "gelu_new"},
          {"n_layer", L},
          {"n_head", NH},
          {"n_embd", C},
          {"n_positions", P},
          {"n_ctx", P},
          {"vocab_size", V},
          {"layer_norm_epsilon", 1e-6},
          {"resid_pdrop", 0.1},
          {"embd_pdrop", 0.1},
          {"attn_pdrop", 0.1},
          {"summary_type", "cls_index"},
          {"summary_use_proj", true},
          {"summary_first_dropout", 0.1},
          {"task_specific_params", {{"text-generation", {{"do_sample", true}}}}},
          {"bos_token_id", V - 1},
          {"eos_token_id", V - 1}};
}

// The HF tensors of a tiny GPT-2 in the file layout (Conv1D weights [in, out]; names without
// the transformer. prefix).
std::vector<HfTensor> hf_tensors() {
  std::vector<std::pair<std::string, std::vector<int64_t>>> specs = {
      {"wte.weight", {V, C}}, {"wpe.weight", {P, C}}, {"ln_f.weight", {C}}, {"ln_f.bias", {C}}};
  for (int l = 0; l < L; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    for (auto& s : std::vector<std::pair<std::string, std::vector<int64_t>>>{
             {"ln_1.weight", {C}},
             {"ln_1.bias", {C}},
             {"attn.c_attn.weight", {C, 3 * C}},
             {"attn.c_attn.bias", {3 * C}},
             {"attn.c_proj.weight", {C, C}},
             {"attn.c_proj.bias", {C}},
             {"ln_2.weight", {C}},
             {"ln_2.bias", {C}},
             {"mlp.c_fc.weight", {C, 4 * C}},
             {"mlp.c_fc.bias", {4 * C}},
             {"mlp.c_proj.weight", {4 * C, C}},
             {"mlp.c_proj.bias", {C}}})
      specs.emplace_back(h + s.first, s.second);
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

// The byte-level BPE of every byte, one merge ("a" "b") and <|endoftext|>: V = 258 ids.
void write_tiny_bpe(const fs::path& dir, const char* vocab_name, const char* merges_name) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[gpt2_bytes_to_symbols(std::string(1, char(b)))] = b;
  vocab["ab"] = 256;
  vocab["<|endoftext|>"] = 257;
  io::write_file_atomic((dir / vocab_name).string(), vocab.dump());
  io::write_file_atomic((dir / merges_name).string(), "#version: 0.2\na b\n");
}

enum class Layout { prefixed, hub };

// A Hugging Face directory: config.json (+ edits), model.safetensors in `layout`, vocab.json +
// merges.txt.
std::string write_hf(const fs::path& dir, Layout layout, const json& config_edits = json::object(),
                     const std::vector<HfTensor>& extra = {}) {
  fs::create_directories(dir);
  json cfg = hf_config_json();
  for (auto& [k, v] : config_edits.items()) cfg[k] = v;
  io::write_file_atomic((dir / "config.json").string(), cfg.dump(2));
  static std::vector<HfTensor> keep;  // the writer references the data until write()
  keep = hf_tensors();
  for (const auto& e : extra) keep.push_back(e);
  if (layout == Layout::hub)
    for (int l = 0; l < L; ++l) {
      keep.push_back({"h." + std::to_string(l) + ".attn.bias",
                      {1, 1, P, P},
                      std::vector<float>(size_t(P * P), 1.f)});
      keep.push_back({"h." + std::to_string(l) + ".attn.masked_bias", {}, {-1e4f}});
    }
  io::SafetensorsWriter w;
  for (const auto& t : keep) {
    const std::string name =
        layout == Layout::prefixed && t.name != "lm_head.weight" ? "transformer." + t.name : t.name;
    if (t.shape.size() <= size_t(Shape::kMaxDims))
      w.add(name,
            Tensor(const_cast<float*>(t.data.data()), DType::f32, Device::cpu, shape_of(t.shape)));
  }
  w.set_metadata("format", "pt");
  w.write((dir / "model.safetensors").string());
  write_tiny_bpe(dir, "vocab.json", "merges.txt");
  return dir.string();
}

// Checks that `m` holds the weights of hf_tensors() in attnlab's layout.
void expect_hf_weights(const Model& m) {
  const auto ts = hf_tensors();
  for (const auto& e : m.store.entries()) {
    const std::string& n = e.spec.name;
    const HfTensor& t = find(ts, n);
    const std::vector<float> got = m.get(n);
    const bool conv = n.find("c_attn.weight") != std::string::npos ||
                      n.find("c_proj.weight") != std::string::npos ||
                      n.find("c_fc.weight") != std::string::npos;
    if (conv) {  // attnlab [out, in] = HF [in, out] transposed
      const int64_t in = t.shape[0], out = t.shape[1];
      ASSERT_EQ(got.size(), size_t(in * out)) << n;
      for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < in; ++i)
          ASSERT_EQ(got[size_t(o * in + i)], t.data[size_t(i * out + o)])
              << n << " " << o << "," << i;
    } else if (n == "wte.weight") {  // V real rows, then the zero padding
      ASSERT_EQ(got.size(), size_t(384 * C));
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(got[i], i < t.data.size() ? t.data[i] : 0.f) << n << " " << i;
    } else {
      EXPECT_EQ(got, t.data) << n;
    }
  }
}

}  // namespace

TEST(HfGpt2, ConfigIsMappedAndMetadataKeysAreAccepted) {
  const test::TempDir tmp("hf");
  const std::string dir = write_hf(tmp.path() / "m", Layout::prefixed, {{"some_new_key", 1}});
  const ModelSource s = inspect_model_source(dir);
  EXPECT_EQ(s.format, ModelFormat::hf);
  EXPECT_EQ(s.config.n_layer, L);
  EXPECT_EQ(s.config.n_head, NH);
  EXPECT_EQ(s.config.n_embd, C);
  EXPECT_EQ(s.config.vocab_size, V);
  EXPECT_EQ(s.config.padded_vocab, 384);
  EXPECT_EQ(s.config.block_size, P);
  EXPECT_FLOAT_EQ(s.config.norm_eps, 1e-6f);
  EXPECT_TRUE(s.config.tied_embeddings);
  EXPECT_EQ(s.tokenizer, "gpt2:" + dir);
  ASSERT_EQ(s.notes.size(), 1u);
  EXPECT_NE(s.notes[0].find("some_new_key"), std::string::npos);
  EXPECT_EQ(make_tokenizer(s.tokenizer)->vocab_size(), V);
  // A Hugging Face Trainer's checkpoint-N/ holds a trainer_state.json too: still Hugging Face.
  std::ofstream(fs::path(dir) / "trainer_state.json") << R"({"global_step": 500})";
  EXPECT_EQ(inspect_model_source(dir).format, ModelFormat::hf);
}

TEST(HfGpt2, ComputationChangingKeysAreRefusedByName) {
  const test::TempDir tmp("hf");
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"activation_function", "relu"}}, "activation_function"},
      {{{"scale_attn_by_inverse_layer_idx", true}}, "scale_attn_by_inverse_layer_idx"},
      {{{"reorder_and_upcast_attn", true}}, "reorder_and_upcast_attn"},
      {{{"scale_attn_weights", false}}, "scale_attn_weights"},
      {{{"n_inner", -5}}, "n_inner"},
      {{{"add_cross_attention", true}}, "add_cross_attention"},
      {{{"model_type", "falcon"}}, "model_type"},
      {{{"model_type", "llama"}}, "hidden_size is missing"}};
  int i = 0;
  for (const auto& [edit, key] : cases) {
    const std::string dir = write_hf(tmp.path() / std::to_string(i++), Layout::prefixed, edit);
    test::expect_error([&] { inspect_model_source(dir); },
                       {key, key == "hidden_size is missing" ? "LlamaConfig" : "is not supported"});
  }
}

TEST(HfGpt2, BothKeyLayoutsLoadWithConv1DTransposedAndTiedHead) {
  const test::TempDir tmp("hf");
  for (Layout layout : {Layout::prefixed, Layout::hub}) {
    const std::string dir = write_hf(tmp.path() / (layout == Layout::hub ? "hub" : "pre"), layout);
    const ModelSource s = inspect_model_source(dir);
    Model m(s.config, 7);
    ASSERT_FALSE(m.store.contains("lm_head.weight"));
    const WeightLoadReport r = load_model_source(s, m.store);
    EXPECT_TRUE(r.initialised.empty());
    EXPECT_TRUE(r.ignored.empty());
    EXPECT_EQ(r.loaded.size(), m.store.entries().size());
    expect_hf_weights(m);
  }
}

TEST(HfGpt2, TiedHeadCopyMustEqualWteAndUntiedHeadLoads) {
  const test::TempDir tmp("hf");
  const HfTensor wte = find(hf_tensors(), "wte.weight");
  HfTensor head{"lm_head.weight", wte.shape, wte.data};
  {  // the same values twice (old files): accepted
    const std::string dir = write_hf(tmp.path() / "same", Layout::prefixed, {}, {head});
    const ModelSource s = inspect_model_source(dir);
    Model m(s.config, 1);
    load_model_source(s, m.store);
    expect_hf_weights(m);
  }
  {  // two heads (with and without the prefix): refused, not the last one compared
    HfTensor prefixed = head;
    prefixed.name = "transformer.lm_head.weight";
    prefixed.data[3] += 1.f;
    const std::string dir = write_hf(tmp.path() / "two", Layout::hub, {}, {head, prefixed});
    const ModelSource s = inspect_model_source(dir);
    Model m(s.config, 1);
    test::expect_error([&] { load_model_source(s, m.store); },
                       {"two tensors map to 'lm_head.weight'"});
  }
  head.data[3] += 1.f;
  {
    const std::string dir = write_hf(tmp.path() / "differs", Layout::prefixed, {}, {head});
    const ModelSource s = inspect_model_source(dir);
    Model m(s.config, 1);
    test::expect_error([&] { load_model_source(s, m.store); },
                       {"lm_head.weight", "tie_word_embeddings"});
  }
  {  // untied: lm_head.weight is nn.Linear [V, C], loaded as is
    const std::string dir =
        write_hf(tmp.path() / "untied", Layout::prefixed, {{"tie_word_embeddings", false}}, {head});
    const ModelSource s = inspect_model_source(dir);
    ASSERT_FALSE(s.config.tied_embeddings);
    Model m(s.config, 1);
    load_model_source(s, m.store);
    const std::vector<float> got = m.get("lm_head.weight");
    for (size_t i = 0; i < head.data.size(); ++i) ASSERT_EQ(got[i], head.data[i]);
  }
}

TEST(HfGpt2, TensorsTheModelLacksAreRefusedByName) {
  const test::TempDir tmp("hf");
  const HfTensor extra{"score.weight", {2, C}, std::vector<float>(2 * C, 1.f)};
  const std::string dir = write_hf(tmp.path() / "m", Layout::prefixed, {}, {extra});
  const ModelSource s = inspect_model_source(dir);
  Model m(s.config, 1);
  const std::vector<float> before = m.get("h.0.attn.c_attn.weight");
  test::expect_error([&] { load_model_source(s, m.store); },
                     {"1 tensor(s) that the model does not have", "transformer.score.weight"});
  EXPECT_EQ(m.get("h.0.attn.c_attn.weight"), before);  // nothing copied
  WeightLoadOptions allow;
  allow.allow_extra = true;
  EXPECT_EQ(load_model_source(s, m.store, allow).ignored,
            std::vector<std::string>{"transformer.score.weight"});

  // A 2-layer checkpoint into a 1-layer model: the second layer is named.
  GPTConfig one = s.config;
  one.n_layer = 1;
  Model small(one, 1);
  test::expect_error([&] { load_model_source(s, small.store); },
                     {"13 tensor(s)", "transformer.h.1.attn.c_attn.weight"});
}

// A wte (or untied head) with another number of rows than config.json's vocabulary: refused.
// Fewer: the missing ids had zero weights and a logit of 0, and could be sampled; more: the extra
// rows would land in attnlab's padding, which no logit reads (transformers refuses both).
TEST(HfGpt2, EmbeddingsWithAnotherRowCountThanTheVocabularyAreRefused) {
  const test::TempDir tmp("hf");
  for (const int vocab : {V + 5, V - 5}) {
    const std::string dir =
        write_hf(tmp.path() / std::to_string(vocab), Layout::prefixed, {{"vocab_size", vocab}});
    const ModelSource s = inspect_model_source(dir);
    ASSERT_EQ(s.config.vocab_size, vocab);
    Model m(s.config, 1);
    test::expect_error(
        [&] { load_model_source(s, m.store); },
        {"tensor 'transformer.wte.weight' has shape [" + std::to_string(V),
         "vocab_size " + std::to_string(vocab) + " asks for " + std::to_string(vocab) + " rows"});
  }
}

// transformers' generic names for GPT-2's fields (num_attention_heads for n_head, ...) are read
// as those fields: a head count under the other name would otherwise fall to the default 12.
TEST(HfGpt2, TheGenericFieldNamesAreRead) {
  const test::TempDir tmp("hf");
  const std::string dir = write_hf(tmp.path() / "a", Layout::prefixed,
                                   {{"n_head", nullptr},
                                    {"num_attention_heads", NH},
                                    {"n_layer", nullptr},
                                    {"num_hidden_layers", L},
                                    {"n_embd", nullptr},
                                    {"hidden_size", C},
                                    {"n_positions", nullptr},
                                    {"max_position_embeddings", P}});
  const ModelSource s = inspect_model_source(dir);
  EXPECT_EQ(s.config.n_head, NH);
  EXPECT_EQ(s.config.n_layer, L);
  EXPECT_EQ(s.config.n_embd, C);
  EXPECT_EQ(s.config.block_size, P);
  EXPECT_TRUE(s.notes.empty()) << s.notes[0];
  Model m(s.config, 1);
  load_model_source(s, m.store);
  expect_hf_weights(m);
  const std::string both =
      write_hf(tmp.path() / "b", Layout::prefixed, {{"num_attention_heads", 2 * NH}});
  test::expect_error(
      [&] { inspect_model_source(both); },
      {"n_head = " + std::to_string(NH),
       "num_attention_heads = " + std::to_string(2 * NH) + " name the same field and differ"});
  // A shape attnlab cannot build names the file it came from.
  const std::string odd = write_hf(tmp.path() / "odd", Layout::prefixed, {{"n_head", 3}});
  test::expect_error([&] { inspect_model_source(odd); },
                     {"config.json': model.n_embd (" + std::to_string(C) +
                      ") must be a multiple of model.n_head (3)"});
}

TEST(HfGpt2, ShardedIndexLoads) {
  const test::TempDir tmp("hf");
  const fs::path dir = tmp.path() / "sharded";
  fs::create_directories(dir);
  io::write_file_atomic((dir / "config.json").string(), hf_config_json().dump());
  const auto ts = hf_tensors();
  io::SafetensorsWriter a, b;
  json map = json::object();
  for (size_t i = 0; i < ts.size(); ++i) {
    const std::string n = "transformer." + ts[i].name;
    (i % 2 ? a : b)
        .add(n, Tensor(const_cast<float*>(ts[i].data.data()), DType::f32, Device::cpu,
                       shape_of(ts[i].shape)));
    map[n] = i % 2 ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  a.write((dir / "model-00001-of-00002.safetensors").string());
  b.write((dir / "model-00002-of-00002.safetensors").string());
  io::write_file_atomic((dir / "model.safetensors.index.json").string(),
                        json{{"metadata", json::object()}, {"weight_map", map}}.dump());
  const ModelSource s = inspect_model_source(dir.string());
  Model m(s.config, 1);
  load_model_source(s, m.store);
  expect_hf_weights(m);
}

TEST(Convert, HfToAttnlabToHfRoundTrips) {
  const test::TempDir tmp("conv");
  const std::string hf = write_hf(tmp.path() / "hf", Layout::hub);
  const std::string ours = (tmp.path() / "ours").string();
  ConvertOptions o;
  o.to = ModelFormat::attnlab;
  convert_model(hf, ours, o);
  // A checkpoint directory that eval/generate read: recipe.yaml, tokenizer.json, strict load.
  const ModelSource s = inspect_model_source(ours);
  EXPECT_EQ(s.format, ModelFormat::attnlab);
  EXPECT_EQ(make_tokenizer(s.tokenizer)->vocab_size(), V);
  const Recipe r = parse_recipe(io::read_file(ours + "/recipe.yaml"), "recipe.yaml");
  Model m(gpt_config_of(r), 5);
  load_model_weights(ours, m.store);
  expect_hf_weights(m);
  EXPECT_FLOAT_EQ(float(r.model.norm_eps), 1e-6f);

  // llm.c writes one file: an empty directory as its destination is refused before any work.
  const fs::path empty = tmp.path() / "empty";
  fs::create_directories(empty);
  o.to = ModelFormat::llmc;
  test::expect_error([&] { convert_model(ours, empty.string(), o); },
                     {"is a directory; --to llmc writes one file"});

  const std::string hf2 = (tmp.path() / "hf2").string();
  o.to = ModelFormat::hf;
  convert_model(ours, hf2, o);
  // The exported files: transformer.* names, Conv1D layout, no lm_head (tied), format pt.
  io::SafetensorsFile f(hf2 + "/model.safetensors");
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_FALSE(f.contains("lm_head.weight"));
  for (const auto& t : hf_tensors()) {
    ASSERT_TRUE(f.contains("transformer." + t.name)) << t.name;
    EXPECT_EQ(f.info("transformer." + t.name).shape, t.shape) << t.name;
    const Tensor v = f.view("transformer." + t.name);
    EXPECT_EQ(std::vector<float>(v.ptr<float>(), v.ptr<float>() + v.numel()), t.data) << t.name;
  }
  const json cfg = json::parse(io::read_file(hf2 + "/config.json"));
  EXPECT_EQ(cfg["n_layer"], L);
  EXPECT_EQ(cfg["vocab_size"], V);
  EXPECT_EQ(cfg["n_positions"], P);
  EXPECT_EQ(cfg["activation_function"], "gelu_new");
  // Float settings as the decimals they were given (not 9.99999997e-07 from the float).
  EXPECT_EQ(cfg["layer_norm_epsilon"].get<double>(), 1e-6);
  EXPECT_EQ(cfg["initializer_range"].get<double>(), 0.02);
  // The tokenizer as vocab.json + merges.txt, the same ids.
  const auto t1 = make_tokenizer("gpt2:" + hf), t2 = make_tokenizer("gpt2:" + hf2);
  std::vector<int32_t> i1, i2;
  t1->encode("abcab a b<|endoftext|>", i1);
  t2->encode("abcab a b<|endoftext|>", i2);
  EXPECT_EQ(i1, i2);
  EXPECT_EQ(t2->eot_id(), 257);
  test::expect_error([&] { convert_model(ours, hf2, o); }, {"already exists"});
}

TEST(Convert, HfExportRefusesWhatGpt2CannotRepresent) {
  GPTConfig gqa = tiny_config();
  gqa.n_head = 4;
  gqa.n_kv_head = 2;
  Model mg(gqa, 1);
  const test::TempDir tmp("conv");
  test::expect_error(
      [&] { write_hf_gpt2(mg.store, gqa, nullptr, (tmp.path() / "a").string(), nullptr); },
      {"grouped-query attention"});
  GPTConfig window = tiny_config();
  window.attention.window = 4;
  Model mw(window, 1);
  test::expect_error(
      [&] { write_hf_gpt2(mw.store, window, nullptr, (tmp.path() / "b").string(), nullptr); },
      {"sliding attention window"});
}

TEST(StrictLoad, CheckpointOfAnotherShapeIsRefusedNamingTheExtraTensors) {
  const test::TempDir tmp("strict");
  GPTConfig four = tiny_config();
  four.n_layer = 4;
  Model m4(four, 1);
  const fs::path dir = tmp.path() / "ckpt";
  fs::create_directories(dir);
  io::SafetensorsWriter w;
  for (const auto& e : m4.store.entries()) w.add(e.spec.name, m4.store.param(e.spec.name));
  w.write((dir / "model.safetensors").string());
  GPTConfig three = tiny_config();
  three.n_layer = 3;
  Model m3(three, 2);
  const std::vector<float> before = m3.get("h.0.ln_1.weight");
  test::expect_error([&] { load_model_weights(dir.string(), m3.store); },
                     {"12 tensor(s) that the model does not have", "h.3.attn.c_attn.weight",
                      "h.3.mlp.c_proj.bias"});
  EXPECT_EQ(m3.get("h.0.ln_1.weight"), before);
  Model m4b(four, 3);
  load_model_weights(dir.string(), m4b.store);
  EXPECT_EQ(m4b.get("h.3.mlp.c_fc.weight"), m4.get("h.3.mlp.c_fc.weight"));
}

TEST(InitFrom, ModelKeysComeFromTheCheckpointAndGivenKeysMustAgree) {
  const test::TempDir tmp("init");
  const std::string hf = write_hf(tmp.path() / "hf", Layout::prefixed);
  const std::string base =
      "data:\n  synthetic:\n    vocab_size: 200\ntrain:\n  init_from: " + hf + "\n  seq_len: 8\n";
  const Recipe r = resolve_init_from(parse_recipe(base, "r.yaml"));
  EXPECT_EQ(r.model.n_layer, L);
  EXPECT_EQ(r.model.n_embd, C);
  EXPECT_EQ(r.model.vocab_size, V);
  EXPECT_EQ(r.model.block_size, P);
  EXPECT_FLOAT_EQ(float(r.model.norm_eps), 1e-6f);
  // Given and equal: fine. Given and different: every such key is named with both values.
  EXPECT_EQ(resolve_init_from(parse_recipe(base + "model:\n  n_layer: 2\n", "r.yaml")).model,
            r.model);
  test::expect_error(
      [&] {
        resolve_init_from(parse_recipe(base + "model:\n  n_layer: 3\n  n_embd: 24\n", "r.yaml"));
      },
      {"model.n_layer: 3 in the recipe (r.yaml:8", "2 in the checkpoint",
       "model.n_embd: 24 in the recipe", "8 in the checkpoint"});
  test::expect_error(
      [&] { resolve_init_from(parse_recipe(base, "r.yaml", {"model.preset=gpt2"})); },
      {"model.n_layer: 12 in the recipe (--set 'model.preset=gpt2')"});
  // n_embd alone, not a multiple of the default n_head (12): the keys across the model wait for
  // the checkpoint's, so the error is the disagreement, not GPT-2's head count.
  test::expect_error(
      [&] { resolve_init_from(parse_recipe(base, "r.yaml", {"model.n_embd=10"})); },
      {"model.n_embd: 10 in the recipe (--set 'model.n_embd=10'), 8 in the checkpoint"});

  // The weights: base tensors loaded, extras refused unless allowed.
  Model m(gpt_config_of(r), 9);
  const WeightLoadReport rep = load_init_from(r, m.store);
  EXPECT_EQ(rep.loaded.size(), m.store.entries().size());
  expect_hf_weights(m);
  test::expect_error([&] { parse_recipe("train:\n  init_allow_extra: true\n", "r.yaml"); },
                     {"train.init_allow_extra", "train.init_from"});
}
