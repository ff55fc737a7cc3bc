#include "eval/tasks.h"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/gpt.h"

namespace attnlab {

const char* task_kind_name(TaskKind k) {
  switch (k) {
    case TaskKind::multiple_choice:
      return "multiple_choice";
    case TaskKind::schema:
      return "schema";
    case TaskKind::language_modeling:
      return "language_modeling";
  }
  return "?";
}

const char* task_prompt_name(TaskPrompt p) { return p == TaskPrompt::lm_eval ? "lm-eval" : "file"; }

TaskPrompt parse_task_prompt(const std::string& s) {
  if (s == "lm-eval") return TaskPrompt::lm_eval;
  if (s == "file") return TaskPrompt::file;
  ATTN_FAIL(
      "--prompt: expected lm-eval (the \\nAnswer: cue on \"Question:\" queries) or file "
      "(the files' text as it is), got '%s'",
      s.c_str());
}

namespace {

using nlohmann::json;

// Python's str.isspace, which lm-eval's str.rstrip() follows: ASCII \t \n \v \f \r, 0x1c-0x1f
// and space, and U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000.
bool is_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
         c == 0x205f || c == 0x3000;
}

// Where s's trailing whitespace starts (s.size() if none), decoding UTF-8 backwards; an invalid
// sequence ends the whitespace.
size_t trailing_space(const std::string& s) {
  size_t end = s.size();
  while (end > 0) {
    size_t b = end - 1;
    while (b > 0 && end - b < 4 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
    const unsigned char lead = static_cast<unsigned char>(s[b]);
    const size_t len = lead < 0x80 ? 1 : (lead >> 5) == 6 ? 2 : (lead >> 4) == 14 ? 3 : 4;
    if (len != end - b || (len == 4 && (lead >> 3) != 30)) break;
    uint32_t c = len == 1 ? lead : lead & (0x7F >> len);
    for (size_t i = b + 1; i < end; ++i) c = (c << 6) | (static_cast<unsigned char>(s[i]) & 0x3F);
    if (!is_space(c)) break;
    end = b;
  }
  return end;
}

std::string string_field(const json& j, const char* key, const std::string& where) {
  ATTN_REQUIRE(j.contains(key), "%s: missing field \"%s\"", where.c_str(), key);
  ATTN_REQUIRE(j[key].is_string(), "%s: field \"%s\" must be a string, got %s", where.c_str(), key,
               j[key].dump().c_str());
  return j[key].get<std::string>();
}

std::vector<std::string> string_list(const json& j, const char* key, const std::string& where) {
  ATTN_REQUIRE(j.contains(key), "%s: missing field \"%s\"", where.c_str(), key);
  const json& v = j[key];
  ATTN_REQUIRE(v.is_array(), "%s: field \"%s\" must be a list of strings", where.c_str(), key);
  std::vector<std::string> out;
  for (const json& e : v) {
    ATTN_REQUIRE(e.is_string(), "%s: field \"%s\" must hold strings, got %s", where.c_str(), key,
                 e.dump().c_str());
    out.push_back(e.get<std::string>());
  }
  ATTN_REQUIRE(out.size() >= 2, "%s: field \"%s\" needs at least two options, got %zu",
               where.c_str(), key, out.size());
  return out;
}

int gold_field(const json& j, size_t n_options, const std::string& where) {
  ATTN_REQUIRE(j.contains("gold"), "%s: missing field \"gold\"", where.c_str());
  ATTN_REQUIRE(j["gold"].is_number_integer(), "%s: field \"gold\" must be an integer, got %s",
               where.c_str(), j["gold"].dump().c_str());
  const int64_t g = j["gold"].get<int64_t>();
  ATTN_REQUIRE(g >= 0 && g < int64_t(n_options), "%s: gold %lld is not an option index (0..%zu)",
               where.c_str(), (long long)g, n_options - 1);
  return int(g);
}

TaskKind kind_of(const json& j, const std::string& where) {
  if (j.contains("choices")) return TaskKind::multiple_choice;
  if (j.contains("context_options")) return TaskKind::schema;
  if (j.contains("context") && j.contains("continuation")) return TaskKind::language_modeling;
  ATTN_FAIL(
      "%s: not a task line: expected {\"query\", \"choices\", \"gold\"} (multiple choice), "
      "{\"context_options\", \"continuation\", \"gold\"} (schema) or {\"context\", "
      "\"continuation\"} (language modeling)",
      where.c_str());
}

}  // namespace

std::string lm_eval_query(const std::string& query) {
  static const std::string kQuestion = "Question:", kCue = "\nAnswer:";
  if (query.compare(0, kQuestion.size(), kQuestion) != 0) return query;
  if (query.find(kCue) != std::string::npos) return query;
  return query.substr(0, trailing_space(query)) + kCue;
}

size_t utf8_length(const std::string& s) {
  size_t n = 0;
  for (const unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

Task load_task(const std::string& name, const std::string& path, int64_t limit, TaskPrompt prompt) {
  ATTN_REQUIRE(!std::filesystem::is_directory(path), "task file '%s' is a directory", path.c_str());
  std::ifstream in(path, std::ios::binary);
  ATTN_REQUIRE(in.good(), "cannot open task file '%s'", path.c_str());
  Task t;
  t.name = name;
  t.path = path;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (limit > 0 && int64_t(t.examples.size()) >= limit) break;
    if (line.find_first_not_of(" \t\r\n") == std::string::npos) continue;
    const std::string where = strformat("%s:%d", path.c_str(), n);
    json j;
    try {
      j = json::parse(line);
    } catch (const json::parse_error& e) {
      ATTN_FAIL("%s: invalid JSON: %s", where.c_str(), e.what());
    }
    ATTN_REQUIRE(j.is_object(), "%s: expected a JSON object", where.c_str());
    const TaskKind k = kind_of(j, where);
    if (t.examples.empty()) t.kind = k;
    ATTN_REQUIRE(k == t.kind, "%s: a %s line in a %s file", where.c_str(), task_kind_name(k),
                 task_kind_name(t.kind));
    TaskExample ex;
    ex.line = n;
    switch (k) {
      case TaskKind::multiple_choice: {
        std::string q = string_field(j, "query", where);
        if (prompt == TaskPrompt::lm_eval) {
          std::string cued = lm_eval_query(q);
          t.cued += cued != q;
          q = std::move(cued);
        }
        for (std::string& c : string_list(j, "choices", where)) ex.options.push_back({q, c});
        ex.gold = gold_field(j, ex.options.size(), where);
        break;
      }
      case TaskKind::schema: {
        const std::string cont = string_field(j, "continuation", where);
        for (std::string& c : string_list(j, "context_options", where))
          ex.options.push_back({c, cont});
        ex.gold = gold_field(j, ex.options.size(), where);
        break;
      }
      case TaskKind::language_modeling:
        ex.options.push_back(
            {string_field(j, "context", where), string_field(j, "continuation", where)});
        break;
    }
    // An empty continuation scores log p = 0, the most likely answer there is: it would always
    // win (or, as the LM continuation, say nothing).
    for (size_t o = 0; o < ex.options.size(); ++o)
      ATTN_REQUIRE(
          !ex.options[o].continuation.empty(), "%s: %s is empty (nothing to score)", where.c_str(),
          k == TaskKind::multiple_choice ? strformat("choice %zu", o).c_str() : "the continuation");
    t.examples.push_back(std::move(ex));
  }
  ATTN_REQUIRE(!t.examples.empty(), "task file '%s' holds no examples", path.c_str());
  return t;
}

ScoredPair scored_pair(const TaskOption& o) {
  ScoredPair p{o.context, o.continuation};
  // lm-eval's target_delimiter " ", also before a continuation that starts with whitespace
  // (LAMBADA line 4463: " \n\nrecorder"); not after a context ending with whitespace.
  // Whitespace as Python's (U+00A0, U+3000, ...; lm-eval strips with str.rstrip()).
  const size_t end = trailing_space(p.context);
  if (end == p.context.size()) p.continuation = " " + p.continuation;
  // lm-eval's _encode_pair: the context's trailing whitespace belongs to the continuation, so
  // that the BPE sees " word" (or "\nword") as it would inside the text.
  p.continuation = p.context.substr(end) + p.continuation;
  p.context.resize(end);
  return p;
}

ScoreRequest option_request(const Tokenizer& tok, const TaskOption& o, int max_len,
                            bool want_argmax, const std::string& where, bool* truncated) {
  const ScoredPair p = scored_pair(o);
  std::vector<int32_t> ctx, whole;
  if (p.context.empty()) {
    // lm-eval's prefix token: the BOS where the tokenizer has one (LLaMA), else <|endoftext|>.
    // (A non-empty context goes without a BOS, as lm-eval's Hugging Face model encodes by
    // default: add_bos_token false.)
    ctx.push_back(document_start_id(tok));
    whole = ctx;
    tok.encode(p.continuation, whole);
  } else {
    tok.encode(p.context, ctx);
    tok.encode(p.context + p.continuation, whole);
  }
  const size_t n_cont = whole.size() > ctx.size() ? whole.size() - ctx.size() : 0;
  ATTN_REQUIRE(n_cont > 0, "%s: the continuation \"%s\" tokenises to no tokens", where.c_str(),
               o.continuation.c_str());
  ATTN_REQUIRE(n_cont <= size_t(max_len),
               "%s: the continuation is %zu tokens, longer than the model's context (%d)",
               where.c_str(), n_cont, max_len);
  // Input: the last max_len + 1 tokens without the last one (lm-eval's left truncation).
  const size_t keep = std::min(whole.size(), size_t(max_len) + 1);
  const size_t from = whole.size() - keep;
  if (truncated) *truncated = from > 0;
  ScoreRequest r;
  r.inputs.assign(whole.begin() + ptrdiff_t(from), whole.end() - 1);
  r.targets.assign(r.inputs.size(), GPT::kIgnoreIndex);
  for (size_t i = r.inputs.size() - n_cont; i < r.inputs.size(); ++i)
    r.targets[i] = whole[from + i + 1];
  r.want_argmax = want_argmax;
  return r;
}

TaskRequests task_requests(const Tokenizer& tok, const Task& task, int max_len) {
  const bool want_argmax = task.kind == TaskKind::language_modeling;
  TaskRequests out;
  for (const TaskExample& ex : task.examples) {
    for (size_t k = 0; k < ex.options.size(); ++k) {
      bool cut = false;
      out.requests.push_back(
          option_request(tok, ex.options[k], max_len, want_argmax,
                         strformat("%s:%d: option %zu", task.path.c_str(), ex.line, k), &cut));
      out.truncated += cut;
    }
  }
  return out;
}

std::vector<std::vector<double>> option_loglikelihoods(
    EvalModel& model, const Task& task, const TaskRequests& requests,
    std::vector<std::vector<bool>>* greedy,
    const std::function<void(int64_t, int64_t)>& on_progress) {
  const std::vector<ScoreRequest>& reqs = requests.requests;
  size_t n_options = 0;
  for (const TaskExample& ex : task.examples) n_options += ex.options.size();
  ATTN_REQUIRE(reqs.size() == n_options, "task '%s': %zu requests for %zu options",
               task.name.c_str(), reqs.size(), n_options);
  ATTN_REQUIRE(!greedy || reqs.empty() || reqs[0].want_argmax,
               "task '%s': the greedy check needs requests that ask for the argmax",
               task.name.c_str());
  const std::vector<TokenScores> scores = model.score(reqs, on_progress);
  std::vector<std::vector<double>> ll;
  if (greedy) greedy->clear();
  size_t at = 0;
  for (const TaskExample& ex : task.examples) {
    ll.emplace_back();
    if (greedy) greedy->emplace_back();
    for (size_t k = 0; k < ex.options.size(); ++k, ++at) {
      double sum = 0.0;
      bool all_greedy = true;
      const ScoreRequest& r = reqs[at];
      for (size_t i = 0; i < r.targets.size(); ++i) {
        if (r.targets[i] == GPT::kIgnoreIndex) continue;
        sum += double(scores[at].logprob[i]);
        if (greedy) all_greedy = all_greedy && scores[at].argmax[i] == r.targets[i];
      }
      ll.back().push_back(sum);
      if (greedy) greedy->back().push_back(all_greedy);
    }
  }
  return ll;
}

std::vector<std::vector<double>> option_loglikelihoods(EvalModel& model, const Tokenizer& tok,
                                                       const Task& task,
                                                       std::vector<std::vector<bool>>* greedy) {
  return option_loglikelihoods(model, task, task_requests(tok, task, model.max_len()), greedy);
}

namespace {

// lm-eval's mean_stderr: sample standard deviation / sqrt(n).
double mean_stderr(const std::vector<double>& x) {
  const double n = double(x.size());
  if (x.size() < 2) return std::nan("");
  double mean = 0.0, var = 0.0;
  for (double v : x) mean += v / n;
  for (double v : x) var += (v - mean) * (v - mean) / (n - 1.0);
  return std::sqrt(var / n);
}

double mean(const std::vector<double>& x) {
  double s = 0.0;
  for (double v : x) s += v;
  return x.empty() ? std::nan("") : s / double(x.size());
}

size_t first_max(const std::vector<double>& v) {
  return size_t(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace

TaskResult run_task(EvalModel& model, const Task& task, const TaskRequests& requests,
                    const std::function<void(int64_t, int64_t)>& on_progress) {
  const auto t0 = std::chrono::steady_clock::now();
  TaskResult res;
  res.name = task.name;
  res.path = task.path;
  res.kind = task.kind;
  res.examples = int64_t(task.examples.size());
  res.truncated = requests.truncated;
  res.cued = task.cued;
  const bool lm = task.kind == TaskKind::language_modeling;
  std::vector<std::vector<bool>> greedy;
  const std::vector<std::vector<double>> ll =
      option_loglikelihoods(model, task, requests, lm ? &greedy : nullptr, on_progress);
  std::vector<double> acc, acc_norm, cont_ll;
  for (size_t e = 0; e < task.examples.size(); ++e) {
    const TaskExample& ex = task.examples[e];
    res.requests += int64_t(ex.options.size());
    if (lm) {
      acc.push_back(greedy[e][0] ? 1.0 : 0.0);
      cont_ll.push_back(ll[e][0]);
      continue;
    }
    acc.push_back(first_max(ll[e]) == size_t(ex.gold) ? 1.0 : 0.0);
    if (task.kind == TaskKind::multiple_choice) {
      std::vector<double> norm(ll[e].size());
      for (size_t k = 0; k < norm.size(); ++k) {
        // lm-eval divides by len(choice), the characters of the choice's string. A zero-length
        // choice counts as one.
        norm[k] = ll[e][k] / double(std::max<size_t>(1, utf8_length(ex.options[k].continuation)));
      }
      acc_norm.push_back(first_max(norm) == size_t(ex.gold) ? 1.0 : 0.0);
    }
  }
  res.acc = mean(acc);
  res.acc_stderr = mean_stderr(acc);
  if (!acc_norm.empty()) {
    res.acc_norm = mean(acc_norm);
    res.acc_norm_stderr = mean_stderr(acc_norm);
  }
  if (lm) {
    res.perplexity = std::exp(-mean(cont_ll));
    res.perplexity_stderr = res.perplexity * mean_stderr(cont_ll);
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

TaskResult run_task(EvalModel& model, const Tokenizer& tok, const Task& task) {
  return run_task(model, task, task_requests(tok, task, model.max_len()));
}

}  // namespace attnlab
