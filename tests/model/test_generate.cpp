// Incremental decoding (GPT::prefill / decode_step over a KV cache) against the full forward on
// the CPU, and attnlab::generate on a checkpoint trained in the test: bad input, sliding context,
// determinism.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "config/recipe.h"
#include "core/context.h"
#include "io/safetensors.h"
#include "model/gpt.h"
#include "test_util.h"
#include "tokenizer/bpe.h"
#include "tokenizer/tokenizer.h"
#include "train/checkpoint.h"
#include "train/generate.h"
#include "train/trainer.h"

namespace fs = std::filesystem;
using namespace attnlab;

namespace {

GPTConfig decode_config() {
  GPTConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.vocab_size = 23;
  c.padded_vocab = 32;
  c.block_size = 12;
  return c;
}

struct DecodeFixture {
  std::unique_ptr<ExecContext> ctx = ExecContext::make_cpu();
  GPTConfig c;
  GPT model;
  ParameterStore store;

  explicit DecodeFixture(const GPTConfig& cfg = decode_config()) : c(cfg), model(cfg) {
    model.declare_params(store);
    store.finalize(Device::cpu, DType::f32, {});
    model.init_params(store, 7);
    // Larger weights than GPT-2's init, so that attention is far from uniform.
    std::mt19937 rng(9);
    std::normal_distribution<float> nd(0.f, 0.3f);
    float* w = store.all_params().ptr<float>();
    for (int64_t i = 0; i < store.param_buffer_numel(); ++i) w[i] += nd(rng);
  }
  // Logits [B, T, Vp] of forward() on tokens [B, T].
  std::vector<float> full_logits(std::vector<int32_t>& ids, int B, int T) {
    model.allocate(*ctx, B, T, DType::f32);
    model.forward(*ctx, store, test::cpu_tensor(ids, Shape{B, T}), Tensor(),
                  AttentionMode::generate);
    Tensor l = model.logits();
    return std::vector<float>(l.ptr<float>(), l.ptr<float>() + l.numel());
  }
};

void expect_decode_matches_forward(DecodeFixture& f) {
  const int B = 2, T = 12, Vp = f.c.padded_vocab;
  std::vector<int32_t> ids = test::random_ints(size_t(B) * T, 5, f.c.vocab_size);
  const std::vector<float> full = f.full_logits(ids, B, T);
  for (int P : {1, 4, T}) {
    KVCache cache = f.model.make_kv_cache(*f.ctx, B, T, DType::f32);
    // Tokens [B, n] starting at column t0 of every sequence.
    auto cols = [&](int t0, int n) {
      static std::vector<int32_t> buf;
      buf.clear();
      for (int b = 0; b < B; ++b)
        for (int t = t0; t < t0 + n; ++t) buf.push_back(ids[size_t(b) * T + t]);
      return test::cpu_tensor(buf, Shape{B, n});
    };
    Tensor logits = f.model.prefill(*f.ctx, f.store, cols(0, P), cache);
    for (int t = P - 1; t < T; ++t) {
      if (t > P - 1) logits = f.model.decode_step(*f.ctx, f.store, cols(t, 1), cache);
      ASSERT_EQ(logits.shape, (Shape{B, Vp}));
      for (int b = 0; b < B; ++b) {
        const float* ref = full.data() + (size_t(b) * T + t) * Vp;
        EXPECT_LT(test::max_rel_error(logits.ptr<float>() + size_t(b) * Vp, ref, size_t(Vp)), 1e-5)
            << "P=" << P << " t=" << t << " b=" << b;
      }
    }
    EXPECT_EQ(cache.length(), T);
    // Full: one more token is refused with a message that says what to do.
    std::string msg =
        test::thrown_message([&] { f.model.decode_step(*f.ctx, f.store, cols(0, 1), cache); });
    EXPECT_NE(msg.find("KV cache is full (12 tokens)"), std::string::npos) << msg;
  }
}

}  // namespace

TEST(GPTDecode, PrefillAndStepsMatchForward) {
  DecodeFixture f;
  expect_decode_matches_forward(f);
}

