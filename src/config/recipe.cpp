// Recipe defaults, model presets and validation. Parsing and printing live in recipe_yaml.cpp.
#include "config/recipe.h"

#include <algorithm>
#include <cmath>

#include "config/suggest.h"

namespace attnlab {
namespace {

struct ModelPreset {
  const char* name;
  ModelFamily family;
  int n_layer, n_head, n_kv_head, n_embd, vocab_size, block_size, mlp_hidden;
  double rope_theta;
  bool tied = false;         // the LLaMA family's head is untied but for LLaMA 3.2's
  double llama3_factor = 0;  // > 0: rope_scaling llama3 with this factor (low 1, high 4, 8192)
};

// GPT-2 (Radford et al. 2019): vocab 50257, a 1024-token context. The LLaMA family as their
// Hugging Face config.json files give them (llama3-8b is LLaMA 3.0; 3.1 and 3.2 add the llama3
// RoPE scaling). norm_eps stays the recipe's (1e-5, as all of these).
constexpr ModelPreset kPresets[] = {
    {"gpt2", ModelFamily::gpt2, 12, 12, 0, 768, 50257, 1024, 0, 10000},
    {"gpt2-medium", ModelFamily::gpt2, 24, 16, 0, 1024, 50257, 1024, 0, 10000},
    {"gpt2-large", ModelFamily::gpt2, 36, 20, 0, 1280, 50257, 1024, 0, 10000},
    {"gpt2-xl", ModelFamily::gpt2, 48, 25, 0, 1600, 50257, 1024, 0, 10000},
    {"tinyllama-1.1b", ModelFamily::llama, 22, 32, 4, 2048, 32000, 2048, 5632, 10000},
    {"llama2-7b", ModelFamily::llama, 32, 32, 0, 4096, 32000, 4096, 11008, 10000},
    {"llama2-13b", ModelFamily::llama, 40, 40, 0, 5120, 32000, 4096, 13824, 10000},
    {"llama3-8b", ModelFamily::llama, 32, 32, 8, 4096, 128256, 8192, 14336, 500000},
    {"llama3.1-8b", ModelFamily::llama, 32, 32, 8, 4096, 128256, 131072, 14336, 500000, false, 8},
    {"llama3.2-1b", ModelFamily::llama, 16, 32, 8, 2048, 128256, 131072, 8192, 500000, true, 32},
    {"llama3.2-3b", ModelFamily::llama, 28, 24, 8, 3072, 128256, 131072, 8192, 500000, true, 32},
    {"mistral-7b", ModelFamily::mistral, 32, 32, 8, 4096, 32768, 32768, 14336, 1000000},
};
constexpr int64_t kMaxLayers = 10000;
constexpr int64_t kMaxSyntheticTokens = int64_t(1) << 31;

[[noreturn]] void fail_key(const std::string& key, const std::string& msg) {
  throw ConfigError(key, msg);
}

void require_min(const std::string& key, int64_t value, int64_t min) {
  if (value < min)
    fail_key(key, strformat("%s must be >= %lld, got %lld", key.c_str(), (long long)min,
                            (long long)value));
}

void require_max(const std::string& key, int64_t value, int64_t max) {
  if (value > max)
    fail_key(key, strformat("%s must be <= %lld, got %lld", key.c_str(), (long long)max,
                            (long long)value));
}

// Finite and inside [lo, hi] (lo_open / hi_open exclude the bound), also once rounded to float,
// the type the model and the optimizer use (so 1e-50 for a positive key is not a silent 0).
void require_range(const std::string& key, double value, double lo, bool lo_open, double hi,
                   bool hi_open) {
  auto inside = [&](double v) {
    return std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  };
  const double as_float = double(float(value));
  if (inside(value) && inside(as_float)) return;
  std::string range =
      std::isinf(hi) ? strformat("%s %g", lo_open ? ">" : ">=", lo)
                     : strformat("in %s%g, %g%s", lo_open ? "(" : "[", lo, hi, hi_open ? ")" : "]");
  if (std::isinf(lo) && std::isinf(hi)) range = "finite";
  const std::string rounded =
      inside(value) ? strformat(" (%g as a float, the type it is used as)", as_float) : "";
  fail_key(key, strformat("%s must be %s, got %g%s", key.c_str(), range.c_str(), value,
                          rounded.c_str()));
}

constexpr double kInf = INFINITY;

}  // namespace

const std::vector<std::string>& model_preset_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const ModelPreset& p : kPresets) v.emplace_back(p.name);
    return v;
  }();
  return names;
}

