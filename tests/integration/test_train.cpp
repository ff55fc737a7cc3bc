// End-to-end training on the embedded synthetic data: golden losses, bit-exact resume, gradient
// accumulation equivalence, and the CLI's handling of bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "config/recipe.h"
#include "interop/model_source.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace fs = std::filesystem;
using namespace attnlab;

namespace {

// A model small enough that a step takes a few milliseconds on one core.
const char* kTinyRecipe = R"(
model: {n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 64, block_size: 32, vocab_multiple: 32}
data:
  source: synthetic
  synthetic: {vocab_size: 64, train_tokens: 20000, val_tokens: 4096, seed: 7}
optim: {lr: 3.0e-3, weight_decay: 0.1, grad_clip: 1.0}
schedule: {type: cosine, warmup_steps: 2, final_lr_frac: 0.1}
train: {steps: 8, micro_batch: 4, seq_len: 16, device: cpu, seed: 11}
eval: {every: 4, batches: 2}
checkpoint: {every: 4, keep_last: 2}
log: {every: 1}
)";

Recipe tiny(const std::string& out_dir, std::vector<std::string> extra = {}) {
  extra.push_back("train.out_dir=" + out_dir);
  return parse_recipe(kTinyRecipe, "tiny.yaml", extra);
}

TrainOptions quiet() {
  TrainOptions o;
  o.quiet = true;
  return o;
}

// Every tensor's bytes of a checkpoint's model and optimizer files.
std::map<std::string, std::string> checkpoint_bytes(const std::string& ckpt) {
  std::map<std::string, std::string> out;
  for (const char* f : {"model.safetensors", "optimizer.safetensors"}) {
    io::SafetensorsFile st((fs::path(ckpt) / f).string());
    for (const auto& n : st.names()) {
      auto raw = st.raw(n);
      out[std::string(f) + ":" + n] =
          std::string(reinterpret_cast<const char*>(raw.data()), raw.size());
    }
  }
  return out;
}

}  // namespace

TEST(TrainIntegration, LossDecreasesAndBeatsNothingSilly) {
  const test::TempDir tmp("it");
  const std::string dir = tmp.file("learn");
  Recipe r = tiny(dir, {"train.steps=150", "train.micro_batch=8", "train.seq_len=32",
                        "optim.lr=1e-2", "eval.every=0"});
  TrainResult res = train(r, quiet());
  EXPECT_EQ(res.steps, 150);
  // ln(64) = 4.16 at initialisation; the model must learn the Markov structure and beat the
  // best context-free (unigram) predictor on validation data by a wide margin (measured: 2.94
  // against 4.01).
  EXPECT_LT(res.final_train_loss, 3.6);
  EXPECT_LT(res.final_val_loss, res.unigram_baseline - 0.6);
  EXPECT_TRUE(std::isfinite(res.final_val_loss));
  EXPECT_TRUE(fs::exists(fs::path(dir) / "recipe.yaml"));
  EXPECT_TRUE(fs::exists(fs::path(dir) / "metrics.jsonl"));
}

// Golden losses of the first steps of the tiny recipe: any change to initialisation, data order,
// an op or the optimizer shows up here. Regenerate (and say why in the commit) only when such a
// change is intended.
TEST(TrainIntegration, GoldenLosses) {
  const test::TempDir tmp("it");
  const std::string dir = tmp.file("golden");
  TrainResult res = train(tiny(dir, {"train.steps=5", "eval.at_end=false"}), quiet());
  const double golden[5] = {4.1651347242295742, 4.1168442778289318, 4.0214969515800476,
                            4.09270054474473, 4.1283904612064362};
  ASSERT_EQ(res.losses.size(), 5u);
  for (int i = 0; i < 5; ++i)
    EXPECT_NEAR(res.losses[size_t(i)], golden[i], 1e-5) << "step " << i + 1;
}

