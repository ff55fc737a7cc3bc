#include "config/model_keys.h"

#include <functional>
#include <utility>
#include <vector>

#include "core/error.h"

namespace attnlab {
namespace {

// One architecture key: its path, its value as text, and copying it from the checkpoint's model.
struct ArchKey {
  const char* path;
  std::function<std::string(const ModelConfig&)> text;
  std::function<void(ModelConfig&, const ModelConfig&)> take;
};

template <class T>
std::string text_of(const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_same_v<T, double>) {
    return strformat("%g", float(v));  // compared as the model's float
  } else if constexpr (std::is_enum_v<T>) {
    return std::string(enum_name(v));
  } else {
    return std::to_string(v);
  }
}

// A key of model.rope_scaling, compared by value: a model's keys that its type does not read
// hold their defaults (rope_scaling_config_of), and a recipe may not give them
// (rope_scaling_unread_key).
#define ROPE_SCALING_KEY(field)                                             \
  ArchKey {                                                                 \
    "model.rope_scaling." #field,                                           \
        [](const ModelConfig& m) { return text_of(m.rope_scaling.field); }, \
        [](ModelConfig& m, const ModelConfig& src) {                        \
          m.rope_scaling.field = src.rope_scaling.field;                    \
        }                                                                   \
  }

#define ARCH_KEY(field)                                                     \
  ArchKey {                                                                 \
    "model." #field, [](const ModelConfig& m) { return text_of(m.field); }, \
        [](ModelConfig& m, const ModelConfig& src) { m.field = src.field; } \
  }

const std::vector<ArchKey>& arch_keys() {
  static const std::vector<ArchKey> keys = {
      // The family is a label (its block choices are compared key by key below): taken from the
      // model, never a conflict (a Hugging Face Mistral read as family llama is the same model).
      ArchKey{"model.family", [](const ModelConfig&) { return std::string(); },
              [](ModelConfig& m, const ModelConfig& src) { m.family = src.family; }},
      ARCH_KEY(n_layer),
      ARCH_KEY(n_head),
      ArchKey{"model.n_kv_head",  // 0 and n_head both mean "no grouped-query attention"
              [](const ModelConfig& m) { return std::to_string(m.kv_heads()); },
              [](ModelConfig& m, const ModelConfig& src) { m.n_kv_head = src.n_kv_head; }},
      ARCH_KEY(n_embd),
      ARCH_KEY(vocab_size),
      ARCH_KEY(block_size),
      ARCH_KEY(vocab_multiple),
      ARCH_KEY(norm),
      ARCH_KEY(mlp),
      ARCH_KEY(position),
      ARCH_KEY(bias),
      ARCH_KEY(tied_embeddings),
      ARCH_KEY(norm_eps),
      ArchKey{"model.mlp_hidden",  // 0 and the default width are the same model
              [](const ModelConfig& m) { return std::to_string(m.mlp_hidden_width()); },
              [](ModelConfig& m, const ModelConfig& src) { m.mlp_hidden = src.mlp_hidden; }},
      ARCH_KEY(rope_theta),
      ArchKey{"model.rope_scaling.type",
              [](const ModelConfig& m) { return text_of(m.rope_scaling.type); },
              [](ModelConfig& m, const ModelConfig& src) {
                m.rope_scaling.type = src.rope_scaling.type;
              }},
      ROPE_SCALING_KEY(factor),
      ROPE_SCALING_KEY(low_freq_factor),
      ROPE_SCALING_KEY(high_freq_factor),
      ROPE_SCALING_KEY(original_context)};
  return keys;
}
#undef ARCH_KEY
#undef ROPE_SCALING_KEY

// One attention key: its path and its resolved value as text, for the model's head dim (0:
// unknown, the raw value).
struct AttentionKey {
  const char* path;
  std::function<std::string(const AttentionConfig&, int head_dim)> text;
};

#define ATTN_KEY(path, expr)                                            \
  AttentionKey {                                                        \
    path, [](const AttentionConfig& a, int) { return text_of(a.expr); } \
  }

const std::vector<AttentionKey>& attention_keys() {
  static const std::vector<AttentionKey> keys = {
      AttentionKey{"attention.type", [](const AttentionConfig& a, int) { return a.type; }},
      ATTN_KEY("attention.window", window),
      ATTN_KEY("attention.focus.groups", focus.groups),
      ATTN_KEY("attention.focus.d_g", focus.d_g),
      ATTN_KEY("attention.focus.local_window", focus.local_window),
      ATTN_KEY("attention.focus.tau", focus.tau),
      ATTN_KEY("attention.focus.iterations", focus.iterations),
      ATTN_KEY("attention.focus.assign", focus.assign),
      ATTN_KEY("attention.focus.sinkhorn_scope", focus.sinkhorn_scope),
      ATTN_KEY("attention.focus.gate", focus.gate),
      ATTN_KEY("attention.focus.gate_eps", focus.gate_eps),
      ATTN_KEY("attention.focus.gate_scale", focus.gate_scale),
      ATTN_KEY("attention.focus.gate_bias", focus.gate_bias),
      AttentionKey{"attention.sfa.k",  // 0 picks the head dim's default: the same model
                   [](const AttentionConfig& a, int head_dim) {
                     return std::to_string(a.sfa.k == 0 && head_dim > 0 ? sfa_default_k(head_dim)
                                                                        : a.sfa.k);
                   }}};
  return keys;
}
#undef ATTN_KEY

// Whether attention key `path` shapes the function of a model of attention type `type`: the type
// and window, and that variant's own keys.
bool applies(const char* path, const std::string& type) {
  const std::string p(path);
  return p == "attention.type" || p == "attention.window" ||
         p.rfind("attention." + type + ".", 0) == 0;
}

// Where `recipe` gave `path`, or "default".
std::string where_given(const Recipe& recipe, const char* path) {
  const auto w = recipe.given.where.find(path);
  return w != recipe.given.where.end() ? w->second : "default";
}

}  // namespace

