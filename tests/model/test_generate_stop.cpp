// attnlab::generate with a BOS tokenizer (the tiny SentencePiece-style tokenizer.json of the
// tokenizer tests) on a checkpoint trained in the test: stop tokens from generation_config.json
// and --stop, its sampling defaults (do_sample, temperature, top_k, top_p), special tokens in the
// prompt (--special), and convert carrying generation_config.json.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "config/recipe.h"
#include "core/error.h"
#include "interop/convert.h"
#include "interop/hf_files.h"
#include "interop/model_source.h"
#include "io/atomic_file.h"
#include "test_util.h"
#include "tokenizer/tiny_sp_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "train/checkpoint.h"
#include "train/generate.h"
#include "train/trainer.h"

namespace fs = std::filesystem;
using namespace attnlab;

namespace {

// A model of 288 ids (the tokenizer has 281: <unk> 0, <s> 1, </s> 2, 256 byte tokens, words)
// trained two steps: its samples are nearly uniform over the tokenizer's ids.
class GenerateStopTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir("genstop");
    const char* recipe = R"(
model: {n_layer: 1, n_head: 2, n_embd: 32, vocab_size: 288, block_size: 64, vocab_multiple: 32}
data: {source: synthetic, synthetic: {vocab_size: 64, train_tokens: 4096, val_tokens: 1024}}
train: {steps: 2, micro_batch: 2, seq_len: 16, device: cpu, seed: 3}
eval: {every: 0}
checkpoint: {at_end: true}
)";
    TrainOptions o;
    o.quiet = true;
    train(parse_recipe(recipe, "genstop.yaml", {"train.out_dir=" + dir_->file("run")}), o);
    ckpt_ = resolve_checkpoint_dir(dir_->file("run"));
    std::ofstream(fs::path(ckpt_) / "tokenizer.json") << test::sp_json("legacy").dump();
  }
  static void TearDownTestSuite() { delete dir_; }

  GenerateOptions options(const std::string& prompt, int n) const {
    GenerateOptions o;
    o.checkpoint = ckpt_;
    o.prompt = prompt;
    o.max_new_tokens = n;
    o.device = "cpu";
    o.seed = 5;
    return o;
  }
  // A copy of the checkpoint with this generation_config.json.
  std::string with_generation_config(const std::string& name, const std::string& json) const {
    const fs::path copy = dir_->file(name);
    fs::copy(ckpt_, copy, fs::copy_options::recursive);
    std::ofstream(copy / "generation_config.json") << json;
    return copy.string();
  }
  static test::TempDir* dir_;
  static std::string ckpt_;
};
test::TempDir* GenerateStopTest::dir_ = nullptr;
std::string GenerateStopTest::ckpt_;

// The first index k >= 3 whose id is new and no special token, with no default stop (</s>, <s>)
// before it; ids.size() when there is none (the test's seed then needs changing).
size_t first_fresh(const std::vector<int32_t>& ids) {
  for (size_t k = 0; k < ids.size(); ++k) {
    if (ids[k] == 1 || ids[k] == 2) break;
    if (k >= 3 && ids[k] > 2 &&
        std::find(ids.begin(), ids.begin() + int64_t(k), ids[k]) == ids.begin() + int64_t(k))
      return k;
  }
  return ids.size();
}

}  // namespace

TEST_F(GenerateStopTest, StopsAtTheIdsOfGenerationConfigAndOfStopTokens) {
  GenerateOptions o = options("hello", 60);
  o.stop = false;
  const GenerateResult all = generate(o, nullptr);
  ASSERT_EQ(all.new_ids.size(), 60u);
  const size_t k = first_fresh(all.new_ids);
  ASSERT_LT(k, all.new_ids.size());
  const int32_t x = all.new_ids[k];
  const std::vector<int32_t> before(all.new_ids.begin(), all.new_ids.begin() + int64_t(k));

  // Without a stop id for x, stopping happens only at </s> or <s>, which these samples avoid
  // until k (first_fresh); with one, at x, uncounted.
  GenerateOptions s = options("hello", 60);
  s.checkpoint = with_generation_config("gc", "{\"eos_token_id\": [2, " + std::to_string(x) + "]}");
  const GenerateResult r = generate(s, nullptr);
  EXPECT_EQ(r.stop_token, x);
  EXPECT_EQ(r.new_ids, before);
  EXPECT_EQ(r.new_tokens, int(k));
  std::string notes;
  for (const auto& n : r.notes) notes += n + "\n";
  EXPECT_NE(notes.find(strformat(
                "stops at \"</s>\" (2), \"<s>\" (1), %s (%d)\n",
                quote_piece(make_tokenizer(ckpt_ + "/tokenizer.json")->piece(x)).c_str(), x)),
            std::string::npos)
      << notes;
  s.stop = false;  // --no-stop goes past it
  EXPECT_EQ(generate(s, nullptr).new_ids, all.new_ids);

  GenerateOptions t = options("hello", 60);  // the same as --stop <id>
  t.stop_tokens = {std::to_string(x)};
  EXPECT_EQ(generate(t, nullptr).new_ids, before);
  t.stop_tokens = {"<unk>", "</s>", "2"};  // a special token's text is its id; each id once
  notes.clear();
  for (const auto& n : generate(t, nullptr).notes) notes += n + "\n";
  EXPECT_NE(notes.find("stops at \"</s>\" (2), \"<s>\" (1), \"<unk>\" (0)\n"), std::string::npos)
      << notes;
}