// Dense, Focus with the soft gate and with hard routing in training (its Sinkhorn, group
// parameters and their optimizer state carried by the checkpoint), SFA with its distillation
// term, and the LLaMA block (RMSNorm, SwiGLU, RoPE, an untied head).
TEST(TrainIntegration, ResumeIsBitExact) {
  const test::TempDir tmp("it");
  const std::vector<std::string> focus = {"attention.type=focus", "attention.focus.groups=4",
                                          "attention.focus.local_window=4"};
  std::vector<std::string> focus_hard = focus;
  focus_hard.push_back("attention.focus.route_training=hard");
  const std::vector<std::string> sfa = {"attention.type=sfa", "attention.sfa.distill=0.1"};
  const std::vector<std::string> llama = {"model.family=llama"};
  int variant = 0;
  for (const std::vector<std::string>& keys :
       {std::vector<std::string>{}, focus, focus_hard, sfa, llama}) {
    SCOPED_TRACE("variant " + std::to_string(variant));
    const std::string a = tmp.file("resume_a" + std::to_string(variant)),
                      b = tmp.file("resume_b" + std::to_string(variant));
    ++variant;
    // A: 8 steps straight, checkpointing at 4 and 8. B: resumes from A's step-4 checkpoint (as
    // if A had been killed after it) and runs the remaining 4 steps into a new run directory.
    const TrainResult ra = train(tiny(a, keys), quiet());
    TrainOptions o = quiet();
    o.resume = (fs::path(a) / "checkpoints" / "step_00000004").string();
    TrainResult rb = train(tiny(b, keys), o);
    EXPECT_EQ(rb.steps, 8);
    ASSERT_EQ(rb.losses.size(), 4u);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(rb.losses[i], ra.losses[4 + i]) << "step " << 5 + i;
    auto ba = checkpoint_bytes(resolve_checkpoint_dir(a));
    auto bb = checkpoint_bytes(resolve_checkpoint_dir(b));
    ASSERT_EQ(ba.size(), bb.size());
    for (const auto& [name, bytes] : ba) {
      ASSERT_TRUE(bb.count(name)) << name;
      EXPECT_TRUE(bytes == bb[name]) << "tensor " << name << " differs after resume";
    }
    if (keys == focus) {
      EXPECT_TRUE(ba.count("model.safetensors:h.0.attn.focus.w_g"));
    }
    if (keys == llama) {
      EXPECT_TRUE(ba.count("model.safetensors:lm_head.weight"));
      EXPECT_FALSE(ba.count("model.safetensors:wpe.weight"));
    }
    // The trainer state says what the run computed in: the CPU path is f32 whatever the recipe's
    // train.precision (the tiny recipe leaves it at bf16).
    const TrainerState st = load_trainer_state(resolve_checkpoint_dir(b));
    EXPECT_EQ(tiny(b).train.precision, Precision::bf16);
    EXPECT_EQ(st.device, "cpu");
    EXPECT_EQ(st.precision, "f32");
  }
}

// Ctrl-C (here SIGINT raised at the start of step 3 of 8; checkpoints only at the end): the step
// in flight finishes, a checkpoint of it is written and the run stops; its resume equals the run
// that was never interrupted, bit for bit.
TEST(TrainIntegration, InterruptWritesACheckpointAndTheResumeIsExact) {
  const test::TempDir tmp("it");
  const std::vector<std::string> keys = {"checkpoint.every=0", "checkpoint.at_end=true"};
  const std::string whole = tmp.file("whole"), cut = tmp.file("cut");
  train(tiny(whole, keys), quiet());
  struct Env {
    explicit Env(const char* step) { ::setenv("ATTNLAB_TEST_INTERRUPT", step, 1); }
    ~Env() { ::unsetenv("ATTNLAB_TEST_INTERRUPT"); }  // also when train throws
  };
  const TrainResult stopped = [&] {
    const Env env("3");
    return train(tiny(cut, keys), quiet());
  }();
  EXPECT_EQ(stopped.interrupted_by, SIGINT);
  EXPECT_EQ(stopped.steps, 3);
  EXPECT_TRUE(fs::exists(fs::path(cut) / "checkpoints" / "step_00000003" / "model.safetensors"));
  TrainOptions o = quiet();
  o.resume = cut;
  const TrainResult resumed = train(tiny(cut, keys), o);
  EXPECT_EQ(resumed.interrupted_by, 0);
  EXPECT_EQ(resumed.steps, 8);
  auto ba = checkpoint_bytes(resolve_checkpoint_dir(whole));
  auto bb = checkpoint_bytes(resolve_checkpoint_dir(cut));
  ASSERT_EQ(ba.size(), bb.size());
  for (const auto& [name, bytes] : ba) EXPECT_TRUE(bytes == bb[name]) << name;
  // In the last step: the run finishes as it would have (its final checkpoint, the same bytes)
  // and still reports the signal, so that the CLI ends by it.
  const std::string late = tmp.file("late");
  const TrainResult at_end = [&] {
    const Env env("8");
    return train(tiny(late, keys), quiet());
  }();
  EXPECT_EQ(at_end.interrupted_by, SIGINT);
  EXPECT_EQ(at_end.steps, 8);
  auto bl = checkpoint_bytes(resolve_checkpoint_dir(late));
  ASSERT_EQ(ba.size(), bl.size());
  for (const auto& [name, bytes] : ba) EXPECT_TRUE(bytes == bl[name]) << name;
}

