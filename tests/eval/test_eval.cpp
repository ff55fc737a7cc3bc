// The evaluation harness (src/eval/) against brute force on a tiny random model: per-token
// log-likelihoods equal log-softmax of a separate forward, acc / acc_norm on constructed cases,
// task files with bad lines fail naming file:line, a recipe must agree with the model. The
// perplexity paths are in test_eval_perplexity.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "config/recipe.h"
#include "eval/eval_model.h"
#include "eval/harness.h"
#include "eval/tasks.h"
#include "eval_test_util.h"
#include "test_util.h"
#include "tokenizer/tiny_sp_tokenizer.h"
#include "train/trainer.h"

namespace fs = std::filesystem;
using namespace attnlab;

using test::brute_force_argmax;
using test::brute_force_logprobs;
using test::bytes_of;
using test::cpu;
using test::EvalTest;
using test::make_run;
using test::write;

TEST_F(EvalTest, ChoiceLogLikelihoodIsTheSumOfLogSoftmax) {
  const ModelSource src = inspect_model_source(run_);
  EvalModel model(src, cpu());
  ByteTokenizer tok;
  Task task;
  task.name = "t";
  task.path = "t.jsonl";
  task.kind = TaskKind::multiple_choice;
  task.examples.push_back({1, {{"Question: up?", "sky"}, {"Question: up?", "ground floor"}}, 0});
  task.examples.push_back({2, {{"Q:\n", "a"}, {"Q:\n", " b"}, {"Q:\n", ""}}, 2});
  const auto ll = option_loglikelihoods(model, tok, task);
  ASSERT_EQ(ll.size(), 2u);
  for (size_t e = 0; e < 2; ++e) {
    for (size_t k = 0; k < task.examples[e].options.size(); ++k) {
      const ScoredPair p = scored_pair(task.examples[e].options[k]);
      const std::vector<int32_t> ctx = bytes_of(p.context), cont = bytes_of(p.continuation);
      std::vector<int32_t> all = ctx;
      all.insert(all.end(), cont.begin(), cont.end());
      const auto lp = brute_force_logprobs(src, all);
      double expect = 0.0;
      for (size_t i = ctx.size() - 1; i < lp.size(); ++i) expect += lp[i];
      EXPECT_NEAR(ll[e][k], expect, 1e-4) << e << " " << k;
    }
  }
  // The space rule (lm-eval): " " + choice after a query without trailing whitespace, also before
  // a choice starting with whitespace (lm-eval's LAMBADA line 4463: " \n\nrecorder"); the query's
  // trailing whitespace moves into the continuation, and then no space is added.
  EXPECT_EQ(scored_pair({"Question: up?", "sky"}).continuation, " sky");
  EXPECT_EQ(scored_pair({"Q:\n", "a"}).context, "Q:");
  EXPECT_EQ(scored_pair({"Q:\n", "a"}).continuation, "\na");
  EXPECT_EQ(scored_pair({"Q:", " b"}).continuation, "  b");
  EXPECT_EQ(scored_pair({"saw the", "\n\nrecorder"}).continuation, " \n\nrecorder");
  EXPECT_EQ(scored_pair({"Q:", ""}).continuation, " ");
  EXPECT_EQ(scored_pair({"Q:\n", ""}).continuation, "\n");
  // Whitespace as Python's str.isspace (lm-eval's rstrip): NBSP, U+3000 and U+2028 too, in UTF-8;
  // a stray continuation byte or other text ends it.
  EXPECT_EQ(scored_pair({"Q:\xc2\xa0", "a"}).context, "Q:");
  EXPECT_EQ(scored_pair({"Q:\xc2\xa0", "a"}).continuation,
            "\xc2\xa0"
            "a");
  EXPECT_EQ(scored_pair({"Q: \xe3\x80\x80\xe2\x80\xa8", "a"}).continuation,
            " \xe3\x80\x80\xe2\x80\xa8"
            "a");
  EXPECT_EQ(scored_pair({"Q:\xa0", "a"}).continuation, " a");      // not UTF-8: not space
  EXPECT_EQ(scored_pair({"Q:\xc3\xa9", "a"}).continuation, " a");  // e-acute
  EXPECT_EQ(scored_pair({"\xe2\x80\x80", "a"}).context, "");       // all whitespace (U+2000)
  EXPECT_EQ(lm_eval_query("Question: up?\xe3\x80\x80"), "Question: up?\nAnswer:");
}

