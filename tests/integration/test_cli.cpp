// The attnlab command line end to end: prepare -> train -> eval -> generate on a tiny model, and
// every kind of bad input giving a clear message and a non-zero exit without damaging earlier
// output.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/unknown_option.h"
#include "data/shard.h"
#include "io/atomic_file.h"
#include "test_util.h"
#include "train/checkpoint.h"

namespace fs = std::filesystem;

namespace {

struct CliResult {
  int code = -1;
  std::string out;  // stdout and stderr together
};

// The CLI with `env` (NAME=value ... for its environment, "" for this process's).
CliResult run_env(const std::string& env, const std::string& args) {
  std::string cmd = (env.empty() ? "" : "env " + env + " ") + attnlab::test::attnlab_binary() +
                    " " + args + " 2>&1";
  CliResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}
CliResult run(const std::string& args) { return run_env("", args); }

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    recipe_ = (dir_ / "tiny.yaml").string();
    std::ofstream(recipe_) << R"(# a tiny recipe for CLI tests
model: {n_layer: 1, n_head: 2, n_embd: 16, vocab_size: 260, block_size: 32, vocab_multiple: 32}
data:
  source: synthetic
  synthetic: {vocab_size: 64, train_tokens: 8000, val_tokens: 2048, seed: 3}
optim: {lr: 1.0e-2}
schedule: {type: constant}
train: {steps: 3, micro_batch: 2, seq_len: 16, device: cpu}
eval: {every: 0, batches: 2}
log: {every: 1}
)";
  }
  std::string train_args(const std::string& extra = "") const {
    return "train " + recipe_ + " --set train.out_dir=" + (dir_ / "run").string() + " " + extra;
  }
  attnlab::test::TempDir tmp_{"cli"};
  const fs::path dir_ = tmp_.path();
  std::string recipe_;
};

void expect_error(const CliResult& r, const std::string& needle) {
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(needle), std::string::npos) << "expected '" << needle << "' in:\n" << r.out;
}

}  // namespace

TEST(CliOptions, UnknownOptionsNameTheClosestOne) {
  using attnlab::cli::closest_option;
  using attnlab::cli::unknown_option_message;
  const std::vector<std::string> names = {"max-new-tokens", "temperature", "top-k", "top-p",
                                          "seed"};
  EXPECT_EQ(closest_option("max-tokens", names), "max-new-tokens");  // shared words
  EXPECT_EQ(closest_option("temprature", names), "temperature");     // edit distance
  EXPECT_EQ(closest_option("top_k", names), "top-k");
  EXPECT_EQ(closest_option("verbose", names), "");
  EXPECT_EQ(closest_option("max-batch-size", names), "");  // 1 of 3 words shared: not close

  CLI::App app{"t"};
  CLI::App* gen = app.add_subcommand("generate", "g");
  int n = 0;
  std::string prompt;
  gen->add_option("--max-new-tokens,-n", n, "tokens");
  gen->add_option("--prompt,-p", prompt, "text");
  auto message = [&](std::vector<std::string> args) {
    std::vector<std::string> rev(args.rbegin(), args.rend());  // CLI11 takes them reversed
    try {
      app.clear();
      app.parse(rev);
    } catch (const CLI::ExtrasError&) {
      return unknown_option_message(app, args);
    }
    return std::string("(parsed)");
  };
  EXPECT_EQ(message({"generate", "--prompt", "x", "--max-tokens", "20"}),
            "generate: unknown option '--max-tokens' (did you mean '--max-new-tokens'?); "
            "`attnlab generate --help` lists the options");
  EXPECT_EQ(message({"generate", "--max-tokens=20"})
                .rfind("generate: unknown option '--max-tokens' (did you mean", 0),
            0u);
  EXPECT_EQ(message({"generate", "-x"}),
            "generate: unknown option '-x'; `attnlab generate --help` lists the options");
  // A stray positional argument (or a negative number) is not an unknown option: CLI11's
  // message stands.
  EXPECT_EQ(message({"generate", "-n", "3", "extra"}), "");
  EXPECT_EQ(message({"generate", "-n", "3", "-5"}), "");
  EXPECT_EQ(message({"generate", "-n", "3"}), "(parsed)");

  // A mistyped command (CLI11: "A subcommand is required").
  app.add_subcommand("train", "t");
  app.require_subcommand(1);
  auto command = [&](std::vector<std::string> args) {
    std::vector<std::string> rev(args.rbegin(), args.rend());
    try {
      app.clear();
      app.parse(rev);
    } catch (const CLI::RequiredError&) {
      return attnlab::cli::unknown_command_message(app, args);
    } catch (const CLI::ParseError&) {
      return std::string("(other error)");
    }
    return std::string("(parsed)");
  };
  EXPECT_EQ(command({"trian", "r.yaml"}),
            "unknown command 'trian' (did you mean 'train'?); the commands: generate, train "
            "(`attnlab --help`)");
  EXPECT_EQ(command({"xyzzy"}),
            "unknown command 'xyzzy'; the commands: generate, train (`attnlab --help`)");
  EXPECT_EQ(command({}), "");  // no command at all: CLI11's message stands
  EXPECT_EQ(command({"--verbose"}),
            "unknown option '--verbose': options follow a command, one of generate, train "
            "(`attnlab COMMAND --help` lists its options)");
}

TEST_F(Cli, HelpAndVersion) {
  CliResult r = run("--help");
  EXPECT_EQ(r.code, 0);
  for (const char* sub : {"train", "eval", "score", "info", "prepare", "generate", "tokenize"})
    EXPECT_NE(r.out.find(sub), std::string::npos) << sub;
  EXPECT_EQ(run("--version").code, 0);
  EXPECT_NE(run("frobnicate").code, 0);
  // A mistyped option names the subcommand, the option and the closest valid one.
  CliResult typo = run("generate nowhere --max-tokens 20");
  EXPECT_NE(typo.code, 0);
  EXPECT_NE(typo.out.find("attnlab: error: generate: unknown option '--max-tokens' (did you mean "
                          "'--max-new-tokens'?)"),
            std::string::npos)
      << typo.out;
  CliResult cmd = run("trian x.yaml");
  EXPECT_NE(cmd.code, 0);
  EXPECT_NE(cmd.out.find("attnlab: error: unknown command 'trian' (did you mean 'train'?)"),
            std::string::npos)
      << cmd.out;
}

