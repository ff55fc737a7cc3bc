// The attnlab command line end to end: prepare -> train -> eval -> generate on a tiny model, and
// every kind of bad input giving a clear message and a non-zero exit without damaging earlier
// output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/unknown_option.h"
#include "data/shard.h"
#include "integration/cli_fixture.h"
#include "io/atomic_file.h"
#include "test_util.h"
#include "train/checkpoint.h"

namespace fs = std::filesystem;
using attnlab::test::Cli;
using attnlab::test::CliResult;
using attnlab::test::expect_error;
using attnlab::test::run;
using attnlab::test::run_env;

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
  EXPECT_EQ(g.out.find("slid"), std::string::npos) << g.out;
  // The run's generation_config.json sets the sampling (greedy: do_sample false); a flag given
  // replaces it. The generated text is what comes before the notes and the summary.
  const auto text = [](const std::string& out) {
    const size_t note = out.find("\nnote: ");
    return out.substr(0, note != std::string::npos ? note : out.rfind("\n["));
  };
  const std::string gen = "generate " + (dir_ / "run").string() + " -n 5 --seed 1 --tokenizer byte";
  CliResult argmax = run(gen + " -t 0");
  ASSERT_EQ(argmax.code, 0) << argmax.out;
  ASSERT_NE(text(argmax.out), text(g.out));
  std::ofstream(dir_ / "run" / "generation_config.json") << R"({"do_sample": false})";
  CliResult from_file = run(gen), flag = run(gen + " -t 1");
  fs::remove(dir_ / "run" / "generation_config.json");
  EXPECT_EQ(text(from_file.out), text(argmax.out));
  EXPECT_NE(from_file.out.find("note: greedy decoding (do_sample false in '"), std::string::npos)
      << from_file.out;
  EXPECT_EQ(text(flag.out), text(g.out));
  // Past the context (block_size 32: a 2-token prompt and 40 tokens) it slides, and says so.
  CliResult slid = run("generate " + (dir_ / "run").string() +
                       " -p ab -n 40 --seed 1 --tokenizer byte --no-stop");
  ASSERT_EQ(slid.code, 0) << slid.out;
  EXPECT_NE(slid.out.find("[2 prompt tokens, 40 generated, the context (model.block_size 32) slid "
                          "1 time(s) to its last 16 tokens, "),
            std::string::npos)
      << slid.out;
  EXPECT_NE(slid.out.find(" tok/s, KV cache 32 positions, "), std::string::npos) << slid.out;
  // Synthetic tokens have no text: a tokenizer the recipe names is not used, and that is said.
  CliResult synth = run(
      train_args("--set data.tokenizer=byte --set train.out_dir=" + (dir_ / "run_tok").string()));
  ASSERT_EQ(synth.code, 0) << synth.out;
  EXPECT_NE(synth.out.find("warning: data.tokenizer (--set 'data.tokenizer=byte') is not used: "
                           "data.source is synthetic"),
            std::string::npos)
      << synth.out;
  CliResult i = run("info " + recipe_);
  ASSERT_EQ(i.code, 0) << i.out;
  EXPECT_NE(i.out.find("FLOPs per token"), std::string::npos);
  EXPECT_NE(i.out.find("PaLM's 12 L d T halved for the causal mask"), std::string::npos) << i.out;
  // The synthetic data lives in host memory beside the estimate (8000 + 2048 tokens, 4 bytes).
  EXPECT_NE(i.out.find("synthetic data    39.25 KiB of host memory besides the total"),
            std::string::npos)
      << i.out;
  const CliResult z = run("info " + recipe_ + " --set distributed.zero=1");
  EXPECT_NE(z.out.find("(distributed.zero 1: with W ranks each holds 1/W of the optimizer state"),
            std::string::npos)
      << z.out;
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