TEST_F(EvalTest, AccAndAccNormOnAConstructedCase) {
  const ModelSource src = inspect_model_source(run_);
  EvalModel model(src, cpu(2));
  ByteTokenizer tok;
  // The options' log-likelihoods from brute force decide the expected answers.
  // load_task gives "Question:" queries lm-eval's "\nAnswer:" cue (the default prompt).
  auto ll_of = [&](const std::string& q, const std::string& c) {
    const ScoredPair p = scored_pair({lm_eval_query(q), c});
    std::vector<int32_t> all = bytes_of(p.context + p.continuation);
    const auto lp = brute_force_logprobs(src, all);
    double s = 0.0;
    for (size_t i = p.context.size() - 1; i < lp.size(); ++i) s += lp[i];
    return s;
  };
  const std::string q = "Question: w?";
  // acc_norm divides by characters (lm-eval's len(choice)): "\u00e9\u00e9" is 2, not 4 bytes.
  const std::vector<std::string> choices = {"a", "bbbbbbbbb", "c\u00e9\u00e9"};
  const std::vector<double> chars = {1, 9, 3};
  std::vector<double> ll, norm;
  for (size_t k = 0; k < choices.size(); ++k) {
    ll.push_back(ll_of(q, choices[k]));
    norm.push_back(ll.back() / chars[k]);
  }
  const int best = int(std::max_element(ll.begin(), ll.end()) - ll.begin());
  const int best_norm = int(std::max_element(norm.begin(), norm.end()) - norm.begin());
  const int wrong = (best + 1) % 3 == best_norm ? (best + 2) % 3 : (best + 1) % 3;
  // Four examples: gold = best (acc 1), best_norm (acc_norm 1), and twice a wrong option.
  std::string lines;
  for (int g : {best, best_norm, wrong, wrong})
    lines += nlohmann::json{{"query", q}, {"choices", choices}, {"gold", g}}.dump() + "\n";
  write(tmp_.path() / "mc.jsonl", lines);
  const TaskResult r = run_task(model, tok, load_task("mc", (tmp_.path() / "mc.jsonl").string()));
  double acc = 0, acc_norm = 0;
  for (int g : {best, best_norm, wrong, wrong}) {
    acc += (g == best) / 4.0;
    acc_norm += (g == best_norm) / 4.0;
  }
  EXPECT_EQ(r.examples, 4);
  EXPECT_EQ(r.requests, 12);
  EXPECT_DOUBLE_EQ(r.acc, acc);
  EXPECT_DOUBLE_EQ(r.acc_norm, acc_norm);
  EXPECT_GT(r.acc_stderr, 0.0);
}

TEST_F(EvalTest, AccNormDividesByCharactersNotBytes) {
  // Find, on this model, a pair {ASCII, "\u00e9" x n} whose acc_norm decision differs between
  // dividing by characters (n) and by UTF-8 bytes (2n); run_task must take the characters' one.
  const ModelSource src = inspect_model_source(run_);
  EvalModel model(src, cpu());
  ByteTokenizer tok;
  const std::string q = "Question: w?";
  auto ll_of = [&](const std::string& c) {
    const ScoredPair p = scored_pair({lm_eval_query(q), c});
    const auto lp = brute_force_logprobs(src, bytes_of(p.context + p.continuation));
    double s = 0.0;
    for (size_t i = p.context.size() - 1; i < lp.size(); ++i) s += lp[i];
    return s;
  };
  int found = -1;
  std::vector<std::string> choices;
  for (const char* first : {"a", "b", "zz", "q", "xyz", "mm"}) {
    for (int n = 1; n <= 5 && found < 0; ++n) {
      std::string accented;
      for (int i = 0; i < n; ++i) accented += "\u00e9";
      const double l0 = ll_of(first), l1 = ll_of(accented);
      const double len0 = double(std::string(first).size());
      const int by_chars = l1 / n > l0 / len0 ? 1 : 0, by_bytes = l1 / (2 * n) > l0 / len0 ? 1 : 0;
      if (by_chars != by_bytes) {
        found = by_chars;
        choices = {first, accented};
      }
    }
    if (found >= 0) break;
  }
  ASSERT_GE(found, 0) << "no pair separates characters from bytes on this model";
  write(tmp_.path() / "mc.jsonl",
        nlohmann::json{{"query", q}, {"choices", choices}, {"gold", found}}.dump() + "\n");
  const TaskResult r = run_task(model, tok, load_task("mc", (tmp_.path() / "mc.jsonl").string()));
  EXPECT_EQ(r.acc_norm, 1.0) << choices[0] << " | " << choices[1];
}

