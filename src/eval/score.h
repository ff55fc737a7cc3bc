// `attnlab score`: per-token log-probabilities of a text or token file under a model, as JSON
// lines, for users' own analyses (docs/eval.md). Long inputs are scored with sliding windows
// (eval/perplexity.h), so every token is scored once.
//
// One line per token, in order:
//   {"pos": 0, "token": 464, "piece": "The", "logprob": -3.21, "argmax": 464, "argmax_piece": ...}
// --text: the file is one document; <|endoftext|> is put in front (not printed), so every token
// has a logprob. --tokens: an llm.c shard (.bin) or whitespace-separated ids; the first token has
// no context: "logprob" and "argmax" are null. "piece"/"argmax_piece" need a tokenizer (the
// model's, or --tokenizer) and are omitted without one for --tokens.
#pragma once
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "eval/eval_model.h"

namespace attnlab {

struct ScoreOptions {
  std::string model;
  std::string adapter;  // optional: a retrofit's adapter.safetensors on `model`
  std::string text;     // a text file (plain, .gz, .xz)
  std::string tokens;   // a token file
  std::string tokenizer;
  int context = 0, stride = 0;  // 0 = block_size, context
  EvalDeviceOptions device;
  std::vector<std::string> overrides;  // --set: attention.focus.top_k / eval_routing only
};

struct ScoreSummary {
  int64_t tokens = 0;  // tokens scored
  double nll = 0.0;
};

// Scores the text or token file; each JSON line goes to `emit` (after every input check: a
// refused call emits nothing).
ScoreSummary score_tokens(const ScoreOptions& options,
                          const std::function<void(std::string_view)>& emit);

// Reads a token file: a shard (by its magic) or whitespace-separated integer ids.
std::vector<int32_t> read_token_file(const std::string& path);

}  // namespace attnlab