// A resume continues the checkpoint's model: a key that changes its function (an architecture or
// attention key, also one left at a default the checkpoint did not use) is refused, naming the
// key, both values and where the recipe's came from; training keys (steps, lr) may change.
TEST(TrainIntegration, ResumeRefusesAnotherModel) {
  const test::TempDir tmp("it");
  const std::string a = tmp.file("resume_model");
  const std::vector<std::string> focus = {"train.steps=4", "attention.type=focus",
                                          "attention.focus.groups=4", "attention.focus.tau=0.5",
                                          "attention.focus.local_window=4"};
  train(tiny(a, focus), quiet());
  TrainOptions o = quiet();
  o.resume = a;
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> keys = focus;
    keys.insert(keys.end(), extra.begin(), extra.end());
    return keys;
  };
  test::expect_error([&] { train(tiny(tmp.file("r1"), with({"attention.focus.tau=0.2"})), o); },
                     {"the recipe's model differs from the checkpoint's",
                      "attention.focus.tau: 0.2 in the recipe (--set 'attention.focus.tau=0.2'), "
                      "0.5 in the checkpoint"});
  test::expect_error(
      [&] { train(tiny(tmp.file("r2"), with({"attention.focus.gate=multiplicative"})), o); },
      {"attention.focus.gate: multiplicative in the recipe"});
  test::expect_error([&] { train(tiny(tmp.file("r3"), with({"model.norm_eps=0.5"})), o); },
                     {"model.norm_eps: 0.5 in the recipe"});
  // tau left at its default (0.1) where the checkpoint was trained with 0.5
  std::vector<std::string> no_tau = focus;
  std::erase(no_tau, std::string("attention.focus.tau=0.5"));
  test::expect_error([&] { train(tiny(tmp.file("r4"), no_tau), o); },
                     {"attention.focus.tau: 0.1 in the recipe (default), 0.5 in the checkpoint"});
  // training keys may change: more steps, another learning rate, hard routing in training; the
  // resume names what changed
  const Recipe more =
      tiny(tmp.file("r5"),
           with({"train.steps=6", "optim.lr=1e-3", "attention.focus.route_training=hard"}));
  const std::string ckpt = resolve_checkpoint_dir(a);
  const std::string changes = check_resume_recipe(more, ckpt);
  for (const char* c :
       {"train.steps 4 -> 6", "attention.focus.route_training soft -> hard", "optim.lr "})
    EXPECT_NE(changes.find(c), std::string::npos) << c << " not in: " << changes;
  EXPECT_EQ(check_resume_recipe(tiny(a, focus), ckpt), "");
  // Values that resolve to the checkpoint's (n_kv_head 0 = n_head; sfa.k 0 = its default for the
  // head dim, 2 here) are not listed as changed.
  EXPECT_EQ(check_resume_recipe(tiny(a, with({"model.n_kv_head=2"})), ckpt), "");
  const std::string sfa = tmp.file("sfa");
  const std::vector<std::string> sfa_keys = {"train.steps=4", "attention.type=sfa",
                                             "attention.sfa.distill=0.5"};
  train(tiny(sfa, sfa_keys), quiet());
  std::vector<std::string> k2 = sfa_keys;
  k2.push_back("attention.sfa.k=2");
  EXPECT_EQ(check_resume_recipe(tiny(sfa, k2), resolve_checkpoint_dir(sfa)), "");
  // SFA's distillation term: in each step's record beside the cross-entropy `loss`.
  std::ifstream m((fs::path(sfa) / "metrics.jsonl").string());
  int steps = 0;
  for (std::string line; std::getline(m, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("loss")) continue;
    ++steps;
    EXPECT_GT(j.value("aux_loss", 0.0), 0.0) << line;
  }
  EXPECT_EQ(steps, 4);
  const TrainResult r = train(more, o);
  EXPECT_EQ(r.steps, 6);
  // Without its recipe.yaml the checkpoint's model is still known (model.safetensors' metadata);
  // with neither the resume is refused, not left unchecked.
  fs::remove(fs::path(ckpt) / "recipe.yaml");
  test::expect_error([&] { train(tiny(tmp.file("r6"), with({"attention.focus.tau=0.2"})), o); },
                     {"attention.focus.tau: 0.2 in the recipe"});
  const fs::path bare = tmp.file("bare");
  fs::create_directories(bare);
  const std::string header = "{\"__metadata__\":{\"format\":\"pt\"}}";
  std::ofstream f(bare / "model.safetensors", std::ios::binary);
  const uint64_t n = header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << header;
  f.close();
  test::expect_error([&] { check_resume_recipe(tiny(a, focus), bare.string()); },
                     {"has no recipe.yaml and its model.safetensors no recipe metadata"});
}