TEST_F(Cli, TrainEvalGenerateInfo) {
  CliResult t = run(train_args());
  ASSERT_EQ(t.code, 0) << t.out;
  EXPECT_NE(t.out.find("step 3/3"), std::string::npos) << t.out;
  EXPECT_TRUE(fs::exists(dir_ / "run" / "checkpoints" / "step_00000003" / "model.safetensors"));
  CliResult e = run("eval " + recipe_ + " --checkpoint " + (dir_ / "run").string());
  ASSERT_EQ(e.code, 0) << e.out;
  EXPECT_NE(e.out.find("val loss"), std::string::npos);
  CliResult g = run("generate " + (dir_ / "run").string() + " -n 5 --seed 1 --tokenizer byte");
  ASSERT_EQ(g.code, 0) << g.out;
  CliResult i = run("info " + recipe_);
  ASSERT_EQ(i.code, 0) << i.out;
  EXPECT_NE(i.out.find("FLOPs per token"), std::string::npos);
}

// Every model.* key reaches the model: without biases and with an untied head the parameter
// count changes by exactly those tensors (the tiny recipe: 1 layer of width 16, vocab 260).
TEST_F(Cli, InfoCountsBiasAndUntiedHead) {
  auto params = [&](const std::string& sets) {
    CliResult i = run("info " + recipe_ + sets);
    EXPECT_EQ(i.code, 0) << i.out;
    const size_t at = i.out.find("parameters        ");
    EXPECT_NE(at, std::string::npos) << i.out;
    return std::stoll(i.out.substr(at + 18));
  };
  const long long base = params("");
  const long long changed = params(" --set model.bias=false --set model.tied_embeddings=false");
  CliResult i = run("info " + recipe_ + " --set model.bias=false");
  EXPECT_NE(i.out.find("no biases, tied embeddings"), std::string::npos) << i.out;
  const long long C = 16, V = 260, biases = 11 * C + C;  // per layer 11 C, ln_f C
  EXPECT_EQ(changed - base, V * C - biases);
}

TEST_F(Cli, PrepareThenTrainOnShards) {
  fs::create_directories(dir_ / "text");
  for (int f = 0; f < 3; ++f) {
    std::ofstream o(dir_ / "text" / ("doc" + std::to_string(f) + ".txt"));
    for (int d = 0; d < 20; ++d)
      o << "Document " << d << " of file " << f
        << ": the quick brown fox jumps over the lazy dog.\n\n\n";
  }
  CliResult p = run("prepare '" + (dir_ / "text").string() + "/*.txt' --out " +
                    (dir_ / "shards").string() + " --val-fraction 0.2 --no-progress");
  ASSERT_EQ(p.code, 0) << p.out;
  CliResult t =
      run(train_args("--set data.source=shards --set data.train=" + (dir_ / "shards").string() +
                     "/train_*.bin --set data.val=" + (dir_ / "shards").string() +
                     "/val_*.bin --set eval.at_end=true --set eval.batches=1"));
  ASSERT_EQ(t.code, 0) << t.out;
  EXPECT_NE(t.out.find("val loss"), std::string::npos) << t.out;
  EXPECT_EQ(t.out.find("shorter than one window"), std::string::npos) << t.out;
  // A shard shorter than one window (prepare's last one can be a few tokens) holds no window:
  // training goes on and says so, naming it.
  attnlab::write_shard((dir_ / "shards" / "train_zz_tail.bin").string(),
                       std::vector<int32_t>{1, 2, 3, 4, 5, 6}, 260);
  CliResult tail = run("train " + recipe_ + " --set train.out_dir=" + (dir_ / "run_tail").string() +
                       " --set data.source=shards --set data.train=" + (dir_ / "shards").string() +
                       "/train_*.bin --set eval.at_end=false");
  ASSERT_EQ(tail.code, 0) << tail.out;
  EXPECT_NE(tail.out.find("data.train: 1 source(s) shorter than one window (seq_len + 1 = 17 "
                          "tokens) hold no window and are not read: "),
            std::string::npos)
      << tail.out;
  EXPECT_NE(tail.out.find("train_zz_tail.bin"), std::string::npos) << tail.out;
  fs::remove(dir_ / "shards" / "train_zz_tail.bin");
  // Without data.tokenizer the checkpoints carry the tokenizer `prepare` wrote beside the shards.
  const std::string ckpt = attnlab::resolve_checkpoint_dir((dir_ / "run").string());
  EXPECT_EQ(
      nlohmann::json::parse(attnlab::io::read_file(ckpt + "/tokenizer.json")),
      nlohmann::json::parse(attnlab::io::read_file((dir_ / "shards" / "tokenizer.json").string())));
  // Without one there, none (the default `byte` was saved: a guess, wrong for GPT-2 shards).
  fs::rename(dir_ / "shards" / "tokenizer.json", dir_ / "tokenizer.json.aside");
  CliResult t2 = run("train " + recipe_ + " --set train.out_dir=" + (dir_ / "run2").string() +
                     " --set data.source=shards --set data.train=" + (dir_ / "shards").string() +
                     "/train_*.bin --set eval.at_end=false");
  ASSERT_EQ(t2.code, 0) << t2.out;
  EXPECT_FALSE(fs::exists(fs::path(attnlab::resolve_checkpoint_dir((dir_ / "run2").string())) /
                          "tokenizer.json"));
  fs::rename(dir_ / "tokenizer.json.aside", dir_ / "shards" / "tokenizer.json");
  // A tokenizer the recipe names must load (a typo used to train on and leave checkpoints
  // without one).
  expect_error(
      run(train_args("--set data.source=shards --set data.train=" + (dir_ / "shards").string() +
                     "/train_*.bin --set eval.at_end=false --set data.tokenizer=gtp2:" +
                     (dir_ / "none").string())),
      "data.tokenizer 'gtp2:");
  // Validation data among the training data: refused (the val loss would be on training data).
  expect_error(
      run(train_args("--set data.source=shards --set data.train=" + (dir_ / "shards").string() +
                     "/*.bin --set data.val=" + (dir_ / "shards").string() + "/val_*.bin")),
      "the validation loss would be taken on training data");
  // A named tokenizer with another vocabulary than the shards' (prepare's tokenizer.json) would be
  // saved into the checkpoints: refused. (The GPT-2 files come from the shared data.)
  if (const char* shared = std::getenv("ATTNLAB_SHARED_DATA")) {
    expect_error(
        run(train_args("--set data.source=shards --set data.train=" + (dir_ / "shards").string() +
                       "/train_*.bin --set eval.at_end=false --set model.vocab_size=50257 "
                       "--set data.tokenizer=gpt2:" +
                       std::string(shared) + "/gpt2-vocab")),
        "has 50257 ids, but the shards were prepared with");
  }
}

