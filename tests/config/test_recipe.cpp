// Recipe loading: defaults, presets, precedence, the YAML round trip, and every recipe shipped in
// recipes/. Every class of error (with its message): test_recipe_errors.cpp; the attention
// variants' keys: test_recipe_variants.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include "config/recipe.h"
#include "config/recipe_test_util.h"
#include "config/suggest.h"
#include "test_util.h"
#include "train/from_recipe.h"

namespace attnlab {
namespace {

using test::parse_error;
using test::thrown_message;

TEST(RecipeSuggest, EditDistanceAndClosestMatch) {
  EXPECT_EQ(edit_distance("", ""), 0);
  EXPECT_EQ(edit_distance("abc", ""), 3);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3);
  EXPECT_EQ(edit_distance("lr", "rl"), 1);
  EXPECT_EQ(edit_distance("stesp", "steps"), 1);
  EXPECT_EQ(edit_distance("ca", "abc"), 3);
  EXPECT_EQ(closest_match("cosin", {"cosine", "linear"}), "cosine");
  EXPECT_EQ(closest_match("COSINE", {"linear", "cosine"}), "cosine");
  EXPECT_EQ(closest_match("zzzzzz", {"cosine", "linear"}), "");
  EXPECT_EQ(join_names({"a", "b", "c"}), "a, b, c");
}

TEST(RecipeDefaults, EmptyTextGivesDefaults) {
  Recipe r = parse_recipe("", "empty.yaml");
  EXPECT_EQ(r, Recipe{});
  EXPECT_EQ(r.model.family, ModelFamily::gpt2);
  EXPECT_EQ(r.model.n_layer, 12);
  EXPECT_EQ(r.model.n_kv_head, 0);
  EXPECT_EQ(r.model.kv_heads(), 12);
  EXPECT_EQ(r.model.head_dim(), 64);
  EXPECT_EQ(r.model.padded_vocab(), 50304);  // 50257 rounded up to a multiple of 128
  EXPECT_EQ(r.attention.type, "dense");
  EXPECT_EQ(r.data.source, DataSource::synthetic);
  EXPECT_EQ(r.data.synthetic.train_tokens, 4000000);
  EXPECT_DOUBLE_EQ(r.optim.lr, 6e-4);
  EXPECT_DOUBLE_EQ(r.optim.beta2, 0.95);
  EXPECT_EQ(r.schedule.type, ScheduleType::cosine);
  EXPECT_DOUBLE_EQ(r.schedule.decay_frac, 0.2);
  EXPECT_EQ(r.train.device, DeviceChoice::auto_select);
  EXPECT_EQ(r.train.precision, Precision::bf16);
  EXPECT_EQ(r.train.tokens_per_step(), 4 * 1024);
  EXPECT_EQ(r.train.grad_accum_steps(1), 1);
  EXPECT_EQ(r.eval.every, 100);
  EXPECT_EQ(r.checkpoint.keep_last, 2);
  EXPECT_EQ(r.log.color, ColorMode::auto_detect);
  EXPECT_EQ(r.distributed.backend, DistBackend::auto_select);
  EXPECT_EQ(r.distributed.zero, 0);
  EXPECT_EQ(r.retrofit.train_roles, std::vector<std::string>{"attention"});
  EXPECT_EQ(r.retrofit.trainable_roles().size(), 3u);  // disabled: everything trains
  EXPECT_NO_THROW(Recipe{}.validate());
  // Null sections ("train:" with nothing below) and null strings are accepted.
  Recipe n = parse_recipe("train:\ndata:\n  val:\n", "null.yaml");
  EXPECT_EQ(n, Recipe{});
}

TEST(RecipeDefaults, HelperArithmetic) {
  ModelConfig m;
  m.vocab_size = 257;
  m.vocab_multiple = 64;
  EXPECT_EQ(m.padded_vocab(), 320);
  m.vocab_multiple = 1;
  EXPECT_EQ(m.padded_vocab(), 257);
  TrainConfig t;
  t.micro_batch = 8;
  t.seq_len = 256;
  t.batch_tokens = 8 * 256 * 12;
  EXPECT_EQ(t.grad_accum_steps(1), 12);
  EXPECT_EQ(t.grad_accum_steps(4), 3);
  test::expect_error(
      [&] { t.grad_accum_steps(5); },
      "must be a multiple of train.micro_batch * train.seq_len * world size = 8 * 256 * 5");
  // Evaluation does not read batch_tokens: another micro_batch for scoring is not refused.
  EXPECT_NO_THROW(parse_recipe("train: {micro_batch: 100, seq_len: 16, batch_tokens: 96}\n",
                               "x.yaml", {}, RecipeUse::eval));
  EXPECT_THROW(parse_recipe("train: {micro_batch: 100, seq_len: 16, batch_tokens: 96}\n", "x.yaml",
                            {}, RecipeUse::train),
               Error);
  // The default 0 (one micro-batch in all) with several ranks: said as such, with the value.
  t.batch_tokens = 0;
  EXPECT_EQ(t.grad_accum_steps(1), 1);
  test::expect_error([&] { t.grad_accum_steps(2); },
                     {"train.batch_tokens is 0, i.e. micro_batch * seq_len = 2048 tokens",
                      "2 ranks cannot split", "(4096: one micro-batch per rank)"});
  EXPECT_EQ(enum_name(ScheduleType::wsd), "wsd");
  EXPECT_EQ(enum_name(DeviceChoice::auto_select), "auto");
}

TEST(RecipePresets, SetShapeAndExplicitKeysWin) {
  struct Want {
    const char* name;
    int n_layer, n_head, n_embd;
  };
  for (Want w : {Want{"gpt2", 12, 12, 768}, Want{"gpt2-medium", 24, 16, 1024},
                 Want{"gpt2-large", 36, 20, 1280}, Want{"gpt2-xl", 48, 25, 1600}}) {
    Recipe r = parse_recipe(std::string("model:\n  n_layer: 3\n  preset: ") + w.name, "p.yaml");
    EXPECT_EQ(r.model.preset, w.name);
    EXPECT_EQ(r.model.n_layer, 3) << "an explicit key must beat the preset, even written first";
    EXPECT_EQ(r.model.n_head, w.n_head) << w.name;
    EXPECT_EQ(r.model.n_embd, w.n_embd) << w.name;
    EXPECT_EQ(r.model.vocab_size, 50257);
    EXPECT_EQ(r.model.block_size, 1024);
    EXPECT_EQ(r.model.head_dim(), 64);
  }
  // A preset given with --set still loses to the file's explicit keys.
  Recipe r = parse_recipe(
      "model:\n  n_embd: 256\n  n_head: 4\n  block_size: 512\n"
      "train:\n  seq_len: 512\n",
      "p.yaml", {"model.preset=gpt2-xl"});
  EXPECT_EQ(r.model.n_layer, 48);
  EXPECT_EQ(r.model.n_embd, 256);
  EXPECT_EQ(r.model.block_size, 512);
  EXPECT_HAS(parse_error("model:\n  preset: gpt3\n"),
             "x.yaml:2: model.preset 'gpt3' is not a known preset (valid: gpt2, gpt2-medium, "
             "gpt2-large, gpt2-xl, tinyllama-1.1b, llama2-7b, llama2-13b, llama3-8b, "
             "llama3.1-8b, llama3.2-1b, llama3.2-3b, mistral-7b); did you mean 'gpt2'?");
}

// model.family sets the block's choices; the LLaMA presets set the family, the sizes and the RoPE
// base; explicit keys beat both, and a family that contradicts the preset is refused.
TEST(RecipePresets, FamilyAndLlamaPresets) {
  Recipe llama = parse_recipe("model:\n  family: llama\n", "p.yaml");
  EXPECT_EQ(llama.model.norm, NormKind::rmsnorm);
  EXPECT_EQ(llama.model.mlp, MlpKind::swiglu);
  EXPECT_EQ(llama.model.position, PositionKind::rope);
  EXPECT_FALSE(llama.model.bias);
  EXPECT_FALSE(llama.model.tied_embeddings);
  EXPECT_EQ(llama.model.mlp_hidden_width(), 2048);  // LLaMA's rule from 768
  Recipe mixed = parse_recipe("model:\n  bias: true\n  family: mistral\n  mlp: gelu\n", "p.yaml");
  EXPECT_TRUE(mixed.model.bias) << "explicit keys beat the family's";
  EXPECT_EQ(mixed.model.mlp, MlpKind::gelu);
  EXPECT_EQ(mixed.model.norm, NormKind::rmsnorm);
  EXPECT_EQ(mixed.model.mlp_hidden_width(), 3072);  // 4 n_embd for GELU
  Recipe gpt2 = parse_recipe("model:\n  n_layer: 2\n", "p.yaml");
  EXPECT_EQ(gpt2.model.norm, NormKind::layernorm);
  EXPECT_EQ(gpt2.model.position, PositionKind::learned);

  Recipe l7 = parse_recipe("model:\n  preset: llama2-7b\n  block_size: 2048\n", "p.yaml");
  EXPECT_EQ(l7.model.family, ModelFamily::llama);
  EXPECT_EQ(l7.model.n_layer, 32);
  EXPECT_EQ(l7.model.n_embd, 4096);
  EXPECT_EQ(l7.model.kv_heads(), 32);
  EXPECT_EQ(l7.model.vocab_size, 32000);
  EXPECT_EQ(l7.model.block_size, 2048);
  EXPECT_EQ(l7.model.mlp_hidden_width(), 11008);
  EXPECT_EQ(l7.model.norm, NormKind::rmsnorm);
  EXPECT_FALSE(l7.model.tied_embeddings);
  l7.model.mlp_hidden = 0;
  EXPECT_EQ(l7.model.mlp_hidden_width(), 11008) << "LLaMA's rule gives the same width";
  Recipe m = parse_recipe("model:\n  preset: mistral-7b\n", "p.yaml");
  EXPECT_EQ(m.model.family, ModelFamily::mistral);
  EXPECT_EQ(m.model.kv_heads(), 8);
  EXPECT_EQ(m.model.mlp_hidden_width(), 14336);
  EXPECT_EQ(m.model.rope_theta, 1e6);
  Recipe t = parse_recipe("model:\n  preset: tinyllama-1.1b\n", "p.yaml");
  EXPECT_EQ(t.model.n_layer, 22);
  EXPECT_EQ(t.model.kv_heads(), 4);
  Recipe l3 = parse_recipe("model:\n  preset: llama3-8b\n", "p.yaml");
  EXPECT_EQ(l3.model.vocab_size, 128256);
  EXPECT_EQ(l3.model.rope_theta, 500000);
  // A preset and a family that disagree are refused.
  EXPECT_HAS(parse_error("model:\n  preset: gpt2\n  family: llama\n"),
             "x.yaml:3: model.family 'llama' contradicts model.preset 'gpt2' (a gpt2 model); drop "
             "one of them");
  Recipe same = parse_recipe("model:\n  preset: llama2-7b\n  family: llama\n", "p.yaml");
  EXPECT_EQ(same.model.n_layer, 32);
  // A preset's keys (and the family's) count as given: init_from takes none of them from its
  // checkpoint.
  EXPECT_TRUE(l7.given.where.count("model.mlp_hidden"));
  EXPECT_TRUE(l7.given.where.count("model.rope_theta"));
  EXPECT_FALSE(llama.given.where.count("model.norm")) << "a family's choices are defaults";
  EXPECT_FALSE(llama.given.where.count("model.n_layer"));
  Recipe g = parse_recipe("model:\n  preset: gpt2\n", "p.yaml");
  EXPECT_TRUE(g.given.where.count("model.n_embd"));
  EXPECT_FALSE(g.given.where.count("model.bias")) << "GPT-2 presets give their sizes only";
}

// model.rope_scaling: the section's keys and errors; LLaMA 3.1 / 3.2 presets carry it (3.2 ties
// its head); a preset's scaling keys count as given.
TEST(RecipePresets, RopeScalingKeysAndLlama31Presets) {
  const Recipe r = parse_recipe(
      "model:\n  family: llama\n  rope_scaling: {type: llama3, factor: 16, "
      "original_context: 4096}\n",
      "p.yaml");
  EXPECT_EQ(r.model.rope_scaling.type, RopeScalingKind::llama3);
  EXPECT_EQ(r.model.rope_scaling.factor, 16);
  EXPECT_EQ(r.model.rope_scaling.low_freq_factor, 1);
  EXPECT_EQ(r.model.rope_scaling.high_freq_factor, 4);
  EXPECT_EQ(r.model.rope_scaling.original_context, 4096);
  EXPECT_EQ(parse_recipe("model: {family: llama}\n", "p.yaml").model.rope_scaling.type,
            RopeScalingKind::none);
  EXPECT_HAS(parse_error("model:\n  family: llama\n  rope_scaling: {type: yarn}\n"),
             "model.rope_scaling.type");
  EXPECT_HAS(parse_error("model:\n  family: llama\n  rope_scaling: {type: llama3, "
                         "low_freq_factor: 4, high_freq_factor: 2}\n"),
             "model.rope_scaling.high_freq_factor (2) must be finite and greater than "
             "low_freq_factor (4)");
  EXPECT_HAS(parse_error("model:\n  family: llama\n  rope_scaling: {type: linear, factor: 0}\n"),
             "model.rope_scaling.factor must be > 0, got 0");
  EXPECT_HAS(parse_error("model:\n  family: llama\n  rope_scaling: {type: llama3}\n"),
             "model.rope_scaling.type llama3 (x.yaml:3) needs model.rope_scaling.factor");
  EXPECT_HAS(parse_error("model:\n  family: llama\n  rope_scaling: {type: linear, factor: 2, "
                         "original_context: 100}\n"),
             "model.rope_scaling.original_context (x.yaml:3) is not read by "
             "model.rope_scaling.type linear (linear reads factor only)");
  EXPECT_HAS(parse_error("model:\n  rope_scaling: {type: linear, factor: 2}\n"),
             "model.rope_scaling.type is linear, but model.position is learned");
  const Recipe l31 = parse_recipe("model:\n  preset: llama3.1-8b\n", "p.yaml");
  EXPECT_EQ(l31.model.rope_scaling.type, RopeScalingKind::llama3);
  EXPECT_EQ(l31.model.rope_scaling.factor, 8);
  EXPECT_EQ(l31.model.block_size, 131072);
  EXPECT_FALSE(l31.model.tied_embeddings);
  const Recipe l32 = parse_recipe("model:\n  preset: llama3.2-1b\n", "p.yaml");
  EXPECT_EQ(l32.model.rope_scaling.factor, 32);
  EXPECT_TRUE(l32.model.tied_embeddings);
  EXPECT_EQ(l32.model.n_layer, 16);
  EXPECT_EQ(l32.model.mlp_hidden_width(), 8192);
  EXPECT_TRUE(l32.given.where.count("model.rope_scaling.factor"));
  EXPECT_EQ(parse_recipe("model:\n  preset: llama3-8b\n", "p.yaml").model.rope_scaling.type,
            RopeScalingKind::none)
      << "LLaMA 3.0 has no scaling";
}

TEST(RecipeOverrides, PrecedenceAndValueForms) {
  const std::string yaml =
      "optim:\n  lr: 1e-3\ntrain:\n  steps: 50\n  seq_len: 64\n  micro_batch: 2\n"
      "model:\n  block_size: 64\n";
  Recipe r = parse_recipe(
      yaml, "o.yaml",
      {"optim.lr=3e-4", "train.steps=1_000", "train.steps=2_000", "data.train=data/shards/*.bin",
       "train.name=run #1", "retrofit.train_roles=[attention, adapter]", "train.device=cpu",
       "train.deterministic=off", "attention.focus.top_k=1",
       "data.val=", "data.synthetic.train_tokens=4e5", "train.out_dir='runs/a b'"});
  EXPECT_DOUBLE_EQ(r.optim.lr, 3e-4);
  EXPECT_EQ(r.train.steps, 2000) << "later --set wins";
  EXPECT_EQ(r.train.seq_len, 64) << "file keys not overridden stay";
  EXPECT_EQ(r.data.train, "data/shards/*.bin");
  EXPECT_EQ(r.train.name, "run #1");
  EXPECT_EQ(r.retrofit.train_roles, (std::vector<std::string>{"attention", "adapter"}));
  EXPECT_EQ(r.train.device, DeviceChoice::cpu);
  EXPECT_FALSE(r.train.deterministic);
  EXPECT_EQ(r.data.val, "");
  EXPECT_EQ(r.attention.focus.top_k, 1);
  EXPECT_EQ(r.data.synthetic.train_tokens, 400000);
  EXPECT_EQ(r.train.out_dir, "runs/a b");
  // An override can repair a file value that would not validate on its own.
  EXPECT_NO_THROW(parse_recipe("train:\n  micro_batch: 0\n", "o.yaml", {"train.micro_batch=1"}));
}

TEST(RecipeYaml, RoundTripIsExact) {
  Recipe r;
  r.model.preset = "gpt2-medium";
  r.model.n_layer = 3;
  r.model.n_head = 16;
  r.model.n_embd = 1024;
  r.model.norm_eps = 1.0 / 3.0;  // needs all 17 digits
  r.model.init_std = 0.02 / std::sqrt(2.0 * 3);
  r.model.tied_embeddings = false;
  r.attention.type = "focus";
  r.attention.focus.groups = 4;
  r.attention.focus.tau = 0.05;
  r.attention.focus.sinkhorn_scope = FocusScope::sequence;
  r.attention.focus.gate = FocusGate::multiplicative;
  r.attention.focus.eval_routing = FocusRouting::soft;
  r.data.source = DataSource::shards;
  r.data.train = "data/*train*.bin";
  r.data.val = "data/\"quoted\"\\val #1.bin";
  r.data.tokenizer = "gpt2:/models/gpt2";
  r.data.synthetic.train_tokens = 2147483648LL;  // past int32 (the largest allowed)
  r.optim.lr = 6e-4;
  r.optim.eps = 1e-10;
  r.optim.grad_clip = 0;
  r.schedule.type = ScheduleType::wsd;
  r.schedule.final_lr_frac = 0.1;
  r.train.name = "";
  r.train.seq_len = 512;
  r.train.micro_batch = 3;
  r.train.batch_tokens = 3 * 512 * 7;
  r.train.device = DeviceChoice::cuda;
  r.train.recompute = Recompute::block;
  r.train.seed = -5;
  r.log.color = ColorMode::never;
  r.retrofit.train_roles = {"attention", "adapter"};
  r.model.block_size = 512;
  ASSERT_NO_THROW(r.validate());
  const std::string yaml = recipe_to_yaml(r);
  Recipe back = parse_recipe(yaml, "resolved.yaml");
  EXPECT_EQ(back, r) << yaml;
  EXPECT_EQ(recipe_to_yaml(back), yaml);
  EXPECT_EQ(parse_recipe(recipe_to_yaml(Recipe{}), "d.yaml"), Recipe{});
  // Every key is printed, floats always read as floats, enums by name.
  for (const std::string& path : recipe_key_paths()) {
    std::string line = "\n";
    line.append(2 * std::count(path.begin(), path.end(), '.'), ' ');
    line.append(path.substr(path.rfind('.') + 1)).append(":");
    EXPECT_HAS(yaml, line);
  }
  EXPECT_HAS(yaml, "  grad_clip: 0.0\n");
  EXPECT_HAS(yaml, "  lr: 6.0e-04\n");
  EXPECT_HAS(yaml, "  type: wsd\n");
  EXPECT_HAS(yaml, "  device: cuda\n");
  EXPECT_HAS(yaml, "  focus:\n    groups: 4\n");
  EXPECT_HAS(yaml, "    sinkhorn_scope: sequence\n");
  EXPECT_HAS(yaml, "  train_roles: [\"attention\", \"adapter\"]\n");
}

TEST(RecipeYaml, KeyPathsCoverTheSchema) {
  std::vector<std::string> paths = recipe_key_paths();
  EXPECT_EQ(paths.front(), "model.preset");
  EXPECT_EQ(paths.back(), "retrofit.lora.targets");
  EXPECT_NE(std::find(paths.begin(), paths.end(), "data.synthetic.seed"), paths.end());
  EXPECT_NE(std::find(paths.begin(), paths.end(), "attention.focus.groups"), paths.end());
  EXPECT_NE(std::find(paths.begin(), paths.end(), "attention.sfa.k"), paths.end());
  EXPECT_NE(std::find(paths.begin(), paths.end(), "attention.sfa.distill"), paths.end());
  EXPECT_EQ(std::set<std::string>(paths.begin(), paths.end()).size(), paths.size());
}

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(RecipeFiles, ShippedRecipesLoadAndValidate) {
  const std::filesystem::path dir = std::filesystem::path(test::source_dir()) / "recipes";
  int count = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    Recipe r;
    ASSERT_NO_THROW(r = load_recipe(entry.path().string(), {}));
    EXPECT_EQ(parse_recipe(recipe_to_yaml(r), "resolved.yaml"), r);
    ++count;
  }
  EXPECT_GE(count, 2);