std::vector<std::string> model_preset_keys(const std::string& preset) {
  for (const ModelPreset& p : kPresets) {
    if (preset != p.name) continue;
    if (p.family == ModelFamily::gpt2)
      return {"n_layer", "n_head", "n_embd", "vocab_size", "block_size"};
    return {"family",
            "n_layer",
            "n_head",
            "n_kv_head",
            "n_embd",
            "vocab_size",
            "block_size",
            "norm",
            "mlp",
            "position",
            "bias",
            "tied_embeddings",
            "mlp_hidden",
            "rope_theta",
            "rope_scaling.type",
            "rope_scaling.factor",
            "rope_scaling.low_freq_factor",
            "rope_scaling.high_freq_factor",
            "rope_scaling.original_context"};
  }
  return {};
}

void apply_family_defaults(ModelConfig& model, ModelFamily family) {
  const bool gpt2 = family == ModelFamily::gpt2;
  model.family = family;
  model.norm = gpt2 ? NormKind::layernorm : NormKind::rmsnorm;
  model.mlp = gpt2 ? MlpKind::gelu : MlpKind::swiglu;
  model.position = gpt2 ? PositionKind::learned : PositionKind::rope;
  model.bias = gpt2;
  model.tied_embeddings = gpt2;
}

void apply_model_preset(ModelConfig& model, const std::string& preset) {
  if (preset.empty()) return;
  for (const ModelPreset& p : kPresets) {
    if (preset != p.name) continue;
    apply_family_defaults(model, p.family);
    model.n_layer = p.n_layer;
    model.n_head = p.n_head;
    model.n_kv_head = p.n_kv_head;
    model.n_embd = p.n_embd;
    model.vocab_size = p.vocab_size;
    model.block_size = p.block_size;
    model.mlp_hidden = p.mlp_hidden;
    model.rope_theta = p.rope_theta;
    if (p.tied) model.tied_embeddings = true;
    model.rope_scaling = RopeScalingConfig{};
    if (p.llama3_factor > 0) {
      model.rope_scaling.type = RopeScalingKind::llama3;
      model.rope_scaling.factor = p.llama3_factor;
    }
    return;
  }
  std::string hint = closest_match(preset, model_preset_names());
  fail_key("model.preset",
           strformat("model.preset '%s' is not a known preset (valid: %s)%s", preset.c_str(),
                     join_names(model_preset_names()).c_str(),
                     hint.empty() ? "" : ("; did you mean '" + hint + "'?").c_str()));
}

int ModelConfig::padded_vocab() const {
  return (vocab_size + vocab_multiple - 1) / vocab_multiple * vocab_multiple;
}

