#include "train/init_from.h"

#include <algorithm>

#include "config/model_keys.h"
#include "core/error.h"
#include "interop/foreign_tensors.h"
#include "interop/model_source.h"

namespace attnlab {

const std::string& init_source(const Recipe& r) {
  return r.retrofit.enabled ? r.retrofit.checkpoint : r.train.init_from;
}

const char* init_source_key(const Recipe& r) {
  return r.retrofit.enabled ? "retrofit.checkpoint" : "train.init_from";
}

namespace {
ModelSource inspect_init_source(const Recipe& r) {
  try {
    return inspect_model_source(init_source(r));
  } catch (const Error& e) {
    ATTN_FAIL("%s: %s", init_source_key(r), e.what());
  }
}
}  // namespace

Recipe resolve_init_from(const Recipe& r, const std::string& resume) {
  if (init_source(r).empty()) return r;
  // Resuming: the checkpoint's resolved model (check_resume_recipe compares the rest); one
  // without a recipe.yaml takes the keys from the init source as a new run does.
  if (const auto trained =
          resume.empty() ? std::nullopt : read_checkpoint_recipe(resolve_checkpoint_dir(resume))) {
    Recipe out = r;
    take_model_keys(out.model, r.given, trained->model);
    out.model.preset = "";
    out.validate(RecipeUse::train, /*model_resolved=*/true);
    return out;
  }
  const ModelSource src = inspect_init_source(r);
  const Recipe source_recipe = recipe_of_model_source(src);
  const ModelConfig& from = source_recipe.model;
  Recipe out = r;
  // Compared after the keys it does not give are taken, so that n_kv_head resolves against the
  // model's n_head.
  take_model_keys(out.model, r.given, from);
  const std::string conflicts =
      given_model_key_conflicts(out.model, r.given, from, "the checkpoint");
  ATTN_REQUIRE(conflicts.empty(),
               "%s '%s' (%s) is a different model than the recipe gives:%s\n"
               "remove these keys from the recipe (the checkpoint's values are used) or set them "
               "to the checkpoint's",
               init_source_key(r), init_source(r).c_str(), model_format_name(src.format),
               conflicts.c_str());
  // LoRA tensors in the checkpoint are loaded into the new run's adapters (a retrofit continuing
  // one, e.g. a second phase): another alpha would scale them differently, so the model would
  // not start as the checkpoint's function. (A recipe without LoRA finds them extra tensors.)
  if (source_recipe.retrofit.lora.rank > 0 && out.retrofit.lora.rank > 0) {
    const std::string lora = lora_key_conflicts(out, source_recipe, "the checkpoint");
    ATTN_REQUIRE(lora.empty(),
                 "%s '%s' holds LoRA adapters trained with other settings than the recipe's:%s\n"
                 "set these keys to the checkpoint's (its adapters are loaded as they are), or "
                 "start the adapters afresh from a checkpoint without them",
                 init_source_key(r), init_source(r).c_str(), lora.c_str());
  }
  // A retrofit freezes the base: its attention must stay what the base was trained with (a dense
  // base may take the variant the retrofit trains). train.init_from may change it and says so
  // (init_attention_note).
  if (r.retrofit.enabled) {
    const Recipe& base = source_recipe;
    const std::string changes = attention_changes_from(out, base, "the base");
    // A windowed dense base cannot take a variant (Focus and SFA refuse attention.window): no key
    // to set would help, so say that instead.
    const bool windowed_variant = base.attention.type == "dense" && base.attention.window > 0 &&
                                  out.attention.type != "dense";
    ATTN_REQUIRE(
        changes.empty(),
        "retrofit.checkpoint '%s': the retrofit keeps the base's weights frozen, so its "
        "attention must stay the one they were trained with:%s\n%s",
        init_source(r).c_str(), changes.c_str(),
        windowed_variant
            ? strformat("a base trained with attention.window %d cannot take attention.type "
                        "%s (which has no window); retrofit it as dense, e.g. with LoRA "
                        "(retrofit.lora) and attention.window %d",
                        base.attention.window, out.attention.type.c_str(), base.attention.window)
                  .c_str()
            : "set these keys to the base's (a dense base without a window can take "
              "focus)");
  }
  out.model.preset = "";  // every value is explicit now
  out.validate(RecipeUse::train, /*model_resolved=*/true);
  return out;
}

std::string init_attention_note(const Recipe& r) {
  if (init_source(r).empty() || r.retrofit.enabled) return "";
  const std::string changes =
      attention_changes_from(r, recipe_of_model_source(inspect_init_source(r)), "the checkpoint");
  if (changes.empty()) return "";
  return strformat(
      "train.init_from '%s': this run's attention differs from the one its weights "
      "were trained with:%s",
      init_source(r).c_str(), changes.c_str());
}

WeightLoadReport load_init_from(const Recipe& r, const ParameterStore& store,
                                std::vector<float>* exact) {
  const ModelSource src = inspect_init_source(r);
  WeightLoadOptions o;
  o.required_roles = {ParamRole::base};
  o.allow_extra = r.train.init_allow_extra;
  o.allow_extra_key = "train.init_allow_extra";
  if (!exact) return load_model_source(src, store, o);
  TrainableF32Values values(store);
  if (store.dtype() == DType::bf16) o.on_f32_values = values.taker();  // f32 holds them exactly
  WeightLoadReport report = load_model_source(src, store, o);
  // A bf16 run's master, finer than its bf16 weights (and exact where the file was f32).
  if (src.format == ModelFormat::attnlab && src.adapter.empty())
    for_each_master_tensor(src.weights_path, values.taker());
  *exact = values.finish();
  return report;
}

}  // namespace attnlab