  Recipe gpt2 = load_recipe((dir / "gpt2-124m-dense.yaml").string(), {});
  EXPECT_EQ(gpt2.model.n_layer, 12);
  EXPECT_EQ(gpt2.model.n_embd, 768);
  EXPECT_EQ(gpt2.train.tokens_per_step(), 524288);
  EXPECT_EQ(gpt2.train.grad_accum_steps(1), 8);
  EXPECT_EQ(gpt2.data.source, DataSource::shards);
  Recipe quick = load_recipe((dir / "quickstart.yaml").string(), {});
  EXPECT_EQ(quick.model.n_embd, 128);
  EXPECT_EQ(quick.data.source, DataSource::synthetic);
  EXPECT_EQ(quick.data.synthetic.mix, SyntheticMixConfig{});  // the default stream
  Recipe recall = load_recipe((dir / "quickstart-recall.yaml").string(), {});
  EXPECT_EQ(recall.data.synthetic.mix, (SyntheticMixConfig{0, 1, 1, 0}));
  EXPECT_EQ(recall.data.synthetic.keys, 32);
  EXPECT_EQ(recall.data.synthetic.values, 32);
  EXPECT_GE(recall.data.synthetic.train_tokens,
            recall.train.steps * recall.train.tokens_per_step());
}