void ModelConfig::validate(bool cross_checks) const {
  if (!preset.empty()) {
    ModelConfig scratch;
    apply_model_preset(scratch, preset);  // throws for an unknown name
  }
  require_min("model.n_layer", n_layer, 1);
  // (bounds far past any model, so that a typo is refused before n_layer modules are built)
  require_max("model.n_layer", n_layer, kMaxLayers);
  require_min("model.n_head", n_head, 1);
  require_min("model.n_kv_head", n_kv_head, 0);
  require_min("model.n_embd", n_embd, 1);
  require_min("model.vocab_size", vocab_size, 1);
  require_min("model.block_size", block_size, 1);
  require_min("model.vocab_multiple", vocab_multiple, 1);
  if (int64_t(vocab_size) + vocab_multiple > INT32_MAX)
    fail_key("model.vocab_size", strformat("model.vocab_size %d is too large", vocab_size));
  if (cross_checks && n_embd % n_head != 0)
    fail_key("model.n_embd",
             strformat("model.n_embd (%d) must be divisible by model.n_head (%d)", n_embd, n_head));
  if (cross_checks && n_kv_head > 0 && (n_kv_head > n_head || n_head % n_kv_head != 0))
    fail_key("model.n_kv_head",
             strformat("model.n_kv_head (%d) must divide model.n_head (%d); 0 means n_head",
                       n_kv_head, n_head));
  require_range("model.norm_eps", norm_eps, 0, true, kInf, false);
  require_range("model.init_std", init_std, 0, true, kInf, false);
  require_min("model.mlp_hidden", mlp_hidden, 0);
  require_range("model.rope_theta", rope_theta, 0, true, kInf, false);
  require_range("model.rope_scaling.factor", rope_scaling.factor, 0, true, kInf, false);
  require_range("model.rope_scaling.low_freq_factor", rope_scaling.low_freq_factor, 0, true, kInf,
                false);
  require_min("model.rope_scaling.original_context", rope_scaling.original_context, 1);
  if (!std::isfinite(rope_scaling.high_freq_factor) ||
      (rope_scaling.type == RopeScalingKind::llama3 &&
       !(rope_scaling.high_freq_factor > rope_scaling.low_freq_factor)))
    fail_key("model.rope_scaling.high_freq_factor",
             strformat("model.rope_scaling.high_freq_factor (%g) must be finite and greater than "
                       "low_freq_factor (%g)",
                       rope_scaling.high_freq_factor, rope_scaling.low_freq_factor));
  if (cross_checks && rope_scaling.type != RopeScalingKind::none && position != PositionKind::rope)
    fail_key("model.rope_scaling.type",
             strformat("model.rope_scaling.type is %s, but model.position is %s (scaling applies "
                       "to rope only)",
                       std::string(enum_name(rope_scaling.type)).c_str(),
                       std::string(enum_name(position)).c_str()));
  if (cross_checks && position == PositionKind::rope && (n_embd / n_head) % 2 != 0)
    fail_key("model.position",
             strformat("model.position: rope rotates pairs of dims, so the head dim (n_embd %d / "
                       "n_head %d = %d) must be even",
                       n_embd, n_head, n_embd / n_head));
}

std::string rope_scaling_key_problem(const Recipe& r, bool need_factor) {
  const RopeScalingConfig& s = r.model.rope_scaling;
  const RopeScalingConfig defaults;
  const std::string type(enum_name(s.type));
  const std::pair<const char*, bool> keys[] = {
      {"factor", s.factor != defaults.factor},
      {"low_freq_factor", s.low_freq_factor != defaults.low_freq_factor},
      {"high_freq_factor", s.high_freq_factor != defaults.high_freq_factor},
      {"original_context", s.original_context != defaults.original_context}};
  for (const auto& [name, changed] : keys) {
    const std::string key = std::string("model.rope_scaling.") + name;
    const auto w = r.given.where.find(key);
    const bool read = s.type == RopeScalingKind::llama3 ||
                      (s.type == RopeScalingKind::linear && key == "model.rope_scaling.factor");
    if (w != r.given.where.end() && changed && !read)
      return strformat("%s (%s) is not read by model.rope_scaling.type %s (%s)", key.c_str(),
                       w->second.c_str(), type.c_str(),
                       s.type == RopeScalingKind::none ? "no scaling; set the type"
                                                       : "linear reads factor only");
  }
  if (need_factor && s.type != RopeScalingKind::none &&
      !r.given.contains("model.rope_scaling.factor"))
    return strformat("model.rope_scaling.type %s (%s) needs model.rope_scaling.factor",
                     type.c_str(), r.given.where.at("model.rope_scaling.type").c_str());
  return "";
}

std::string FocusConfig::unused_key_reason(const std::string& key) const {
  const bool multiplicative = gate == FocusGate::multiplicative;
  if ((key == "attention.focus.gate_scale" || key == "attention.focus.gate_bias") &&
      !multiplicative)
    return "it belongs to the multiplicative gate; attention.focus.gate is additive";
  if (key == "attention.focus.gate_eps" && multiplicative)
    return "it belongs to the additive gate; attention.focus.gate is multiplicative";
  if ((key == "attention.focus.iterations" || key == "attention.focus.sinkhorn_scope") &&
      assign == FocusAssign::softmax)
    return "it belongs to the Sinkhorn assignment; attention.focus.assign is softmax";
  return "";
}