TEST_F(EvalTest, SchemaAndLanguageModelingAgainstBruteForce) {
  const ModelSource src = inspect_model_source(run_);
  EvalModel model(src, cpu());
  ByteTokenizer tok;
  // Winogrande: the shared continuation after each option.
  write(
      tmp_.path() / "wg.jsonl",
      R"({"context_options": ["The cat sat so the cat", "The cat sat so the mat"], "continuation": "was warm.", "gold": 1})"
      "\n");
  const Task wg = load_task("wg", (tmp_.path() / "wg.jsonl").string());
  EXPECT_EQ(wg.kind, TaskKind::schema);
  const auto ll = option_loglikelihoods(model, tok, wg);
  for (int k = 0; k < 2; ++k) {
    const std::string ctx = wg.examples[0].options[size_t(k)].context;
    const auto lp = brute_force_logprobs(src, bytes_of(ctx + " was warm."));
    double s = 0.0;
    for (size_t i = ctx.size() - 1; i < lp.size(); ++i) s += lp[i];
    EXPECT_NEAR(ll[0][size_t(k)], s, 1e-4);
  }
  const TaskResult wr = run_task(model, tok, wg);
  EXPECT_DOUBLE_EQ(wr.acc, (ll[0][1] > ll[0][0]) ? 1.0 : 0.0);
  EXPECT_TRUE(std::isnan(wr.acc_norm));

  // LAMBADA: acc = every continuation token greedy; perplexity = exp(-mean log-likelihood).
  // The first example's continuation is the model's own greedy byte (so acc counts it).
  const std::string c0 = "the end of the";
  std::vector<int32_t> pre = bytes_of(c0 + " ");
  const int g = brute_force_argmax(src, pre);
  std::string greedy_cont(1, char(g));
  std::string lines = nlohmann::json{{"context", c0 + " "}, {"continuation", greedy_cont}}.dump() +
                      "\n" + nlohmann::json{{"context", "a b"}, {"continuation", "cd"}}.dump() +
                      "\n";
  write(tmp_.path() / "lm.jsonl", lines);
  const Task lm = load_task("lm", (tmp_.path() / "lm.jsonl").string());
  std::vector<std::vector<bool>> greedy;
  const auto lll = option_loglikelihoods(model, tok, lm, &greedy);
  double mean_ll = 0.0, acc = 0.0;
  for (size_t e = 0; e < 2; ++e) {
    const ScoredPair p = scored_pair(lm.examples[e].options[0]);
    std::vector<int32_t> all = bytes_of(p.context + p.continuation);
    const auto lp = brute_force_logprobs(src, all);
    double s = 0.0;
    bool all_greedy = true;
    for (size_t i = p.context.size() - 1; i < lp.size(); ++i) {
      s += lp[i];
      std::vector<int32_t> prefix(all.begin(), all.begin() + ptrdiff_t(i) + 1);
      all_greedy = all_greedy && brute_force_argmax(src, prefix) == all[i + 1];
    }
    EXPECT_NEAR(lll[e][0], s, 1e-4);
    EXPECT_EQ(greedy[e][0], all_greedy) << e;
    mean_ll += s / 2.0;
    acc += all_greedy / 2.0;
  }
  // Example 0: the context's trailing space moves into the continuation: " " then g; the space
  // is greedy only if the model says so, so compare with the brute-force flags above.
  const TaskResult lr = run_task(model, tok, lm);
  EXPECT_DOUBLE_EQ(lr.acc, acc);
  EXPECT_NEAR(lr.perplexity, std::exp(-mean_ll), 1e-6 * std::exp(-mean_ll));
  // Its standard error: perplexity x the sample sd of the two log-likelihoods / sqrt(2).
  const double sd = std::fabs(lll[0][0] - lll[1][0]) / std::sqrt(2.0);
  EXPECT_NEAR(lr.perplexity_stderr, lr.perplexity * sd / std::sqrt(2.0),
              1e-6 * lr.perplexity_stderr);
}

