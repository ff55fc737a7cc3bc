#include "eval/harness.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>

#include "config/model_keys.h"
#include "core/cuda_check.h"
#include "core/error.h"
#include "data/shard.h"
#include "data/text_reader.h"
#include "eval/perplexity.h"
#include "eval/tasks.h"
#include "eval/validation.h"
#include "io/metrics.h"
#include "train/from_recipe.h"
#include "train/retrofit.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace attnlab {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// "piqa: 1.20K/3.68K sequences | 310/s | ETA 8s", at most every 2 s and at the end.
class ProgressLine {
 public:
  ProgressLine(bool on, std::string what, std::string unit)
      : on_(on), what_(std::move(what)), unit_(std::move(unit)) {}
  void operator()(int64_t done, int64_t total) {
    if (!on_) return;
    const double s = seconds_since(t0_);
    if (done < total && s - last_ < 2.0) return;
    last_ = s;
    const double rate = s > 0 ? double(done) / s : 0.0;
    std::string eta = total > done && rate > 0
                          ? " | ETA " + io::format_duration(double(total - done) / rate)
                          : "";
    std::fprintf(stderr, "%s: %s/%s %s | %s/s%s\n", what_.c_str(),
                 io::format_count(double(done)).c_str(), io::format_count(double(total)).c_str(),
                 unit_.c_str(), io::format_count(rate).c_str(), eta.c_str());
  }

 private:
  bool on_;
  std::string what_, unit_;
  Clock::time_point t0_ = Clock::now();
  double last_ = 0.0;
};

// A JSON number, or null for NaN (JSON has no NaN).
json num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

std::string fmt(double v, const char* f = "%.4f") {
  return std::isfinite(v) ? strformat(f, v) : std::string("-");
}

struct Table {
  std::string out =
      strformat("%-22s %-12s %12s %10s  %s\n", "data", "metric", "value", "stderr", "count");
  void row(const std::string& data, const std::string& metric, double value, double stderr_v,
           const std::string& count, const char* f = "%.4f") {
    out += strformat("%-22s %-12s %12s %10s  %s\n", data.c_str(), metric.c_str(),
                     fmt(value, f).c_str(), fmt(stderr_v).c_str(), count.c_str());
  }
};

// (name, path) of every task: --tasks, then --task-dir's *.jsonl in name order.
std::vector<std::pair<std::string, std::string>> task_list(const EvalOptions& o) {
  std::vector<std::pair<std::string, std::string>> out = o.tasks;
  if (!o.task_dir.empty()) {
    ATTN_REQUIRE(fs::is_directory(o.task_dir), "--task-dir '%s' is not a directory",
                 o.task_dir.c_str());
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(o.task_dir))
      if (e.is_regular_file() && e.path().extension() == ".jsonl") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    ATTN_REQUIRE(!files.empty(), "--task-dir '%s' holds no *.jsonl files", o.task_dir.c_str());
    for (const fs::path& f : files) out.emplace_back(f.stem().string(), f.string());
  }
  // Names key the report (its table rows and the --out JSON's "tasks"): one file each.
  std::map<std::string, std::string> seen;
  for (const auto& [name, path] : out) {
    const auto [it, fresh] = seen.emplace(name, path);
    ATTN_REQUIRE(fresh,
                 "task name '%s' is given twice ('%s' and '%s'); name them apart with "
                 "--tasks NAME=FILE",
                 name.c_str(), it->second.c_str(), path.c_str());
  }
  return out;
}

json perplexity_json(const PerplexityResult& r, int context, int stride, const std::string& glob) {
  json j = {{"source", glob},
            {"loss", num(r.loss())},
            {"loss_stderr", num(r.loss_stderr())},
            {"perplexity", num(r.perplexity())},
            {"perplexity_stderr", num(r.perplexity_stderr())},
            {"tokens", r.tokens},
            {"documents", r.documents},
            {"clusters", r.clusters},
            {"windows", r.windows},
            {"context", context},
            {"stride", stride}};
  if (r.bytes > 0) {
    j["bytes"] = r.bytes;
    j["bits_per_byte"] = num(r.bits_per_byte());
    j["bits_per_byte_stderr"] = num(r.bits_per_byte_stderr());
  }
  return j;
}