void FocusConfig::validate() const {
  require_min("attention.focus.groups", groups, 1);
  require_min("attention.focus.d_g", d_g, 1);
  require_min("attention.focus.local_window", local_window, 0);
  require_range("attention.focus.tau", tau, 0, true, kInf, false);
  // The scores are cosines / tau in float: every difference of two (up to 2 / tau) must be finite,
  // or the Sinkhorn's log-domain steps meet inf - inf.
  if (!std::isfinite(2.0f / float(tau)))
    fail_key("attention.focus.tau",
             strformat("attention.focus.tau must be >= %g (2 / tau is used as a float), got %g",
                       2.0 / double(std::numeric_limits<float>::max()), tau));
  require_min("attention.focus.iterations", iterations, 1);
  require_min("attention.focus.top_k", top_k, 1);
  if (top_k > groups)
    fail_key("attention.focus.top_k",
             strformat("attention.focus.top_k (%d) must be <= attention.focus.groups (%d)", top_k,
                       groups));
  require_range("attention.focus.gate_eps", gate_eps, 0, true, kInf, false);
  require_range("attention.focus.gate_scale", gate_scale, -kInf, false, kInf, false);
  require_range("attention.focus.gate_bias", gate_bias, -kInf, false, kInf, false);
}

void SfaConfig::validate() const {
  require_min("attention.sfa.k", k, 0);
  require_range("attention.sfa.distill", distill, 0, false, kInf, false);
}

void AttentionConfig::validate() const {
  if (type.empty()) fail_key("attention.type", "attention.type must not be empty");
  require_min("attention.window", window, 0);
  focus.validate();
  sfa.validate();
  if (type == "sfa" && window != 0)
    fail_key("attention.window",
             strformat("attention.window (%d) does not apply to attention.type sfa (full causal "
                       "only); set attention.window=0",
                       window));
  if (type == "focus" && window != 0)
    fail_key("attention.window",
             strformat("attention.window (%d) does not apply to attention.type focus: its local "
                       "band is attention.focus.local_window",
                       window));
}

void DataConfig::validate() const {
  if (tokenizer.empty()) fail_key("data.tokenizer", "data.tokenizer must not be empty");
  // The generator's range (data/synthetic.cpp); the model's vocabulary is checked at the start.
  require_min("data.synthetic.vocab_size", synthetic.vocab_size, 64);
  require_max("data.synthetic.vocab_size", synthetic.vocab_size, 65536);
  // The synthetic data is generated in memory (4 bytes a token).
  require_min("data.synthetic.train_tokens", synthetic.train_tokens, 2);
  require_max("data.synthetic.train_tokens", synthetic.train_tokens, kMaxSyntheticTokens);
  require_min("data.synthetic.val_tokens", synthetic.val_tokens, 0);
  require_max("data.synthetic.val_tokens", synthetic.val_tokens, kMaxSyntheticTokens);
  const SyntheticMixConfig& mix = synthetic.mix;
  require_range("data.synthetic.mix.markov", mix.markov, 0, false, kInf, false);
  require_range("data.synthetic.mix.bind", mix.bind, 0, false, kInf, false);
  require_range("data.synthetic.mix.query", mix.query, 0, false, kInf, false);
  require_range("data.synthetic.mix.copy", mix.copy, 0, false, kInf, false);
  if (mix.markov + mix.bind + mix.query + mix.copy <= 0)
    fail_key("data.synthetic.mix",
             "data.synthetic.mix: at least one of markov, bind, query, copy "
             "must be > 0");
  if (mix.query > 0 && mix.bind <= 0)
    fail_key("data.synthetic.mix.query",
             strformat("data.synthetic.mix.query (%g) needs data.synthetic.mix.bind > 0: queries "
                       "ask for keys bound earlier in the document",
                       mix.query));
  const int num_content = synthetic.vocab_size - 8;  // data/synthetic.h: 8 ids at the top
  if (synthetic.keys < 0 || synthetic.keys > std::max(num_content, 0))
    fail_key("data.synthetic.keys",
             strformat("data.synthetic.keys must be in [0, %d] (data.synthetic.vocab_size - 8 "
                       "content ids; 0 = all of them), got %d",
                       std::max(num_content, 0), synthetic.keys));
  // With keys set, the value alphabet follows it (disjoint): keys + values content ids at most.
  const int value_room =
      std::max(synthetic.keys > 0 ? num_content - synthetic.keys : num_content, 0);
  if (synthetic.values < 0 || synthetic.values > value_room)
    fail_key("data.synthetic.values",
             strformat("data.synthetic.values must be in [0, %d] (content ids left after "
                       "data.synthetic.keys = %d; 0 = all content ids), got %d",
                       value_room, synthetic.keys, synthetic.values));
  require_min("data.synthetic.doc_min_tokens", synthetic.doc_min_tokens, 1);
  if (synthetic.doc_max_tokens < synthetic.doc_min_tokens)
    fail_key("data.synthetic.doc_max_tokens",
             strformat("data.synthetic.doc_max_tokens (%d) must be >= "
                       "data.synthetic.doc_min_tokens (%d)",
                       synthetic.doc_max_tokens, synthetic.doc_min_tokens));
}

