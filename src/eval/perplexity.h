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

// The standard errors treat the scored text as a sample of independent clusters (the documents
// between <|endoftext|> tokens, below), not of independent tokens: neighbouring tokens' losses are
// correlated, and a per-token error would be several times too small. loss = sum nll / sum n over
// clusters is a ratio estimator; its delta-method (cluster-robust) variance is
// C / (C - 1) * sum_c (nll_c - loss n_c)^2 / N^2 over C clusters of n_c targets, N targets in all.
struct PerplexityResult {
  double nll = 0.0;       // summed negative log-likelihood (nats)
  int64_t tokens = 0;     // targets scored
  int64_t documents = 0;  // documents read
  int64_t windows = 0;    // forwards rows (windows) run
  int64_t bytes = 0;      // text only: UTF-8 bytes of the documents
  // Per-cluster sums for the standard errors: clusters, sum nll_c^2, sum nll_c n_c, sum n_c^2;
  // and per document (text: the documents' bytes) sum nll_d^2, sum nll_d b_d, sum b_d^2.
  int64_t clusters = 0;
  double sum_nll2 = 0.0, sum_nll_n = 0.0, sum_n2 = 0.0;
  double doc_nll2 = 0.0, doc_nll_b = 0.0, doc_b2 = 0.0;
  double loss() const;  // nll / tokens
  double perplexity() const;
  double bits_per_byte() const;  // nll / bytes / ln 2 (text only; NaN otherwise)
  // Standard errors (NaN with fewer than 2 clusters); perplexity's by the delta method from
  // loss's (exp(loss) se); bits per byte's as the ratio nats / bytes over the documents (the
  // same formula with bytes for targets; NaN with fewer than 2 documents or without bytes).
  double loss_stderr() const;
  double perplexity_stderr() const;
  double bits_per_byte_stderr() const;
};

// Reads documents with next(tokens, bytes) until it returns false, and scores them in groups.
// on_progress gets (documents done, tokens scored so far). The clusters of the standard errors:
// target t_p (p >= 1) belongs to the cluster numbered by the count of `cluster_break` tokens
// among t_0 .. t_{p-1} of its document, so a document that holds several <|endoftext|>-separated
// texts (a token shard) counts each text, with the <|endoftext|> that ends it; a document without
// that token is one cluster. cluster_break < 0: each document is one cluster.
PerplexityResult perplexity(EvalModel& model,
                            const std::function<bool(std::vector<int32_t>&, int64_t&)>& next,
                            int context, int stride, int32_t cluster_break,
                            const std::function<void(int64_t, int64_t)>& on_progress = {});

}  // namespace attnlab
