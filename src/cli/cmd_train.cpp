// attnlab train | info | generate | prepare
#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <map>

#include "cli/commands.h"
#include "config/recipe.h"
#include "core/cuda_check.h"
#include "model/gpt.h"
#include "train/from_recipe.h"
#include "train/init_from.h"
#include "train/trainer.h"

namespace attnlab::cli {

namespace {
std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return strformat("%.2f %s", b, units[u]);
}
}  // namespace

int cmd_train(const RecipeArgs& args, const std::string& resume_dir, int profile_steps) {
  Recipe r = load_recipe(args.recipe, args.overrides);
  TrainOptions o;
  o.resume = resume_dir;
  o.profile_steps = profile_steps;
  const TrainResult res = train(r, o);
  if (res.interrupted_by != 0) {
    // End by the signal, as without the handler: a shell running several runs stops too.
    std::fflush(nullptr);
    std::signal(res.interrupted_by, SIG_DFL);
    std::raise(res.interrupted_by);
  }
  return 0;
}

int cmd_generate(const GenerateOptions& options) {
  // The prompt goes out with the first generated piece, so that a refused call (no tokenizer, a
  // prompt past the context) prints nothing to stdout.
  bool prompt_out = false;
  auto put_prompt = [&] {
    if (!prompt_out) std::fputs(options.prompt.c_str(), stdout);
    prompt_out = true;
  };
  GenerateResult r = generate(options, [&](const std::string& piece) {
    put_prompt();
    std::fwrite(piece.data(), 1, piece.size(), stdout);  // raw bytes, NUL included
    std::fflush(stdout);
  });
  put_prompt();
  std::printf("\n");
  std::fflush(stdout);  // the text before the notes on stderr, also where both go to one pipe
  for (const std::string& n : r.notes) std::fprintf(stderr, "note: %s\n", n.c_str());
  // A full context slides to its last block_size / 2 tokens (docs/generate.md): said, since the
  // later tokens then saw less context than a full window.
  const std::string slides =
      r.context_slides > 0
          ? strformat(", the context (model.block_size %d) slid %d time(s) to its last %d tokens",
                      r.context_length, r.context_slides, std::max(1, r.context_length / 2))
          : "";
  std::fprintf(stderr,
               "[%d prompt tokens, %d generated%s%s, %.1f tok/s, KV cache %d positions, %s]\n",
               r.prompt_tokens, r.new_tokens,
               r.stop_token >= 0 ? strformat(", stopped at %s", r.stop_piece.c_str()).c_str() : "",
               slides.c_str(), r.tokens_per_second, r.cache_positions,
               human_bytes(double(r.cache_bytes)).c_str());
  return 0;
}

int cmd_prepare(PrepareOptions options) {
  options.delimiter = unescape_delimiter(options.delimiter);  // it comes from a shell
  PrepareSummary s = prepare(options);
  std::printf("%s\n", s.to_string().c_str());
  return 0;
}