// The id that starts each text of token shards (document_start_id: <|endoftext|>, or a BOS), for
// the clusters of the standard errors (perplexity.h): the one of the tokenizer.json that
// `prepare` wrote beside them, else the evaluation's tokenizer, else none (each file one cluster).
int32_t shard_cluster_break(const std::string& first_shard, const Tokenizer* eval_tok) {
  const fs::path prepared = fs::path(first_shard).parent_path() / "tokenizer.json";
  std::error_code ec;
  if (fs::exists(prepared, ec)) {
    try {
      return document_start_id(*make_tokenizer(prepared.string()));
    } catch (const Error&) {  // not a tokenizer this build reads: the fallbacks below
    }
  }
  return eval_tok ? document_start_id(*eval_tok) : -1;
}

}  // namespace

void check_recipe_model(const Recipe& recipe, const GivenKeys& given, const ModelSource& source,
                        const std::string& model_path) {
  // The architecture keys (the same comparison as train.init_from), then the attention and LoRA
  // keys, which decide the function of the model as well (the evaluation-time ones, top_k and
  // eval_routing, are applied instead: apply_eval_attention_keys).
  const Recipe model_recipe = recipe_of_model_source(source);
  const std::string diffs =
      given_model_key_conflicts(recipe.model, given, model_recipe.model, "the model") +
      given_attention_key_conflicts(recipe.attention, given, model_recipe.attention, "the model",
                                    head_dim_of(model_recipe.model)) +
      lora_key_conflicts(recipe, model_recipe, "the model", &given);
  ATTN_REQUIRE(diffs.empty(),
               "the recipe's model disagrees with the model being evaluated (%s):%s\n"
               "eval uses the model of the checkpoint; drop these keys from the recipe, which "
               "only supplies data and eval keys",
               model_path.c_str(), diffs.c_str());
}

// attention.focus.top_k and eval_routing choose how a trained Focus model is evaluated: when the
// recipe (--recipe or --set) gives them they replace the checkpoint's.
void apply_eval_attention_keys(const Recipe& recipe, const GivenKeys& given, GPTConfig& model) {
  // A variant's key in a recipe that names another attention.type is carried, not used (as in
  // training; a run's own recipe.yaml lists every key): only keys meant for the variant apply,
  // and those must find it. A key given by --set is always meant.
  auto meant = [&](const char* key, const char* type) {
    if (!given.contains(key)) return false;
    return given.where.at(key).rfind("--set", 0) == 0 || !given.contains("attention.type") ||
           recipe.attention.type == type;
  };
  const FocusOptions& f = gpt_config_of(recipe).attention.focus;
  FocusOptions& mf = model.attention.focus;
  for (const char* key : {"attention.focus.top_k", "attention.focus.eval_routing"}) {
    ATTN_REQUIRE(!meant(key, "focus") || model.attention.type == "focus",
                 "%s (%s) chooses how a Focus model evaluates; this model's attention is %s", key,
                 given.where.at(key).c_str(), model.attention.type.c_str());
  }
  if (meant("attention.focus.top_k", "focus")) {
    ATTN_REQUIRE(f.top_k >= 1 && f.top_k <= mf.groups,
                 "attention.focus.top_k (%s): %d must be in [1, %d], the model's groups",
                 given.where.at("attention.focus.top_k").c_str(), f.top_k, mf.groups);
    mf.top_k = f.top_k;
  }
  if (meant("attention.focus.eval_routing", "focus")) mf.eval_routing = f.eval_routing;
  // attention.sfa.kernel chooses SFA's path (the same function, another kernel): it applies too.
  if (meant("attention.sfa.kernel", "sfa")) {
    ATTN_REQUIRE(model.attention.type == "sfa",
                 "attention.sfa.kernel (%s) chooses how an SFA model runs; this model's attention "
                 "is %s",
                 given.where.at("attention.sfa.kernel").c_str(), model.attention.type.c_str());
    model.attention.sfa.kernel = gpt_config_of(recipe).attention.sfa.kernel;
  }
}