void OptimConfig::validate() const {
  require_range("optim.lr", lr, 0, true, kInf, false);
  require_range("optim.beta1", beta1, 0, false, 1, true);
  require_range("optim.beta2", beta2, 0, false, 1, true);
  require_range("optim.eps", eps, 0, true, kInf, false);
  require_range("optim.weight_decay", weight_decay, 0, false, kInf, false);
  require_range("optim.grad_clip", grad_clip, 0, false, kInf, false);
}

void ScheduleConfig::validate() const {
  require_min("schedule.warmup_steps", warmup_steps, 0);
  require_range("schedule.final_lr_frac", final_lr_frac, 0, false, 1, false);
  require_range("schedule.decay_frac", decay_frac, 0, true, 1, false);
}

int TrainConfig::grad_accum_steps(int world_size) const {
  ATTN_REQUIRE(world_size >= 1, "world size must be >= 1, got %d", world_size);
  const int64_t per_round = micro_tokens() * world_size;
  // 0 is one micro-batch in all, whatever the world size (so that a run's global batch does not
  // change with the ranks it resumes on): several ranks need it said.
  if (batch_tokens == 0 && world_size > 1)
    fail_key("train.batch_tokens",
             strformat("train.batch_tokens is 0, i.e. micro_batch * seq_len = %lld tokens per "
                       "step in all, which %d ranks cannot split: set it to a multiple of "
                       "micro_batch * seq_len * world size = %lld (%lld: one micro-batch per rank)",
                       (long long)micro_tokens(), world_size, (long long)per_round,
                       (long long)per_round));
  if (tokens_per_step() % per_round != 0)
    fail_key("train.batch_tokens",
             strformat("train.batch_tokens (%lld) must be a multiple of train.micro_batch * "
                       "train.seq_len * world size = %d * %d * %d = %lld",
                       (long long)tokens_per_step(), micro_batch, seq_len, world_size,
                       (long long)per_round));
  return int(tokens_per_step() / per_round);
}

void TrainConfig::validate() const {
  require_min("train.steps", steps, 1);
  if (steps > INT32_MAX)  // the schedule and the optimizer count steps in 32 bits
    fail_key("train.steps",
             strformat("train.steps must be <= %d, got %lld", INT32_MAX, (long long)steps));
  require_min("train.micro_batch", micro_batch, 1);
  require_min("train.seq_len", seq_len, 1);
  require_min("train.batch_tokens", batch_tokens, 0);
  require_min("train.threads", threads, 0);
  // More would only oversubscribe the cores, and far more aborts in the OpenMP runtime.
  if (threads > kMaxThreads)
    fail_key("train.threads", strformat("train.threads must be <= %d (0 = all cores), got %d",
                                        kMaxThreads, threads));
  if (out_dir.empty()) fail_key("train.out_dir", "train.out_dir must not be empty");
  if (batch_tokens % micro_tokens() != 0)
    fail_key("train.batch_tokens",
             strformat("train.batch_tokens (%lld) must be a multiple of train.micro_batch * "
                       "train.seq_len = %d * %d = %lld",
                       (long long)batch_tokens, micro_batch, seq_len, (long long)micro_tokens()));
  if (tokens_per_step() / micro_tokens() > INT32_MAX)
    fail_key("train.batch_tokens", "train.batch_tokens is too large");
  if (init_allow_extra && init_from.empty())
    fail_key("train.init_allow_extra",
             "train.init_allow_extra applies to train.init_from, which is not set");
}

