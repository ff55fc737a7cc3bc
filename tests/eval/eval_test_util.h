// Shared by the evaluation tests: a tiny trained run (CPU) with a tokenizer, CPU options, the
// brute-force log-likelihoods the harness is checked against, and the fixture of test_eval*.cpp.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "config/recipe.h"
#include "eval/eval_model.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace attnlab::test {

// Trains a tiny model for two steps (vocab `vocab`, context `block`) and adds a tokenizer.json.
inline std::string make_run(const std::string& tag, int vocab, const std::string& tokenizer,
                            int block = 32, const std::vector<std::string>& extra = {}) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("attnlab_eval_" + tag + "_" + std::to_string(::getpid())))
                              .string();
  std::filesystem::remove_all(dir);
  const std::string recipe = strformat(R"(
model: {n_layer: 2, n_head: 2, n_embd: 16, vocab_size: %d, block_size: %d, vocab_multiple: 32}
data:
  source: synthetic
  synthetic: {vocab_size: 64, train_tokens: 4096, val_tokens: 1000, seed: 7}
optim: {lr: 3.0e-2}
train: {steps: 2, micro_batch: 2, seq_len: 16, device: cpu, seed: 5}
eval: {every: 0, at_end: false}
log: {every: 1}
)",
                                       vocab, block);
  std::vector<std::string> keys = extra;
  keys.push_back("train.out_dir=" + dir);
  Recipe r = parse_recipe(recipe, "eval_test.yaml", keys);
  TrainOptions o;
  o.quiet = true;
  train(r, o);
  std::ofstream(std::filesystem::path(resolve_checkpoint_dir(dir)) / "tokenizer.json")
      << make_tokenizer(tokenizer)->to_json();
  return dir;
}

inline EvalDeviceOptions cpu(int batch = 3) {
  EvalDeviceOptions d;
  d.device = "cpu";
  d.batch = batch;
  return d;
}

// The logits [T, vocab_size] of one unbatched CPU forward of `in` (T = in.size()), row by row.
inline std::vector<std::vector<float>> forward_logits(const ModelSource& src,
                                                      std::vector<int32_t> in) {
  auto ctx = ExecContext::make_cpu();
  GPT model(src.config);
  ParameterStore store;
  model.declare_params(store);
  store.finalize(Device::cpu, DType::f32, {});
  load_model_source(src, store);
  const int T = int(in.size());
  model.allocate(*ctx, 1, T, DType::f32);
  model.forward(*ctx, store, cpu_tensor(in, Shape{1, T}), Tensor(), AttentionMode::eval);
  const float* logits = static_cast<const float*>(model.logits().data);
  std::vector<std::vector<float>> rows;
  for (int t = 0; t < T; ++t) {
    const float* row = logits + size_t(t) * src.config.padded_vocab;
    rows.emplace_back(row, row + src.config.vocab_size);
  }
  return rows;
}

// log p(ids[i+1] | ids[0..i]) for every i, from one unbatched forward and a log-softmax in double.
inline std::vector<double> brute_force_logprobs(const ModelSource& src,
                                                const std::vector<int32_t>& ids) {
  const auto rows = forward_logits(src, std::vector<int32_t>(ids.begin(), ids.end() - 1));
  std::vector<double> out;
  for (size_t t = 0; t < rows.size(); ++t) {
    double mx = -INFINITY, sum = 0.0;
    for (float x : rows[t]) mx = std::max(mx, double(x));
    for (float x : rows[t]) sum += std::exp(double(x) - mx);
    out.push_back(double(rows[t][size_t(ids[t + 1])]) - mx - std::log(sum));
  }
  return out;
}

// The most likely next token after prefix, from one unbatched forward.
inline int brute_force_argmax(const ModelSource& src, const std::vector<int32_t>& prefix) {
  const std::vector<float> last = forward_logits(src, prefix).back();
  return int(std::max_element(last.begin(), last.end()) - last.begin());
}

inline std::vector<int32_t> bytes_of(const std::string& s) {
  std::vector<int32_t> ids;
  ByteTokenizer().encode(s, ids);
  return ids;
}

inline void write(const std::filesystem::path& p, const std::string& text) {
  std::ofstream(p) << text;
}

// The tests of test_eval*.cpp on one tiny trained byte-level run (vocab 257, context 32).
class EvalTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { run_ = make_run("byte", 257, "byte"); }
  static void TearDownTestSuite() { std::filesystem::remove_all(run_); }
  inline static std::string run_;
  TempDir tmp_{"eval"};
};

}  // namespace attnlab::test
