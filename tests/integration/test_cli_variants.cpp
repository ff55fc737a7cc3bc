// The attnlab command line end to end for the attention variants and their checkpoints: eval's
// harness and scores, Focus's and SFA's evaluation keys, retrofit and LoRA (the fixture:
// cli_fixture.h; the core commands and bad input: test_cli.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "data/shard.h"
#include "integration/cli_fixture.h"
#include "test_util.h"

namespace fs = std::filesystem;
using attnlab::test::Cli;
using attnlab::test::CliResult;
using attnlab::test::expect_error;
using attnlab::test::run;

// attnlab eval MODEL: the checkpoint's own model and validation data by default; tasks, text and
// shards from flags (no recipe, no data.train); JSON results; a disagreeing recipe is refused.
TEST_F(Cli, EvalHarnessAndScore) {
  ASSERT_EQ(run(train_args()).code, 0);
  const std::string model = (dir_ / "run").string();
  CliResult v = run("eval " + model + " --set eval.batches=1000 --no-progress");
  ASSERT_EQ(v.code, 0) << v.out;
  // val_tokens 2048, seq_len 16: 127 whole windows, scored although 127 is odd (micro_batch 2).
  EXPECT_NE(v.out.find("2032 tokens, 127/127 windows"), std::string::npos) << v.out;
  // A run directory: the checkpoint it resolved to is named.
  EXPECT_NE(v.out.find("(attnlab step_"), std::string::npos) << v.out;

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
  attnlab::write_shard((dir_ / "empty.bin").string(), std::vector<int32_t>{}, 260);
  expect_error(run("eval " + model + " --shards " + (dir_ / "empty.bin").string()),
               "no token to score (1 file(s), none with two tokens or more)");
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

// score --out and eval --out are checked before the work (a directory is refused up front), and
// a refused score leaves an existing file as it was (it was truncated first).
TEST_F(Cli, ScoreAndEvalOutputsAreCheckedFirstAndKeptOnError) {
  ASSERT_EQ(run(train_args()).code, 0);
  const std::string model = (dir_ / "run").string();
  std::ofstream(dir_ / "keep.jsonl") << "keep\n";
  std::ofstream(dir_ / "oov.txt") << "1 2 99999\n";
  expect_error(run("score " + model + " --tokens " + (dir_ / "oov.txt").string() + " -o " +
                   (dir_ / "keep.jsonl").string()),
               "outside the model's vocabulary");
  // A uint32 shard's id of 2^31 or more reads as negative: -1 was scored as an ignored target
  // (logprob 0, counted in the mean).
  attnlab::write_shard((dir_ / "big.bin").string(), std::vector<int32_t>{1, 2, 3, 4}, 70000);
  {
    std::fstream f(dir_ / "big.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-4, std::ios::end);
    const uint32_t big = 0xFFFFFFFFu;
    f.write(reinterpret_cast<const char*>(&big), sizeof(big));
  }
  expect_error(run("score " + model + " --tokens " + (dir_ / "big.bin").string()),
               "entry 3 (counting from 0) is token 4294967295, outside the model's vocabulary");
  std::ifstream kept(dir_ / "keep.jsonl");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), "keep\n");
  fs::create_directories(dir_ / "adir");
  std::ofstream(dir_ / "ok.txt") << "1 2 3\n";
  expect_error(run("score " + model + " --tokens " + (dir_ / "ok.txt").string() + " -o " +
                   (dir_ / "adir").string()),
               "score --out '" + (dir_ / "adir").string() + "' is a directory");
  expect_error(run("eval " + model + " --no-progress --out " + (dir_ / "adir").string()),
               "eval --out '" + (dir_ / "adir").string() + "' is a directory");
  const CliResult ok = run("score " + model + " --tokens " + (dir_ / "ok.txt").string() + " -o " +
                           (dir_ / "keep.jsonl").string());
  ASSERT_EQ(ok.code, 0) << ok.out;
  std::ifstream written(dir_ / "keep.jsonl");
  const std::string lines(std::istreambuf_iterator<char>(written), {});
  EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n'), 3) << lines;
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
    EXPECT_EQ(r["attention_eval_soft"], "focus soft gate") << line;         // what val_loss_soft is
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
  EXPECT_NE(resumed.out.find("done: steps 4-5 (2 this session)"), std::string::npos) << resumed.out;
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
  // Another variant's key is named as not used (it was ignored silently).
  const CliResult other = run("eval " + run_dir + " --no-progress --set attention.focus.groups=4");
  ASSERT_EQ(other.code, 0) << other.out;
  EXPECT_NE(other.out.find("note: attention.focus.groups (--set 'attention.focus.groups=4') is not "
                           "used: the model's attention is sfa"),
            std::string::npos)
      << other.out;
  // generate decodes with the sparse cache, and says so (it said nothing).
  const CliResult gen = run("generate " + run_dir + " -n 2 --tokenizer byte");
  ASSERT_EQ(gen.code, 0) << gen.out;
  EXPECT_NE(gen.out.find("note: attention: sfa k 1 of 8 (sparse KV cache)"), std::string::npos)
      << gen.out;
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
  // Focus with a LoRA: the LoRA merges, Focus has no GPT-2 form, and the refusal points at the
  // base (the merge reset the retrofit before the hint was taken from it).
  const std::string fl = (dir_ / "focus_lora").string();
  ASSERT_EQ(run("train " + recipe_ + lora + " --set retrofit.train_roles=[adapter,attention]" +
                " --set attention.type=focus --set train.out_dir=" + fl)
                .code,
            0);
  expect_error(run("convert " + fl + " " + (dir_ / "fl_hf").string() + " --to hf"),
               "this is a retrofit of '" + base + "': convert that base instead");
}
