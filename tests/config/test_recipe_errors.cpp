// Recipe errors, each class with its message: empty values, unknown keys (with the suggestion),
// wrong types, out-of-range and cross-field values, enums and unsupported features, bad --set.
#include <gtest/gtest.h>

#include <string>

#include "config/recipe.h"
#include "config/recipe_test_util.h"
#include "test_util.h"

namespace attnlab {
namespace {

using test::parse_error;

// An empty value is named at its key's line (yaml-cpp marks it at the next token).
TEST(RecipeErrors, EmptyValueIsNamedAtItsKeysLine) {
  EXPECT_EQ(parse_error("attention:\n  focus:\n    groups:\n    d_g: 4\n"),
            "x.yaml:3: attention.focus.groups: expected an integer, got an empty value");
}

TEST(RecipeErrors, UnknownKeysSuggestTheRightOne) {
  EXPECT_EQ(parse_error("model:\n  n_layer: 2\noptim:\n  lr: 1e-3\n  learnig_rate: 3e-4\n"),
            "x.yaml:5: unknown key 'optim.learnig_rate'; did you mean 'optim.lr'?");
  EXPECT_EQ(parse_error("train:\n  stesp: 10\n"),
            "x.yaml:2: unknown key 'train.stesp'; did you mean 'train.steps'?");
  EXPECT_EQ(parse_error("train:\n  lr: 1e-3\n"),
            "x.yaml:2: unknown key 'train.lr'; did you mean 'optim.lr'?");
  EXPECT_EQ(parse_error("optimizer:\n  lr: 1e-3\n"),
            "x.yaml:1: unknown section 'optimizer'; did you mean 'optim'?");
  EXPECT_EQ(parse_error("data:\n  synthetic:\n    vocab_size: 9\n    tokns: 5\n"),
            "x.yaml:4: unknown key 'data.synthetic.tokns'; did you mean "
            "'data.synthetic.train_tokens'?");
  std::string m = parse_error("log:\n  qqqqqqqq: 1\n");
  EXPECT_HAS(m,
             "x.yaml:2: unknown key 'log.qqqqqqqq' (valid keys in log: every, metrics_file, "
             "color)");
  EXPECT_HAS(parse_error("train:\n  steps: 1\n  steps: 2\n"),
             "x.yaml:3: duplicate key 'train.steps' (first set at x.yaml:2)");
  EXPECT_EQ(parse_error("", {"optim.learnig_rate=1"}),
            "--set 'optim.learnig_rate=1': unknown key 'optim.learnig_rate'; did you mean "
            "'optim.lr'?");
}

TEST(RecipeErrors, WrongTypes) {
  EXPECT_EQ(parse_error("optim:\n  lr: abc\n"), "x.yaml:2: optim.lr: expected a float, got 'abc'");
  EXPECT_EQ(parse_error("train:\n\n  steps: 1.5\n"),
            "x.yaml:3: train.steps: expected an integer, got '1.5'");
  EXPECT_EQ(parse_error("train:\n  micro_batch: 99999999999\n"),
            "x.yaml:2: train.micro_batch: 99999999999 does not fit a 32-bit integer");
  EXPECT_EQ(parse_error("model:\n  bias: maybe\n"),
            "x.yaml:2: model.bias: expected true or false, got 'maybe'");
  EXPECT_EQ(parse_error("optim:\n  lr: [1, 2]\n"),
            "x.yaml:2: optim.lr: expected a float, got a list");
  EXPECT_EQ(parse_error("optim:\n  lr: .inf\n"),
            "x.yaml:2: optim.lr: expected a float, got '.inf'");
  EXPECT_EQ(parse_error("train: 5\n"), "x.yaml:1: train: expected a map of keys, got '5'");
  EXPECT_EQ(parse_error("- a\n- b\n"),
            "x.yaml:1: a recipe must be a map of sections (model:, train:, ...), got a list");
  EXPECT_EQ(parse_error("retrofit:\n  train_roles: attention\n"),
            "x.yaml:2: retrofit.train_roles: expected a list of strings such as [a, b], got "
            "'attention'");
  EXPECT_EQ(parse_error("", {"train.steps=abc"}),
            "--set 'train.steps=abc': train.steps: expected an integer, got 'abc'");
  {
    std::string m = parse_error("train:\n  steps: [1\n");
    EXPECT_EQ(m.rfind("x.yaml:", 0), 0u) << m;
    EXPECT_HAS(m, ": YAML syntax error");
  }
}

TEST(RecipeErrors, OutOfRangeAndCrossField) {
  EXPECT_EQ(parse_error("train:\n  micro_batch: 0\n"),
            "x.yaml:2: train.micro_batch must be >= 1, got 0");
  // wsd: the decay may not reach into the warm-up (it failed only when training started).
  EXPECT_EQ(parse_error("train: {steps: 20}\nschedule: {type: wsd, warmup_steps: 8}\n",
                        {"schedule.decay_frac=0.7"}),
            "--set 'schedule.decay_frac=0.7': schedule.type wsd: the decay (schedule.decay_frac "
            "0.7 of train.steps 20 = 14 steps) overlaps the 8 warmup steps "
            "(schedule.warmup_steps); lower one of them");
  EXPECT_EQ(parse_error("train: {steps: 20}\nschedule: {type: wsd, warmup_steps: 8}\n",
                        {"schedule.decay_frac=0.6"}),
            "");
  EXPECT_EQ(parse_error("", {"train.micro_batch=0"}),
            "--set 'train.micro_batch=0': train.micro_batch must be >= 1, got 0");
  EXPECT_EQ(parse_error("optim:\n  beta2: 1.0\n"),
            "x.yaml:2: optim.beta2 must be in [0, 1), got 1");
  EXPECT_EQ(parse_error("schedule:\n  decay_frac: 0\n"),
            "x.yaml:2: schedule.decay_frac must be in (0, 1], got 0");
  EXPECT_EQ(parse_error("optim:\n  lr: -1\n"), "x.yaml:2: optim.lr must be > 0, got -1");
  EXPECT_EQ(parse_error("train:\n  threads: 100000\n"),
            "x.yaml:2: train.threads must be <= 1024 (0 = all cores), got 100000");
  EXPECT_EQ(parse_error("train:\n  threads: 1024\n"), "");
  EXPECT_EQ(parse_error("train:\n  steps: 3000000000\n"),
            "x.yaml:2: train.steps must be <= 2147483647, got 3000000000");
  // Sizes past any real run are refused before they are built (they ran out of host memory).
  EXPECT_EQ(parse_error("", {"model.n_layer=100000000"}),
            "--set 'model.n_layer=100000000': model.n_layer must be <= 10000, got 100000000");
  EXPECT_EQ(parse_error("", {"data.synthetic.train_tokens=10000000000"}),
            "--set 'data.synthetic.train_tokens=10000000000': data.synthetic.train_tokens must be "
            "<= 2147483648, got 10000000000");
  EXPECT_EQ(parse_error("", {"data.synthetic.vocab_size=10"}),
            "--set 'data.synthetic.vocab_size=10': data.synthetic.vocab_size must be >= 64, got "
            "10");
  EXPECT_EQ(parse_error("checkpoint:\n  keep_last: 0\n"),
            "x.yaml:2: checkpoint.keep_last must be >= 1, got 0");
  EXPECT_EQ(parse_error("train:\n  seq_len: 2048\n"),
            "x.yaml:2: train.seq_len (2048) must be <= model.block_size (1024)");
  EXPECT_EQ(parse_error("train:\n  micro_batch: 4\n  seq_len: 1024\n  batch_tokens: 10000\n"),
            "x.yaml:4: train.batch_tokens (10000) must be a multiple of train.micro_batch * "
            "train.seq_len = 4 * 1024 = 4096");
  EXPECT_EQ(parse_error("model:\n  n_head: 5\n"),
            "x.yaml: model.n_embd (768) must be divisible by model.n_head (5)");
  EXPECT_EQ(parse_error("model:\n  n_kv_head: 5\n"),
            "x.yaml:2: model.n_kv_head (5) must divide model.n_head (12); 0 means n_head");
  EXPECT_EQ(parse_error("schedule:\n  warmup_steps: 5000\n"),
            "x.yaml:2: schedule.warmup_steps (5000) must be <= train.steps (1000)");
  EXPECT_EQ(parse_error("data:\n  source: shards\n  val: v*.bin\n"),
            "x.yaml: data.train must name the training shards (a glob) when data.source is "
            "'shards'");
  EXPECT_HAS(parse_error("data:\n  source: shards\n  train: t*.bin\n"),
             "x.yaml: data.val is empty but evaluation is on");
  EXPECT_NO_THROW(parse_recipe("data:\n  source: shards\n  train: t*.bin\n", "x.yaml",
                               {"eval.every=0", "eval.at_end=false"}));
  // Synthetic validation shorter than a window: refused with evaluation off too (training
  // builds the stream for its unigram baseline and failed there).
  EXPECT_HAS(parse_error("data:\n  synthetic: {val_tokens: 5}\neval: {every: 0, at_end: false}\n"),
             "data.synthetic.val_tokens (5) must exceed train.seq_len (1024)");
  EXPECT_EQ(parse_error("model:\n  vocab_size: 300\n"),
            "x.yaml: data.synthetic.vocab_size (512) must be <= model.vocab_size (300)");
  // validate() alone (no file) names only the key.
  Recipe r;
  r.train.micro_batch = 0;
  try {
    r.validate();
    ADD_FAILURE() << "validate() accepted micro_batch 0";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key_path(), "train.micro_batch");
    EXPECT_STREQ(e.what(), "train.micro_batch must be >= 1, got 0");
  }
}

TEST(RecipeErrors, EnumsAndUnsupportedFeatures) {
  EXPECT_EQ(parse_error("model:\n  family: falcon\n"),
            "x.yaml:2: model.family 'falcon' is not a valid value (valid: gpt2, llama, mistral)");
  EXPECT_EQ(parse_error("model:\n  norm: batchnorm\n"),
            "x.yaml:2: model.norm 'batchnorm' is not a valid value (valid: layernorm, rmsnorm)");
  EXPECT_HAS(parse_error("model:\n  mlp: relu\n"),
             "x.yaml:2: model.mlp 'relu' is not a valid value (valid: gelu, swiglu)");
  EXPECT_EQ(parse_error("model:\n  position: alibi\n"),
            "x.yaml:2: model.position 'alibi' is not a valid value (valid: learned, rope)");
  EXPECT_HAS(parse_error("model:\n  position: rope\n  n_embd: 96\n  n_head: 32\n"),
             "x.yaml:2: model.position: rope rotates pairs of dims, so the head dim (n_embd 96 / "
             "n_head 32 = 3) must be even");
  EXPECT_HAS(parse_error("model:\n  rope_theta: 0\n"), "model.rope_theta must be > 0, got 0");
  EXPECT_HAS(parse_error("model:\n  mlp_hidden: -1\n"), "model.mlp_hidden must be >= 0, got -1");
  EXPECT_EQ(parse_error("distributed:\n  backend: gloo\n"),
            "x.yaml:2: distributed.backend 'gloo' is not a valid value (valid: auto, none, mpi, "
            "nccl)");
  EXPECT_EQ(parse_error("distributed:\n  zero: 2\n"),
            "x.yaml:2: distributed.zero must be 0 (replicated optimizer state) or 1 (ZeRO-1: "
            "optimizer state sharded by rank), got 2");
  EXPECT_EQ(parse_error("distributed:\n  timeout_s: 0\n"),
            "x.yaml:2: distributed.timeout_s must be in (0, 1e+07], got 0");
  EXPECT_EQ(parse_error("distributed:\n  bucket_mb: -1\n"),
            "x.yaml:2: distributed.bucket_mb must be in (0, 1e+06], got -1");
  EXPECT_EQ(parse_error("schedule:\n  type: cosin\n"),
            "x.yaml:2: schedule.type 'cosin' is not a valid value (valid: cosine, linear, "
            "constant, wsd); did you mean 'cosine'?");
  EXPECT_EQ(parse_error("train:\n  precision: int4\n"),
            "x.yaml:2: train.precision 'int4' is not a valid value (valid: bf16, fp32)");
  EXPECT_EQ(parse_error("retrofit:\n  enabled: true\n"),
            "x.yaml: retrofit.enabled needs retrofit.checkpoint: the base model (an attnlab run or "
            "checkpoint directory, a Hugging Face GPT-2 directory or an llm.c .bin file)");
  EXPECT_EQ(parse_error("retrofit:\n  enabled: true\n  checkpoint: base\n  lora:\n    rank: 4\n"
                        "    targets: [mlp]\n"),
            "x.yaml:6: retrofit.lora.targets: 'mlp' is not implemented yet; the valid target is "
            "c_attn (the q/k/v projection)");
  EXPECT_EQ(parse_error("retrofit:\n  lora:\n    rank: 4\n"),
            "x.yaml:3: retrofit.lora applies to a retrofit: set retrofit.enabled: true and "
            "retrofit.checkpoint (the frozen base the adapter is trained on)");
  EXPECT_EQ(parse_error("retrofit:\n  enabled: true\n  checkpoint: a\n  lora:\n    rank: 4\n"),
            "x.yaml: retrofit.train_roles must include adapter with retrofit.lora.rank > 0 (the "
            "LoRA tensors are role adapter; without it they stay at B = 0 and the LoRA is the "
            "base model): set retrofit.train_roles: [adapter]");
  EXPECT_EQ(parse_error("retrofit:\n  enabled: true\n  checkpoint: a\n  train_roles: [adapter]\n"
                        "  lora:\n    rank: 4\n    alpha: -2\n"),
            "x.yaml:7: retrofit.lora.alpha must be > 0, got -2");
  EXPECT_EQ(parse_error("retrofit:\n  enabled: true\n  checkpoint: a\ntrain:\n  init_from: b\n"),
            "x.yaml:5: train.init_from ('b') and retrofit.checkpoint ('a') both name the model to "
            "start from; a retrofit starts from retrofit.checkpoint: remove train.init_from");
  EXPECT_EQ(parse_error("retrofit:\n  train_roles: [attention, centroids]\n"),
            "x.yaml:2: retrofit.train_roles: unknown parameter role 'centroids' (valid: base, "
            "attention, adapter)");
  EXPECT_NO_THROW(parse_recipe("attention:\n  focus: {}\n  sfa:\n", "x.yaml"));
}

TEST(RecipeErrors, BadSetSyntax) {
  for (const char* bad :
       {"train.steps", "=5", ".steps=5", "train..steps=5", "train.steps.=5", "train steps=5"}) {
    EXPECT_EQ(parse_error("", {bad}), std::string("--set '") + bad +
                                          "': expected key=value with a dotted key, e.g. --set "
                                          "optim.lr=3e-4")
        << bad;
  }
  EXPECT_HAS(parse_error("", {"retrofit.train_roles=[a"}),
             "--set 'retrofit.train_roles=[a': invalid YAML value");
  EXPECT_EQ(parse_error("", {"train=5"}),
            "--set 'train=5': train: expected a map of keys, got '5'");
  EXPECT_EQ(parse_error("", {"nope.x=5"}),
            "--set 'nope.x=5': unknown section 'nope' (valid "
            "sections: model, attention, data, optim, schedule, "
            "train, eval, checkpoint, log, distributed, retrofit)");
  test::expect_error([] { load_recipe("/nonexistent/recipe.yaml", {}); },
                     "cannot read recipe '/nonexistent/recipe.yaml': No such file");
}

}  // namespace
}  // namespace attnlab