// The same block runs every configuration: grouped-query attention, a sliding window shorter than
// the sequence, no biases and an untied head decode exactly like the full forward.
TEST(GPTDecode, GqaWindowNoBiasUntiedMatchForward) {
  GPTConfig c = decode_config();
  c.n_head = 4;
  c.n_kv_head = 2;
  c.attention.window = 5;
  c.bias = false;
  c.tied_embeddings = false;
  DecodeFixture f(c);
  EXPECT_EQ(f.store.param("h.0.attn.c_attn.weight").shape, (Shape{16 + 2 * 8, 16}));
  expect_decode_matches_forward(f);
}

// The LLaMA block: RoPE's angles at the cached positions (pos > 0 in decode_step), RMSNorm,
// SwiGLU, GQA: prefill and steps give the full forward's logits.
TEST(GPTDecode, LlamaBlockMatchesForward) {
  GPTConfig c = decode_config();
  c.n_head = 4;
  c.n_kv_head = 2;
  c.norm = NormType::rmsnorm;
  c.mlp = MlpType::swiglu;
  c.position = PositionType::rope;
  c.rope_theta = 500.f;
  c.bias = false;
  c.tied_embeddings = false;
  DecodeFixture f(c);
  EXPECT_FALSE(f.store.contains("wpe.weight"));
  expect_decode_matches_forward(f);
}

// RoPE scaling reaches the model's rotation in the forward and in decoding: with LLaMA 3.1's
// scaling over a short original context (most frequencies scaled or interpolated within 12
// tokens) the logits move, and decode still equals the forward.
TEST(GPTDecode, LlamaBlockWithRopeScalingMatchesForward) {
  GPTConfig c = decode_config();
  c.n_head = 4;
  c.norm = NormType::rmsnorm;
  c.mlp = MlpType::swiglu;
  c.position = PositionType::rope;
  c.rope_theta = 500.f;
  c.bias = false;
  DecodeFixture plain(c);
  c.rope_scaling.type = RopeScalingType::llama3;
  c.rope_scaling.factor = 8.f;
  c.rope_scaling.original_context = 8;
  DecodeFixture scaled(c);
  expect_decode_matches_forward(scaled);
  std::vector<int32_t> ids = test::random_ints(12, 5, c.vocab_size);
  const std::vector<float> a = plain.full_logits(ids, 1, 12), b = scaled.full_logits(ids, 1, 12);
  EXPECT_GT(test::max_rel_error(b, a), 1e-3) << "the same weights, so only the scaling differs";
}

// The decoding activations are sized by the chunks run, not by the cache's length: none at first,
// a prefill's B x T rows, no more for a decode step or a shorter prefill, more for a longer one.
TEST(GPTDecode, ScratchGrowsToTheLargestChunk) {
  DecodeFixture f;
  std::vector<int32_t> ids = test::random_ints(12, 8, f.c.vocab_size);
  auto first = [&](int n) {
    return test::cpu_tensor(ids, Shape{12}).slice0(0, n).view(Shape{1, n});
  };
  auto row = [](const Tensor& t) {
    return std::vector<float>(t.ptr<float>(), t.ptr<float>() + t.numel());
  };
  KVCache whole = f.model.make_kv_cache(*f.ctx, 1, 12, DType::f32);
  f.model.prefill(*f.ctx, f.store, first(12), whole);
  const size_t rows12 = whole.scratch_bytes();
  KVCache cache = f.model.make_kv_cache(*f.ctx, 1, 12, DType::f32);
  EXPECT_EQ(cache.scratch_bytes(), 0u);
  f.model.prefill(*f.ctx, f.store, first(3), cache);
  const size_t rows3 = cache.scratch_bytes();
  EXPECT_GT(rows3, 0u);
  EXPECT_LT(rows3, rows12);
  f.model.decode_step(*f.ctx, f.store, first(1), cache);
  EXPECT_EQ(cache.scratch_bytes(), rows3);
  const std::vector<float> grown = row(f.model.prefill(*f.ctx, f.store, first(8), cache));
  const size_t rows8 = cache.scratch_bytes();
  KVCache fresh = f.model.make_kv_cache(*f.ctx, 1, 12, DType::f32);
  EXPECT_EQ(grown, row(f.model.prefill(*f.ctx, f.store, first(8), fresh)));
  EXPECT_GT(rows8, rows3);
  EXPECT_LT(rows8, rows12);
  f.model.prefill(*f.ctx, f.store, first(2), cache);
  EXPECT_EQ(cache.scratch_bytes(), rows8);
}

