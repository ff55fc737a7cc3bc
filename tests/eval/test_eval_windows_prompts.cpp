// Evaluation pieces that need no trained fixture of test_eval.cpp: the sliding windows' cover,
// lm-eval's prompt and character lengths, and (with ATTNLAB_SHARED_DATA) the real task files
// scored with GPT-2's tokenizer.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "eval/eval_model.h"
#include "eval/harness.h"
#include "eval/perplexity.h"
#include "eval/tasks.h"
#include "eval_test_util.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace attnlab;
using test::cpu;
using test::make_run;

TEST(SlidingWindows, EveryTargetOnceAndStrideEqualsContextIsNonOverlapping) {
  for (int64_t n : {0, 1, 2, 5, 31, 32, 33, 64, 65, 100}) {
    for (int context : {1, 4, 16}) {
      for (int stride = 1; stride <= context; ++stride) {
        std::vector<int> count(size_t(std::max<int64_t>(n, 1)), 0);
        for (const Window& w : sliding_windows(n, context, stride)) {
          ASSERT_LE(w.length, context);
          ASSERT_LE(w.begin + w.length, std::max<int64_t>(n - 1, 0));
          for (int i = w.first_scored; i < w.length; ++i) {
            ++count[size_t(w.begin + i + 1)];
            // Left context: everything in the window, at least context - stride after window 0.
            if (w.begin > 0) {
              EXPECT_GE(i, context - stride);
            }
          }
        }
        for (int64_t p = 1; p < n; ++p) EXPECT_EQ(count[size_t(p)], 1) << n << " " << p;
        if (n > 0) {
          EXPECT_EQ(count[0], 0);
        }
      }
    }
  }
  // stride == context: windows [kN, kN + N] as in the trainer's validation, the last one partial.
  const auto w = sliding_windows(37, 8, 8);
  ASSERT_EQ(w.size(), 5u);
  for (size_t k = 0; k < w.size(); ++k) {
    EXPECT_EQ(w[k].begin, int64_t(k) * 8);
    EXPECT_EQ(w[k].first_scored, 0);
    EXPECT_EQ(w[k].length, k < 4 ? 8 : 4);
  }
  test::expect_error([] { sliding_windows(10, 4, 5); }, {"stride", "between 1 and the context"});
}

TEST(EvalPrompt, LmEvalCueAndCharacterLengths) {
  // lm-eval's ARC / PIQA prompt: "Question: {q}\nAnswer:", the query's trailing whitespace dropped.
  EXPECT_EQ(lm_eval_query("Question: up?"), "Question: up?\nAnswer:");
  EXPECT_EQ(lm_eval_query("Question: up?\n"), "Question: up?\nAnswer:");
  EXPECT_EQ(lm_eval_query("Question: up? \t\n"), "Question: up?\nAnswer:");
  // Queries that are not questions, or carry the cue already, stay as they are.
  EXPECT_EQ(lm_eval_query("The man walks"), "The man walks");
  EXPECT_EQ(lm_eval_query(" Question: up?"), " Question: up?");
  EXPECT_EQ(lm_eval_query("Question: up?\nAnswer:"), "Question: up?\nAnswer:");
  EXPECT_EQ(lm_eval_query("Question: up?\nAnswer: "), "Question: up?\nAnswer: ");
  EXPECT_EQ(parse_task_prompt("lm-eval"), TaskPrompt::lm_eval);
  EXPECT_EQ(parse_task_prompt("file"), TaskPrompt::file);
  test::expect_error([] { parse_task_prompt("lm_eval"); }, {"--prompt", "lm-eval", "file"});
  EXPECT_EQ(utf8_length(""), 0u);
  EXPECT_EQ(utf8_length("abc"), 3u);
  EXPECT_EQ(utf8_length("caf\u00e9"), 4u);         // 5 bytes
  EXPECT_EQ(utf8_length("\u20ac\U0001F600"), 2u);  // 3 + 4 bytes
}

// The real task files with the GPT-2 tokenizer on a tiny random model: a few examples each.
TEST(EvalSharedData, RealTaskFilesWithGpt2) {
  const char* root = std::getenv("ATTNLAB_SHARED_DATA");
  if (!root) GTEST_SKIP() << "ATTNLAB_SHARED_DATA is not set";
  const fs::path data(root);
  const std::string gpt2 = "gpt2:" + (data / "gpt2-vocab").string();
  const std::string run = make_run("gpt2", 50257, gpt2, 256);
  const ModelSource src = inspect_model_source(run);
  EvalModel model(src, cpu(8));
  auto tok = eval_tokenizer(src, "", src.config.vocab_size);
  const std::pair<const char*, TaskKind> files[] = {
      {"piqa", TaskKind::multiple_choice},
      {"arc_easy", TaskKind::multiple_choice},
      {"arc_challenge", TaskKind::multiple_choice},
      {"winogrande", TaskKind::schema},
      {"lambada_openai", TaskKind::language_modeling}};
  for (const auto& [name, kind] : files) {
    const Task t = load_task(name, (data / "eval" / (std::string(name) + ".jsonl")).string(), 3);
    EXPECT_EQ(t.kind, kind) << name;
    ASSERT_EQ(t.examples.size(), 3u);
    const TaskResult r = run_task(model, *tok, t);
    EXPECT_GE(r.acc, 0.0);
    EXPECT_LE(r.acc, 1.0);
    EXPECT_EQ(r.examples, 3);
  }
  // ARC: the choice's tokens are those of " " + choice; PIQA (query ends in "\n"): "\n" + choice.
  const Task arc = load_task("arc", (data / "eval" / "arc_easy.jsonl").string(), 1);
  const TaskOption& o = arc.examples[0].options[0];
  const ScoreRequest r = option_request(*tok, o, 32, false, "arc");
  std::vector<int32_t> cont;
  tok->encode(" " + o.continuation, cont);
  std::vector<int32_t> scored;
  for (size_t i = 0; i < r.targets.size(); ++i)
    if (r.targets[i] != GPT::kIgnoreIndex) scored.push_back(r.targets[i]);
  EXPECT_EQ(scored, cont);
  // Both get lm-eval's prompt "Question: ...\nAnswer:"; PIQA's query ends in "\n", which the cue
  // replaces, so its choices are " " + choice too (with --prompt file: "\n" + choice).
  EXPECT_EQ(arc.cued, 1);
  EXPECT_EQ(o.context.substr(o.context.size() - 8), "\nAnswer:");
  const Task piqa = load_task("piqa", (data / "eval" / "piqa.jsonl").string(), 1);
  const TaskOption& po = piqa.examples[0].options[0];
  EXPECT_EQ(po.context.substr(po.context.size() - 9), "?\nAnswer:") << po.context;
  EXPECT_EQ(scored_pair(po).continuation, " " + po.continuation);
  const Task piqa_file =
      load_task("piqa", (data / "eval" / "piqa.jsonl").string(), 1, TaskPrompt::file);
  EXPECT_EQ(piqa_file.cued, 0);
  EXPECT_EQ(scored_pair(piqa_file.examples[0].options[0]).continuation, "\n" + po.continuation);
  fs::remove_all(run);
}
