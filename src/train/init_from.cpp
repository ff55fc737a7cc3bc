#include "train/init_from.h"

#include <functional>

#include "core/error.h"
#include "interop/model_source.h"

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

#define ARCH_KEY(field)                                                     \
  ArchKey {                                                                 \
    "model." #field, [](const ModelConfig& m) { return text_of(m.field); }, \
        [](ModelConfig& m, const ModelConfig& src) { m.field = src.field; } \
  }

const std::vector<ArchKey>& arch_keys() {
  static const std::vector<ArchKey> keys = {
      ARCH_KEY(family),
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
      ARCH_KEY(norm_eps)};
  return keys;
}
#undef ARCH_KEY

}  // namespace

Recipe resolve_init_from(const Recipe& r) {
  if (r.train.init_from.empty()) return r;
  const ModelSource src = inspect_model_source(r.train.init_from);
  const ModelConfig from = recipe_of_model_source(src).model;
  Recipe out = r;
  std::string conflicts;
  for (const ArchKey& k : arch_keys()) {
    // n_kv_head follows n_head when not given: compare after n_head is resolved.
    if (r.given.contains(k.path)) {
      if (k.text(out.model) == k.text(from) ||
          (std::string(k.path) == "model.n_kv_head" &&
           (out.model.n_kv_head == 0 ? out.model.n_head : out.model.n_kv_head) == from.kv_heads()))
        continue;
      conflicts += strformat("\n  %s: %s in the recipe (%s), %s in the checkpoint", k.path,
                             k.text(out.model).c_str(), r.given.where.at(k.path).c_str(),
                             k.text(from).c_str());
    } else {
      k.take(out.model, from);
    }
  }
  ATTN_REQUIRE(conflicts.empty(),
               "train.init_from '%s' (%s) is a different model than the recipe gives:%s\n"
               "remove these keys from the recipe (the checkpoint's values are used) or set them "
               "to the checkpoint's",
               r.train.init_from.c_str(), model_format_name(src.format), conflicts.c_str());
  out.model.preset = "";  // every value is explicit now
  out.validate();
  return out;
}

WeightLoadReport load_init_from(const Recipe& r, const ParameterStore& store) {
  const ModelSource src = inspect_model_source(r.train.init_from);
  WeightLoadOptions o;
  o.required_roles = {ParamRole::base};
  o.allow_extra = r.train.init_allow_extra;
  return load_model_source(src, store, o);
}

}  // namespace attnlab