TEST_F(EvalTest, LongContextsKeepTheirRightmostTokens) {
  const ModelSource src = inspect_model_source(run_);
  EvalModel model(src, cpu());
  ByteTokenizer tok;
  std::string q;
  for (int i = 0; i < 12; ++i) q += "word" + std::to_string(i) + " ";
  q += "end";  // 70 bytes > block_size 32
  bool cut = false;
  const ScoreRequest r = option_request(tok, {q, "xyz"}, model.max_len(), false, "here", &cut);
  EXPECT_TRUE(cut);
  ASSERT_EQ(r.inputs.size(), 32u);
  const std::vector<int32_t> all = bytes_of(q + " xyz");
  // The input is the last 33 tokens minus the last; the 4 continuation tokens are the targets.
  for (size_t i = 0; i < 32; ++i) EXPECT_EQ(r.inputs[i], all[all.size() - 33 + i]);
  int scored = 0;
  for (int32_t t : r.targets) scored += t != GPT::kIgnoreIndex;
  EXPECT_EQ(scored, 4);
  Task task{"long", "long.jsonl", TaskKind::multiple_choice, {{1, {{q, "xyz"}, {q, "w"}}, 0}}};
  const TaskRequests requests = task_requests(tok, task, model.max_len());
  EXPECT_EQ(requests.truncated, 2);
  const auto ll = option_loglikelihoods(model, task, requests);
  const std::vector<int32_t> window(all.end() - 33, all.end());
  const auto lp = brute_force_logprobs(src, window);
  double s = 0.0;
  for (size_t i = 28; i < 32; ++i) s += lp[i];
  EXPECT_NEAR(ll[0][0], s, 1e-4);
  // A continuation longer than the model cannot be scored.
  test::expect_error(
      [&] {
        option_request(tok, {"q", std::string(40, 'x')}, model.max_len(), false, "f:3");
      },
      {"f:3", "longer than the model's context"});
}

TEST_F(EvalTest, TaskFileErrorsNameFileAndLine) {
  const fs::path f = tmp_.path() / "bad.jsonl";
  auto load = [&] { load_task("bad", f.string()); };
  write(f, "{\"query\": \"q\", \"choices\": [\"a\", \"b\"], \"gold\": 0}\n{\"query\": \"q\", ");
  test::expect_error(load, {"bad.jsonl:2", "invalid JSON"});
  write(f, "\n{\"query\": \"q\", \"choices\": [\"a\", \"b\"], \"gold\": 2}\n");
  test::expect_error(load, {"bad.jsonl:2", "gold 2"});
  write(f, "{\"query\": \"q\", \"choices\": [\"a\"], \"gold\": 0}\n");
  test::expect_error(load, {"bad.jsonl:1", "at least two"});
  write(f, "{\"query\": 3, \"choices\": [\"a\", \"b\"], \"gold\": 0}\n");
  test::expect_error(load, {"bad.jsonl:1", "\"query\" must be a string"});
  write(f, "{\"text\": \"x\"}\n");
  test::expect_error(load, {"bad.jsonl:1", "not a task line"});
  write(f,
        "{\"context\": \"a\", \"continuation\": \"b\"}\n"
        "{\"query\": \"q\", \"choices\": [\"a\", \"b\"], \"gold\": 0}\n");
  test::expect_error(load, {"bad.jsonl:2", "multiple_choice line in a language_modeling file"});
  write(f, "");
  test::expect_error(load, {"bad.jsonl", "no examples"});
  // An empty continuation scores log p = 0 and would always win.
  write(f, "{\"query\": \"q\", \"choices\": [\"a\", \"\"], \"gold\": 0}\n");
  test::expect_error(load, {"bad.jsonl:1", "choice 1 is empty (nothing to score)"});
  write(f, "{\"context\": \"a\", \"continuation\": \"\"}\n");
  test::expect_error(load, {"bad.jsonl:1", "the continuation is empty"});
  test::expect_error([&] { load_task("x", tmp_.path().string()); }, {"is a directory"});
  test::expect_error([&] { load_task("x", (tmp_.path() / "none.jsonl").string()); },
                     {"cannot open", "none.jsonl"});
  // limit keeps the first lines (and does not read past them).
  write(f,
        "{\"context\": \"a\", \"continuation\": \"b\"}\n{\"context\": \"c\", \"continuation\": "
        "\"d\"}\nnot json\n");
  EXPECT_EQ(load_task("ok", f.string(), 2).examples.size(), 2u);
}

