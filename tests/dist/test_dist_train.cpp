// Data-parallel training on the CPU path under `mpirun -np 2` (skipped in a plain run):
// 2 ranks == 1 rank with the same global batch (gradient accumulation), for dense, Focus and SFA,
// with ZeRO 0 and ZeRO 1; resume of a 2-rank run on 2 and on 1 rank; a signal to one rank; the
// start-up check that the ranks resolved the same run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/recipe.h"
#include "dist/consistency.h"
#include "dist/dist_test_util.h"
#include "io/safetensors.h"
#include "test_util.h"
#include "train/trainer.h"

namespace fs = std::filesystem;

namespace attnlab {
namespace {

// Tiny and fp32; 4 x 16 tokens per micro-batch and rank, 128 tokens per step in all.
const char* kRecipe = R"(
model: {n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 64, block_size: 32, vocab_multiple: 32}
data:
  source: synthetic
  synthetic: {vocab_size: 64, train_tokens: 20000, val_tokens: 4096, seed: 7}
optim: {lr: 3.0e-3, weight_decay: 0.1, grad_clip: 0.5}
schedule: {type: cosine, warmup_steps: 2, final_lr_frac: 0.1}
train: {steps: 6, micro_batch: 4, seq_len: 16, batch_tokens: 128, device: cpu, seed: 11}
eval: {every: 3, batches: 2}
checkpoint: {every: 3, keep_last: 4}
log: {every: 1}
distributed: {timeout_s: 120, bucket_mb: 0.004}
)";
// bucket_mb 0.004: buckets of 1024 floats, so the tiny model's ~30K gradients make ~30 buckets
// and the bucketed reduce-scatter (ZeRO 1) and the per-bucket all-gathers run many times.

std::vector<std::string> attention_keys(const std::string& type) {
  if (type == "focus")
    return {"attention.type=focus", "attention.focus.groups=4", "attention.focus.d_g=8",
            "attention.focus.local_window=4"};
  if (type == "sfa") return {"attention.type=sfa", "attention.sfa.k=4"};
  // The LLaMA block (RMSNorm, SwiGLU, RoPE, no biases, an untied head: its own lm_head bucket).
  if (type == "llama") return {"attention.type=dense", "model.family=llama"};
  return {"attention.type=dense"};
}

TrainResult run(const std::string& out_dir, std::vector<std::string> keys, bool single,
                const std::string& resume = "") {
  keys.push_back("train.out_dir=" + out_dir);
  TrainOptions o;
  o.quiet = true;
  o.single_process = single;
  o.resume = resume;
  return train(parse_recipe(kRecipe, "dist.yaml", keys), o);
}

// Every tensor of a checkpoint's model and optimizer files as floats.
std::map<std::string, std::vector<float>> checkpoint_tensors(const std::string& ckpt) {
  std::map<std::string, std::vector<float>> out;
  for (const char* f : {"model.safetensors", "optimizer.safetensors"}) {
    io::SafetensorsFile st((fs::path(ckpt) / f).string());
    for (const auto& n : st.names()) {
      auto raw = st.raw(n);
      std::vector<float> v(raw.size() / sizeof(float));
      std::memcpy(v.data(), raw.data(), raw.size());
      out[std::string(f) + ":" + n] = std::move(v);
    }
  }
  return out;
}

std::string step_dir(const std::string& run, int step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08d", step);
  return (fs::path(run) / "checkpoints" / name).string();
}

// Losses within rel_tol of each other and every checkpoint tensor within rel_tol (relative to
// the tensor's largest entry); 0 = bit for bit.
// Tolerances. fp32 runs that differ only in the order of the gradient sums (rank 0's half plus
// rank 1's, against one accumulation) agree to rounding: measured over 6 steps, losses within
// 1e-8 and gradient norms within 4e-7 (relative), tensors within 1.1e-4 of their largest entry
// (Focus; 3e-5 for dense and SFA). A loss scaled by the rank's own count doubles the gradient
// norm (AdamW itself hardly sees the scale), unreduced gradients move the tensors by O(1).
constexpr double kTol = 1e-5;        // losses and gradient norms
constexpr double kTensorTol = 5e-4;  // every checkpoint tensor

// The gradient norm of every step in a run's metrics file (a wrong loss scale shows here: AdamW
// itself is nearly blind to the scale of the gradients).
std::vector<double> grad_norms(const std::string& run) {
  std::vector<double> out;
  std::ifstream f((fs::path(run) / "metrics.jsonl").string());
  for (std::string line; std::getline(f, line);)
    if (line.find("\"grad_norm\"") != std::string::npos)
      out.push_back(nlohmann::json::parse(line)["grad_norm"].get<double>());
  return out;
}

// Runs a and b (their directories and final checkpoints at step 6) agree: losses and gradient
// norms within rel_tol, every checkpoint tensor within kTensorTol of its largest entry;
// rel_tol 0 = bit for bit.
void expect_same_run(const TrainResult& a, const std::string& a_run, const TrainResult& b,
                     const std::string& b_run, double rel_tol, const std::string& what) {
  const std::string a_ckpt = step_dir(a_run, 6), b_ckpt = step_dir(b_run, 6);
  ASSERT_EQ(a.losses.size(), b.losses.size()) << what;
  // The last steps of each metrics file (a resumed run's file starts at its resume step).
  std::vector<double> na = grad_norms(a_run), nb = grad_norms(b_run);
  ASSERT_GE(na.size(), a.losses.size()) << what;
  ASSERT_GE(nb.size(), b.losses.size()) << what;
  na.erase(na.begin(), na.end() - ptrdiff_t(a.losses.size()));
  nb.erase(nb.begin(), nb.end() - ptrdiff_t(b.losses.size()));
  double worst_norm = 0.0;
  for (size_t i = 0; i < na.size(); ++i) {
    EXPECT_NEAR(na[i], nb[i], rel_tol * nb[i]) << what << ": gradient norm of step " << i + 1;
    worst_norm = std::max(worst_norm, std::fabs(na[i] - nb[i]) / nb[i]);
  }
  double worst_loss = 0.0, worst_tensor = 0.0;
  for (size_t i = 0; i < a.losses.size(); ++i) {
    EXPECT_NEAR(a.losses[i], b.losses[i], rel_tol * std::fabs(b.losses[i]) + 1e-12)
        << what << ": loss of step " << i + 1;
    worst_loss = std::max(worst_loss, std::fabs(a.losses[i] - b.losses[i]) / b.losses[i]);
  }
  const auto ta = checkpoint_tensors(a_ckpt), tb = checkpoint_tensors(b_ckpt);
  ASSERT_EQ(ta.size(), tb.size()) << what;
  for (const auto& [name, va] : ta) {
    const auto it = tb.find(name);
    ASSERT_NE(it, tb.end()) << what << ": " << name;
    // The flat optimizer state of a store with more shards is longer by its zero padding.
    const std::vector<float>& vb = it->second;
    const size_t n = std::min(va.size(), vb.size());
    for (const auto* v : {&va, &vb})
      for (size_t i = n; i < v->size(); ++i)
        ASSERT_EQ((*v)[i], 0.f) << what << ": " << name << " padding at " << i;
    const double err = test::max_rel_error(va.data(), vb.data(), n);
    worst_tensor = std::max(worst_tensor, err);
    if (rel_tol == 0)
      EXPECT_TRUE(std::equal(va.begin(), va.begin() + ptrdiff_t(n), vb.begin()))
          << what << ": " << name << " differs (rel " << err << ")";
    else
      EXPECT_LE(err, kTensorTol) << what << ": " << name;
  }
  std::printf("[dist-err] %s: losses %.2e, gradient norms %.2e, tensors %.2e (relative)\n",
              what.c_str(), worst_loss, worst_norm, worst_tensor);
}

class DistTrain : public ::testing::TestWithParam<std::string> {};

TEST_P(DistTrain, TwoRanksEqualOneRankWithAccumulationForZero0And1) {
  MPI_OR_SKIP(comm);
  test::SharedTempDir tmp(*comm, "dist_" + GetParam());
  const auto keys = attention_keys(GetParam());
  TrainResult ref;
  if (comm->rank() == 0) ref = run(tmp.file("ref"), keys, /*single=*/true);  // accumulates 2
  comm->barrier();
  std::vector<TrainResult> two(2);
  for (int zero : {0, 1}) {
    auto k = keys;
    k.push_back("distributed.zero=" + std::to_string(zero));
    const std::string dir = tmp.file("zero" + std::to_string(zero));
    two[size_t(zero)] = run(dir, k, /*single=*/false);
    EXPECT_EQ(two[size_t(zero)].steps, 6);
    if (comm->rank() == 0) {
      expect_same_run(two[size_t(zero)], dir, ref, tmp.file("ref"), kTol,
                      GetParam() + " ZeRO " + std::to_string(zero) + " vs 1 rank");
      EXPECT_NEAR(two[size_t(zero)].final_val_loss, ref.final_val_loss, kTol * ref.final_val_loss);
      EXPECT_TRUE(fs::exists(fs::path(dir) / "metrics.jsonl"));
      // Every step reports its gradient communication (wall clock on the mpi backend).
      std::ifstream f((fs::path(dir) / "metrics.jsonl").string());
      int timed = 0;
      for (std::string line; std::getline(f, line);) {
        const auto j = nlohmann::json::parse(line);
        if (!j.contains("comm_ms")) continue;
        ++timed;
        EXPECT_GT(j["comm_bucket_ms"].size(), 10u);
        EXPECT_GE(j["exposed_comm_ms"].get<double>(), 0.0);
        EXPECT_DOUBLE_EQ(j["exposed_comm_ms"].get<double>(), j["comm_ms"].get<double>());
      }
      EXPECT_EQ(timed, 6);
      if (GetParam() == "focus") {  // the telemetry counts both ranks' validation tokens
        auto last_eval = [](const std::string& d) {
          nlohmann::json last;
          std::ifstream m((fs::path(d) / "metrics.jsonl").string());
          for (std::string line; std::getline(m, line);) {
            const auto j = nlohmann::json::parse(line);
            if (j.contains("val_loss")) last = j;
          }
          return last;
        };
        const nlohmann::json a = last_eval(dir), b = last_eval(tmp.file("ref"));
        ASSERT_TRUE(a.contains("focus.h0.tokens") && b.contains("focus.h0.tokens")) << a << b;
        EXPECT_EQ(a["focus.h0.tokens"], b["focus.h0.tokens"]);
        EXPECT_NEAR(a["focus.h0.entropy"].get<double>(), b["focus.h0.entropy"].get<double>(), 1e-3);
      }
    }
  }
  if (comm->rank() == 0)
    expect_same_run(two[1], tmp.file("zero1"), two[0], tmp.file("zero0"), kTol,
                    GetParam() + " ZeRO 1 vs ZeRO 0");
}

INSTANTIATE_TEST_SUITE_P(Attention, DistTrain, ::testing::Values("dense", "focus", "sfa", "llama"));

// A 2-rank ZeRO-1 run resumed from its step-3 checkpoint: on 2 ranks bit for bit (the same
// reduction order), on 2 ranks with another bucket size (another shard map: the checkpoint is in
// flat order) and on 1 rank (the state re-sharded) within the tolerance.
TEST(DistTrainResume, TwoRankRunResumesOnTwoAndOnOneRank) {
  MPI_OR_SKIP(comm);
  test::SharedTempDir tmp(*comm, "dist_resume");
  const std::vector<std::string> k{"distributed.zero=1"};
  const TrainResult full = run(tmp.file("a"), k, false);
  const TrainResult two = run(tmp.file("b"), k, false, step_dir(tmp.file("a"), 3));
  ASSERT_EQ(two.losses.size(), 3u);
  if (comm->rank() == 0) {
    TrainResult tail = full;
    tail.losses.erase(tail.losses.begin(), tail.losses.begin() + 3);
    expect_same_run(two, tmp.file("b"), tail, tmp.file("a"), 0, "resume on 2 ranks");
  }
  auto other = k;
  other.push_back("distributed.bucket_mb=0.01");
  const TrainResult rebucketed = run(tmp.file("f"), other, false, step_dir(tmp.file("a"), 3));
  if (comm->rank() == 0) {
    TrainResult tail = full;
    tail.losses.erase(tail.losses.begin(), tail.losses.begin() + 3);
    expect_same_run(rebucketed, tmp.file("f"), tail, tmp.file("a"), kTol,
                    "resume on 2 ranks, other buckets");
    const TrainResult one = run(tmp.file("c"), k, true, step_dir(tmp.file("a"), 3));
    expect_same_run(one, tmp.file("c"), tail, tmp.file("a"), kTol, "resume on 1 rank");
  }
  comm->barrier();
  // And a 1-rank checkpoint resumed on 2 ranks.
  if (comm->rank() == 0) run(tmp.file("d"), k, true);
  comm->barrier();
  const TrainResult from_one = run(tmp.file("e"), k, false, step_dir(tmp.file("d"), 3));
  if (comm->rank() == 0) {
    TrainResult tail = full;
    tail.losses.erase(tail.losses.begin(), tail.losses.begin() + 3);
    expect_same_run(from_one, tmp.file("e"), tail, tmp.file("a"), kTol,
                    "1-rank checkpoint resumed on 2 ranks");
  }
}

// Ctrl-C or SIGTERM reaching one rank only (rank 1, at the start of step 2, by the test hook
// ATTNLAB_TEST_INTERRUPT): every rank stops after step 2 with its checkpoint and reports the
// signal, and the resume on 2 ranks ends where the uninterrupted run does, bit for bit. (Before
// 2026-12-07 several ranks kept the default action: the job died without a checkpoint.)
TEST(DistTrainInterrupt, OneRanksSignalStopsEveryRankAfterTheSameStep) {
  MPI_OR_SKIP(comm);
  test::SharedTempDir tmp(*comm, "dist_interrupt");
  const TrainResult full = run(tmp.file("a"), {}, false);
  struct Env {  // rank 1 only; unset also when train throws
    Env(bool set, const char* when) {
      if (set) ::setenv("ATTNLAB_TEST_INTERRUPT", when, 1);
    }
    ~Env() { ::unsetenv("ATTNLAB_TEST_INTERRUPT"); }
  };
  const TrainResult cut = [&] {
    const Env env(comm->rank() == 1, "2");
    return run(tmp.file("b"), {}, false);
  }();
  EXPECT_EQ(cut.interrupted_by, SIGINT);
  EXPECT_EQ(cut.steps, 2);
  EXPECT_EQ(cut.losses.size(), 2u);
  EXPECT_TRUE(fs::exists(fs::path(step_dir(tmp.file("b"), 2)) / "model.safetensors"));
  const TrainResult resumed = run(tmp.file("b"), {}, false, tmp.file("b"));
  EXPECT_EQ(resumed.interrupted_by, 0);
  if (comm->rank() == 0) {
    TrainResult tail = full;
    tail.losses.erase(tail.losses.begin(), tail.losses.begin() + 2);
    expect_same_run(resumed, tmp.file("b"), tail, tmp.file("a"), 0, "interrupted and resumed");
  }
  // In the last step after its all-reduce (during its evaluation and checkpoint): the run
  // finishes as it would have, and every rank still reports the signal (it ended with status 0).
  const TrainResult late = [&] {
    const Env env(comm->rank() == 1, "6+");
    return run(tmp.file("c"), {}, false);
  }();
  EXPECT_EQ(late.interrupted_by, SIGINT);
  EXPECT_EQ(late.steps, 6);
  if (comm->rank() == 0) expect_same_run(late, tmp.file("c"), full, tmp.file("a"), 0, "late");
}

// A validation set of fewer windows than ranks: a rank that scores none adds nothing (its NaN
// mean times 0 tokens made the global loss NaN), and the loss is the one-rank loss.
TEST(DistTrainValidation, FewerWindowsThanRanksStaysFinite) {
  MPI_OR_SKIP(comm);
  test::SharedTempDir tmp(*comm, "dist_val");
  const std::vector<std::string> k{"data.synthetic.val_tokens=20", "eval.every=0",
                                   "eval.at_end=true", "checkpoint.every=0"};
  const TrainResult two = run(tmp.file("a"), k, false);
  EXPECT_TRUE(std::isfinite(two.final_val_loss)) << two.final_val_loss;
  if (comm->rank() == 0) {
    const TrainResult one = run(tmp.file("b"), k, true);
    EXPECT_NEAR(two.final_val_loss, one.final_val_loss, 1e-5);
  }
  comm->barrier();
}

// An odd eval.batches: two ranks score the same eval.batches x micro_batch windows as one (they
// scored a batch more: the count was rounded up to a multiple of the ranks).
TEST(DistTrainValidation, OddBatchCountScoresTheSameWindowsAsOneRank) {
  MPI_OR_SKIP(comm);
  test::SharedTempDir tmp(*comm, "dist_val_odd");
  const std::vector<std::string> k{"eval.batches=3", "eval.every=0", "eval.at_end=true",
                                   "checkpoint.every=0"};
  const TrainResult two = run(tmp.file("a"), k, false);
  if (comm->rank() == 0) {
    const TrainResult one = run(tmp.file("b"), k, true);
    EXPECT_NEAR(two.final_val_loss, one.final_val_loss, 1e-6 * one.final_val_loss);
  }
  comm->barrier();
}

// Ranks resuming different checkpoints (one node's stale copy of out_dir) are refused on every
// rank, naming the weights, instead of training on with other weights per rank.
TEST(DistTrainResume, RanksResumingDifferentCheckpointsAreRefused) {
  MPI_OR_SKIP(comm);
  test::SharedTempDir tmp(*comm, "dist_resume_mismatch");
  run(tmp.file("a"), {}, false);
  run(tmp.file("b"), {"train.seed=12"}, false);  // other weights, the same recipe otherwise
  const std::string mine = step_dir(tmp.file(comm->rank() == 0 ? "a" : "b"), 3);
  const std::string msg = test::thrown_message([&] {
    TrainOptions o;
    o.quiet = true;
    o.resume = mine;
    std::vector<std::string> keys{"train.out_dir=" + tmp.file("c")};
    train(parse_recipe(kRecipe, "dist.yaml", keys), o);
  });
  EXPECT_NE(msg.find("resolved a different checkpoint to resume than rank 0"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("resume every rank from the same checkpoint"), std::string::npos) << msg;
  if (comm->rank() == 1) {
    EXPECT_NE(msg.find("resume: weights"), std::string::npos) << msg;
  }
}

// Ranks given different --profile step counts (each would run its own number of steps) are
// refused on every rank before training, naming the option (it ended in MPI_ERR_TRUNCATE).
TEST(DistTrainCheck, DifferentProfileStepsAreRefused) {
  MPI_OR_SKIP(comm);
  test::SharedTempDir tmp(*comm, "dist_profile_mismatch");
  const std::string msg = test::thrown_message([&] {
    TrainOptions o;
    o.quiet = true;
    o.profile_steps = comm->rank() == 0 ? 2 : 3;
    train(parse_recipe(kRecipe, "dist.yaml", {"train.out_dir=" + tmp.file("p")}), o);
  });
  EXPECT_NE(msg.find("resolved a different recipe or data than rank 0"), std::string::npos) << msg;
  if (comm->rank() == 1) {
    EXPECT_NE(msg.find("--profile (steps) = 3"), std::string::npos) << msg;
  }
}

// A Focus retrofit of a dense base (only the attention role trains): 2 ranks (ZeRO 1) == 1 rank,
// and the frozen base tensors in the final checkpoint are the base checkpoint's, bit for bit.
TEST(DistTrainRetrofit, FrozenBaseNeverMovesAndTwoRanksEqualOne) {
  MPI_OR_SKIP(comm);
  test::SharedTempDir tmp(*comm, "dist_retrofit");
  if (comm->rank() == 0) run(tmp.file("base"), {}, true);
  comm->barrier();
  auto k = attention_keys("focus");
  k.insert(k.end(), {"retrofit.enabled=true", "retrofit.checkpoint=" + tmp.file("base"),
                     "distributed.zero=1"});
  const TrainResult two = run(tmp.file("two"), k, false);
  if (comm->rank() == 0) {
    const TrainResult one = run(tmp.file("one"), k, true);
    expect_same_run(two, tmp.file("two"), one, tmp.file("one"), kTol, "focus retrofit");
    io::SafetensorsFile base(
        (fs::path(step_dir(tmp.file("base"), 6)) / "model.safetensors").string());
    io::SafetensorsFile after(
        (fs::path(step_dir(tmp.file("two"), 6)) / "model.safetensors").string());
    int frozen = 0, trained = 0;
    for (const std::string& name : after.names()) {
      if (name.find(".attn.focus.") != std::string::npos) {
        ++trained;
        continue;
      }
      ASSERT_NE(std::find(base.names().begin(), base.names().end(), name), base.names().end());
      const auto a = after.raw(name), b = base.raw(name);
      EXPECT_TRUE(a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin()))
          << name << " moved";
      ++frozen;
    }
    EXPECT_GT(trained, 0);
    EXPECT_GT(frozen, 10);
  }
  comm->barrier();
}

// Ranks that resolved different runs all stop, the differing rank naming the keys.
TEST(DistTrainCheck, DifferentRecipesOrDataStopEveryRank) {
  MPI_OR_SKIP(comm);
  Recipe r = parse_recipe(kRecipe, "dist.yaml");
  check_same_run(*comm, run_facts(r, {}));  // the same: passes
  if (comm->rank() == 1) r = parse_recipe(kRecipe, "dist.yaml", {"optim.lr=1e-3"});
  const std::string msg = test::thrown_message([&] { check_same_run(*comm, run_facts(r, {})); });
  if (comm->rank() == 1)
    EXPECT_NE(msg.find("rank 1 resolved a different recipe or data than rank 0 (1 differing "
                       "keys; its values here: optim.lr = "),
              std::string::npos)
        << msg;
  else
    EXPECT_NE(msg.find("rank 0: rank(s) 1 resolved a different recipe or data than rank 0"),
              std::string::npos)
        << msg;
}

}  // namespace
}  // namespace attnlab