// --resume writes into train.out_dir (recipe.yaml, the metrics cut back, new checkpoints pruned
// by keep_last): another run there is refused, untouched; the checkpoint's own run and a new
// directory are fine. A resume with nothing left to train (train.steps <= the checkpoint's step)
// is refused too.
TEST(TrainIntegration, ResumeRefusesAnotherRunsDirectory) {
  const test::TempDir tmp("it");
  const std::string a = tmp.file("run_a"), b = tmp.file("run_b");
  train(tiny(a), quiet());
  train(tiny(b), quiet());
  const std::string b_latest = resolve_checkpoint_dir(b);
  const std::string b_metrics = io::read_file((fs::path(b) / "metrics.jsonl").string());
  TrainOptions o = quiet();
  o.resume = (fs::path(a) / "checkpoints" / "step_00000004").string();
  test::expect_error([&] { train(tiny(b), o); },
                     {"holds another run (its own checkpoints)", "--set train.out_dir="});
  EXPECT_EQ(resolve_checkpoint_dir(b), b_latest);
  EXPECT_EQ(io::read_file((fs::path(b) / "metrics.jsonl").string()), b_metrics);
  EXPECT_EQ(train(tiny(a), o).steps, 8);  // its own run
  o.resume = a;
  test::expect_error([&] { train(tiny(tmp.file("r"), {"train.steps=8"}), o); },
                     {"the checkpoint is at step 8 and train.steps is 8: nothing to train"});
  // A checkpoint whose files come from two steps (an optimizer file copied in by hand) is refused.
  const fs::path mixed = tmp.file("mixed");
  fs::copy(fs::path(a) / "checkpoints" / "step_00000004", mixed, fs::copy_options::recursive);
  fs::copy_file(fs::path(a) / "checkpoints" / "step_00000008" / "optimizer.safetensors",
                mixed / "optimizer.safetensors", fs::copy_options::overwrite_existing);
  o.resume = mixed.string();
  test::expect_error([&] { train(tiny(tmp.file("m")), o); },
                     {"optimizer.safetensors is of step 8 but trainer_state.json of step 4"});
  // A recipe.yaml edited by hand (another attention window) would build another model from the
  // same weights (eval, generate, the resume's comparison): refused, naming the keys' group.
  const fs::path edited = tmp.file("edited");
  fs::copy(fs::path(a) / "checkpoints" / "step_00000004", edited, fs::copy_options::recursive);
  Recipe r = *read_checkpoint_recipe(edited.string());
  r.attention.window = 8;
  io::write_file_atomic((edited / "recipe.yaml").string(), recipe_to_yaml(r));
  test::expect_error([&] { read_checkpoint_recipe(edited.string()); },
                     {"recipe.yaml and the recipe saved with its weights", "the attention keys"});
  // eval, generate, convert and init_from read a checkpoint through inspect_model_source
  // (they took the edited recipe.yaml as it was).
  test::expect_error([&] { inspect_model_source(edited.string()); },
                     {"recipe.yaml and the recipe saved with its weights", "the attention keys"});
  // Without recipe.yaml, the recipe saved with the weights.
  fs::remove(edited / "recipe.yaml");
  EXPECT_EQ(inspect_model_source(edited.string()).config.attention.window, 0);
  r.attention.window = 0;
  r.optim.lr = 1e-4;  // a training key: not the model's function
  io::write_file_atomic((edited / "recipe.yaml").string(), recipe_to_yaml(r));
  EXPECT_EQ(read_checkpoint_recipe(edited.string())->optim.lr, 1e-4);
}