int cmd_info(const RecipeArgs& args) {
  // A retrofit's (or init_from's) model keys come from its base checkpoint.
  Recipe r = resolve_init_from(load_recipe(args.recipe, args.overrides));
  // The model is built before anything is printed: a recipe it refuses (an unknown attention
  // type) prints only the error, not a resolved recipe that `info > file` would keep.
  const GPTConfig c = gpt_config_of(r);
  GPT model(c);
  std::printf("# resolved recipe\n%s\n", recipe_to_yaml(r).c_str());
  ParameterStore store;
  model.declare_params(store);
  std::map<std::string, int64_t> by_role;
  int64_t total = 0;
  for (const auto& e : store.entries()) {
    by_role[role_name(e.spec.role)] += e.spec.shape.numel();
    total += e.spec.shape.numel();
  }
  const int64_t padding = model.vocab_padding();
  const auto trainable = r.retrofit.trainable_roles();
  int64_t n_train = 0;
  for (const auto& e : store.entries())
    if (trainable.count(e.spec.role)) n_train += e.spec.shape.numel();

  bool cuda = r.train.device == DeviceChoice::cuda ||
              (r.train.device == DeviceChoice::auto_select && cuda_available());
  DType dt = cuda && r.train.precision == Precision::bf16 ? DType::bf16 : DType::f32;
  const TrainingMemoryEstimate mem =
      estimate_training_memory(model, total, n_train, r.train.micro_batch, r.train.seq_len, dt);
  // The same run with every tensor trainable (full fine-tuning), for comparison with a retrofit.
  const TrainingMemoryEstimate full =
      estimate_training_memory(model, total, total, r.train.micro_batch, r.train.seq_len, dt);
  const int accum = r.train.grad_accum_steps(1);
  const double fpt = model.flops_per_token(r.train.seq_len, store, trainable);

  std::printf("# model\n");
  // Counts without the vocabulary padding (which is in the base role's embeddings).
  const int64_t unpadded = total - padding;
  const int64_t train_unpadded = n_train - (trainable.count(ParamRole::base) ? padding : 0);
  std::printf("parameters        %lld (%.2fM; %lld with vocabulary padding)\n", (long long)unpadded,
              double(unpadded) / 1e6, (long long)total);
  for (auto& [role, n] : by_role)
    std::printf("  role %-10s  %lld\n", role.c_str(),
                (long long)(role == role_name(ParamRole::base) ? n - padding : n));
  std::printf("trainable         %lld (%.2f%%)\n", (long long)train_unpadded,
              100.0 * double(train_unpadded) / double(unpadded));
  std::printf("frozen            %lld%s\n", (long long)(unpadded - train_unpadded),
              r.retrofit.enabled ? " (retrofit: no gradient, no optimizer state)" : "");
  std::printf("padded vocab      %d (vocab %d)\n", c.padded_vocab, c.vocab_size);
  std::printf("block             %s, %s MLP (width %d), %s positions", norm_name(c.norm),
              mlp_name(c.mlp), c.mlp_hidden(), position_name(c.position));
  if (c.position == PositionType::rope) {
    std::printf(" (theta %g", double(c.rope_theta));
    if (c.rope_scaling.type != RopeScalingType::none)
      std::printf(", scaling %s", rope_scaling_name(c.rope_scaling).c_str());
    std::printf(")");
  }
  std::printf(", %s, %s embeddings\n", c.bias ? "biases" : "no biases",
              c.tied_embeddings ? "tied" : "untied");
  std::printf("attention         %s, %d query heads, %d kv heads, head dim %d\n",
              c.attention.type.c_str(), c.n_head, c.kv_heads(), c.head_dim());
  if (c.lora.enabled())
    std::printf(
        "lora              rank %d, alpha %g (scale %g) on c_attn: %lld parameters (role "
        "adapter)\n",
        c.lora.rank, double(c.lora.alpha), double(c.lora.scale()), (long long)by_role["adapter"]);
  std::printf("\n# step\n");
  std::printf("device            %s (%s)\n", cuda ? "cuda" : "cpu", dtype_name(dt));
  std::printf("tokens per step   %lld = %d x %d x %d accumulation\n",
              (long long)r.train.tokens_per_step(), r.train.micro_batch, r.train.seq_len, accum);
  std::printf(
      "FLOPs per token   %.3g (6 per trained matrix weight, 4 per frozen one, + attention 6 L d T: "
      "PaLM's 12 L d T halved for the causal mask, as llm.c counts)\n",
      fpt);
  std::printf("FLOPs per step    %.3g\n", fpt * double(r.train.tokens_per_step()));
  std::printf("\n# memory estimate (one rank)\n");
  std::printf("weights           %s\n", human_bytes(double(mem.weights)).c_str());
  std::printf("gradients         %s\n", human_bytes(double(mem.grads)).c_str());
  std::printf("optimizer state   %s\n", human_bytes(double(mem.optimizer)).c_str());
  std::printf("activations       %s (micro-batch %d x %d, recompute %s)\n",
              human_bytes(double(mem.activations)).c_str(), r.train.micro_batch, r.train.seq_len,
              recompute_name(c.recompute));
  if (mem.workspace)
    std::printf("workspace         %s\n", human_bytes(double(mem.workspace)).c_str());
  std::printf("total             %s\n", human_bytes(double(mem.total())).c_str());
  if (r.distributed.zero == 1)
    std::printf(
        "                  (distributed.zero 1: with W ranks each holds 1/W of the optimizer "
        "state; the estimate above is for one rank holding all of it)\n");
  if (r.data.source == DataSource::synthetic)  // generated in host memory, 4 bytes a token
    std::printf(
        "synthetic data    %s of host memory besides the total (train + val tokens)\n",
        human_bytes(4.0 * double(r.data.synthetic.train_tokens + r.data.synthetic.val_tokens))
            .c_str());
  if (n_train != total) {
    std::printf("\n# memory: this run (%s) vs full fine-tuning (every tensor trains)\n",
                r.retrofit.enabled ? "retrofit" : "frozen roles");
    std::printf("gradients         %s vs %s\n", human_bytes(double(mem.grads)).c_str(),
                human_bytes(double(full.grads)).c_str());
    std::printf("optimizer state   %s vs %s\n", human_bytes(double(mem.optimizer)).c_str(),
                human_bytes(double(full.optimizer)).c_str());
    std::printf("total             %s vs %s\n", human_bytes(double(mem.total())).c_str(),
                human_bytes(double(full.total())).c_str());
  }
  return 0;
}

}  // namespace attnlab::cli