TEST(GPTDecode, RejectsMismatchedCacheAndInput) {
  DecodeFixture f;
  std::vector<int32_t> ids = test::random_ints(10, 6, f.c.vocab_size);
  KVCache small = f.model.make_kv_cache(*f.ctx, 1, 4, DType::f32);
  std::string msg = test::thrown_message([&] {
    f.model.prefill(*f.ctx, f.store, test::cpu_tensor(ids, Shape{1, 10}), small);
  });
  EXPECT_NE(msg.find("exceed the KV cache length 4"), std::string::npos) << msg;
  msg = test::thrown_message([&] {
    f.model.prefill(*f.ctx, f.store, test::cpu_tensor(ids, Shape{2, 5}), small);
  });
  EXPECT_NE(msg.find("tokens have batch 2, the KV cache 1"), std::string::npos) << msg;
  msg = test::thrown_message([&] { f.model.make_kv_cache(*f.ctx, 1, 13, DType::f32); });
  EXPECT_NE(msg.find("model.block_size = 12"), std::string::npos) << msg;
  msg = test::thrown_message([&] {
    f.model.decode_step(*f.ctx, f.store, test::cpu_tensor(ids, Shape{1, 10}), small);
  });
  EXPECT_NE(msg.find("i32[B, 1]"), std::string::npos) << msg;
}

// ---- attnlab::generate on a checkpoint trained here --------------------------------------------

namespace {

// Trains a tiny byte-vocabulary model for two steps once; the checkpoint is shared by the tests.
// Its tokenizer.json (byte) is what generate uses unless a test passes another spec.
class GenerateTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    run_dir_ = (fs::temp_directory_path() / ("attnlab_gen_" + std::to_string(::getpid()))).string();
    fs::remove_all(run_dir_);
    const char* recipe = R"(
model: {n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 257, block_size: 24, vocab_multiple: 32}
data:
  source: synthetic
  tokenizer: byte
  synthetic: {vocab_size: 64, train_tokens: 4096, val_tokens: 1024, seed: 7}
train: {steps: 2, micro_batch: 2, seq_len: 16, device: cpu, seed: 11}
eval: {every: 0}
checkpoint: {every: 2, keep_last: 1}
log: {every: 1}
)";
    Recipe r = parse_recipe(recipe, "gen.yaml", {"train.out_dir=" + run_dir_});
    TrainOptions o;
    o.quiet = true;
    train(r, o);
    // Synthetic-data runs carry no tokenizer; a run on prepared shards writes this file.
    std::ofstream(fs::path(resolve_checkpoint_dir(run_dir_)) / "tokenizer.json")
        << make_tokenizer("byte")->to_json();
  }
  static void TearDownTestSuite() { fs::remove_all(run_dir_); }

  GenerateOptions options(const std::string& prompt) const {
    GenerateOptions o;
    o.checkpoint = run_dir_;
    o.prompt = prompt;
    o.max_new_tokens = 10;
    o.device = "cpu";
    o.stop = false;
    return o;
  }
  static std::string run_dir_;
};
std::string GenerateTest::run_dir_;

}  // namespace

TEST_F(GenerateTest, DeterministicForASeed) {
  GenerateOptions o = options("hello");
  std::vector<std::string> streamed;
  GenerateResult a = generate(o, [&](const std::string& s) { streamed.push_back(s); });
  GenerateResult b = generate(o, nullptr);
  EXPECT_EQ(a.prompt_tokens, 5);
  EXPECT_EQ(a.new_tokens, 10);
  EXPECT_EQ(a.text, b.text);
  std::string joined;
  for (auto& s : streamed) joined += s;
  EXPECT_EQ(joined, a.text);  // streaming delivers exactly the text, piece by piece
  EXPECT_EQ(streamed.size(), 10u);
  o.seed = 99;
  EXPECT_NE(generate(o, nullptr).text, a.text);  // 10 bytes from 257 nearly uniform ids
}

