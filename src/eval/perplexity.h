// Perplexity of token sequences longer than the model's context: sliding windows (the
// convention of Hugging Face's perplexity guide, without its off-by-one: no token is skipped).
//
// A document t_0 .. t_{n-1} has the targets t_1 .. t_{n-1} (t_0 is context only; text gets an
// <|endoftext|> in front, so that its first token is a target too, as lm-evaluation-harness's
// rolling log-likelihood does). Window k feeds tokens [k*S, min(k*S + N, n - 1)) and scores only
// the targets that no earlier window scored, so every target is scored exactly once, with at
// least N - S tokens of left context after the first window (N = context, S = stride). S == N
// gives non-overlapping windows (the trainer's validation windows, plus the partial last one).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "eval/eval_model.h"

namespace attnlab {

struct Window {
  int64_t begin = 0;     // first input token
  int length = 0;        // inputs [begin, begin + length); targets [begin + 1, begin + length + 1)
  int first_scored = 0;  // inputs before this index are context only
};
// Throws unless 1 <= stride <= context. No windows when n_tokens < 2.
std::vector<Window> sliding_windows(int64_t n_tokens, int context, int stride);

// Scores of the targets t_1 .. t_{n-1} of one document (entry p - 1 is target t_p).
struct DocumentScores {
  std::vector<float> logprob;
  std::vector<int32_t> argmax;  // with want_argmax only
};
// Scores a group of documents (batched across documents). Each needs >= 1 token.
std::vector<DocumentScores> score_documents(
    EvalModel& model, const std::vector<std::vector<int32_t>>& documents, int context, int stride,
    bool want_argmax, const std::function<void(int64_t, int64_t)>& on_progress = {});

struct PerplexityResult {
  double nll = 0.0;       // summed negative log-likelihood (nats)
  int64_t tokens = 0;     // targets scored
  int64_t documents = 0;  // documents read
  int64_t windows = 0;    // forwards rows (windows) run
  int64_t bytes = 0;      // text only: UTF-8 bytes of the documents
  double loss() const;    // nll / tokens
  double perplexity() const;
  double bits_per_byte() const;  // nll / bytes / ln 2 (text only; NaN otherwise)
};

// Reads documents with next(tokens, bytes) until it returns false, and scores them in groups.
// on_progress gets (documents done, tokens scored so far).
PerplexityResult perplexity(EvalModel& model,
                            const std::function<bool(std::vector<int32_t>&, int64_t&)>& next,
                            int context, int stride,
                            const std::function<void(int64_t, int64_t)>& on_progress = {});

}  // namespace attnlab