TEST_F(EvalTest, PromptAppliesToMultipleChoiceQuestionsOnly) {
  write(tmp_.path() / "mc.jsonl", R"({"query": "Question: a?\n", "choices": ["x", "y"], "gold": 0})"
                                  "\n"
                                  R"({"query": "The man", "choices": ["x", "y"], "gold": 1})"
                                  "\n");
  const Task t = load_task("mc", (tmp_.path() / "mc.jsonl").string());
  EXPECT_EQ(t.cued, 1);
  EXPECT_EQ(t.examples[0].options[1].context, "Question: a?\nAnswer:");
  EXPECT_EQ(t.examples[1].options[0].context, "The man");
  const Task f = load_task("mc", (tmp_.path() / "mc.jsonl").string(), 0, TaskPrompt::file);
  EXPECT_EQ(f.cued, 0);
  EXPECT_EQ(f.examples[0].options[1].context, "Question: a?\n");
  // Schema and language-modeling contexts never get the cue.
  write(tmp_.path() / "lm.jsonl", R"({"context": "Question: a?", "continuation": "b"})"
                                  "\n");
  EXPECT_EQ(load_task("lm", (tmp_.path() / "lm.jsonl").string()).examples[0].options[0].context,
            "Question: a?");
}

TEST_F(EvalTest, ChoiceThatTokenisesToNothingIsAnError) {
  // With the byte tokenizer every non-empty string has tokens and the space rule never leaves an
  // empty continuation; a tokenizer that drops text (here: one that encodes nothing) is refused.
  struct Silent final : Tokenizer {
    std::string name() const override { return "silent"; }
    int vocab_size() const override { return 257; }
    int eot_id() const override { return 256; }
    void encode(std::string_view, std::vector<int32_t>&) const override {}
    size_t split_point(std::string_view t, size_t) const override { return t.size(); }
    std::string decode(std::span<const int32_t>) const override { return ""; }
    std::string piece(int32_t) const override { return ""; }
    std::string to_json() const override { return "{}"; }
  } silent;
  test::expect_error(
      [&] {
        option_request(silent, {"q", "a"}, 32, false, "t.jsonl:4: option 1");
      },
      {"t.jsonl:4: option 1", "tokenises to no tokens"});
  // An empty choice after a query without trailing whitespace scores the single space.
  const ScoreRequest r = option_request(ByteTokenizer(), {"q", ""}, 32, false, "x");
  ASSERT_EQ(r.inputs.size(), 1u);
  EXPECT_EQ(r.targets[0], ' ');
}

// A tokenizer with a BOS (LLaMA): an empty context is the BOS (lm-eval's prefix token; GPT-2's
// is <|endoftext|>), a non-empty one goes without it (lm-eval's default, add_bos_token false).
TEST_F(EvalTest, BosTokenizerPrefixesOnlyAnEmptyContext) {
  write(tmp_.path() / "sp.json", test::sp_json("legacy").dump());
  const auto tok = make_tokenizer("hf:" + (tmp_.path() / "sp.json").string());
  ASSERT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(document_start_id(*tok), 1);
  EXPECT_EQ(document_start_id(ByteTokenizer()), ByteTokenizer::kEot);
  const ScoreRequest empty = option_request(*tok, {"", "ab"}, 32, false, "x");
  ASSERT_FALSE(empty.inputs.empty());
  EXPECT_EQ(empty.inputs[0], 1);
  std::vector<int32_t> ctx;
  tok->encode("hello", ctx);
  const ScoreRequest r = option_request(*tok, {"hello", "ab"}, 32, false, "x");
  ASSERT_GT(r.inputs.size(), ctx.size());
  EXPECT_EQ(std::vector<int32_t>(r.inputs.begin(), r.inputs.begin() + int64_t(ctx.size())), ctx);
  EXPECT_EQ(std::count(r.inputs.begin(), r.inputs.end(), 1), 0);
  // The GPT-2 form: an empty context is <|endoftext|>.
  const ScoreRequest g = option_request(ByteTokenizer(), {"", "ab"}, 32, false, "x");
  EXPECT_EQ(g.inputs[0], ByteTokenizer::kEot);
}