void EvalConfig::validate() const {
  require_min("eval.every", every, 0);
  require_min("eval.batches", batches, 1);
}

void CheckpointConfig::validate() const {
  require_min("checkpoint.every", every, 0);
  require_min("checkpoint.keep_last", keep_last, 1);
}

void LogConfig::validate() const { require_min("log.every", every, 1); }

void DistributedConfig::validate() const {
  if (zero != 0 && zero != 1)
    fail_key("distributed.zero",
             strformat("distributed.zero must be 0 (replicated optimizer state) or 1 "
                       "(ZeRO-1: optimizer state sharded by rank), got %d",
                       zero));
  require_range("distributed.bucket_mb", bucket_mb, 0, true, 1e6, false);
  require_range("distributed.timeout_s", timeout_s, 0, true, 1e7, false);
}

std::set<ParamRole> RetrofitConfig::trainable_roles() const {
  if (!enabled) return {ParamRole::base, ParamRole::attention, ParamRole::adapter};
  std::set<ParamRole> roles;
  for (const std::string& r : train_roles) roles.insert(parse_role(r));
  return roles;
}

void LoraConfig::validate() const {
  require_min("retrofit.lora.rank", rank, 0);
  require_range("retrofit.lora.alpha", alpha, 0, true, kInf, false);
  for (const std::string& t : targets)
    if (t != "c_attn")
      fail_key("retrofit.lora.targets",
               strformat("retrofit.lora.targets: '%s' is not implemented yet; the valid target is "
                         "c_attn (the q/k/v projection)",
                         t.c_str()));
  if (rank > 0 && targets.empty())
    fail_key("retrofit.lora.targets", "retrofit.lora.targets must name at least one projection");
}

void RetrofitConfig::validate() const {
  for (const std::string& r : train_roles) {
    try {
      parse_role(r);
    } catch (const Error& e) {
      fail_key("retrofit.train_roles", std::string("retrofit.train_roles: ") + e.what());
    }
  }
  if (train_roles.empty())
    fail_key("retrofit.train_roles", "retrofit.train_roles must name at least one role");
  if (enabled && checkpoint.empty())
    fail_key("retrofit.checkpoint",
             "retrofit.enabled needs retrofit.checkpoint: the base model (an attnlab run or "
             "checkpoint directory, a Hugging Face GPT-2 directory or an llm.c .bin file)");
  lora.validate();
  if (lora.rank > 0 && !enabled)
    fail_key("retrofit.lora.rank",
             "retrofit.lora applies to a retrofit: set retrofit.enabled: true and "
             "retrofit.checkpoint (the frozen base the adapter is trained on)");
  const bool trains_adapter =
      std::find(train_roles.begin(), train_roles.end(), "adapter") != train_roles.end();
  if (lora.rank > 0 && enabled && !trains_adapter)
    fail_key("retrofit.train_roles",
             "retrofit.train_roles must include adapter with retrofit.lora.rank > 0 (the LoRA "
             "tensors are role adapter; without it they stay at B = 0 and the LoRA is the base "
             "model): set retrofit.train_roles: [adapter]");
}

