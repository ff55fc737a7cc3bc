// Shared by the evaluation tests: a tiny trained run (CPU) with a tokenizer, and CPU options.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "config/recipe.h"
#include "eval/eval_model.h"
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

}  // namespace attnlab::test
