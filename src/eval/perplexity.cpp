#include "eval/perplexity.h"

#include <cmath>
#include <numbers>

#include "core/error.h"

namespace attnlab {

std::vector<Window> sliding_windows(int64_t n_tokens, int context, int stride) {
  ATTN_REQUIRE(context >= 1, "the context must be >= 1 token, got %d", context);
  ATTN_REQUIRE(stride >= 1 && stride <= context,
               "the stride must be between 1 and the context (%d), got %d", context, stride);
  std::vector<Window> out;
  if (n_tokens < 2) return out;
  int64_t scored_until = 0;  // targets t_1 .. t_{scored_until} are scored
  for (int64_t begin = 0;; begin += stride) {
    const int64_t end = std::min<int64_t>(begin + context, n_tokens - 1);  // inputs [begin, end)
    if (end > scored_until) {
      out.push_back(Window{begin, int(end - begin), int(scored_until - begin)});
      scored_until = end;
    }
    if (end == n_tokens - 1) break;
  }
  return out;
}

std::vector<DocumentScores> score_documents(
    EvalModel& model, const std::vector<std::vector<int32_t>>& documents, int context, int stride,
    bool want_argmax, const std::function<void(int64_t, int64_t)>& on_progress) {
  ATTN_REQUIRE(context <= model.max_len(), "the context (%d) exceeds the model's context (%d)",
               context, model.max_len());
  std::vector<ScoreRequest> requests;
  struct Where {
    size_t doc;
    Window w;
  };
  std::vector<Where> where;
  for (size_t d = 0; d < documents.size(); ++d) {
    const std::vector<int32_t>& t = documents[d];
    for (const Window& w : sliding_windows(int64_t(t.size()), context, stride)) {
      ScoreRequest r;
      r.inputs.assign(t.begin() + w.begin, t.begin() + w.begin + w.length);
      r.targets.assign(t.begin() + w.begin + 1, t.begin() + w.begin + w.length + 1);
      std::fill(r.targets.begin(), r.targets.begin() + w.first_scored, GPT::kIgnoreIndex);
      r.want_argmax = want_argmax;
      requests.push_back(std::move(r));
      where.push_back({d, w});
    }
  }
  const std::vector<TokenScores> scores = model.score(requests, on_progress);
  std::vector<DocumentScores> out(documents.size());
  for (size_t d = 0; d < documents.size(); ++d) {
    const size_t n = documents[d].empty() ? 0 : documents[d].size() - 1;
    out[d].logprob.assign(n, 0.f);
    if (want_argmax) out[d].argmax.assign(n, -1);
  }
  for (size_t k = 0; k < requests.size(); ++k) {
    const Window& w = where[k].w;
    DocumentScores& o = out[where[k].doc];
    for (int i = w.first_scored; i < w.length; ++i) {
      const size_t target = size_t(w.begin + i);  // target t_{begin + i + 1} is entry begin + i
      o.logprob[target] = scores[k].logprob[size_t(i)];
      if (want_argmax) o.argmax[target] = scores[k].argmax[size_t(i)];
    }
  }
  return out;
}

double PerplexityResult::loss() const { return tokens ? nll / double(tokens) : std::nan(""); }
double PerplexityResult::perplexity() const { return std::exp(loss()); }
double PerplexityResult::bits_per_byte() const {
  return bytes ? nll / double(bytes) / std::numbers::ln2 : std::nan("");
}
double PerplexityResult::loss_stderr() const {
  if (clusters < 2 || tokens == 0) return std::nan("");
  const double l = loss();
  const double ss = std::max(0.0, sum_nll2 - 2.0 * l * sum_nll_n + l * l * sum_n2);
  return std::sqrt(double(clusters) / double(clusters - 1) * ss) / double(tokens);
}
double PerplexityResult::perplexity_stderr() const { return perplexity() * loss_stderr(); }
double PerplexityResult::bits_per_byte_stderr() const {
  if (documents < 2 || bytes == 0) return std::nan("");
  const double r = nll / double(bytes);  // nats per byte
  const double ss = std::max(0.0, doc_nll2 - 2.0 * r * doc_nll_b + r * r * doc_b2);
  return std::sqrt(double(documents) / double(documents - 1) * ss) / double(bytes) /
         std::numbers::ln2;
}

PerplexityResult perplexity(EvalModel& model,
                            const std::function<bool(std::vector<int32_t>&, int64_t&)>& next,
                            int context, int stride, int32_t cluster_break,
                            const std::function<void(int64_t, int64_t)>& on_progress) {
  PerplexityResult res;
  auto add_cluster = [&](double nll, int64_t n) {
    if (n == 0) return;
    res.nll += nll;
    ++res.clusters;
    res.sum_nll2 += nll * nll;
    res.sum_nll_n += nll * double(n);
    res.sum_n2 += double(n) * double(n);
  };
  // Documents are scored in groups of about 1M tokens: enough to fill batches, little memory.
  constexpr size_t kGroupTokens = size_t(1) << 20;
  std::vector<std::vector<int32_t>> group;
  std::vector<int64_t> group_bytes;  // each document's bytes (text)
  size_t group_tokens = 0;
  auto flush = [&] {
    if (group.empty()) return;
    for (const std::vector<int32_t>& d : group)
      res.windows += int64_t(sliding_windows(int64_t(d.size()), context, stride).size());
    const std::vector<DocumentScores> scores =
        score_documents(model, group, context, stride, false);
    for (size_t d = 0; d < group.size(); ++d) {
      const std::vector<float>& logprob = scores[d].logprob;
      double cluster_nll = 0.0, doc_nll = 0.0;
      int64_t cluster_n = 0;
      for (size_t p = 1; p <= logprob.size(); ++p) {  // entry p - 1 is target t_p
        if (group[d][p - 1] == cluster_break) {       // t_{p-1} starts a new cluster
          add_cluster(cluster_nll, cluster_n);
          doc_nll += cluster_nll;
          cluster_nll = 0.0, cluster_n = 0;
        }
        cluster_nll -= double(logprob[p - 1]);
        ++cluster_n;
      }
      add_cluster(cluster_nll, cluster_n);
      doc_nll += cluster_nll;
      res.tokens += int64_t(logprob.size());
      const double b = double(group_bytes[d]);
      res.doc_nll2 += doc_nll * doc_nll;
      res.doc_nll_b += doc_nll * b;
      res.doc_b2 += b * b;
    }
    res.documents += int64_t(group.size());
    group.clear();
    group_bytes.clear();
    group_tokens = 0;
    if (on_progress) on_progress(res.documents, res.tokens);
  };
  std::vector<int32_t> doc;
  int64_t bytes = 0;
  while (true) {
    doc.clear();
    bytes = 0;
    if (!next(doc, bytes)) break;
    res.bytes += bytes;
    group_tokens += doc.size();
    group.push_back(doc);
    group_bytes.push_back(bytes);
    if (group_tokens >= kGroupTokens) flush();
  }
  flush();
  return res;
}

}  // namespace attnlab
