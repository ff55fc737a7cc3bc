// The recipe schema: key names, their order, and misspellings worth a hint, written once as
// visit() functions over the config structs. Reading, printing and listing keys all walk it
// (src/config/recipe_yaml.cpp, its only includer). Adding a key: one v.field(...) line here, its
// member and validate() in recipe.h / recipe.cpp, and docs/recipes.md.
#pragma once
#include <concepts>
#include <type_traits>

#include "config/recipe.h"

namespace attnlab::recipe_schema {

template <class T, class U>
concept Is = std::same_as<std::remove_const_t<T>, U>;

// Each field: key, member, and other spellings users try (only used for "did you mean").
template <class V>
void visit(V& v, Is<ModelConfig> auto& m) {
  v.field("preset", m.preset);
  v.field("family", m.family, {"arch", "architecture"});
  v.field("n_layer", m.n_layer, {"n_layers", "num_layers", "layers", "depth"});
  v.field("n_head", m.n_head, {"n_heads", "num_heads", "heads"});
  v.field("n_kv_head", m.n_kv_head, {"n_kv_heads", "num_kv_heads"});
  v.field("n_embd", m.n_embd, {"n_embed", "d_model", "hidden_size", "dim", "width"});
  v.field("vocab_size", m.vocab_size, {"vocab"});
  v.field("block_size", m.block_size, {"context_length", "max_seq_len", "n_ctx", "context"});
  v.field("vocab_multiple", m.vocab_multiple, {"pad_vocab", "vocab_pad"});
  v.field("norm", m.norm, {"normalization"});
  v.field("mlp", m.mlp, {"activation"});
  v.field("position", m.position, {"positional", "pos_emb"});
  v.field("bias", m.bias, {"biases", "use_bias"});
  v.field("tied_embeddings", m.tied_embeddings, {"tie_embeddings", "tied", "tie_weights"});
  v.field("norm_eps", m.norm_eps, {"eps", "layernorm_eps", "ln_eps"});
  v.field("init_std", m.init_std, {"std"});
  v.field("mlp_hidden", m.mlp_hidden,
          {"intermediate_size", "ffn_hidden", "d_ff", "ffn_dim", "hidden_dim", "mlp_dim"});
  v.field("rope_theta", m.rope_theta, {"rope_base", "theta", "base"});
  v.section("rope_scaling", m.rope_scaling, {"rope_scale"});
}

template <class V>
void visit(V& v, Is<RopeScalingConfig> auto& r) {
  v.field("type", r.type, {"rope_type", "kind"});
  v.field("factor", r.factor, {"scale", "scaling_factor"});
  v.field("low_freq_factor", r.low_freq_factor, {"low_freq"});
  v.field("high_freq_factor", r.high_freq_factor, {"high_freq"});
  v.field("original_context", r.original_context,
          {"original_max_position_embeddings", "original_max_position", "original_block_size"});
}

template <class V>
void visit(V& v, Is<FocusConfig> auto& f) {
  v.field("groups", f.groups, {"K", "k", "n_groups", "num_groups", "clusters", "centroids"});
  v.field("d_g", f.d_g, {"dg", "group_dim", "d_group"});
  v.field("local_window", f.local_window, {"w", "window", "local"});
  v.field("tau", f.tau, {"temperature"});
  v.field("iterations", f.iterations, {"sinkhorn_iterations", "n_iter", "iters"});
  v.field("top_k", f.top_k, {"topk", "k_groups"});
  v.field("assign", f.assign, {"assignment"});
  v.field("sinkhorn_scope", f.sinkhorn_scope, {"scope"});
  v.field("gate", f.gate, {"gating"});
  v.field("gate_eps", f.gate_eps, {"eps"});
  v.field("gate_scale", f.gate_scale, {"lambda"});
  v.field("gate_bias", f.gate_bias, {"bias", "b"});
  v.field("route_training", f.route_training, {"training_routing", "train_routing"});
  v.field("eval_routing", f.eval_routing, {"inference_routing", "routing"});
}

template <class V>
void visit(V& v, Is<SfaConfig> auto& f) {
  v.field("k", f.k, {"top_k", "topk", "features", "n_features"});
  v.field("distill", f.distill, {"lambda", "distillation", "distill_weight"});
  v.field("kernel", f.kernel, {"path", "impl", "implementation"});
}

template <class V>
void visit(V& v, Is<AttentionConfig> auto& a) {
  v.field("type", a.type, {"name", "kind", "variant"});
  v.field("window", a.window, {"window_size", "sliding_window"});
  v.section("focus", a.focus);
  v.section("sfa", a.sfa);
}

template <class V>
void visit(V& v, Is<SyntheticMixConfig> auto& m) {
  v.field("markov", m.markov, {"walk", "grammar"});
  v.field("bind", m.bind, {"binds", "bindings"});
  v.field("query", m.query, {"queries", "recall"});
  v.field("copy", m.copy, {"copies"});
}

template <class V>
void visit(V& v, Is<SyntheticDataConfig> auto& s) {
  v.field("vocab_size", s.vocab_size, {"vocab"});
  v.field("train_tokens", s.train_tokens, {"tokens"});
  v.field("val_tokens", s.val_tokens);
  v.field("seed", s.seed);
  v.section("mix", s.mix, {"weights", "segments"});
  v.field("keys", s.keys, {"num_keys", "n_keys", "key_vocab"});
  v.field("values", s.values, {"num_values", "n_values", "value_vocab"});
  v.field("doc_min_tokens", s.doc_min_tokens, {"min_doc_tokens", "doc_min"});
  v.field("doc_max_tokens", s.doc_max_tokens, {"max_doc_tokens", "doc_max"});
}

template <class V>
void visit(V& v, Is<DataConfig> auto& d) {
  v.field("source", d.source, {"kind", "type"});
  v.field("train", d.train, {"train_files", "train_glob", "train_shards"});
  v.field("val", d.val, {"val_files", "val_glob", "val_shards", "valid", "validation"});
  v.field("tokenizer", d.tokenizer);
  v.field("shuffle", d.shuffle);
  v.field("seed", d.seed);
  v.section("synthetic", d.synthetic);
}

template <class V>
void visit(V& v, Is<OptimConfig> auto& o) {
  v.field("name", o.name, {"type", "optimizer"});
  v.field("lr", o.lr, {"learning_rate", "max_lr", "peak_lr"});
  v.field("beta1", o.beta1, {"b1"});
  v.field("beta2", o.beta2, {"b2"});
  v.field("eps", o.eps, {"epsilon"});
  v.field("weight_decay", o.weight_decay, {"wd"});
  v.field("grad_clip", o.grad_clip, {"clip", "max_grad_norm", "grad_norm_clip"});
}

template <class V>
void visit(V& v, Is<ScheduleConfig> auto& s) {
  v.field("type", s.type, {"name", "kind"});
  v.field("warmup_steps", s.warmup_steps, {"warmup", "warmup_iters"});
  v.field("final_lr_frac", s.final_lr_frac, {"min_lr_frac", "final_frac"});
  v.field("decay_frac", s.decay_frac, {"cooldown_frac"});
}

template <class V>
void visit(V& v, Is<TrainConfig> auto& t) {
  v.field("name", t.name, {"run_name"});
  v.field("steps", t.steps, {"max_steps", "num_steps", "iters", "num_iterations"});
  v.field("micro_batch", t.micro_batch, {"batch_size", "micro_batch_size"});
  v.field("seq_len", t.seq_len, {"sequence_length", "seq_length", "context"});
  v.field("batch_tokens", t.batch_tokens, {"total_batch_size", "tokens_per_step"});
  v.field("device", t.device);
  v.field("precision", t.precision, {"dtype"});
  v.field("seed", t.seed);
  v.field("threads", t.threads, {"num_threads"});
  v.field("recompute", t.recompute, {"checkpointing", "activation_checkpointing"});
  v.field("out_dir", t.out_dir, {"output_dir", "outdir", "run_dir"});
  v.field("deterministic", t.deterministic);
  v.field("init_from", t.init_from, {"init", "init_checkpoint", "pretrained", "from_pretrained"});
  v.field("init_allow_extra", t.init_allow_extra, {"allow_extra"});
}

template <class V>
void visit(V& v, Is<EvalConfig> auto& e) {
  v.field("every", e.every, {"interval", "eval_every"});
  v.field("batches", e.batches, {"steps", "eval_batches"});
  v.field("at_end", e.at_end);
  v.field("at_start", e.at_start, {"before_training", "eval_at_start"});
}

template <class V>
void visit(V& v, Is<CheckpointConfig> auto& c) {
  v.field("every", c.every, {"interval", "save_every"});
  v.field("at_end", c.at_end);
  v.field("keep_last", c.keep_last, {"keep"});
}

template <class V>
void visit(V& v, Is<LogConfig> auto& l) {
  v.field("every", l.every, {"interval", "log_every"});
  v.field("metrics_file", l.metrics_file, {"metrics"});
  v.field("color", l.color, {"colour"});
}

template <class V>
void visit(V& v, Is<DistributedConfig> auto& d) {
  v.field("backend", d.backend);
  v.field("zero", d.zero, {"zero_stage"});
  v.field("bucket_mb", d.bucket_mb, {"bucket_size_mb", "bucket_cap_mb"});
  v.field("timeout_s", d.timeout_s, {"timeout"});
  v.field("rendezvous_file", d.rendezvous_file, {"init_file"});
}

template <class V>
void visit(V& v, Is<LoraConfig> auto& l) {
  v.field("rank", l.rank, {"r"});
  v.field("alpha", l.alpha, {"lora_alpha"});
  v.field("targets", l.targets, {"target_modules"});
}

template <class V>
void visit(V& v, Is<RetrofitConfig> auto& r) {
  v.field("enabled", r.enabled, {"enable"});
  v.field("checkpoint", r.checkpoint, {"from", "init_from"});
  v.field("train_roles", r.train_roles, {"roles", "trainable_roles"});
  v.section("lora", r.lora, {"adapter"});
}

template <class V>
void visit(V& v, Is<Recipe> auto& r) {
  v.section("model", r.model, {"arch"});
  v.section("attention", r.attention, {"attn"});
  v.section("data", r.data, {"dataset"});
  v.section("optim", r.optim, {"optimizer", "optimiser", "opt"});
  v.section("schedule", r.schedule, {"scheduler", "lr_schedule"});
  v.section("train", r.train, {"training", "trainer"});
  v.section("eval", r.eval, {"evaluation", "validation"});
  v.section("checkpoint", r.checkpoint, {"checkpointing", "ckpt"});
  v.section("log", r.log, {"logging"});
  v.section("distributed", r.distributed, {"dist", "ddp", "parallel"});
  v.section("retrofit", r.retrofit);
}

}  // namespace attnlab::recipe_schema