TEST_F(GenerateStopTest, BadStopTokensAndGenerationConfigsAreRefused) {
  GenerateOptions o = options("hello", 3);
  o.stop_tokens = {"hello world"};
  test::expect_error([&] { generate(o, nullptr); },
                     {"stop token 'hello world' is", "give one token"});
  o.stop_tokens = {"100000"};
  test::expect_error([&] { generate(o, nullptr); }, {"stop token 100000 is not an id", "281 ids"});
  o.stop_tokens = {};
  o.checkpoint = with_generation_config("bad", "{\"eos_token_id\": \"</s>\"}");
  test::expect_error([&] { generate(o, nullptr); },
                     {"generation_config.json", "eos_token_id must be a token id or a list"});
  // ... only for generate: the model itself loads (eval, score, convert, init_from).
  EXPECT_NE(inspect_model_source(o.checkpoint).stop_ids_problem, "");
  // Ids the tokenizer does not have cannot be sampled: left out, not an error.
  o.checkpoint = with_generation_config("outside", "{\"eos_token_id\": [2, 100000]}");
  const GenerateResult r = generate(o, nullptr);
  for (const auto& n : r.notes) EXPECT_EQ(n.find("stops at"), std::string::npos) << n;
}

// A run directory's generation_config.json counts where its checkpoint has none.
TEST_F(GenerateStopTest, RunDirectoryGenerationConfig) {
  const fs::path run = dir_->file("run_copy");
  fs::copy(dir_->file("run"), run, fs::copy_options::recursive);
  EXPECT_TRUE(inspect_model_source(run.string()).stop_ids.empty());
  EXPECT_EQ(inspect_model_source(run.string()).generation_config, "");
  std::ofstream(run / "generation_config.json") << R"({"eos_token_id": 9})";
  EXPECT_EQ(inspect_model_source(run.string()).stop_ids, (std::vector<int32_t>{9}));
  EXPECT_EQ(inspect_model_source(run.string()).generation_config,
            (run / "generation_config.json").string());
}

// The samples follow generation_config.json's sampling as the same values given on the command
// line would, and the command line's values replace the file's.
TEST_F(GenerateStopTest, SamplingDefaultsOfGenerationConfig) {
  const auto ids = [&](const std::string& checkpoint, const SamplingChoice& c) {
    GenerateOptions o = options("hello", 24);
    o.checkpoint = checkpoint;
    o.stop = false;
    o.sampling = c;
    return generate(o, nullptr).new_ids;
  };
  const std::vector<int32_t> plain = ids(ckpt_, {});  // temperature 1, no cuts
  SamplingChoice greedy, llama, attnlab_defaults;
  greedy.temperature = 0.f;
  llama.temperature = 0.6f;
  llama.top_k = 50;
  llama.top_p = 0.9f;
  attnlab_defaults.temperature = 1.f;
  attnlab_defaults.top_k = 0;
  attnlab_defaults.top_p = 1.f;
  const std::vector<int32_t> argmax = ids(ckpt_, greedy), cut = ids(ckpt_, llama);
  ASSERT_NE(argmax, plain);
  ASSERT_NE(cut, plain);

  const std::string no_sampling = with_generation_config("gc_false", R"({"do_sample": false})");
  EXPECT_EQ(ids(no_sampling, {}), argmax);
  GenerateOptions o = options("hello", 2);
  o.checkpoint = no_sampling;
  EXPECT_EQ(generate(o, nullptr).notes.front().rfind("greedy decoding (do_sample false in '", 0),
            0u);
  const std::string sampled =
      with_generation_config("gc_true", R"({"do_sample": true, "temperature": 0.6, "top_p": 0.9})");
  EXPECT_EQ(ids(sampled, {}), cut);
  EXPECT_EQ(ids(sampled, attnlab_defaults), plain);
  EXPECT_EQ(ids(with_generation_config("gc_none", R"({"temperature": 0.6})"), {}), plain);

  o.checkpoint = with_generation_config("gc_bad", R"({"do_sample": true, "top_p": 1.5})");
  test::expect_error([&] { generate(o, nullptr); },
                     {"generation_config.json': top_p must be a number in (0, 1]"});
}

