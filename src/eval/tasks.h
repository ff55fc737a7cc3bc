// Zero-shot tasks in the llm-foundry JSON-lines layout (/work/shared/data/eval, docs/eval.md):
//   multiple_choice    {"query", "choices": [...], "gold"}                 PIQA, ARC
//   schema             {"context_options": [...], "continuation", "gold"}  Winogrande
//   language_modeling  {"context", "continuation"}                         LAMBADA
// The kind is read from the fields of each line (all lines of a file must be the same kind).
//
// Prompts (TaskPrompt::lm_eval, the default): a multiple_choice query that starts with
// "Question:" and holds no "\nAnswer:" becomes query (trailing whitespace dropped) + "\nAnswer:",
// lm-eval's ARC and PIQA prompt "Question: {q}\nAnswer:" (llm-foundry's files carry the question
// only; its gauntlet adds the same cue). TaskPrompt::file scores the files' text as it is.
//
// Scoring follows lm-evaluation-harness: each option is a (context, continuation) pair scored by
// the summed log-likelihood of the continuation's tokens given the context:
//   - the continuation is " " + text, also where the text starts with whitespace, unless the
//     context ends with whitespace (then text as is; whitespace as Python's str.isspace);
//   - trailing whitespace of the context moves to the front of the continuation, then the
//     continuation's tokens are encode(context + continuation) minus the first
//     len(encode(context)) tokens (lm-eval's _encode_pair); an empty context is <|endoftext|>;
//   - contexts longer than the model keep their rightmost tokens: the input is the last
//     block_size + 1 tokens of context + continuation, minus the last.
// acc: the option of highest log-likelihood is gold (first maximum on ties). acc_norm: the same
// with the log-likelihood divided by the option text's length in characters (Unicode code
// points, lm-eval's len(choice); multiple_choice).
// language_modeling: acc = every continuation token is the greedy argmax; perplexity =
// exp(-mean over examples of the continuation's log-likelihood), lm-eval's lambada perplexity.
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "eval/eval_model.h"
#include "tokenizer/tokenizer.h"

namespace attnlab {

enum class TaskKind { multiple_choice, schema, language_modeling };
const char* task_kind_name(TaskKind k);

enum class TaskPrompt { lm_eval, file };
const char* task_prompt_name(TaskPrompt p);
TaskPrompt parse_task_prompt(const std::string& s);  // "lm-eval" | "file", else a clear error

// The lm_eval prompt of a multiple_choice query (above); other queries are returned as they are.
std::string lm_eval_query(const std::string& query);

struct TaskOption {
  std::string context;       // as in the file (query, or one of context_options)
  std::string continuation;  // the text scored (choice, or the shared continuation), as in the file
};
struct TaskExample {
  int line = 0;  // 1-based line in the file
  std::vector<TaskOption> options;
  int gold = 0;
};
struct Task {
  std::string name, path;
  TaskKind kind = TaskKind::multiple_choice;
  std::vector<TaskExample> examples;
  int64_t cued = 0;  // multiple_choice examples given the "\nAnswer:" cue (TaskPrompt::lm_eval)
};

// Reads a task file. Blank lines are skipped; limit > 0 keeps the first `limit` examples. Errors
// name the file and line: invalid JSON, missing or mistyped fields, gold out of range, fewer than
// two options, a file with no examples, a line of another kind than the first.
Task load_task(const std::string& name, const std::string& path, int64_t limit = 0,
               TaskPrompt prompt = TaskPrompt::lm_eval);

// The string pair lm-eval scores for one option (whitespace rule and the move of the context's
// trailing whitespace, above).
struct ScoredPair {
  std::string context, continuation;
};
ScoredPair scored_pair(const TaskOption& o);

// Model inputs for one option: context + continuation tokens, left-truncated to the model. Throws
// (naming where) when the continuation has no tokens or more than max_len.
// *truncated (optional) tells whether context tokens were dropped.
ScoreRequest option_request(const Tokenizer& tok, const TaskOption& o, int max_len,
                            bool want_argmax, const std::string& where, bool* truncated = nullptr);

// Every option's request of a task (language_modeling ones ask for the argmax), built before
// anything is scored so that a bad option fails the run before any task runs.
struct TaskRequests {
  std::vector<ScoreRequest> requests;  // the examples' options in order
  int64_t truncated = 0;               // options whose context was left-truncated
};
TaskRequests task_requests(const Tokenizer& tok, const Task& task, int max_len);

// UTF-8 code points of s (Python's len of the decoded string); bytes outside UTF-8 count one each.
size_t utf8_length(const std::string& s);

struct TaskResult {
  std::string name, path;
  TaskKind kind = TaskKind::multiple_choice;
  int64_t examples = 0, requests = 0;
  double acc = 0.0, acc_stderr = 0.0;
  double acc_norm = std::nan(""), acc_norm_stderr = std::nan("");  // multiple_choice only
  // language_modeling only: exp(-mean log-likelihood of the continuations), and its standard
  // error by the delta method, perplexity x the mean's (lm-eval bootstraps it; the two agree to
  // first order).
  double perplexity = std::nan(""), perplexity_stderr = std::nan("");
  int64_t truncated = 0;  // options whose context was left-truncated
  int64_t cued = 0;       // examples given the "\nAnswer:" cue (Task::cued)
  double seconds = 0.0;
};

TaskResult run_task(EvalModel& model, const Task& task, const TaskRequests& requests,
                    const std::function<void(int64_t, int64_t)>& on_progress = {});
TaskResult run_task(EvalModel& model, const Tokenizer& tok, const Task& task);

// Log-likelihoods of each option of each example (exposed for tests).
// greedy (optional): whether every continuation token is the argmax (the requests must ask for
// it: language_modeling tasks).
std::vector<std::vector<double>> option_loglikelihoods(
    EvalModel& model, const Task& task, const TaskRequests& requests,
    std::vector<std::vector<bool>>* greedy = nullptr,
    const std::function<void(int64_t, int64_t)>& on_progress = {});
std::vector<std::vector<double>> option_loglikelihoods(
    EvalModel& model, const Tokenizer& tok, const Task& task,
    std::vector<std::vector<bool>>* greedy = nullptr);

}  // namespace attnlab