// A resume on other data under the same keys (shards regenerated, added) is said: the data
// position then indexes other data. The same data says nothing.
TEST_F(Cli, ResumeSaysWhenTheTrainingDataChanged) {
  ASSERT_EQ(run(train_args("--set checkpoint.every=2")).code, 0);
  const std::string resume = " --set train.steps=4 --resume " + (dir_ / "run").string();
  const CliResult same = run(train_args("--set checkpoint.every=2" + resume));
  ASSERT_EQ(same.code, 0) << same.out;
  EXPECT_EQ(same.out.find("the training data differs"), std::string::npos) << same.out;
  const CliResult other =
      run(train_args("--set checkpoint.every=2 --set data.synthetic.train_tokens=9000 --set "
                     "train.steps=5 --resume " +
                     (dir_ / "run").string()));
  ASSERT_EQ(other.code, 0) << other.out;
  EXPECT_NE(other.out.find("the training data differs from the checkpoint's (1 sources, "),
            std::string::npos)
      << other.out;
  EXPECT_EQ(other.out.find("past the resumed step"), std::string::npos) << other.out;
  // Back to step 4 of this run (keep_last 2 left steps 4 and 5), to go on to step 5 again: the
  // later checkpoint is named (it stays until this run saves step 5 anew).
  const CliResult back = run(train_args("--set checkpoint.every=2 --set train.steps=5 --resume " +
                                        (dir_ / "run" / "checkpoints" / "step_00000004").string()));
  ASSERT_EQ(back.code, 0) << back.out;
  EXPECT_NE(back.out.find("holds checkpoints past the resumed step 4, of the run this one "
                          "replaces: step_00000005"),
            std::string::npos)
      << back.out;
}

// A decaying schedule with no step left to decay ends at the peak lr: said (not refused).
TEST_F(Cli, ScheduleWithoutDecayIsSaid) {
  CliResult t = run(train_args(
      "--set schedule.type=cosine --set schedule.warmup_steps=3 --set schedule.final_lr_frac=0.1"));
  ASSERT_EQ(t.code, 0) << t.out;
  EXPECT_NE(t.out.find("schedule.cosine: the last step runs at lr"), std::string::npos) << t.out;
  CliResult u = run("train " + recipe_ + " --set train.out_dir=" + (dir_ / "run2").string() +
                    " --set schedule.type=cosine --set schedule.final_lr_frac=0.1");
  ASSERT_EQ(u.code, 0) << u.out;
  EXPECT_EQ(u.out.find("no step is left to decay"), std::string::npos) << u.out;
  EXPECT_EQ(u.out.find("fewer than one step reads"), std::string::npos) << u.out;
  // Fewer training windows than a step reads: said (every step repeats windows).
  CliResult tiny = run("train " + recipe_ + " --set train.out_dir=" + (dir_ / "run3").string() +
                       " --set data.synthetic.train_tokens=50 --set train.micro_batch=4");
  ASSERT_EQ(tiny.code, 0) << tiny.out;
  EXPECT_NE(tiny.out.find("data.train holds 3 window(s) of seq_len 16, fewer than one step reads "
                          "(4 = micro_batch 4 x 1 accumulation x 1 rank(s))"),
            std::string::npos)
      << tiny.out;
}

TEST_F(Cli, RecipeErrors) {
  expect_error(run(train_args("--set optim.learnig_rate=1")), "did you mean 'optim.lr'");
  expect_error(run(train_args("--set train.steps=abc")), "train.steps");
  expect_error(run(train_args("--set train.micro_batch=0")), "train.micro_batch");
  expect_error(run(train_args("--set schedule.type=cosin")), "cosine");
  expect_error(run(train_args("--set attention.type=flash9")), "valid: dense");
  std::ofstream(dir_ / "typo.yaml") << "model:\n  n_layr: 2\n";
  expect_error(run("train " + (dir_ / "typo.yaml").string()), "typo.yaml:2");
  expect_error(run("train " + (dir_ / "missing.yaml").string()), "missing.yaml");
  // A second YAML document was dropped; an empty file trained every default.
  std::ofstream(dir_ / "two.yaml") << "model: {n_layer: 2}\n---\ntrain: {steps: 3}\n";
  expect_error(run("info " + (dir_ / "two.yaml").string()),
               "two.yaml: holds 2 YAML documents (separated by ---); a recipe is one document");
  std::ofstream(dir_ / "empty.yaml") << "# nothing yet\n\n   \n";
  expect_error(run("train " + (dir_ / "empty.yaml").string()),
               "empty.yaml' is empty (only comments or blank lines)");
  // info prints the resolved recipe only for a model it can build.
  const CliResult bad_type = run("info " + recipe_ + " --set attention.type=foo");
  expect_error(bad_type, "unknown attention 'foo'");
  EXPECT_EQ(bad_type.out.find("# resolved recipe"), std::string::npos) << bad_type.out;
  // Out-of-range command-line values are refused, not taken for the default.
  expect_error(run("train " + recipe_ + " --profile -1"), "--profile");
  // The user's own recipe in train.out_dir is not overwritten by the run's resolved one.
  fs::create_directories(dir_ / "proj");
  fs::copy_file(recipe_, dir_ / "proj" / "recipe.yaml");
  expect_error(run("train " + (dir_ / "proj" / "recipe.yaml").string() +
                   " --set train.out_dir=" + (dir_ / "proj").string()),
               "holds a recipe.yaml that attnlab did not write");
  EXPECT_EQ(attnlab::io::read_file((dir_ / "proj" / "recipe.yaml").string()),
            attnlab::io::read_file(recipe_));
}