// A Focus model with the sequence-scope Sinkhorn reads later tokens, so right padding would move
// its scores with the batch's other sequences: eval batches only sequences of one length, and a
// batch of 4 scores as a batch of 1 does. (Causal models are padding-invariant as they are.)
TEST(EvalPadding, SequenceScopeFocusScoresDoNotDependOnTheBatch) {
  const std::string run =
      make_run("seqscope", 257, "byte", 32,
               {"attention.type=focus", "attention.focus.groups=4", "attention.focus.d_g=8",
                "attention.focus.local_window=2", "attention.focus.sinkhorn_scope=sequence",
                "attention.focus.eval_routing=soft"});
  const ModelSource src = inspect_model_source(run);
  std::vector<ScoreRequest> reqs;
  for (const char* text : {"the cat sat on the mat and", "a dog", "one two three", "x y",
                           "longer text than the others here", "mid size"}) {
    ScoreRequest r;
    r.inputs = bytes_of(text);
    r.targets.assign(r.inputs.size(), GPT::kIgnoreIndex);
    for (size_t i = 0; i + 1 < r.inputs.size(); ++i) r.targets[i] = r.inputs[i + 1];
    reqs.push_back(r);
  }
  EvalModel one(src, cpu(1)), four(src, cpu(4));
  const auto a = one.score(reqs), b = four.score(reqs);
  ASSERT_EQ(a.size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i)
    for (size_t t = 0; t + 1 < reqs[i].inputs.size(); ++t)
      EXPECT_NEAR(a[i].logprob[t], b[i].logprob[t], 1e-5) << i << " " << t;
  fs::remove_all(run);
}

TEST_F(EvalTest, RecipeModelMustAgree) {
  const ModelSource src = inspect_model_source(run_);
  // Only data and eval keys: nothing to compare.
  Recipe data_only =
      parse_recipe("data: {source: shards, val: v/*.bin}\n", "d.yaml", {}, RecipeUse::eval);
  EXPECT_NO_THROW(check_recipe_model(data_only, data_only.given, src, run_));
  Recipe other = parse_recipe("model: {n_layer: 3, n_head: 2, n_embd: 16, bias: false}\n", "m.yaml",
                              {}, RecipeUse::eval);
  test::expect_error([&] { check_recipe_model(other, other.given, src, run_); },
                     {"model.n_layer: 3 in the recipe (m.yaml:1), 2 in the model",
                      "model.bias: false in the recipe (m.yaml:1), true in the model"});
  Recipe preset = parse_recipe("model: {preset: gpt2}\n", "p.yaml", {}, RecipeUse::eval);
  test::expect_error([&] { check_recipe_model(preset, preset.given, src, run_); },
                     {"model.n_embd: 768 in the recipe (p.yaml:1), 16 in the model"});
  // Evaluation does not need data.train (training still does).
  EXPECT_NO_THROW(parse_recipe("data: {source: shards}\n", "e.yaml", {}, RecipeUse::eval));
  test::expect_error([] { parse_recipe("data: {source: shards}\n", "e.yaml", {}); },
                     {"data.train must name the training shards"});
}

// The default batch holds 4 (CPU) sequences of up to 1,024 tokens, fewer for longer contexts (a
// LLaMA 3 / Mistral block_size would otherwise ask 16 x 32K tokens of a GPU), at least 1.
TEST_F(EvalTest, DefaultBatchShrinksWithTheContext) {
  EvalDeviceOptions d = test::cpu(0);
  EXPECT_EQ(EvalModel(inspect_model_source(run_), d).batch(), 4);  // block_size 32
  const std::string long_run = make_run("long", 257, "byte", 2048);
  const ModelSource src = inspect_model_source(long_run);
  EXPECT_EQ(EvalModel(src, d).batch(), 2);  // 4 x 1024 / 2048
  d.max_len = 512;
  EXPECT_EQ(EvalModel(src, d).batch(), 4) << "a shorter --context takes the full default";
  d.max_len = 0;
  d.batch = 7;
  EXPECT_EQ(EvalModel(src, d).batch(), 7) << "an explicit --batch is kept";
  fs::remove_all(long_run);
}
