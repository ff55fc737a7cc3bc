// attnlab: the command line. Thin: argument parsing only; the work lives in src/cli/cmd_*.cpp.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/cmd_eval.h"
#include "cli/cmd_tokenize.h"
#include "cli/commands.h"
#include "cli/unknown_option.h"
#include "cli/validators.h"
#include "core/error.h"

using namespace attnlab;

int main(int argc, char** argv) {
  CLI::App app{"attnlab: train GPT-style language models with dense, Focus and SFA attention"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "attnlab 0.1.0");

  cli::RecipeArgs train_args, info_args;
  std::string resume;
  int profile_steps = 0;
  auto add_recipe = [](CLI::App* sub, cli::RecipeArgs& a) {
    sub->add_option("recipe", a.recipe, "recipe YAML file")->required()->check(CLI::ExistingFile);
    sub->add_option("--set", a.overrides,
                    "override a recipe key: --set section.key=value (repeatable)");
  };

  CLI::App* train = app.add_subcommand("train", "train a model from a recipe");
  add_recipe(train, train_args);
  train
      ->add_option("--resume", resume,
                   "resume bit-exactly from a run directory or checkpoint directory")
      ->check(cli::non_empty("a run or checkpoint directory"));
  train
      ->add_option("--profile", profile_steps,
                   "run N steps with NVTX ranges for nsys/ncu, then stop")
      ->check(cli::number_at_least(0, true));

  cli::EvalArgs eval_args;
  CLI::App* eval = cli::add_eval_command(app, eval_args);
  cli::ScoreArgs score_args;
  CLI::App* score = cli::add_score_command(app, score_args);

  CLI::App* info =
      app.add_subcommand("info", "resolved recipe, parameter counts, memory and FLOPs");
  add_recipe(info, info_args);

  GenerateOptions gen;
  CLI::App* generate = app.add_subcommand("generate", "sample text from a checkpoint (streamed)");
  generate->add_option("checkpoint", gen.checkpoint, "checkpoint or run directory")->required();
  generate
      ->add_option("--adapter", gen.adapter,
                   "a retrofit's adapter.safetensors, applied on the checkpoint")
      ->check(CLI::ExistingFile);
  generate->add_option("--prompt,-p", gen.prompt, "text to continue (default: a new document)");
  generate->add_option("--max-new-tokens,-n", gen.max_new_tokens, "tokens to generate")
      ->capture_default_str();
  // Given, they replace the model's generation_config.json sampling (GenerateOptions::sampling).
  float temperature = 1.f, top_p = 1.f;
  int top_k = 0;
  CLI::Option* temperature_opt =
      generate->add_option("--temperature,-t", temperature,
                           "0 = greedy (default: the model's generation_config.json, else 1)");
  CLI::Option* top_k_opt = generate->add_option(
      "--top-k", top_k,
      "keep the k most likely tokens and those tied with the k-th, 0 = all (default: the "
      "model's generation_config.json, else 0)");
  CLI::Option* top_p_opt = generate->add_option(
      "--top-p", top_p,
      "nucleus sampling mass (default: the model's generation_config.json, else 1)");
  generate->add_option("--seed", gen.seed, "sampling seed")
      ->check(cli::unsigned_64())
      ->capture_default_str();
  generate->add_option("--tokenizer", gen.tokenizer,
                       "tokenizer spec (default: the checkpoint's tokenizer.json)");
  generate->add_option("--device", gen.device, "auto | cpu | cuda")->capture_default_str();
  generate->add_flag("!--no-stop", gen.stop,
                     "keep going past the stop tokens (end-of-text, a BOS, the model's "
                     "generation_config.json ids, --stop)");
  generate->add_option("--stop", gen.stop_tokens,
                       "one more stop token: an id or a token's text (e.g. '<|eot_id|>'); "
                       "repeatable");
  generate->add_flag("--special", gen.special,
                     "special-token texts in the prompt are those tokens (a chat template "
                     "written out), as transformers encodes text");
  generate->add_option("--set", gen.overrides,
                       "attention.focus.top_k=N, attention.focus.eval_routing=hard|soft or "
                       "attention.sfa.kernel=auto|flash|masked_dense");

  PrepareOptions prep;
  CLI::App* prepare =
      app.add_subcommand("prepare", "turn text files into llm.c-compatible token shards");
  prepare
      ->add_option("inputs", prep.inputs,
                   "text files or globs (plain, .gz, .xz; or JSONL with --jsonl-field)")
      ->required();
  prepare->add_option("--out,-o", prep.out_dir, "output directory for train_*.bin / val_*.bin")
      ->required();
  prepare->add_option("--tokenizer", prep.tokenizer, "byte | gpt2:<dir> | hf:<tokenizer.json>")
      ->capture_default_str();
  prepare->add_option("--delimiter", prep.delimiter,
                      "document separator (\"\" = one document per file; "
                      "escapes \\n \\r \\t \\\\ understood)");
  prepare
      ->add_option("--jsonl-field", prep.jsonl_field,
                   "inputs are JSON lines; documents are this field")
      ->check(cli::non_empty("a field name (an empty one read the JSON lines as text)"));
  prepare->add_option("--val-fraction", prep.val_fraction, "fraction of documents for validation")
      ->capture_default_str();
  prepare->add_option("--seed", prep.seed, "seed of the train/val split")->capture_default_str();
  prepare->add_option("--shard-tokens", prep.shard_tokens, "tokens per shard")
      ->capture_default_str();
  prepare->add_option("--threads", prep.threads, "encoding threads (0 = all cores)")
      ->capture_default_str();
  prepare->add_flag("--eos", prep.eos,
                    "also end each document with the end-of-text token (tokenizers with a BOS)");
  prepare->add_flag("!--no-progress", prep.progress, "no progress line");

  std::string tok_spec = "byte", tok_text;
  bool tok_pieces = true, tok_special = false;
  CLI::App* tokenize = app.add_subcommand("tokenize", "show the ids and pieces of a text");
  tokenize->add_option("text", tok_text, "text to tokenize")->required();
  tokenize
      ->add_option("--tokenizer", tok_spec,
                   "byte | gpt2:<dir> | hf:<tokenizer.json> | <tokenizer.json>")
      ->capture_default_str();
  tokenize->add_flag("!--ids-only", tok_pieces, "print only the ids");
  tokenize->add_flag("--special", tok_special,
                     "as transformers' tokenizer(text): the BOS first, special-token texts as "
                     "their tokens");

  std::string conv_src, conv_dst, conv_to;
  bool conv_bf16 = false;
  std::string conv_adapter;
  CLI::App* convert = app.add_subcommand(
      "convert", "write a model (attnlab, Hugging Face GPT-2 or llm.c) in another format");
  convert
      ->add_option("src", conv_src,
                   "attnlab checkpoint or run, Hugging Face directory, or "
                   "llm.c .bin file")
      ->required();
  convert->add_option("dst", conv_dst, "destination (a new directory; a file for llmc)")
      ->required();
  convert->add_option("--to", conv_to, "attnlab | hf | llmc")->required();
  convert->add_flag("--bf16", conv_bf16, "llmc: write bf16 weights (llm.c version 5)");
  convert
      ->add_option("--adapter", conv_adapter,
                   "merge a retrofit's adapter.safetensors into the converted checkpoint")
      ->check(CLI::ExistingFile);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const std::vector<std::string> args(argv + 1, argv + argc);
    std::string msg;
    if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr)
      msg = cli::unknown_option_message(app, args);
    else if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr)
      msg = cli::unknown_command_message(app, args);
    if (!msg.empty()) {
      std::fprintf(stderr, "attnlab: error: %s\n", msg.c_str());
      return e.get_exit_code();
    }
    return app.exit(e);
  }
  try {
    if (*train) return cli::cmd_train(train_args, resume, profile_steps);
    if (*eval) return cli::cmd_eval(eval_args);
    if (*score) return cli::cmd_score(score_args);
    if (*info) return cli::cmd_info(info_args);
    if (*generate) {
      if (temperature_opt->count()) gen.sampling.temperature = temperature;
      if (top_k_opt->count()) gen.sampling.top_k = top_k;
      if (top_p_opt->count()) gen.sampling.top_p = top_p;
      return cli::cmd_generate(gen);
    }
    if (*prepare) return cli::cmd_prepare(prep);
    if (*tokenize) return run_tokenize(tok_spec, tok_text, tok_pieces, tok_special);
    if (*convert) return cli::cmd_convert(conv_src, conv_dst, conv_to, conv_bf16, conv_adapter);
  } catch (const Error& e) {
    std::fprintf(stderr, "attnlab: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {  // an allocation no earlier check foresaw
    std::fprintf(stderr,
                 "attnlab: error: out of host memory: the command asked for more memory than this "
                 "machine could give (check the recipe's sizes: model, data, batch)\n");
    return 1;
  } catch (const std::length_error& e) {  // a size past what a container can hold
    std::fprintf(stderr,
                 "attnlab: error: a size past what this machine can hold (%s): check the "
                 "recipe's sizes (model, data, batch)\n",
                 e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attnlab: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