// A resume with another alpha would train half the run at one scale and half at another (a rank
// change also fails on the tensors' shapes).
std::string lora_key_conflicts(const Recipe& recipe, const Recipe& model, const char* other,
                               const GivenKeys* only) {
  const LoraConfig &mine = recipe.retrofit.lora, &theirs = model.retrofit.lora;
  if (mine.rank == 0 && theirs.rank == 0) return "";
  auto join = [](const std::vector<std::string>& v) {
    std::string out;
    for (const std::string& x : v) out += (out.empty() ? "" : ",") + x;
    return out;
  };
  const std::pair<const char*, std::pair<std::string, std::string>> keys[] = {
      {"retrofit.lora.rank", {text_of(mine.rank), text_of(theirs.rank)}},
      {"retrofit.lora.alpha", {text_of(mine.alpha), text_of(theirs.alpha)}},
      {"retrofit.lora.targets", {join(mine.targets), join(theirs.targets)}}};
  std::string conflicts;
  for (const auto& [path, values] : keys) {
    if (values.first == values.second || (only && !only->contains(path))) continue;
    const std::string where = only ? only->where.at(path) : where_given(recipe, path);
    conflicts += strformat("\n  %s: %s in the recipe (%s), %s in %s", path, values.first.c_str(),
                           where.c_str(), values.second.c_str(), other);
  }
  return conflicts;
}

std::string given_attention_key_conflicts(const AttentionConfig& recipe_attention,
                                          const GivenKeys& given, const AttentionConfig& model,
                                          const char* other, int head_dim) {
  std::string conflicts;
  for (const AttentionKey& k : attention_keys()) {
    // Keys of another type than the model's mean nothing to it (attention.type names a change).
    if (!applies(k.path, model.type)) continue;
    const std::string mine = k.text(recipe_attention, head_dim), theirs = k.text(model, head_dim);
    if (!given.contains(k.path) || mine == theirs) continue;
    conflicts += strformat("\n  %s: %s in the recipe (%s), %s in %s", k.path, mine.c_str(),
                           given.where.at(k.path).c_str(), theirs.c_str(), other);
  }
  return conflicts;
}

std::string model_function_conflicts(const Recipe& recipe, const Recipe& model, const char* other) {
  GivenKeys all;  // every key compared, named by where the recipe gave it (or its default)
  for (const ArchKey& k : arch_keys()) all.where[k.path] = where_given(recipe, k.path);
  for (const AttentionKey& k : attention_keys()) {
    if (applies(k.path, model.attention.type) || applies(k.path, recipe.attention.type))
      all.where[k.path] = where_given(recipe, k.path);
  }
  return given_model_key_conflicts(recipe.model, all, model.model, other) +
         given_attention_key_conflicts(recipe.attention, all, model.attention, other,
                                       head_dim_of(model.model)) +
         lora_key_conflicts(recipe, model, other);
}

std::string attention_changes_from(const Recipe& recipe, const Recipe& source_recipe,
                                   const char* other) {
  const AttentionConfig& source = source_recipe.attention;
  const bool conversion = source.type == "dense" && recipe.attention.type != "dense";
  GivenKeys all;
  for (const AttentionKey& k : attention_keys()) {
    if (!applies(k.path, source.type)) continue;
    if (conversion && std::string(k.path) == "attention.type") continue;
    // Another type than the source's: the source type's own keys mean nothing to the new model
    // (attention.type names the change).
    if (!applies(k.path, recipe.attention.type)) continue;
    all.where[k.path] = where_given(recipe, k.path);
  }
  return given_attention_key_conflicts(recipe.attention, all, source, other,
                                       head_dim_of(source_recipe.model));
}

int head_dim_of(const ModelConfig& m) { return m.n_head > 0 ? m.head_dim() : 0; }

std::string given_model_key_conflicts(const ModelConfig& recipe_model, const GivenKeys& given,
                                      const ModelConfig& model, const char* other) {
  std::string conflicts;
  for (const ArchKey& k : arch_keys()) {
    if (!given.contains(k.path) || k.text(recipe_model) == k.text(model)) continue;
    conflicts +=
        strformat("\n  %s: %s in the recipe (%s), %s in %s", k.path, k.text(recipe_model).c_str(),
                  given.where.at(k.path).c_str(), k.text(model).c_str(), other);
  }
  return conflicts;
}

void take_model_keys(ModelConfig& recipe_model, const GivenKeys& given, const ModelConfig& model) {
  for (const ArchKey& k : arch_keys())
    if (!given.contains(k.path)) k.take(recipe_model, model);
}

}  // namespace attnlab