// With stop a sampled <|endoftext|> ends the text and is not counted as generated.
TEST_F(GenerateTest, StopsAtEndOfTextWithoutCountingIt) {
  GenerateOptions o = options("a");
  o.stop = true;
  o.max_new_tokens = 4000;  // 257 nearly uniform ids: end-of-text comes long before
  GenerateResult r = generate(o, nullptr);
  ASSERT_EQ(r.stop_token, 256);  // <|endoftext|>
  EXPECT_LT(r.new_tokens, o.max_new_tokens);
  EXPECT_EQ(size_t(r.new_tokens), r.text.size());  // the byte tokenizer: a byte per token
  o.stop = false;                                  // the same samples go on past it
  o.max_new_tokens = r.new_tokens + 5;
  GenerateResult full = generate(o, nullptr);
  EXPECT_EQ(full.stop_token, -1);
  EXPECT_EQ(full.new_tokens, r.new_tokens + 5);
  EXPECT_EQ(full.text.substr(0, r.text.size()), r.text);
}

TEST_F(GenerateTest, EmptyPromptStartsANewDocument) {
  GenerateResult r = generate(options(""), nullptr);
  EXPECT_EQ(r.prompt_tokens, 1);  // <|endoftext|>
  EXPECT_EQ(r.new_tokens, 10);
}

TEST_F(GenerateTest, InvalidUtf8PromptIsTakenByteForByte) {
  const std::string bytes = "a\xff\xfe\xc3 \x80z";  // stray continuation, truncated sequence
  GenerateResult r = generate(options(bytes), nullptr);
  EXPECT_EQ(r.prompt_tokens, int(bytes.size()));
  EXPECT_EQ(r.new_tokens, 10);
}

TEST_F(GenerateTest, PromptLongerThanTheContextIsAnError) {
  std::string msg = test::thrown_message([&] { generate(options(std::string(25, 'x')), nullptr); });
  EXPECT_NE(
      msg.find("the prompt is 25 tokens, longer than the model's context (model.block_size = 24)"),
      std::string::npos)
      << msg;
  EXPECT_NO_THROW(generate(options(std::string(24, 'x')), nullptr));  // exactly full: slides first
}

TEST_F(GenerateTest, ContextSlidesWhenTheCacheIsFull) {
  GenerateOptions o = options("abc");
  o.max_new_tokens = 50;  // 3 + 50 > 24: the cache fills at 24, then every 12 tokens
  GenerateResult r = generate(o, nullptr);
  EXPECT_EQ(r.new_tokens, 50);
  EXPECT_EQ(r.context_slides, 3);  // full after 22, 35 and 48 generated tokens
}

// The KV cache holds the prompt and the new tokens, not the whole context, and the samples are
// those of a longer run's (a larger cache, then a full one that slides) up to where they end.
TEST_F(GenerateTest, CacheHoldsThePromptAndTheNewTokens) {
  GenerateOptions o = options("abc");
  o.max_new_tokens = 5;
  const GenerateResult a = generate(o, nullptr);
  EXPECT_EQ(a.cache_positions, 7);  // the last new token is sampled, never run
  EXPECT_EQ(a.context_slides, 0);
  // K and V of 2 layers, 7 positions of 32 fp32 values each (the CPU cache)
  EXPECT_EQ(a.cache_bytes, size_t(2 * 2 * 7 * 32) * sizeof(float));
  o.max_new_tokens = 20;
  const GenerateResult b = generate(o, nullptr);
  EXPECT_EQ(b.cache_positions, 22);
  EXPECT_EQ(b.context_slides, 0);
  o.max_new_tokens = 22;  // 3 + 21 positions run: block_size, no slide
  const GenerateResult full = generate(o, nullptr);
  EXPECT_EQ(full.cache_positions, 24);
  EXPECT_EQ(full.context_slides, 0);
  EXPECT_EQ(full.new_tokens, 22);
  o.max_new_tokens = 40;
  const GenerateResult c = generate(o, nullptr);
  EXPECT_EQ(c.cache_positions, 24);  // block_size: the context slides after 22 tokens
  EXPECT_EQ(c.cache_bytes, size_t(2 * 2 * 24 * 32) * sizeof(float));
  EXPECT_EQ(c.context_slides, 2);
  ASSERT_EQ(a.text.size(), 5u);
  EXPECT_EQ(b.text.substr(0, 5), a.text);
  EXPECT_EQ(c.text.substr(0, 20), b.text);
  EXPECT_EQ(c.text.substr(0, 22), full.text);
}

