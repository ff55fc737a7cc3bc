// attnlab eval | score: their command-line options (added to the app here, so main.cpp stays a
// list of subcommands) and the commands. docs/eval.md.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "eval/harness.h"
#include "eval/score.h"

namespace attnlab::cli {

struct EvalArgs {
  EvalOptions options;
  std::string checkpoint;          // legacy form: `eval RECIPE --checkpoint RUN`
  std::vector<std::string> tasks;  // name=FILE or FILE
  std::string prompt = "lm-eval";  // --prompt: lm-eval | file
  std::string out;                 // JSON results file
};
CLI::App* add_eval_command(CLI::App& app, EvalArgs& args);
int cmd_eval(EvalArgs args);

struct ScoreArgs {
  ScoreOptions options;
  std::string out;  // "" = stdout
};
CLI::App* add_score_command(CLI::App& app, ScoreArgs& args);
int cmd_score(const ScoreArgs& args);

}  // namespace attnlab::cli
