// attnlab eval | score
#include "cli/cmd_eval.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string_view>

#include "cli/validators.h"
#include "core/error.h"
#include "data/prepare.h"
#include "io/atomic_file.h"

namespace fs = std::filesystem;

namespace attnlab::cli {

namespace {
// An output file's place, checked before the work it reports (not after): a writable directory,
// and no directory at the path itself.
void check_output_path(const std::string& path, const char* what) {
  const fs::path dir = fs::absolute(path).parent_path();
  ATTN_REQUIRE(fs::is_directory(dir) && ::access(dir.c_str(), W_OK) == 0,
               "%s '%s': cannot write into '%s'", what, path.c_str(), dir.c_str());
  ATTN_REQUIRE(!fs::is_directory(path), "%s '%s' is a directory (expected a file path)", what,
               path.c_str());
}

void add_device_options(CLI::App* sub, EvalDeviceOptions& d) {
  sub->add_option("--device", d.device, "auto | cpu | cuda (default: auto, or the recipe's)")
      ->capture_default_str();
  sub->add_option("--precision", d.precision,
                  "auto | bf16 | fp32 (auto on CUDA: the precision the run computed in, fp32 "
                  "for HF and llm.c models; fp32 on the CPU)")
      ->capture_default_str();
  sub->add_option("--batch", d.batch,
                  "sequences per forward (default: 16 on CUDA, 4 on CPU, fewer above 1,024 tokens)")
      ->check(number_at_least(0));
}

}  // namespace

CLI::App* add_eval_command(CLI::App& app, EvalArgs& a) {
  EvalOptions& o = a.options;
  CLI::App* sub = app.add_subcommand(
      "eval", "evaluate a model: validation loss, perplexity, zero-shot tasks (docs/eval.md)");
  sub->add_option("model", o.model,
                  "run directory, checkpoint directory, Hugging Face directory or llm.c .bin "
                  "(with --checkpoint: a recipe, the older form)")
      ->required();
  sub->add_option("--checkpoint", a.checkpoint,
                  "older form `eval RECIPE --checkpoint RUN`: the model; RECIPE is --recipe");
  sub->add_option("--adapter", o.adapter,
                  "a retrofit's adapter.safetensors, applied on the model (docs/retrofit.md)")
      ->check(CLI::ExistingFile);
  sub->add_option("--recipe", o.recipe, "recipe for data and eval keys (its model must agree)")
      ->check(CLI::ExistingFile);
  sub->add_option("--set", o.overrides, "override a recipe key: --set section.key=value");
  sub->add_option("--tasks", a.tasks, "zero-shot tasks: name=FILE.jsonl[,name=FILE.jsonl...]")
      ->delimiter(',');
  sub->add_option("--task-dir", o.task_dir, "every *.jsonl of DIR as a task named by its stem");
  sub->add_option("--prompt", a.prompt,
                  "multiple-choice prompts: lm-eval (default: \"Question: ...\" queries get "
                  "lm-eval's \\nAnswer: cue) or file (the files' text as it is)");
  sub->add_option("--shards", o.shards, "perplexity of token shards (glob; a file = a document)");
  sub->add_option("--text", o.text, "perplexity of text files (glob; plain, .gz, .xz)");
  sub->add_option("--delimiter", o.delimiter,
                  "--text document separator (default: a file is a document; \\n understood)");
  sub->add_option("--tokenizer", o.tokenizer, "tokenizer spec (default: the model's)");
  sub->add_option("--context", o.context, "perplexity window in tokens (default: block_size)")
      ->check(number_at_least(0));
  sub->add_option("--stride", o.stride, "perplexity window stride (default: the context)")
      ->check(number_at_least(0));
  sub->add_option("--limit", o.limit,
                  "first N examples per task, documents per data source (0, the default: all)")
      ->check(number_at_least(0));
  sub->add_flag("--validation", o.validation,
                "also score the recipe's validation set when other data is given");
  add_device_options(sub, o.device);
  sub->add_option("--out,-o", a.out, "write the results as JSON to this file");
  sub->add_flag("!--no-progress", o.progress, "no progress lines");
  return sub;
}

int cmd_eval(EvalArgs a) {
  EvalOptions& o = a.options;
  if (!a.checkpoint.empty()) {
    ATTN_REQUIRE(o.recipe.empty(),
                 "pass the recipe once: `eval MODEL --recipe R` "
                 "(or the older `eval R --checkpoint MODEL`)");
    o.recipe = o.model;
    o.model = a.checkpoint;
  }
  ATTN_REQUIRE(!(fs::is_regular_file(o.model) && (fs::path(o.model).extension() == ".yaml" ||
                                                  fs::path(o.model).extension() == ".yml")),
               "'%s' is a recipe; eval takes the model first: `attnlab eval RUN_DIR "
               "--recipe %s` (or the older `attnlab eval %s --checkpoint RUN_DIR`)",
               o.model.c_str(), o.model.c_str(), o.model.c_str());
  for (const std::string& t : a.tasks) {
    const size_t eq = t.find('=');
    if (eq == std::string::npos)
      o.tasks.emplace_back(fs::path(t).stem().string(), t);
    else
      o.tasks.emplace_back(t.substr(0, eq), t.substr(eq + 1));
    ATTN_REQUIRE(!o.tasks.back().first.empty() && !o.tasks.back().second.empty(),
                 "--tasks expects name=FILE, got '%s'", t.c_str());
  }
  o.delimiter = unescape_delimiter(o.delimiter);  // as prepare's --delimiter
  o.prompt = parse_task_prompt(a.prompt);
  // The results file is checked before the evaluation runs, not after.
  if (!a.out.empty()) check_output_path(a.out, "eval --out");
  const EvalReport r = run_evaluation(o);
  std::fputs(r.table.c_str(), stdout);
  if (!a.out.empty()) {
    io::write_file_atomic(a.out, r.json.dump(2) + "\n");
    std::printf("results: %s\n", a.out.c_str());
  }
  return 0;
}

CLI::App* add_score_command(CLI::App& app, ScoreArgs& a) {
  ScoreOptions& o = a.options;
  CLI::App* sub = app.add_subcommand(
      "score", "per-token log-probabilities and argmax of a text or token file, as JSON lines");
  sub->add_option("model", o.model, "run, checkpoint, Hugging Face directory or llm.c .bin")
      ->required();
  sub->add_option("--adapter", o.adapter,
                  "a retrofit's adapter.safetensors, applied on the model (docs/retrofit.md)")
      ->check(CLI::ExistingFile);
  sub->add_option("--text", o.text, "a text file (one document)");
  sub->add_option("--tokens", o.tokens, "an llm.c shard or a file of whitespace-separated ids");
  sub->add_option("--tokenizer", o.tokenizer, "tokenizer spec (default: the model's)");
  sub->add_option("--context", o.context, "window in tokens (default: block_size)")
      ->check(number_at_least(0));
  sub->add_option("--stride", o.stride, "window stride (default: the context)")
      ->check(number_at_least(0));
  sub->add_option("--set", o.overrides,
                  "attention.focus.top_k=N, attention.focus.eval_routing=hard|soft or "
                  "attention.sfa.kernel=auto|flash|masked_dense");
  add_device_options(sub, o.device);
  sub->add_option("--out,-o", a.out, "write the JSON lines here (default: stdout)");
  return sub;
}

int cmd_score(const ScoreArgs& a) {
  // --out is written as a temporary file renamed at the end: a refused or failed call leaves an
  // existing file as it was (it was truncated first, whatever it held).
  std::unique_ptr<io::AtomicFileWriter> out;
  if (!a.out.empty()) {
    check_output_path(a.out, "score --out");
    out = std::make_unique<io::AtomicFileWriter>(a.out);
  }
  const ScoreSummary s = score_tokens(a.options, [&](std::string_view line) {
    if (out)
      out->write(line);
    else
      std::fwrite(line.data(), 1, line.size(), stdout);
  });
  if (out) out->commit();
  std::fprintf(stderr, "[%lld tokens scored, mean logprob %.4f]\n", (long long)s.tokens,
               s.tokens ? -s.nll / double(s.tokens) : 0.0);
  return 0;
}

}  // namespace attnlab::cli