void apply_eval_overrides(const std::vector<std::string>& overrides, const ModelSource& source,
                          GPTConfig& model, const char* command) {
  if (overrides.empty()) return;
  // On the model's own recipe, so that the checks see its groups.
  Recipe r = parse_recipe(recipe_to_yaml(recipe_of_model_source(source)), "the model's recipe",
                          overrides, RecipeUse::eval);
  std::erase_if(r.given.where, [](const auto& kv) { return kv.second.rfind("--set", 0) != 0; });
  for (const auto& [key, where] : r.given.where) {
    ATTN_REQUIRE(key == "attention.focus.top_k" || key == "attention.focus.eval_routing" ||
                     key == "attention.sfa.kernel",
                 "%s runs the model as trained: --set takes only attention.focus.top_k, "
                 "attention.focus.eval_routing and attention.sfa.kernel, got %s (%s)",
                 command, key.c_str(), where.c_str());
  }
  apply_eval_attention_keys(r, r.given, model);
}

EvalReport run_evaluation(const EvalOptions& o) {
  const auto t_start = Clock::now();
  ModelSource source = inspect_model_source(o.model, o.adapter);

  // The recipe: --recipe, else the checkpoint's own; --set applies to it.
  std::optional<Recipe> recipe;
  GivenKeys given;
  if (!o.recipe.empty()) {
    recipe = load_recipe(o.recipe, o.overrides, RecipeUse::eval);
    given = recipe->given;
  } else if (!source.adapter_recipe_yaml.empty() || !source.recipe_yaml.empty()) {
    // With an adapter, the run that trained it (its data and eval keys; its model is the one
    // evaluated), else the checkpoint's own.
    const bool adapter = !source.adapter_recipe_yaml.empty();
    recipe =
        parse_recipe(adapter ? source.adapter_recipe_yaml : source.recipe_yaml,
                     adapter ? source.adapter + ":recipe" : source.weights_path + "/recipe.yaml",
                     o.overrides, RecipeUse::eval);
    // Only the --set keys can disagree with the checkpoint's own recipe.
    given = recipe->given;
    std::erase_if(given.where, [](const auto& kv) { return kv.second.rfind("--set", 0) != 0; });
  } else if (!o.overrides.empty()) {
    recipe = parse_recipe("{}", "--set", o.overrides, RecipeUse::eval);
    given = recipe->given;
  }
  // A variant's keys given for a model of another attention type are not used: said (as the
  // trainer says it), not applied silently.
  std::vector<std::string> unused_keys;
  if (recipe) {
    check_recipe_model(*recipe, given, source, o.model);
    apply_eval_attention_keys(*recipe, given, source.config);
    const std::string own = "attention." + source.config.attention.type + ".";
    for (const auto& [key, where] : given.where)
      if ((key.rfind("attention.focus.", 0) == 0 || key.rfind("attention.sfa.", 0) == 0) &&
          key.rfind(own, 0) != 0)
        unused_keys.push_back(strformat("%s (%s) is not used: the model's attention is %s",
                                        key.c_str(), where.c_str(),
                                        source.config.attention.type.c_str()));
  }

  const auto tasks = task_list(o);
  const bool other_data = !tasks.empty() || !o.shards.empty() || !o.text.empty();
  const bool validation = o.validation || !other_data;
  ATTN_REQUIRE(!validation || recipe,
               "nothing to evaluate: model '%s' has no recipe with validation data; pass "
               "--tasks, --task-dir, --shards or --text (or --recipe with data.val)",
               o.model.c_str());

  // Device and precision: the flags, else the recipe's train.device and a train.precision given
  // in --recipe or --set (the precision a checkpoint's own recipe names is an intent the CPU path
  // does not follow: EvalModel takes what the run computed in, source_precision).
  EvalDeviceOptions dev = o.device;
  if (recipe && dev.device == "auto") dev.device = std::string(enum_name(recipe->train.device));
  const bool cuda = dev.device == "cuda" || (dev.device == "auto" && cuda_available());
  if (recipe && cuda && dev.precision == "auto" && given.contains("train.precision"))
    dev.precision = std::string(enum_name(recipe->train.precision));
  std::unique_ptr<DataLoader> val;
  std::unique_ptr<SyntheticProbe> probe;
  if (validation) {
    val = validation_loader(*recipe, 0, 1, source.config.vocab_size);  // the evaluated model's
    probe = validation_probe(*recipe, *val);
    const int default_batch = cuda ? 16 : 4;
    dev.batch = std::max(dev.batch > 0 ? dev.batch : default_batch, recipe->train.micro_batch);
  }
  EvalModel model(source, dev);
  const GPTConfig& c = model.config();
  std::unique_ptr<Tokenizer> tok;
  // --tokenizer, else a data.tokenizer given by --set (or by a --recipe file over a checkpoint
  // without one), else the checkpoint's.
  std::string tok_spec = o.tokenizer;
  if (tok_spec.empty() && recipe && given.contains("data.tokenizer") &&
      (given.where.at("data.tokenizer").rfind("--set", 0) == 0 || source.tokenizer.empty()))
    tok_spec = recipe->data.tokenizer;
  if (!o.text.empty() || !tasks.empty()) tok = eval_tokenizer(source, tok_spec, c.vocab_size);
  // Every task is read and tokenised before anything is scored: a bad file or option fails the
  // run before any result is computed (and lost).
  std::vector<std::pair<Task, TaskRequests>> task_inputs;
  for (const auto& [name, path] : tasks) {
    Task task = load_task(name, path, o.limit, o.prompt);
    TaskRequests requests = task_requests(*tok, task, model.max_len());
    task_inputs.emplace_back(std::move(task), std::move(requests));
  }

  EvalReport rep;
  json& j = rep.json;
  j["model"] = {{"path", o.model},
                {"format", model_format_name(source.format)},
                {"weights", source.weights_path},
                {"parameters", model.num_params()},
                {"n_layer", c.n_layer},
                {"n_embd", c.n_embd},
                {"block_size", c.block_size},
                {"attention", c.attention.type}};
  if (!o.adapter.empty()) j["model"]["adapter"] = o.adapter;  // the weights are base + adapter
  // How the variant evaluates (Focus: the routing and top_k), and a caveat where that is not a
  // causal language model's evaluation (Focus's sequence-scope Sinkhorn reads later tokens).
  const std::string eval_mode = model.attention_eval_mode(), caveat = model.attention_caveat();
  if (!eval_mode.empty()) j["model"]["attention_eval"] = eval_mode;
  for (const std::string& n : unused_keys) rep.table += "note: " + n + "\n";
  if (!caveat.empty()) {
    j["caveats"] = json::array({caveat});
    rep.table += "note: " + caveat + "\n";
  }
  j["device"] = device_name(model.device());
  j["precision"] = dtype_name(model.dtype());
  j["batch"] = model.batch();
  Table table;

  if (validation) {
    const auto t0 = Clock::now();
    const ValidationResult v = model.validate(*val, recipe->eval.batches, probe.get());
    j["validation"] = {{"loss", num(v.loss)},
                       {"perplexity", num(v.perplexity)},
                       {"tokens", v.tokens},
                       {"windows", v.windows},
                       {"windows_in_set", val->num_windows()},
                       {"seq_len", recipe->train.seq_len},
                       {"seconds", seconds_since(t0)}};
    const std::string count = strformat("%lld tokens, %lld/%lld windows", (long long)v.tokens,
                                        (long long)v.windows, (long long)val->num_windows());
    // The one-line summary of the older `attnlab eval` (scripts grep it), then the table rows.
    // The variant's telemetry of the scored tokens (Focus: group balance per layer).
    std::map<std::string, double> metrics;
    std::string summary = model.attention_metrics(metrics);
    if (!metrics.empty()) j["validation"]["attention"] = metrics;
    for (const std::string& w : model.attention_warnings()) {
      j["validation"]["warnings"].push_back(w);
      rep.table += "warning: " + w + "\n";
    }
    if (!summary.empty()) summary = " | " + summary;
    if (!eval_mode.empty()) summary = " | " + eval_mode + summary;
    if (v.synthetic) {
      j["validation"]["synthetic"] = v.synthetic->to_json();
      summary += " | " + v.synthetic->summary();
    }
    rep.table +=
        strformat("val loss %.4f | val ppl %.3f | %lld tokens in %lld windows%s\n", v.loss,
                  v.perplexity, (long long)v.tokens, (long long)v.windows, summary.c_str());
    table.row("validation", "loss", v.loss, NAN, count);
    table.row("validation", "perplexity", v.perplexity, NAN, count, "%.3f");
    if (v.synthetic) {
      for (const SyntheticKind k : {SyntheticKind::kRecall, SyntheticKind::kCopied}) {
        const KindScore& ks = v.synthetic->kind(k);
        const std::string n = strformat("%lld targets", (long long)ks.count);
        table.row(strformat("synthetic %s", synthetic_kind_name(k)), "acc", ks.acc(), NAN, n,
                  "%.4f");
        table.row(strformat("synthetic %s", synthetic_kind_name(k)), "loss", ks.loss(), NAN, n);
      }
    }
  }

  const int context = o.context > 0 ? o.context : model.max_len();
  const int stride = o.stride > 0 ? o.stride : context;
  if (!o.shards.empty()) {
    const auto t0 = Clock::now();
    const std::vector<std::string> files = expand_globs({o.shards});
    size_t next_file = 0;
    auto next = [&](std::vector<int32_t>& tokens, int64_t&) {
      if (next_file >= files.size() || (o.limit > 0 && int64_t(next_file) >= o.limit)) return false;
      auto shard = ShardFile::open(files[next_file++], c.vocab_size);
      tokens.resize(size_t(shard->size()));
      shard->read(0, shard->size(), tokens.data());
      return true;
    };
    ProgressLine pl(o.progress, "shards", "files");
    const PerplexityResult r =
        perplexity(model, next, context, stride, shard_cluster_break(files[0], tok.get()),
                   [&](int64_t d, int64_t) { pl(d, int64_t(files.size())); });
    ATTN_REQUIRE(r.tokens > 0,
                 "--shards '%s': no token to score (%zu file(s), none with two tokens or more)",
                 o.shards.c_str(), files.size());
    j["perplexity"]["shards"] = perplexity_json(r, context, stride, o.shards);
    j["perplexity"]["shards"]["seconds"] = seconds_since(t0);
    const std::string count =
        strformat("%lld tokens, %lld files", (long long)r.tokens, (long long)r.documents);
    table.row("shards", "loss", r.loss(), r.loss_stderr(), count);
    table.row("shards", "perplexity", r.perplexity(), r.perplexity_stderr(), count, "%.3f");
  }
  if (!o.text.empty()) {
    const auto t0 = Clock::now();
    const std::vector<std::string> files = expand_globs({o.text});
    size_t next_file = 0;
    int64_t docs = 0;
    std::unique_ptr<DocumentReader> reader;
    std::string doc;
    auto next = [&](std::vector<int32_t>& tokens, int64_t& bytes) {
      if (o.limit > 0 && docs >= o.limit) return false;
      while (!reader || !reader->next(doc)) {
        if (next_file >= files.size()) return false;
        reader =
            std::make_unique<DocumentReader>(open_text_stream(files[next_file++]), o.delimiter);
      }
      ++docs;
      tokens.push_back(document_start_id(*tok));  // every token of the document is a target
      tok->encode(doc, tokens);
      bytes = int64_t(doc.size());
      return true;
    };
    ProgressLine pl(o.progress, "text", "documents");
    const PerplexityResult r = perplexity(model, next, context, stride, document_start_id(*tok),
                                          [&](int64_t d, int64_t) { pl(d, d); });
    ATTN_REQUIRE(r.tokens > 0, "--text '%s': no text to score (%zu file(s), every one empty)",
                 o.text.c_str(), files.size());
    j["perplexity"]["text"] = perplexity_json(r, context, stride, o.text);
    j["perplexity"]["text"]["seconds"] = seconds_since(t0);
    const std::string count =
        strformat("%lld tokens, %lld documents", (long long)r.tokens, (long long)r.documents);
    table.row("text", "loss", r.loss(), r.loss_stderr(), count);
    table.row("text", "perplexity", r.perplexity(), r.perplexity_stderr(), count, "%.3f");
    table.row("text", "bits_per_byte", r.bits_per_byte(), r.bits_per_byte_stderr(), count);
  }
  for (const auto& [task, requests] : task_inputs) {
    const std::string& name = task.name;
    ProgressLine pl(o.progress, name, "sequences");
    const TaskResult r = run_task(model, task, requests, [&](int64_t d, int64_t t) { pl(d, t); });
    json t = {{"file", task.path},        {"kind", task_kind_name(r.kind)},
              {"examples", r.examples},   {"requests", r.requests},
              {"acc", num(r.acc)},        {"acc_stderr", num(r.acc_stderr)},
              {"truncated", r.truncated}, {"seconds", r.seconds}};
    const std::string count = strformat("%lld examples", (long long)r.examples);
    table.row(name, "acc", r.acc, r.acc_stderr, count);
    if (r.kind == TaskKind::multiple_choice) {
      t["prompt"] = task_prompt_name(o.prompt);
      t["answer_cue"] = r.cued;  // examples given "\nAnswer:"
      t["acc_norm"] = num(r.acc_norm);
      t["acc_norm_stderr"] = num(r.acc_norm_stderr);
      table.row(name, "acc_norm", r.acc_norm, r.acc_norm_stderr, count);
    }
    if (r.kind == TaskKind::language_modeling) {
      t["perplexity"] = num(r.perplexity);
      t["perplexity_stderr"] = num(r.perplexity_stderr);
      table.row(name, "perplexity", r.perplexity, r.perplexity_stderr, count, "%.3f");
    }
    j["tasks"][name] = t;
  }
  j["seconds"] = seconds_since(t_start);
  // A run directory: which of its checkpoints (`latest`) was scored.
  std::string format = model_format_name(source.format);
  if (source.format == ModelFormat::attnlab &&
      fs::path(source.weights_path).filename() != fs::path(o.model).filename())
    format.append(" ").append(fs::path(source.weights_path).filename().string());
  rep.table = rep.table +
              strformat("model %s (%s, %s params) | %s %s | batch %d%s\n", o.model.c_str(),
                        format.c_str(), io::format_count(double(model.num_params())).c_str(),
                        device_name(model.device()), dtype_name(model.dtype()), model.batch(),
                        std::none_of(
                            task_inputs.begin(), task_inputs.end(),
                            [](const auto& t) { return t.first.kind == TaskKind::multiple_choice; })
                            ? ""
                            : strformat(" | prompts %s", task_prompt_name(o.prompt)).c_str()) +
              table.out;
  return rep;
}

}  // namespace attnlab