void Recipe::validate(RecipeUse use, bool model_resolved) const {
  const bool model_pending =
      !model_resolved &&
      (!train.init_from.empty() || (retrofit.enabled && !retrofit.checkpoint.empty()));
  model.validate(!model_pending);
  attention.validate();
  data.validate();
  optim.validate();
  schedule.validate();
  if (use == RecipeUse::eval) {
    // Evaluation reads no batch_tokens: a run's value must not refuse another --set
    // train.micro_batch for scoring (it was "must be a multiple of train.micro_batch * ...").
    TrainConfig t = train;
    t.batch_tokens = 0;
    t.validate();
  } else {
    train.validate();
  }
  eval.validate();
  checkpoint.validate();
  log.validate();
  distributed.validate();
  retrofit.validate();
  if (retrofit.enabled && !train.init_from.empty() && train.init_from != retrofit.checkpoint)
    fail_key("train.init_from",
             strformat("train.init_from ('%s') and retrofit.checkpoint ('%s') both name the model "
                       "to start from; a retrofit starts from retrofit.checkpoint: remove "
                       "train.init_from",
                       train.init_from.c_str(), retrofit.checkpoint.c_str()));

  if (use == RecipeUse::train && schedule.type == ScheduleType::wsd) {
    // The schedule's own check (train/schedule.cpp), at the recipe's keys and before the run
    // writes anything.
    const int64_t decay = wsd_decay_steps(float(schedule.decay_frac), train.steps);
    if (train.steps - decay < schedule.warmup_steps)
      fail_key("schedule.decay_frac",
               strformat("schedule.type wsd: the decay (schedule.decay_frac %g of train.steps "
                         "%lld = %lld steps) overlaps the %lld warmup steps "
                         "(schedule.warmup_steps); lower one of them",
                         schedule.decay_frac, (long long)train.steps, (long long)decay,
                         (long long)schedule.warmup_steps));
  }
  if (use == RecipeUse::train && !retrofit.enabled && !retrofit.checkpoint.empty())
    fail_key("retrofit.checkpoint",
             strformat("retrofit.checkpoint ('%s') is set but retrofit.enabled is false: the run "
                       "would ignore it and train from a random initialisation; set "
                       "retrofit.enabled: true to retrofit it, or start from its weights with "
                       "train.init_from and an empty retrofit.checkpoint",
                       retrofit.checkpoint.c_str()));
  if (use == RecipeUse::train && data.source == DataSource::shards && data.train.empty())
    fail_key("data.train",
             "data.train must name the training shards (a glob) when data.source is 'shards'");
  if (!model_pending && attention.type == "sfa" && attention.sfa.k > model.head_dim())
    fail_key("attention.sfa.k",
             strformat("attention.sfa.k (%d) must be <= the head dim (model.n_embd / model.n_head "
                       "= %d); 0 picks the default (%d)",
                       attention.sfa.k, model.head_dim(), sfa_default_k(model.head_dim())));
  if (!model_pending && train.seq_len > model.block_size)
    fail_key("train.seq_len", strformat("train.seq_len (%d) must be <= model.block_size (%d)",
                                        train.seq_len, model.block_size));
  if (schedule.warmup_steps > train.steps)
    fail_key("schedule.warmup_steps",
             strformat("schedule.warmup_steps (%lld) must be <= train.steps (%lld)",
                       (long long)schedule.warmup_steps, (long long)train.steps));
  if (data.source == DataSource::synthetic) {
    if (data.synthetic.vocab_size > model.vocab_size)
      fail_key("data.synthetic.vocab_size",
               strformat("data.synthetic.vocab_size (%d) must be <= model.vocab_size (%d)",
                         data.synthetic.vocab_size, model.vocab_size));
    if (data.synthetic.train_tokens <= train.seq_len)
      fail_key("data.synthetic.train_tokens",
               strformat("data.synthetic.train_tokens (%lld) must exceed train.seq_len (%d): "
                         "one sequence needs seq_len + 1 tokens",
                         (long long)data.synthetic.train_tokens, train.seq_len));
    // Also with evaluation off: the run builds its validation stream (the unigram baseline)
    // anyway (it was accepted here and then failed at the start of training).
    if (use == RecipeUse::train && data.synthetic.val_tokens <= train.seq_len)
      fail_key("data.synthetic.val_tokens",
               strformat("data.synthetic.val_tokens (%lld) must exceed train.seq_len (%d): the "
                         "validation stream needs one window of seq_len + 1 tokens",
                         (long long)data.synthetic.val_tokens, train.seq_len));
  } else if (use == RecipeUse::train && eval.enabled() && data.val.empty()) {
    fail_key("data.val",
             "data.val is empty but evaluation is on; set data.val to the validation shards, or "
             "turn evaluation off with eval.every=0 and eval.at_end=false");
  }
}

}  // namespace attnlab