TEST(TrainIntegration, RefusesToOverwriteARun) {
  const test::TempDir tmp("it");
  const std::string dir = tmp.file("overwrite");
  train(tiny(dir, {"train.steps=1", "schedule.warmup_steps=0"}), quiet());
  test::expect_error(
      [&] {
        train(tiny(dir, {"train.steps=1", "schedule.warmup_steps=0"}), quiet());
      },
      "--resume");
}

// 4 micro-batches of 1 sequence == 1 micro-batch of 4 sequences (same data, same steps): the
// losses, the gradient norms (clipping active: a gradient scaled per micro-batch instead of per
// step would move them by the factor 4, where AdamW's first steps alone barely notice a scale)
// and the weights.
TEST(TrainIntegration, GradientAccumulationMatchesOneBigBatch) {
  const test::TempDir tmp("it");
  const std::string a = tmp.file("accum_a"), b = tmp.file("accum_b");
  std::vector<std::string> common = {"train.steps=4", "schedule.warmup_steps=0",
                                     "data.shuffle=false", "eval.at_end=false",
                                     "optim.grad_clip=0.05"};
  auto ra = common, rb = common;
  ra.push_back("train.micro_batch=4");
  rb.push_back("train.micro_batch=1");
  rb.push_back("train.batch_tokens=64");
  const TrainResult res_a = train(tiny(a, ra), quiet());
  const TrainResult res_b = train(tiny(b, rb), quiet());
  ASSERT_EQ(res_a.losses.size(), 4u);
  ASSERT_EQ(res_b.losses.size(), 4u);
  for (size_t i = 0; i < 4; ++i)
    EXPECT_NEAR(res_b.losses[i], res_a.losses[i], 1e-5 * res_a.losses[i]) << "step " << i + 1;
  auto grad_norms = [](const std::string& dir) {
    std::vector<double> out;
    std::ifstream in(fs::path(dir) / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("grad_norm")) out.push_back(j["grad_norm"].get<double>());
    }
    return out;
  };
  const std::vector<double> ga = grad_norms(a), gb = grad_norms(b);
  ASSERT_EQ(ga.size(), 4u);
  ASSERT_EQ(gb.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_GT(ga[i], 0.05) << "clipping must be active at step " << i + 1;
    EXPECT_NEAR(gb[i], ga[i], 1e-4 * ga[i]) << "step " << i + 1;
  }
  io::SafetensorsFile fa((fs::path(resolve_checkpoint_dir(a)) / "model.safetensors").string());
  io::SafetensorsFile fb((fs::path(resolve_checkpoint_dir(b)) / "model.safetensors").string());
  double max_diff = 0.0;
  for (const auto& n : fa.names()) {
    Tensor ta = fa.view(n), tb = fb.view(n);
    const float* pa = static_cast<const float*>(ta.data);
    const float* pb = static_cast<const float*>(tb.data);
    for (int64_t i = 0; i < ta.numel(); ++i)
      max_diff = std::max(max_diff, double(std::fabs(pa[i] - pb[i])));
  }
  // Each AdamW step moves each weight by about lr = 3e-3; accumulation changes only the
  // summation order of the gradients, so the weights agree to a tiny fraction of that.
  std::printf("[accum] max |weight diff| after 4 steps %.3g\n", max_diff);
  EXPECT_LT(max_diff, 4 * 3e-3 * 1e-3);
}

