#include "train/from_recipe.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "config/suggest.h"
#include "core/error.h"
#include "nn/attention.h"

namespace attnlab {

FocusOptions focus_options_of(const FocusConfig& f) {
  using O = FocusOptions;
  O o;
  o.groups = f.groups;
  o.d_g = f.d_g;
  o.local_window = f.local_window;
  o.tau = float(f.tau);
  o.iterations = f.iterations;
  o.top_k = f.top_k;
  o.assign = f.assign == FocusAssign::sinkhorn ? O::Assign::sinkhorn : O::Assign::softmax;
  o.scope = f.sinkhorn_scope == FocusScope::causal ? O::Scope::causal : O::Scope::sequence;
  o.gate = f.gate == FocusGate::additive ? O::Gate::additive : O::Gate::multiplicative;
  o.gate_eps = float(f.gate_eps);
  o.gate_scale = float(f.gate_scale);
  o.gate_bias = float(f.gate_bias);
  o.route_training = f.route_training == FocusRouting::hard ? O::Routing::hard : O::Routing::soft;
  o.eval_routing = f.eval_routing == FocusRouting::hard ? O::Routing::hard : O::Routing::soft;
  return o;
}

// The recipe's and the kernels' spellings of the scaling types are the same list.
static_assert(int(RopeScalingKind::none) == int(RopeScalingType::none) &&
              int(RopeScalingKind::linear) == int(RopeScalingType::linear) &&
              int(RopeScalingKind::llama3) == int(RopeScalingType::llama3));

RopeScaling rope_scaling_of(const RopeScalingConfig& r) {
  RopeScaling s;
  s.type = static_cast<RopeScalingType>(r.type);
  if (s.type == RopeScalingType::none) return s;  // no factor is read: the defaults
  s.factor = float(r.factor);
  if (s.type == RopeScalingType::linear) return s;
  s.low_freq_factor = float(r.low_freq_factor);
  s.high_freq_factor = float(r.high_freq_factor);
  s.original_context = r.original_context;
  return s;
}

RopeScalingConfig rope_scaling_config_of(const RopeScaling& s) {
  RopeScalingConfig r;
  r.type = static_cast<RopeScalingKind>(s.type);
  if (s.type == RopeScalingType::none) return r;
  r.factor = shortest_double(s.factor);
  if (s.type == RopeScalingType::linear) return r;
  r.low_freq_factor = shortest_double(s.low_freq_factor);
  r.high_freq_factor = shortest_double(s.high_freq_factor);
  r.original_context = s.original_context;
  return r;
}

GPTConfig gpt_config_of(const Recipe& r) {
  GPTConfig c;
  c.n_layer = r.model.n_layer;
  c.n_head = r.model.n_head;
  c.n_kv_head = r.model.n_kv_head;
  c.n_embd = r.model.n_embd;
  c.vocab_size = r.model.vocab_size;
  c.padded_vocab = r.model.padded_vocab();
  c.block_size = r.model.block_size;
  c.norm_eps = float(r.model.norm_eps);
  c.init_std = float(r.model.init_std);
  // Every model.* choice reaches the block config (the switches make a new recipe value a compile
  // warning here until the block implements it).
  switch (r.model.norm) {
    case NormKind::layernorm:
      c.norm = NormType::layernorm;
      break;
    case NormKind::rmsnorm:
      c.norm = NormType::rmsnorm;
      break;
  }
  switch (r.model.mlp) {
    case MlpKind::gelu:
      c.mlp = MlpType::gelu;
      break;
    case MlpKind::swiglu:
      c.mlp = MlpType::swiglu;
      break;
  }
  switch (r.model.position) {
    case PositionKind::learned:
      c.position = PositionType::learned;
      break;
    case PositionKind::rope:
      c.position = PositionType::rope;
      break;
  }
  c.mlp_hidden_size = r.model.mlp_hidden;
  c.rope_theta = float(r.model.rope_theta);
  c.rope_scaling = rope_scaling_of(r.model.rope_scaling);
  c.bias = r.model.bias;
  c.tied_embeddings = r.model.tied_embeddings;
  // The registry knows the types (tests register more), so the recipe checks them here, where
  // it can still name where the value came from.
  const std::vector<std::string> types = attention_types();
  if (std::find(types.begin(), types.end(), r.attention.type) == types.end()) {
    const auto w = r.given.where.find("attention.type");
    const std::string hint = closest_match(r.attention.type, types);
    ATTN_FAIL("%s: attention.type: unknown attention '%s'%s (valid: %s)",
              w != r.given.where.end() ? w->second.c_str() : "the recipe", r.attention.type.c_str(),
              hint.empty() ? "" : ("; did you mean '" + hint + "'?").c_str(),
              join_names(types).c_str());
  }
  c.attention.type = r.attention.type;
  c.attention.window = r.attention.window;
  c.attention.focus = focus_options_of(r.attention.focus);
  c.attention.sfa.k = r.attention.sfa.k;
  c.attention.sfa.distill = float(r.attention.sfa.distill);
  switch (r.attention.sfa.kernel) {
    case SfaKernel::auto_select:
      c.attention.sfa.kernel = SfaOptions::Kernel::auto_select;
      break;
    case SfaKernel::flash:
      c.attention.sfa.kernel = SfaOptions::Kernel::flash;
      break;
    case SfaKernel::masked_dense:
      c.attention.sfa.kernel = SfaOptions::Kernel::masked_dense;
      break;
  }
  c.lora.rank = r.retrofit.lora.rank;
  c.lora.alpha = float(r.retrofit.lora.alpha);
  c.recompute = r.train.recompute == Recompute::gelu    ? ActivationRecompute::gelu
                : r.train.recompute == Recompute::block ? ActivationRecompute::block
                                                        : ActivationRecompute::none;
  return c;
}

int vocab_multiple_of(int vocab_size, int padded_vocab) {
  for (int mult = 128; mult >= 1; mult /= 2)
    if ((vocab_size + mult - 1) / mult * mult == padded_vocab) return mult;
  ATTN_FAIL(
      "a padded vocabulary of %d rows for %d tokens is not a multiple of a power of two "
      "<= 128",
      padded_vocab, vocab_size);
}

void set_model_config(const GPTConfig& c, Recipe& r) {
  ModelConfig& m = r.model;
  m.preset = "";
  const bool gpt2_block = c.norm == NormType::layernorm && c.mlp == MlpType::gelu &&
                          c.position == PositionType::learned;
  m.family = gpt2_block               ? ModelFamily::gpt2
             : c.attention.window > 0 ? ModelFamily::mistral
                                      : ModelFamily::llama;
  m.n_layer = c.n_layer;
  m.n_head = c.n_head;
  m.n_kv_head = c.n_kv_head;
  m.n_embd = c.n_embd;
  m.vocab_size = c.vocab_size;
  m.block_size = c.block_size;
  m.vocab_multiple = vocab_multiple_of(c.vocab_size, c.padded_vocab);
  m.norm = c.norm == NormType::rmsnorm ? NormKind::rmsnorm : NormKind::layernorm;
  m.mlp = c.mlp == MlpType::swiglu ? MlpKind::swiglu : MlpKind::gelu;
  m.position = c.position == PositionType::rope ? PositionKind::rope : PositionKind::learned;
  m.mlp_hidden = c.mlp_hidden_size;
  m.rope_theta = shortest_double(c.rope_theta);
  m.rope_scaling = rope_scaling_config_of(c.rope_scaling);
  m.bias = c.bias;
  m.tied_embeddings = c.tied_embeddings;
  m.norm_eps = shortest_double(c.norm_eps);
  m.init_std = shortest_double(c.init_std);
  r.attention.type = c.attention.type;
  r.attention.window = c.attention.window;
}

AdamWConfig adamw_config_of(const Recipe& r) {
  AdamWConfig oc;
  oc.lr = float(r.optim.lr);
  oc.beta1 = float(r.optim.beta1);
  oc.beta2 = float(r.optim.beta2);
  oc.eps = float(r.optim.eps);
  oc.weight_decay = float(r.optim.weight_decay);
  oc.grad_clip = float(r.optim.grad_clip);
  return oc;
}

ScheduleSpec schedule_of(const Recipe& r, int total_steps) {
  ScheduleSpec s;
  s.type = parse_schedule_type(std::string(enum_name(r.schedule.type)));
  s.lr = float(r.optim.lr);
  s.warmup_steps = int(r.schedule.warmup_steps);
  s.total_steps = total_steps;
  s.final_lr_frac = float(r.schedule.final_lr_frac);
  s.decay_frac = float(r.schedule.decay_frac);
  return s;
}

std::string schedule_change_note(const ScheduleSpec& was, const ScheduleSpec& now, int next_step) {
  const float before = lr_at(was, next_step), after = lr_at(now, next_step);
  if (std::fabs(after - before) <= 1e-6f * std::max(was.lr, now.lr)) return "";
  return strformat(
      "the recipe changes the learning-rate schedule (%s over %d steps, lr %g, before: %s over "
      "%d steps, lr %g): step %d runs at lr %g where the checkpoint's run would have used %g",
      schedule_type_name(now.type), now.total_steps, double(now.lr), schedule_type_name(was.type),
      was.total_steps, double(was.lr), next_step + 1, double(after), double(before));
}

}  // namespace attnlab
