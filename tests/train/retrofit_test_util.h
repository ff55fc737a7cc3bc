// Shared by the retrofit tests (test_retrofit*.cpp): a tiny CPU recipe to train bases on, the
// keys of a Focus retrofit of such a base.
#pragma once
#include <string>
#include <vector>

#include "config/recipe.h"
#include "train/trainer.h"

namespace attnlab::test {

inline const char* kTinyRecipe = R"(
model: {n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 64, block_size: 32, vocab_multiple: 32}
data:
  source: synthetic
  synthetic: {vocab_size: 64, train_tokens: 20000, val_tokens: 4096, seed: 7}
optim: {lr: 3.0e-3, weight_decay: 0.1, grad_clip: 1.0}
schedule: {type: cosine, warmup_steps: 1, final_lr_frac: 0.1}
train: {steps: 4, micro_batch: 4, seq_len: 16, device: cpu, seed: 11}
eval: {every: 0, batches: 2, at_end: false}
checkpoint: {every: 0, keep_last: 2}
log: {every: 100}
)";

inline Recipe tiny(const std::string& out_dir, std::vector<std::string> extra = {}) {
  extra.push_back("train.out_dir=" + out_dir);
  return parse_recipe(kTinyRecipe, "tiny.yaml", extra);
}

inline TrainOptions quiet() {
  TrainOptions o;
  o.quiet = true;
  return o;
}

inline std::vector<std::string> focus_retrofit(const std::string& base) {
  return {"attention.type=focus",           "attention.focus.groups=4", "attention.focus.d_g=8",
          "attention.focus.local_window=4", "attention.focus.top_k=2",  "retrofit.enabled=true",
          "retrofit.checkpoint=" + base};
}

}  // namespace attnlab::test