// eval.at_start scores the initial model before step 1 (a fine-tune's starting point) and changes
// nothing else: the training losses are those of a run without it.
TEST(TrainIntegration, EvalAtStartScoresTheInitialModel) {
  const test::TempDir tmp("it");
  const TrainResult a = train(tiny(tmp.file("a"), {"train.steps=3", "eval.every=0"}), quiet());
  const TrainResult b =
      train(tiny(tmp.file("b"), {"train.steps=3", "eval.every=0", "eval.at_start=true"}), quiet());
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.final_val_loss, b.final_val_loss);
  std::ifstream in(fs::path(tmp.file("b")) / "metrics.jsonl");
  std::vector<int64_t> val_steps;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("val_loss")) val_steps.push_back(j["step"].get<int64_t>());
  }
  EXPECT_EQ(val_steps, (std::vector<int64_t>{0, 3}));
}

// A resume of an earlier checkpoint of the same run (step 4 of 8) replaces the continuation
// after it: once it records its first step (the metrics cut back to step 4), `latest` names
// step 4, so a crash before its first save (here an allocation failure at step 6, by the test
// hook ATTNLAB_TEST_OOM) leaves --resume RUN where the metrics end; a resume failing before any
// record leaves both as they were. A resume of another run's checkpoint into a directory with
// metrics but no checkpoints replaces those metrics (they mixed two runs in one file).
TEST(TrainIntegration, AResumedEarlierCheckpointTakesOverTheRunAtItsFirstRecord) {
  const test::TempDir tmp("it");
  const std::string a = tmp.file("fork");
  train(tiny(a), quiet());
  const std::string step4 = (fs::path(a) / "checkpoints" / "step_00000004").string();
  const std::string step8 = (fs::path(a) / "checkpoints" / "step_00000008").string();
  auto steps_of = [](const std::string& run) {
    std::vector<int64_t> steps;
    std::ifstream f((fs::path(run) / "metrics.jsonl").string());
    for (std::string line; std::getline(f, line);)
      steps.push_back(nlohmann::json::parse(line)["step"].get<int64_t>());
    return steps;
  };
  struct OomAt {
    explicit OomAt(const char* v) { ::setenv("ATTNLAB_TEST_OOM", v, 1); }
    ~OomAt() { ::unsetenv("ATTNLAB_TEST_OOM"); }
  };
  TrainOptions o = quiet();
  o.resume = step4;
  {
    const OomAt oom("0:5");  // fails before its first record
    test::expect_error([&] { train(tiny(a), o); }, {"out of host memory"});
  }
  EXPECT_EQ(resolve_checkpoint_dir(a), step8);
  EXPECT_EQ(steps_of(a).back(), 8);
  {
    const OomAt oom("0:6");  // fails after recording step 5
    test::expect_error([&] { train(tiny(a), o); }, {"out of host memory"});
  }
  EXPECT_EQ(resolve_checkpoint_dir(a), step4);
  EXPECT_EQ(steps_of(a).back(), 5);
  // Another run's metrics (no checkpoints: checkpoint.every 0, no at_end) in the directory a
  // checkpoint of `a` resumes into: replaced, not continued.
  const std::string b = tmp.file("metrics_only");
  train(tiny(b, {"checkpoint.every=0", "checkpoint.at_end=false", "train.steps=3"}), quiet());
  ASSERT_EQ(steps_of(b).front(), 1);
  {
    const OomAt oom("0:5");  // a resume failing before its first record leaves them as they were
    test::expect_error([&] { train(tiny(b), o); }, {"out of host memory"});
  }
  EXPECT_EQ(steps_of(b).front(), 1);
  train(tiny(b), o);
  const std::vector<int64_t> resumed = steps_of(b);
  ASSERT_FALSE(resumed.empty());
  EXPECT_EQ(resumed.front(), 5);
  EXPECT_EQ(resumed.back(), 8);
}