TEST_F(Cli, DataErrors) {
  expect_error(run(train_args("--set data.source=shards --set data.train=" +
                              (dir_ / "none").string() + "/*.bin --set eval.at_end=false")),
               "data.train: no files match");
  // Wrong magic, then a truncated file.
  std::vector<int32_t> toks(100, 5);
  std::string shard = (dir_ / "bad_000000.bin").string();
  attnlab::write_shard(shard, toks, 260);
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    int32_t bad = 12345;
    f.write(reinterpret_cast<const char*>(&bad), 4);
  }
  expect_error(run(train_args("--set data.source=shards --set data.train=" + shard +
                              " --set eval.at_end=false")),
               "magic");
  attnlab::write_shard(shard, toks, 260);
  fs::resize_file(shard, fs::file_size(shard) - 10);
  expect_error(run(train_args("--set data.source=shards --set data.train=" + shard +
                              " --set eval.at_end=false")),
               "bad_000000.bin");
}

TEST_F(Cli, OutputAndCheckpointErrors) {
  std::ofstream(dir_ / "a_file") << "x";
  expect_error(
      run("train " + recipe_ + " --set train.out_dir=" + (dir_ / "a_file" / "run").string()),
      "a_file");
  ASSERT_EQ(run(train_args()).code, 0);
  // Resuming with another model (here another shape) names the key and both values, before any
  // tensor is read.
  expect_error(run(train_args("--set model.n_embd=32 --resume " + (dir_ / "run").string())),
               "model.n_embd: 32 in the recipe (--set 'model.n_embd=32'), 16 in the checkpoint");
  expect_error(run(train_args("--resume " + (dir_ / "nowhere").string())), "nowhere");
  // A run that stopped before its first checkpoint is named as such.
  ASSERT_EQ(run("train " + recipe_ +
                " --set checkpoint.at_end=false --set train.out_dir=" + (dir_ / "nockpt").string())
                .code,
            0);
  expect_error(run(train_args("--resume " + (dir_ / "nockpt").string())),
               "is a run directory without a checkpoint yet");
  // eval's --out is checked before the evaluation runs.
  expect_error(run("eval " + (dir_ / "run").string() + " --out " +
                   (dir_ / "no_such_dir" / "r.json").string()),
               "--out '" + (dir_ / "no_such_dir" / "r.json").string() + "': cannot write into");
}

// One process run inside an sbatch script (Slurm's variables inherited from an allocation of 4
// tasks, no srun): whatever backend the build's automatic choice takes, the error says why and
// what to do, and no run starts.
TEST_F(Cli, SingleProcessInsideAnAllocationIsToldAboutSrun) {
  const CliResult r =
      run_env("SLURM_PROCID=0 SLURM_NTASKS=4 SLURM_LOCALID=0", train_args("--set log.every=1"));
  expect_error(r, "SLURM_NTASKS is the allocation's");
  EXPECT_FALSE(fs::exists(dir_ / "run" / "checkpoints")) << r.out;
}

TEST_F(Cli, DivergenceStopsWithoutDamagingTheLastCheckpoint) {
  ASSERT_EQ(run(train_args()).code, 0);
  const fs::path ckpt = dir_ / "run" / "checkpoints" / "step_00000003" / "model.safetensors";
  const auto size_before = fs::file_size(ckpt);
  const auto time_before = fs::last_write_time(ckpt);
  // A huge learning rate blows the weights up; the loss becomes non-finite within a few steps.
  CliResult r =
      run(train_args("--set train.steps=12 --set optim.lr=1e30 --set optim.grad_clip=0 "
                     "--set checkpoint.every=100 --resume " +
                     (dir_ / "run").string()));
  expect_error(r, "diverged");
  EXPECT_EQ(fs::file_size(ckpt), size_before);
  EXPECT_EQ(fs::last_write_time(ckpt), time_before);
  EXPECT_EQ(run("eval " + recipe_ + " --checkpoint " + (dir_ / "run").string()).code, 0);
}