// data.synthetic.mix / keys / doc_*_tokens: the defaults are the original stream's, and every bad
// value names its key and the range.
TEST(RecipeSynthetic, MixKeysAndDocumentLengths) {
  const SyntheticDataConfig d;
  EXPECT_EQ(d.mix, (SyntheticMixConfig{45, 20, 20, 15}));
  EXPECT_EQ(d.keys, 0);
  EXPECT_EQ(d.values, 0);
  EXPECT_EQ(d.doc_min_tokens, 128);
  EXPECT_EQ(d.doc_max_tokens, 1024);
  Recipe r = parse_recipe(
      "data:\n  synthetic:\n    mix: {markov: 0, bind: 1, query: 2, copy: 0.5}\n    keys: 32\n",
      "x.yaml", {"data.synthetic.doc_min_tokens=64", "data.synthetic.doc_max_tokens=256"});
  EXPECT_EQ(r.data.synthetic.mix, (SyntheticMixConfig{0, 1, 2, 0.5}));
  EXPECT_EQ(r.data.synthetic.keys, 32);
  EXPECT_EQ(r.data.synthetic.doc_min_tokens, 64);
  EXPECT_EQ(r.data.synthetic.doc_max_tokens, 256);
  EXPECT_EQ(parse_error("", {"data.synthetic.mix.copy=-1"}),
            "--set 'data.synthetic.mix.copy=-1': data.synthetic.mix.copy must be >= 0, got -1");
  EXPECT_HAS(parse_error("data:\n  synthetic:\n    mix: {markov: 0, bind: 0, query: 0, copy: 0}\n"),
             "data.synthetic.mix: at least one of markov, bind, query, copy must be > 0");
  EXPECT_HAS(parse_error("", {"data.synthetic.mix.bind=0"}),
             "data.synthetic.mix.query (20) needs data.synthetic.mix.bind > 0");
  EXPECT_NO_THROW(
      parse_recipe("", "x.yaml", {"data.synthetic.mix.bind=0", "data.synthetic.mix.query=0"}));
  EXPECT_HAS(parse_error("", {"data.synthetic.keys=505"}),
             "data.synthetic.keys must be in [0, 504] (data.synthetic.vocab_size - 8 content ids; "
             "0 = all of them), got 505");
  EXPECT_HAS(parse_error("", {"data.synthetic.keys=-1"}),
             "data.synthetic.keys must be in [0, 504]");
  EXPECT_HAS(parse_error("", {"data.synthetic.keys=500", "data.synthetic.values=5"}),
             "data.synthetic.values must be in [0, 4] (content ids left after "
             "data.synthetic.keys = 500; 0 = all content ids), got 5");
  EXPECT_NO_THROW(parse_recipe("", "x.yaml", {"data.synthetic.values=504"}));
  EXPECT_HAS(parse_error("", {"data.synthetic.doc_min_tokens=0"}),
             "data.synthetic.doc_min_tokens must be >= 1, got 0");
  EXPECT_HAS(parse_error("", {"data.synthetic.doc_max_tokens=100"}),
             "data.synthetic.doc_max_tokens (100) must be >= data.synthetic.doc_min_tokens (128)");
  EXPECT_HAS(parse_error("", {"data.synthetic.mix.recal=1"}), "did you mean 'data.synthetic.mix.");
}

TEST(RecipeFiles, DocsNameEveryKey) {
  const std::string docs =
      read_text(std::filesystem::path(test::source_dir()) / "docs" / "recipes.md");
  ASSERT_FALSE(docs.empty());
  for (const std::string& path : recipe_key_paths()) EXPECT_HAS(docs, "`" + path + "`");
}

}  // namespace
}  // namespace attnlab