TEST_F(GenerateTest, TokenizerLargerThanTheModelIsAnError) {
  GenerateOptions o = options("hi");
  // A GPT-2 style vocabulary written next to the test: 300 ids > the model's 257.
  fs::path dir = fs::path(run_dir_) / "big_vocab";
  fs::create_directories(dir);
  nlohmann::json enc = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) enc[gpt2_bytes_to_symbols(std::string(1, char(b)))] = b;
  enc["ab"] = 256;
  for (int i = 257; i < 299; ++i) enc["extra" + std::to_string(i)] = i;
  enc["<|endoftext|>"] = 299;
  std::ofstream(dir / "encoder.json") << enc.dump();
  std::ofstream(dir / "vocab.bpe") << "#version: 0.2\na b\n";
  o.tokenizer = "gpt2:" + dir.string();
  std::string msg = test::thrown_message([&] { generate(o, nullptr); });
  EXPECT_NE(msg.find("has 300 ids but the model's vocabulary has 257"), std::string::npos) << msg;
}

TEST_F(GenerateTest, MissingTokenizerJsonIsAnError) {
  fs::path copy = fs::path(run_dir_ + "_copy");
  fs::remove_all(copy);
  fs::copy(resolve_checkpoint_dir(run_dir_), copy, fs::copy_options::recursive);
  ASSERT_TRUE(fs::remove(copy / "tokenizer.json"));
  GenerateOptions o = options("hi");
  o.checkpoint = copy.string();
  std::string msg = test::thrown_message([&] { generate(o, nullptr); });
  EXPECT_NE(msg.find("carries no tokenizer; pass a tokenizer spec"), std::string::npos) << msg;
  o.tokenizer = "byte";  // the way out the message names
  EXPECT_EQ(generate(o, nullptr).new_tokens, 10);
  o.tokenizer = (copy / "missing.json").string();
  EXPECT_NE(test::thrown_message([&] { generate(o, nullptr); }), "");
  fs::remove_all(copy);
}

// generate runs the model as trained, as eval does: a checkpoint that lacks a variant's tensors
// (here the Focus projections and centroids, role attention) is refused, not run with them at
// their zero initialisation.
TEST(GenerateFocus, RefusesACheckpointMissingItsFocusTensors) {
  const test::TempDir tmp("genf");
  const char* recipe = R"(
model: {n_layer: 1, n_head: 2, n_embd: 32, vocab_size: 257, block_size: 24, vocab_multiple: 32}
attention: {type: focus, focus: {groups: 4, d_g: 8, local_window: 4}}
data: {source: synthetic, synthetic: {vocab_size: 64, train_tokens: 4096, val_tokens: 1024}}
train: {steps: 2, micro_batch: 2, seq_len: 16, device: cpu}
eval: {every: 0}
checkpoint: {at_end: true}
)";
  TrainOptions to;
  to.quiet = true;
  train(parse_recipe(recipe, "genf.yaml", {"train.out_dir=" + tmp.file("run")}), to);
  GenerateOptions o;
  o.checkpoint = tmp.file("run");
  o.prompt = "ab";
  o.max_new_tokens = 3;
  o.device = "cpu";
  o.tokenizer = "byte";
  EXPECT_EQ(generate(o, nullptr).new_tokens, 3);

  const fs::path weights = fs::path(resolve_checkpoint_dir(o.checkpoint)) / "model.safetensors";
  {
    io::SafetensorsFile f(weights.string());
    io::SafetensorsWriter w;
    int dropped = 0;
    for (const std::string& n : f.names()) {
      if (n.find(".attn.focus.") != std::string::npos || n == "centroids") {
        ++dropped;
        continue;
      }
      w.add(n, f.view(n));
    }
    ASSERT_GT(dropped, 0);
    w.set_metadata(f.metadata());
    w.write(weights.string() + ".new");
  }
  fs::rename(weights.string() + ".new", weights);
  const std::string msg = test::thrown_message([&] { generate(o, nullptr); });
  EXPECT_NE(msg.find("(role attention)"), std::string::npos) << msg;
}