// attnlab eval MODEL: the checkpoint's own model and validation data by default; tasks, text and
// shards from flags (no recipe, no data.train); JSON results; a disagreeing recipe is refused.
TEST_F(Cli, EvalHarnessAndScore) {
  ASSERT_EQ(run(train_args()).code, 0);
  const std::string model = (dir_ / "run").string();
  CliResult v = run("eval " + model + " --set eval.batches=1000 --no-progress");
  ASSERT_EQ(v.code, 0) << v.out;
  // val_tokens 2048, seq_len 16: 127 whole windows, scored although 127 is odd (micro_batch 2).
  EXPECT_NE(v.out.find("2032 tokens, 127/127 windows"), std::string::npos) << v.out;

  std::ofstream(dir_ / "mc.jsonl")
      << R"({"query": "Question: a?", "choices": ["x", "yy"], "gold": 1})"
      << "\n"
      << R"({"query": "Question: b?\n", "choices": ["z", "w"], "gold": 0})"
      << "\n";
  std::ofstream(dir_ / "doc.txt") << "some text to score, long enough for two windows of 32.\n";
  const std::string out = (dir_ / "results.json").string();
  CliResult e = run(
      "eval " + model + " --tokenizer byte --tasks mc=" + (dir_ / "mc.jsonl").string() +
      " --text " + (dir_ / "doc.txt").string() + " --context 16 --stride 8 --batch 3 --out " + out);
  ASSERT_EQ(e.code, 0) << e.out;
  EXPECT_NE(e.out.find("acc_norm"), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("| prompts lm-eval"), std::string::npos) << e.out;
  std::ifstream in(out);
  const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(json.find("\"tasks\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"stride\": 8"), std::string::npos) << json;
  EXPECT_EQ(json.find("\"validation\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"answer_cue\": 2"), std::string::npos) << json;

  // Shards without data.train (evaluation never reads training data).
  std::vector<int32_t> toks(300, 7);
  attnlab::write_shard((dir_ / "val_000000.bin").string(), toks, 260);
  CliResult s =
      run("eval " + model + " --set data.source=shards --set data.train= --set data.val=" +
          (dir_ / "val_*.bin").string() + " --no-progress");
  ASSERT_EQ(s.code, 0) << s.out;
  EXPECT_NE(s.out.find("validation"), std::string::npos) << s.out;
  CliResult sh = run("eval " + model + " --shards " + (dir_ / "val_*.bin").string());
  ASSERT_EQ(sh.code, 0) << sh.out;
  EXPECT_NE(sh.out.find("299 tokens, 1 files"), std::string::npos) << sh.out;

  expect_error(run("eval " + model + " --recipe " + recipe_ + " --set model.n_embd=32"),
               "model.n_embd: 32 in the recipe (--set 'model.n_embd=32'), 16 in the model");
  expect_error(run("eval " + recipe_), "is a recipe");
  // A name given twice would key one report entry (the --out JSON kept the last only).
  expect_error(run("eval " + model + " --tokenizer byte --tasks x=" + (dir_ / "mc.jsonl").string() +
                   ",x=" + (dir_ / "mc.jsonl").string()),
               "task name 'x' is given twice");
  std::ofstream(dir_ / "empty.txt").flush();  // nothing to score: an error, not a NaN row
  expect_error(run("eval " + model + " --tokenizer byte --text " + (dir_ / "empty.txt").string()),
               "no text to score");
  // --set data.tokenizer chooses the tokenizer (it was ignored for the checkpoint's).
  expect_error(run("eval " + model + " --tasks mc=" + (dir_ / "mc.jsonl").string() +
                   " --set data.tokenizer=gpt2:" + (dir_ / "no_vocab").string()),
               "no_vocab");
  std::ofstream(dir_ / "bad.jsonl") << "{\"query\": \"q\"}\n";
  expect_error(run("eval " + model + " --tokenizer byte --tasks " + (dir_ / "bad.jsonl").string()),
               "bad.jsonl:1");
  // A continuation longer than the model fails the run before any task is scored (the first
  // task's progress line never appears), naming the file, line and option.
  std::ofstream(dir_ / "long.jsonl")
      << "{\"context\": \"a\", \"continuation\": \"" << std::string(40, 'x') << "\"}\n";
  CliResult lg =
      run("eval " + model + " --tokenizer byte --tasks mc=" + (dir_ / "mc.jsonl").string() +
          ",long=" + (dir_ / "long.jsonl").string());
  expect_error(lg, "long.jsonl:1: option 0: the continuation is 41 tokens");
  EXPECT_EQ(lg.out.find("mc: "), std::string::npos) << lg.out;
  expect_error(run("eval " + model +
                   " --tokenizer byte --prompt plain --tasks mc=" + (dir_ / "mc.jsonl").string()),
               "--prompt: expected lm-eval");

  CliResult sc = run("score " + model + " --tokenizer byte --text " + (dir_ / "doc.txt").string() +
                     " --out " + (dir_ / "scores.jsonl").string());
  ASSERT_EQ(sc.code, 0) << sc.out;
  EXPECT_NE(sc.out.find("tokens scored"), std::string::npos) << sc.out;
  EXPECT_TRUE(fs::file_size(dir_ / "scores.jsonl") > 0);
}