// --special: "<s>" in the prompt is the BOS (one, not two); without it the characters are text.
TEST_F(GenerateStopTest, SpecialTokensInThePromptWithoutASecondBos) {
  const auto tok = make_tokenizer((fs::path(ckpt_) / "tokenizer.json").string());
  std::vector<int32_t> ab, text, mixed;
  tok->encode("hello", ab);
  tok->encode("<s>hello", text);
  tok->encode_with_special("hello</s><s>hello", mixed);
  ASSERT_EQ(std::count(mixed.begin(), mixed.end(), 1), 1);
  ASSERT_EQ(std::count(mixed.begin(), mixed.end(), 2), 1);
  GenerateOptions o = options("<s>hello", 2);
  o.special = true;
  EXPECT_EQ(generate(o, nullptr).prompt_tokens, int(1 + ab.size()));
  o.prompt = "hello</s><s>hello";  // a special token inside the prompt: one id each
  EXPECT_EQ(generate(o, nullptr).prompt_tokens, int(1 + mixed.size()));
  o.special = false;
  o.prompt = "<s>hello";
  EXPECT_EQ(generate(o, nullptr).prompt_tokens, int(1 + text.size()));
  EXPECT_GT(text.size(), ab.size() + 1);  // "<s>" as text is several tokens
}

// A run initialised from a model with a generation_config.json writes it into its checkpoints,
// and a resume keeps it: a fine-tuned Instruct model still stops where it did.
TEST_F(GenerateStopTest, FineTuneCheckpointsCarryGenerationConfig) {
  const std::string src = with_generation_config("ft_src", R"({"eos_token_id": [2, 99]})");
  const char* recipe = R"(
model: {n_layer: 1, n_head: 2, n_embd: 32, vocab_size: 288, block_size: 64, vocab_multiple: 32}
data: {source: synthetic, synthetic: {vocab_size: 64, train_tokens: 4096, val_tokens: 1024}}
train: {steps: 1, micro_batch: 2, seq_len: 16, device: cpu, seed: 3}
eval: {every: 0}
checkpoint: {every: 1}
)";
  const std::string run = dir_->file("ft");
  TrainOptions o;
  o.quiet = true;
  train(parse_recipe(recipe, "ft.yaml", {"train.out_dir=" + run, "train.init_from=" + src}), o);
  EXPECT_EQ(hf_eos_token_ids(resolve_checkpoint_dir(run), false), (std::vector<int32_t>{2, 99}));
  o.resume = run;
  train(parse_recipe(recipe, "ft.yaml",
                     {"train.out_dir=" + run, "train.init_from=" + src, "train.steps=2"}),
        o);
  const std::string step2 = resolve_checkpoint_dir(run);
  EXPECT_NE(step2.find("step_00000002"), std::string::npos) << step2;
  EXPECT_EQ(hf_eos_token_ids(step2, false), (std::vector<int32_t>{2, 99}));
}

// convert carries generation_config.json (to attnlab and to Hugging Face), and a Hugging Face
// directory's config.json ids count where it has no generation_config.json.
TEST_F(GenerateStopTest, ConvertCarriesGenerationConfig) {
  const std::string src =
      with_generation_config("conv", R"({"eos_token_id": [2, 77], "top_p": 0.9})");
  for (ModelFormat to : {ModelFormat::attnlab, ModelFormat::hf}) {
    const std::string out = dir_->file(std::string("converted_") + model_format_name(to));
    ConvertOptions co;
    co.to = to;
    const ConvertResult res = convert_model(src, out, co);
    EXPECT_EQ(hf_eos_token_ids(out, false), (std::vector<int32_t>{2, 77}));
    EXPECT_NE(io::read_file(out + "/generation_config.json").find("top_p"), std::string::npos);
    EXPECT_NE(std::find(res.written.begin(), res.written.end(), out + "/generation_config.json"),
              res.written.end());
    EXPECT_EQ(inspect_model_source(out).stop_ids, (std::vector<int32_t>{2, 77}));
  }

  // A Hugging Face directory whose ids are in config.json only: convert writes them as a
  // generation_config.json.
  const std::string hf_out = dir_->file("converted_hf");
  fs::remove(fs::path(hf_out) / "generation_config.json");
  nlohmann::json cfg = nlohmann::json::parse(io::read_file(hf_out + "/config.json"));
  cfg["eos_token_id"] = {2, 88};
  std::ofstream(hf_out + "/config.json") << cfg.dump();
  const std::string back = dir_->file("back");
  ConvertOptions co;
  co.to = ModelFormat::attnlab;
  convert_model(hf_out, back, co);
  EXPECT_EQ(hf_eos_token_ids(back, false), (std::vector<int32_t>{2, 88}));

  const fs::path hf = dir_->file("hfdir");
  fs::create_directories(hf);
  std::ofstream(hf / "config.json") << R"({"eos_token_id": [5, 6]})";
  EXPECT_EQ(hf_eos_token_ids(hf.string(), true), (std::vector<int32_t>{5, 6}));
  EXPECT_TRUE(hf_eos_token_ids(hf.string(), false).empty());  // an attnlab checkpoint's rule
  std::ofstream(hf / "generation_config.json") << R"({"eos_token_id": 7})";
  EXPECT_EQ(hf_eos_token_ids(hf.string(), true), (std::vector<int32_t>{7}));
}