// A Hugging Face tokenizer.json of GPT-2's byte-level BPE without merges: 256 byte ids in GPT-2's
// byte order (printable bytes first), then <|endoftext|> (257 ids, as the byte tokenizer).
static std::string byte_level_bpe_json() {
  std::vector<int> order;
  for (int b = 0; b < 256; ++b)
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) order.push_back(b);
  int extra = 0;
  std::vector<int> code(256);
  for (int b : order) code[size_t(b)] = b;
  for (int b = 0; b < 256; ++b)
    if (std::find(order.begin(), order.end(), b) == order.end()) {
      order.push_back(b);
      code[size_t(b)] = 256 + extra++;
    }
  nlohmann::json vocab = nlohmann::json::object();
  for (size_t id = 0; id < order.size(); ++id) {
    const int c = code[size_t(order[id])];
    std::string utf8 = c < 0x80 ? std::string(1, char(c))
                                : std::string{char(0xc0 | (c >> 6)), char(0x80 | (c & 0x3f))};
    vocab[utf8] = id;
  }
  nlohmann::json j = {
      {"added_tokens", {{{"id", 256}, {"content", "<|endoftext|>"}, {"special", true}}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
  return j.dump();
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
  // Its recipe.yaml names that tokenizer.json, so the run reruns from it as it is (it said the
  // default `byte`, refused against the shards' tokenizer).
  EXPECT_NE(attnlab::io::read_file((dir_ / "run" / "recipe.yaml").string())
                .find("tokenizer: \"" + (dir_ / "shards" / "tokenizer.json").string() + "\""),
            std::string::npos);
  const CliResult again = run("train " + (dir_ / "run" / "recipe.yaml").string() +
                              " --set train.out_dir=" + (dir_ / "run_again").string() +
                              " --set train.steps=1 --set schedule.warmup_steps=0");
  ASSERT_EQ(again.code, 0) << again.out;
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
        "is not the tokenizer the shards were prepared with");
  }
  // The same number of ids mapped otherwise (a byte-level BPE without merges, ids in GPT-2's
  // byte order, against the byte tokenizer the shards were prepared with): refused too.
  const std::string hf = (dir_ / "bytes_bpe.json").string();
  std::ofstream(hf) << byte_level_bpe_json();
  expect_error(
      run(train_args("--set data.source=shards --set data.train=" + (dir_ / "shards").string() +
                     "/train_*.bin --set eval.at_end=false --set data.tokenizer=hf:" + hf)),
      "is not the tokenizer the shards were prepared with (" + (dir_ / "shards").string() +
          "/tokenizer.json): id 0 has other bytes");
  // The same with a wildcard in the glob's directory part (the check looked for
  // shard[s]/tokenizer.json and never ran).
  expect_error(run(train_args(
                   "--set data.source=shards --set data.train=" + dir_.string() +
                   "/shard[s]/train_*.bin --set eval.at_end=false --set data.tokenizer=hf:" + hf)),
               "is not the tokenizer the shards were prepared with");
  // Shards of two tokenizers under one glob: refused, naming both files.
  fs::create_directories(dir_ / "shards2");
  fs::copy_file(dir_ / "shards" / "train_000000.bin", dir_ / "shards2" / "train_000000.bin");
  fs::copy_file(hf, dir_ / "shards2" / "tokenizer.json");
  const CliResult mixed =
      run(train_args("--set data.source=shards --set data.train=" + dir_.string() +
                     "/shards*/train_*.bin --set "
                     "eval.at_end=false"));
  for (const char* needle : {"holds shards prepared with different tokenizers",
                             "shards2/tokenizer.json", "id 0 has other bytes"})
    expect_error(mixed, needle);
  fs::remove_all(dir_ / "shards2");
  // Shard globs with the synthetic source (data.source left at its default) are not read: said.
  CliResult syn = run("train " + recipe_ + " --set train.out_dir=" + (dir_ / "run4").string() +
                      " --set data.train=" + (dir_ / "shards").string() +
                      "/train_*.bin --set train.steps=1 --set eval.at_end=false");
  ASSERT_EQ(syn.code, 0) << syn.out;
  EXPECT_NE(syn.out.find("data.train ('" + (dir_ / "shards").string() +
                         "/train_*.bin') is not read: data.source is synthetic"),
            std::string::npos)
      << syn.out;
  // One beside the shards that cannot load is said (the checkpoints then carry none).
  fs::rename(dir_ / "shards" / "tokenizer.json", dir_ / "tokenizer.json.aside");
  std::ofstream(dir_ / "shards" / "tokenizer.json") << "{bad";
  CliResult bad = run("train " + recipe_ + " --set train.out_dir=" + (dir_ / "run3").string() +
                      " --set data.source=shards --set data.train=" + (dir_ / "shards").string() +
                      "/train_*.bin --set eval.at_end=false");
  ASSERT_EQ(bad.code, 0) << bad.out;
  EXPECT_NE(bad.out.find("warning: the tokenizer.json beside data.train (" +
                         (dir_ / "shards").string() + "/tokenizer.json) cannot be loaded"),
            std::string::npos)
      << bad.out;
  fs::rename(dir_ / "tokenizer.json.aside", dir_ / "shards" / "tokenizer.json");
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
  EXPECT_EQ(back.out.find("another window order"), std::string::npos) << back.out;
  // Another data.seed in the middle of an epoch: the position counts windows of the old order.
  const CliResult seed =
      run(train_args("--set checkpoint.every=2 --set train.steps=6 "
                     "--set data.seed=77 --resume " +
                     (dir_ / "run").string()));
  ASSERT_EQ(seed.code, 0) << seed.out;
  EXPECT_NE(seed.out.find("data.seed differs from the checkpoint's: the resumed epoch 0 "
                          "continues at window"),
            std::string::npos)
      << seed.out;
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

// The closing line says what this session ran: its steps (a resume: which), time and last train
// loss, with the validation loss where the run evaluated (also with evaluation off); --profile
// evaluates nothing (its forwards would fall inside the capture range).
TEST_F(Cli, ClosingLineSaysWhatThisSessionRan) {
  const std::string no_eval = " --set eval.every=0 --set eval.at_end=false";
  CliResult t = run(train_args("--set checkpoint.at_end=true" + no_eval));
  ASSERT_EQ(t.code, 0) << t.out;
  EXPECT_NE(t.out.find("done: 3 steps in "), std::string::npos) << t.out;
  EXPECT_NE(t.out.find(" | train loss "), std::string::npos) << t.out;
  EXPECT_EQ(t.out.find("val loss"), std::string::npos) << t.out;
  const std::string resume = " --resume " + (dir_ / "run").string();
  CliResult r = run(train_args("--set train.steps=5 --set eval.at_end=true" + resume));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("done: steps 4-5 (2 this session) in "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| final val loss "), std::string::npos) << r.out;
  CliResult prof = run("train " + recipe_ + " --set train.out_dir=" + (dir_ / "prof").string() +
                       " --set eval.at_start=true --set eval.every=1 --profile 2");
  ASSERT_EQ(prof.code, 0) << prof.out;
  EXPECT_NE(prof.out.find("done: 2 steps in "), std::string::npos) << prof.out;
  EXPECT_EQ(prof.out.find("val loss"), std::string::npos) << prof.out;
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
  expect_error(run("train " + recipe_ + " --profile -1"), "--profile: must be > 0, got -1");
  expect_error(run("train " + recipe_ + " --profile 0"), "--profile: must be > 0, got 0");
  // An empty --resume (a shell variable unset) is refused, not a fresh run.
  expect_error(run(train_args("--resume ''")), "--resume: needs a run or checkpoint directory");
  expect_error(run("eval " + recipe_ + " --batch -1"), "--batch: must be >= 0, got -1");
  expect_error(run("generate " + recipe_ + " --seed 99999999999999999999999"),
               "--seed: must be <= 18446744073709551615");
  expect_error(run("prepare " + recipe_ + " --jsonl-field '' -o " + (dir_ / "p").string()),
               "--jsonl-field: needs a field name");
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
  expect_error(
      run("eval " + (dir_ / "run").string() + " --out " +
          (dir_ / "no_such_dir" / "r.json").string()),
      "eval --out '" + (dir_ / "no_such_dir" / "r.json").string() + "': cannot write into");
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