// A Focus model's evaluation-time keys (top_k, eval_routing) apply to `attnlab eval`; the keys
// that define the trained function are refused when they differ from the checkpoint's.
TEST_F(Cli, EvalAppliesFocusRoutingKeysAndRefusesTheOthers) {
  const std::string run_dir = (dir_ / "focus").string();
  CliResult t =
      run(train_args("--set attention.type=focus --set attention.focus.groups=4 "
                     "--set attention.focus.local_window=2 --set train.out_dir=" +
                     run_dir));
  ASSERT_EQ(t.code, 0) << t.out;
  auto val_loss = [&](const std::string& sets) {
    CliResult e = run("eval " + run_dir + " --no-progress " + sets);
    EXPECT_EQ(e.code, 0) << e.out;
    const size_t at = e.out.find("validation             loss");
    EXPECT_NE(at, std::string::npos) << e.out;
    return at == std::string::npos ? 0.0 : std::stod(e.out.substr(at + 27, 20));
  };
  EXPECT_NE(t.out.find("| max dominance "), std::string::npos) << t.out;  // the trainer's eval line
  const CliResult plain = run("eval " + run_dir + " --no-progress");
  EXPECT_NE(plain.out.find("| max dominance "), std::string::npos) << plain.out;
  const double hard2 = val_loss("");
  EXPECT_EQ(val_loss("--set attention.focus.top_k=2"), hard2);
  EXPECT_NE(val_loss("--set attention.focus.top_k=1"), hard2);
  EXPECT_NE(val_loss("--set attention.focus.eval_routing=soft"), hard2);
  expect_error(run("eval " + run_dir + " --set attention.focus.tau=0.2"),
               "attention.focus.tau: 0.2 in the recipe (--set 'attention.focus.tau=0.2'), 0.1 in "
               "the model");
  expect_error(run("eval " + run_dir + " --set attention.focus.gate=multiplicative"),
               "attention.focus.gate: multiplicative in the recipe");
  expect_error(run("eval " + run_dir + " --set attention.focus.top_k=5"), "attention.focus.top_k");
  // score and generate take the evaluation keys by --set, and only those.
  std::ofstream(dir_ / "ids.txt") << "1 2 3 4 5 6 7 8 9 10 11 12";
  auto scores = [&](const std::string& sets) {
    const CliResult r = run("score " + run_dir + " --tokens " + (dir_ / "ids.txt").string() +
                            " --out " + (dir_ / "s.jsonl").string() + sets);
    EXPECT_EQ(r.code, 0) << r.out;
    std::ifstream f(dir_ / "s.jsonl");
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  const std::string hard_scores = scores("");
  // score and generate say how they ran the attention.
  const CliResult sn =
      run("score " + run_dir + " --tokens " + (dir_ / "ids.txt").string() + " --out " +
          (dir_ / "s2.jsonl").string() + " --set attention.focus.eval_routing=soft");
  EXPECT_NE(sn.out.find("note: attention: focus soft gate"), std::string::npos) << sn.out;
  const CliResult gn = run("generate " + run_dir + " -n 3 --seed 1 --tokenizer byte");
  EXPECT_EQ(gn.code, 0) << gn.out;
  EXPECT_NE(gn.out.find("note: attention: focus hard routing, top_k 2"), std::string::npos)
      << gn.out;
  EXPECT_EQ(scores(" --set attention.focus.eval_routing=hard"), hard_scores);
  EXPECT_NE(scores(" --set attention.focus.eval_routing=soft"), hard_scores);
  expect_error(run("score " + run_dir + " --tokens " + (dir_ / "ids.txt").string() +
                   " --set attention.focus.tau=0.2"),
               "score runs the model as trained: --set takes only attention.focus.top_k, "
               "attention.focus.eval_routing and attention.sfa.kernel, got attention.focus.tau");
  expect_error(run("eval " + run_dir + " --set attention.sfa.kernel=flash"),
               "attention.sfa.kernel (--set 'attention.sfa.kernel=flash') chooses how an SFA model "
               "runs; this model's attention is focus");
  expect_error(run("generate " + run_dir + " --set attention.focus.gate=multiplicative"),
               "generate runs the model as trained");
  expect_error(run("generate " + run_dir + " --set attention.focus.top_k=9"),
               "--set 'attention.focus.top_k=9': attention.focus.top_k (9) must be <= "
               "attention.focus.groups (4)");
  // The eval line and --out say how the model was evaluated.
  const CliResult soft = run("eval " + run_dir + " --no-progress --set attention.focus.top_k=1 " +
                             "--out " + (dir_ / "ev.json").string());
  ASSERT_EQ(soft.code, 0) << soft.out;
  EXPECT_NE(soft.out.find("windows | focus hard routing, top_k 1 | max dominance "),
            std::string::npos)
      << soft.out;
  std::ifstream ev(dir_ / "ev.json");
  const nlohmann::json ej = nlohmann::json::parse(ev);
  EXPECT_EQ(ej["model"]["attention_eval"], "focus hard routing, top_k 1");
  EXPECT_FALSE(ej.contains("caveats"));
  // The telemetry counts every scored token of the evaluation (2 batches here), not one batch.
  EXPECT_EQ(ej["validation"]["attention"]["focus.h0.tokens"], ej["validation"]["tokens"]) << ej;
  EXPECT_EQ(ej["validation"]["tokens"], 64) << ej;
  // The trainer's evaluation record: the other routing's loss and the layer's telemetry.
  std::ifstream mf(fs::path(run_dir) / "metrics.jsonl");
  int evals = 0;
  for (std::string line; std::getline(mf, line);) {
    const nlohmann::json r = nlohmann::json::parse(line);
    if (!r.contains("val_loss")) continue;
    ++evals;
    ASSERT_TRUE(r.contains("val_loss_soft")) << line;
    EXPECT_EQ(r["attention_eval"], "focus hard routing, top_k 2") << line;  // what val_loss is
    EXPECT_NE(r["val_loss_soft"], r["val_loss"]) << line;
    EXPECT_EQ(r["focus.h0.tokens"], 64) << line;
    EXPECT_EQ(r["val_tokens"], 64) << line;  // what the loss was taken over
    EXPECT_EQ(r["val_windows"], 4) << line;
    double shares = 0;
    for (int k = 0; k < 4; ++k)
      shares += r["focus.h0.group_share." + std::to_string(k)].get<double>();
    EXPECT_NEAR(shares, 1.0, 1e-12) << line;
    EXPECT_GE(r["focus.h0.dominance"].get<double>(), 0.25) << line;
  }
  EXPECT_GT(evals, 0);
}

// A retrofit keeps its base frozen, so the base's attention must carry over: a dense base with a
// sliding window cannot take Focus (which has none), and a windowless dense base can; init_from
// may change the attention but warns, naming the keys.
TEST_F(Cli, RetrofitKeepsTheBasesAttentionAndInitFromSaysWhatChanged) {
  const std::string base = (dir_ / "windowed").string();
  ASSERT_EQ(run(train_args("--set attention.window=8 --set checkpoint.at_end=true "
                           "--set train.out_dir=" +
                           base))
                .code,
            0);
  const std::string focus =
      " --set attention.type=focus --set attention.focus.groups=2 --set "
      "attention.focus.local_window=4 --set attention.window=0";
  expect_error(
      run(train_args(focus + " --set retrofit.enabled=true --set retrofit.checkpoint=" + base +
                     " --set retrofit.train_roles=[attention] "
                     "--set train.out_dir=" +
                     (dir_ / "rf").string())),
      "the retrofit keeps the base's weights frozen, so its attention must stay the one "
      "they were trained with:\n  attention.window: 0 in the recipe (--set "
      "'attention.window=0'), 8 in the base");
  const CliResult init = run(train_args(focus + " --set train.init_from=" + base +
                                        " --set train.out_dir=" + (dir_ / "init").string()));
  ASSERT_EQ(init.code, 0) << init.out;
  EXPECT_NE(init.out.find("this run's attention differs from the one its weights were trained "
                          "with:\n  attention.window: 0 in the recipe (--set "
                          "'attention.window=0'), 8 in the checkpoint"),
            std::string::npos)
      << init.out;
  // A windowless dense base takes Focus without a word.
  ASSERT_EQ(run(train_args("--set checkpoint.at_end=true --set train.out_dir=" +
                           (dir_ / "plain").string()))
                .code,
            0);
  const std::string retrofit =
      focus +
      " --set retrofit.enabled=true --set retrofit.checkpoint=" + (dir_ / "plain").string() +
      " --set retrofit.train_roles=[attention] --set train.out_dir=" + (dir_ / "rf2").string() +
      " --set checkpoint.at_end=true";
  const CliResult rf = run(train_args(retrofit));
  ASSERT_EQ(rf.code, 0) << rf.out;
  EXPECT_EQ(rf.out.find("differs from the one"), std::string::npos) << rf.out;
  // The retrofit line counts as the run header does (the vocabulary's padding rows left out).
  const size_t h = rf.out.find(" params ("), r = rf.out.find(" parameters train");
  ASSERT_TRUE(h != std::string::npos && r != std::string::npos) << rf.out;
  const std::string header_total =
      rf.out.substr(rf.out.rfind("| ", h) + 2, h - rf.out.rfind("| ", h) - 2);
  const size_t of = rf.out.rfind(" of ", r);
  EXPECT_EQ(rf.out.substr(of + 4, r - of - 4), header_total) << rf.out;
  // Its checkpoint holds every tensor: a resume does not need the base any more.
  fs::rename(dir_ / "plain", dir_ / "plain_moved");
  const CliResult resumed =
      run(train_args(retrofit + " --set train.steps=5 --resume " + (dir_ / "rf2").string()));
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_NE(resumed.out.find("done: 5 steps"), std::string::npos) << resumed.out;
  // Focus has no Hugging Face form: the refusal points at the retrofit's base.
  expect_error(
      run("convert " + (dir_ / "rf2").string() + " " + (dir_ / "rf2_hf").string() + " --to hf"),
      "this is a retrofit of '" + (dir_ / "plain").string() + "': convert that base instead");
}

// attention.sfa.kernel chooses SFA's path in eval and score too (it was ignored there), and the
// output says which path and k ran.
TEST_F(Cli, EvalOfSfaTakesTheKernelAndSaysWhatRan) {
  const std::string run_dir = (dir_ / "sfa").string();
  ASSERT_EQ(run(train_args("--set attention.type=sfa --set train.out_dir=" + run_dir)).code, 0);
  const CliResult plain = run("eval " + run_dir + " --no-progress");
  ASSERT_EQ(plain.code, 0) << plain.out;
  EXPECT_NE(plain.out.find("| sfa k 1 of 8 (masked-dense path)"), std::string::npos) << plain.out;
  const CliResult flash =
      run("eval " + run_dir + " --no-progress --set attention.sfa.kernel=flash");
  ASSERT_EQ(flash.code, 0) << flash.out;
  EXPECT_NE(flash.out.find("| sfa k 1 of 8 (FlashSFA path)"), std::string::npos) << flash.out;
}

// Focus keys with attention.type dense (a forgotten type) train dense, and the run says so; the
// banner names the attention type.
TEST_F(Cli, VariantKeysOfAnotherTypeAreNamedAsUnused) {
  const CliResult t = run(train_args("--set attention.focus.groups=4 --set train.out_dir=" +
                                     (dir_ / "dense_focus_keys").string()));
  ASSERT_EQ(t.code, 0) << t.out;
  EXPECT_NE(t.out.find("| attention dense"), std::string::npos) << t.out;
  // The Focus evaluation keys given on the command line do not apply to a dense model: refused,
  // not ignored.
  std::ofstream(dir_ / "ids3.txt") << "1 2 3";
  expect_error(run("score " + (dir_ / "dense_focus_keys").string() + " --tokens " +
                   (dir_ / "ids3.txt").string() + " --set attention.focus.top_k=1"),
               "attention.focus.top_k (--set 'attention.focus.top_k=1') chooses how a Focus model "
               "evaluates; this model's attention is dense");
  // A run's own recipe.yaml (every key listed, Focus's too under attention.type dense) supplies
  // eval's data: its Focus keys are carried, not applied, as in training.
  const std::string own = (dir_ / "dense_focus_keys" / "recipe.yaml").string();
  const CliResult e =
      run("eval " + (dir_ / "dense_focus_keys").string() + " --recipe " + own + " --no-progress");
  EXPECT_EQ(e.code, 0) << e.out;
  // An unknown type names where it came from and the closest registered one.
  expect_error(run("info " + recipe_ + " --set attention.type=focsu"),
               "--set 'attention.type=focsu': attention.type: unknown attention 'focsu'; did you "
               "mean 'focus'? (valid: dense, focus, sfa)");
  EXPECT_NE(t.out.find("warning: attention.focus.groups (--set 'attention.focus.groups=4') is not "
                       "used: attention.type is dense"),
            std::string::npos)
      << t.out;
}

// A Focus model with the sequence-scope Sinkhorn evaluates with a caveat (its groups read later
// tokens: not a causal language model's loss) in train, eval (text and --out) and score.
TEST_F(Cli, SequenceScopeFocusEvaluatesWithACaveat) {
  const std::string run_dir = (dir_ / "focus_seq").string();
  const CliResult t =
      run(train_args("--set attention.type=focus --set attention.focus.groups=4 "
                     "--set attention.focus.local_window=2 "
                     "--set attention.focus.sinkhorn_scope=sequence --set train.out_dir=" +
                     run_dir));
  ASSERT_EQ(t.code, 0) << t.out;
  const std::string caveat = "sinkhorn_scope is sequence (the paper's form)";
  EXPECT_NE(t.out.find(caveat), std::string::npos) << t.out;
  const CliResult e =
      run("eval " + run_dir + " --no-progress --out " + (dir_ / "seq.json").string());
  ASSERT_EQ(e.code, 0) << e.out;
  EXPECT_NE(e.out.find("note: attention.focus." + caveat), std::string::npos) << e.out;
  std::ifstream ev(dir_ / "seq.json");
  const nlohmann::json ej = nlohmann::json::parse(ev);
  ASSERT_TRUE(ej.contains("caveats"));
  EXPECT_NE(ej["caveats"][0].get<std::string>().find(caveat), std::string::npos);
  std::ofstream(dir_ / "ids.txt") << "1 2 3 4 5 6 7 8";
  const CliResult sc = run("score " + run_dir + " --tokens " + (dir_ / "ids.txt").string() +
                           " --out " + (dir_ / "seq_scores.jsonl").string());
  ASSERT_EQ(sc.code, 0) << sc.out;
  EXPECT_NE(sc.out.find("note: attention.focus." + caveat), std::string::npos) << sc.out;
}

// A LoRA retrofit through the command line: info shows the adapter role, trainable vs frozen and
// both memory modes; eval, score and generate take --adapter; convert --adapter merges the LoRA
// into a plain checkpoint that evaluates like base + adapter; a rank < 0 is refused by name.
TEST_F(Cli, LoraRetrofitInfoEvalConvert) {
  ASSERT_EQ(run(train_args("--set checkpoint.at_end=true")).code, 0);
  const std::string base = (dir_ / "run").string(), rf = (dir_ / "lora").string();
  const std::string lora = " --set retrofit.enabled=true --set retrofit.checkpoint=" + base +
                           " --set retrofit.train_roles=[adapter] --set retrofit.lora.rank=2";
  CliResult i = run("info " + recipe_ + lora);
  ASSERT_EQ(i.code, 0) << i.out;
  // 1 layer, n_embd 16: A [2, 16] + B [48, 2] = 128 parameters.
  EXPECT_NE(i.out.find("role adapter     128"), std::string::npos) << i.out;
  EXPECT_NE(i.out.find("lora              rank 2, alpha 16 (scale 8) on c_attn"), std::string::npos)
      << i.out;
  EXPECT_NE(i.out.find("trainable         128 "), std::string::npos) << i.out;
  EXPECT_NE(i.out.find("vs full fine-tuning"), std::string::npos) << i.out;
  CliResult t = run("train " + recipe_ + lora + " --set train.out_dir=" + rf);
  ASSERT_EQ(t.code, 0) << t.out;
  const std::string adapter =
      (dir_ / "lora" / "checkpoints" / "step_00000003" / "adapter.safetensors").string();
  ASSERT_TRUE(fs::exists(adapter)) << t.out;
  CliResult e1 = run("eval " + base + " --adapter " + adapter + " --no-progress --out " +
                     (dir_ / "lora_eval.json").string());
  ASSERT_EQ(e1.code, 0) << e1.out;
  {  // the results name the adapter the weights came with
    std::ifstream ej(dir_ / "lora_eval.json");
    EXPECT_EQ(nlohmann::json::parse(ej)["model"]["adapter"], adapter);
  }
  const std::string merged = (dir_ / "merged").string();
  CliResult c = run("convert " + base + " " + merged + " --to attnlab --adapter " + adapter);
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_NE(c.out.find("merged into c_attn.weight"), std::string::npos) << c.out;
  CliResult e2 = run("eval " + merged + " --no-progress");
  ASSERT_EQ(e2.code, 0) << e2.out;
  auto val_loss = [](const std::string& out) {
    const size_t at = out.find("val loss");
    return at == std::string::npos ? std::string("(none)") : out.substr(at, 14);  // 3 decimals
  };
  EXPECT_EQ(val_loss(e1.out), val_loss(e2.out)) << e1.out << "\n" << e2.out;
  // The base in another format (no recipe of its own): the adapter's run supplies the data.
  const std::string hf = (dir_ / "base_hf").string();
  ASSERT_EQ(run("convert " + base + " " + hf + " --to hf").code, 0);
  const CliResult e3 = run("eval " + hf + " --adapter " + adapter + " --no-progress");
  ASSERT_EQ(e3.code, 0) << e3.out;
  EXPECT_EQ(val_loss(e3.out), val_loss(e1.out)) << e3.out << "\n" << e1.out;
  const CliResult g =
      run("generate " + base + " --adapter " + adapter + " -n 4 --seed 1 --tokenizer byte");
  EXPECT_EQ(g.code, 0) << g.out;
  // The byte tokenizer has fewer ids than the model (260): sampling is restricted, and it says so.
  EXPECT_NE(g.out.find("note: tokenizer 'byte' has 257 ids and the model 260"), std::string::npos)
      << g.out;
  std::ofstream(dir_ / "doc.txt") << "some text to score, long enough for two windows of 32.\n";
  EXPECT_EQ(run("score " + base + " --adapter " + adapter + " --tokenizer byte --text " +
                (dir_ / "doc.txt").string() + " --out " + (dir_ / "s.jsonl").string())
                .code,
            0);
  expect_error(run("info " + recipe_ + " --set retrofit.enabled=true --set retrofit.checkpoint=" +
                   base + " --set retrofit.lora.rank=-1"),
               "retrofit.lora.rank must be >= 0, got -1");
}
