// The LoRA retrofit (docs/retrofit.md): adapters trained alone, applied on their base, merged by
// convert, refused for another base or rank; and an adapter applied across a converted copy of its
// base (the base hash).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <string>

#include "config/recipe.h"
#include "core/context.h"
#include "eval/harness.h"
#include "interop/convert.h"
#include "interop/model_source.h"
#include "io/atomic_file.h"
#include "io/data_hash.h"
#include "io/safetensors.h"
#include "model/gpt.h"
#include "model/model_fixture.h"
#include "nn/attention_focus.h"
#include "retrofit_test_util.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/retrofit.h"
#include "train/trainer.h"

namespace fs = std::filesystem;
using namespace attnlab;
using test::focus_retrofit;
using test::quiet;
using test::thrown_message;
using test::tiny;

namespace {

std::vector<std::string> lora_retrofit(const std::string& base, int rank = 4) {
  return {"retrofit.enabled=true",          "retrofit.checkpoint=" + base,
          "retrofit.train_roles=[adapter]", "retrofit.lora.rank=" + std::to_string(rank),
          "retrofit.lora.alpha=8",          "checkpoint.at_end=true"};
}

// An adapter file rewritten with `edit` applied to its metadata.
std::string edited_adapter(const std::string& adapter, const std::string& out,
                           const std::function<void(std::map<std::string, std::string>&)>& edit) {
  io::SafetensorsFile f(adapter);
  std::map<std::string, std::string> meta = f.metadata();
  edit(meta);
  io::SafetensorsWriter w;
  for (const std::string& n : f.names()) w.add(n, f.view(n));
  w.set_metadata(meta);
  w.write(out);
  return out;
}

}  // namespace

// A LoRA retrofit of a dense run: the base stays bitwise, the checkpoint and its adapter hold
// A and B per layer with the LoRA metadata, the adapter applied on its base rebuilds the run's
// model, convert --adapter merges it into a plain checkpoint with the
// same logits, and another base or a rank that disagrees is refused.
TEST(RetrofitLora, TrainsOnlyTheAdaptersAndItsAdapterAppliesAndMerges) {
  const test::TempDir tmp("rfl");
  const std::string base = tmp.file("base"), other = tmp.file("other"), rf = tmp.file("rf");
  train(tiny(base, {"checkpoint.at_end=true", "train.steps=20"}), quiet());
  train(tiny(other, {"checkpoint.at_end=true", "train.seed=12"}), quiet());
  std::vector<std::string> keys = lora_retrofit(base);
  for (const char* k : {"train.steps=30", "optim.lr=2.0e-2", "optim.weight_decay=0"})
    keys.push_back(k);
  const TrainResult res = train(tiny(rf, keys), quiet());
  ASSERT_EQ(res.losses.size(), 30u);
  EXPECT_TRUE(std::isfinite(res.final_train_loss));

  const std::string rf_ckpt = resolve_checkpoint_dir(rf), base_ckpt = resolve_checkpoint_dir(base);
  io::SafetensorsFile rm((fs::path(rf_ckpt) / "model.safetensors").string());
  io::SafetensorsFile bm((fs::path(base_ckpt) / "model.safetensors").string());
  int lora_tensors = 0;
  for (const std::string& n : rm.names()) {
    if (bm.contains(n)) {
      const auto a = rm.raw(n), b = bm.raw(n);
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0) << n << " changed";
    } else {
      EXPECT_TRUE(n.ends_with(".attn.c_attn.lora_a") || n.ends_with(".attn.c_attn.lora_b")) << n;
      ++lora_tensors;
    }
  }
  EXPECT_EQ(lora_tensors, 4);
  const std::string adapter = (fs::path(rf_ckpt) / kAdapterFileName).string();
  io::SafetensorsFile af(adapter);
  EXPECT_EQ(af.names().size(), 4u);
  EXPECT_EQ(af.metadata().at("lora.rank"), "4");
  EXPECT_EQ(af.metadata().at("lora.alpha"), "8");
  EXPECT_EQ(af.metadata().at("lora.targets"), "c_attn");
  EXPECT_EQ(af.metadata().at("attention"), "dense");

  // Applied on its base: the run's model, LoRA included; its logits are the reference below.
  const ModelSource src = with_adapter(inspect_model_source(base), adapter);
  EXPECT_EQ(src.config.lora.rank, 4);
  test::ModelFixture fx(src.config, 2, 8, {});
  load_model_source(src, fx.store);
  for (const std::string& n : rm.names())
    EXPECT_EQ(std::memcmp(rm.raw(n).data(), fx.store.param(n).data, rm.raw(n).size()), 0) << n;
  const std::vector<float> with_lora = fx.logits();

  // convert --adapter: the LoRA merged into c_attn.weight, a plain dense checkpoint.
  ConvertOptions co;
  co.to = ModelFormat::attnlab;
  co.adapter = adapter;
  const std::string merged = tmp.file("merged");
  convert_model(base, merged, co);
  const ModelSource ms = inspect_model_source(merged);
  EXPECT_FALSE(ms.config.lora.enabled());
  // Its recipe is a plain model's (no retrofit left), so it trains as it is.
  const std::optional<Recipe> mr = read_checkpoint_recipe(resolve_checkpoint_dir(merged));
  ASSERT_TRUE(mr.has_value());
  EXPECT_FALSE(mr->retrofit.enabled);
  EXPECT_TRUE(mr->retrofit.checkpoint.empty());
  EXPECT_EQ(mr->retrofit.lora.rank, 0);
  test::ModelFixture mf(ms.config, 2, 8, {});
  mf.tokens = fx.tokens;
  load_model_source(ms, mf.store);
  for (const auto& e : mf.store.entries()) EXPECT_EQ(e.spec.name.find("lora"), std::string::npos);
  const std::vector<float> merged_logits = mf.logits();
  double worst = 0.0;
  for (size_t i = 0; i < with_lora.size(); ++i)
    worst = std::max(worst, double(std::fabs(merged_logits[i] - with_lora[i])));
  std::printf("[lora convert] max |logit diff| merged checkpoint vs base + adapter %.3g\n", worst);
  EXPECT_LT(worst, 1e-4);
  EXPECT_GT(worst, 0.0);  // (not bitwise: W + s B A is one rounding, the branch another)

  // Another base: refused by the hash. A rank that disagrees: refused naming both.
  ParameterStore s2;
  GPT(src.config).declare_params(s2);
  s2.finalize(Device::cpu, DType::f32, {});
  EXPECT_HAS(thrown_message([&] {
               load_model_source(with_adapter(inspect_model_source(other), adapter), s2);
             }),
             "was trained on another base model");
  // A Focus retrofit of the base given in place of the base: named as such.
  std::vector<std::string> frf_keys = focus_retrofit(base);
  frf_keys.push_back("checkpoint.at_end=true");
  train(tiny(tmp.file("frf"), frf_keys), quiet());
  EXPECT_HAS(thrown_message([&] { with_adapter(inspect_model_source(tmp.file("frf")), adapter); }),
             "attention.type: dense in the adapter's model, focus in the base (if '");
  const std::string bad_meta =
      edited_adapter(adapter, tmp.file("m.safetensors"), [](auto& m) { m["lora.rank"] = "8"; });
  EXPECT_HAS(thrown_message([&] { with_adapter(inspect_model_source(base), bad_meta); }),
             "its metadata gives lora.rank 8 but its recipe retrofit.lora.rank 4");
  // Every setting the metadata repeats must agree with the recipe (only the rank was compared).
  const std::string bad_alpha =
      edited_adapter(adapter, tmp.file("a.safetensors"), [](auto& m) { m["lora.alpha"] = "32"; });
  EXPECT_HAS(thrown_message([&] { with_adapter(inspect_model_source(base), bad_alpha); }),
             "its metadata gives lora.alpha 32 but its recipe 8 (a damaged adapter)");
  const std::string no_targets =
      edited_adapter(adapter, tmp.file("t.safetensors"), [](auto& m) { m.erase("lora.targets"); });
  EXPECT_HAS(thrown_message([&] { with_adapter(inspect_model_source(base), no_targets); }),
             "its metadata gives lora.targets (none) but its recipe c_attn");
  const std::string bad_rank = edited_adapter(adapter, tmp.file("r.safetensors"), [](auto& m) {
    m["lora.rank"] = "8";
    const size_t at = m["recipe"].find("rank: 4");
    ASSERT_NE(at, std::string::npos);
    m["recipe"].replace(at, 7, "rank: 8");
  });
  const std::string v2 = edited_adapter(adapter, tmp.file("v.safetensors"),
                                        [](auto& m) { m["adapter_version"] = "2"; });
  EXPECT_HAS(thrown_message([&] { with_adapter(inspect_model_source(base), v2); }),
             "adapter_version 2 is not one this attnlab reads (1)");

  // A retrofit continuing from the LoRA run loads its adapters as they are: with another alpha
  // it would start from another function, so it is refused; with the same one it trains.
  std::vector<std::string> cont = lora_retrofit(rf);
  cont.push_back("train.steps=2");
  cont.push_back("retrofit.lora.alpha=16");
  EXPECT_HAS(thrown_message([&] { train(tiny(tmp.file("cont"), cont), quiet()); }),
             "holds LoRA adapters trained with other settings than the recipe's:\n"
             "  retrofit.lora.alpha: 16 in the recipe (--set 'retrofit.lora.alpha=16'), 8 in the "
             "checkpoint");
  cont.pop_back();
  EXPECT_EQ(train(tiny(tmp.file("cont"), cont), quiet()).losses.size(), 2u);
  // Evaluating: a LoRA key the recipe gives must be the model's (it cannot change the function).
  std::vector<std::string> ek = lora_retrofit(base);
  ek.push_back("retrofit.lora.alpha=16");
  const Recipe alpha16 = tiny(tmp.file("e"), ek);
  EXPECT_HAS(thrown_message([&] { check_recipe_model(alpha16, alpha16.given, src, "m"); }),
             "retrofit.lora.alpha: 16 in the recipe (--set 'retrofit.lora.alpha=16'), 8 in the "
             "model");
  ek.back() = "retrofit.lora.alpha=8";
  const Recipe alpha8 = tiny(tmp.file("e"), ek);
  EXPECT_NO_THROW(check_recipe_model(alpha8, alpha8.given, src, "m"));
  EXPECT_HAS(thrown_message([&] {
               check_recipe_model(alpha8, alpha8.given, inspect_model_source(base), "m");
             }),
             "retrofit.lora.rank: 4 in the recipe (--set 'retrofit.lora.rank=4'), 0 in the model");

  const ModelSource r8 = with_adapter(inspect_model_source(base), bad_rank);
  ParameterStore s8;
  GPT(r8.config).declare_params(s8);
  s8.finalize(Device::cpu, DType::f32, {});
  EXPECT_HAS(thrown_message([&] { load_model_source(r8, s8); }),
             "is a LoRA of rank 8 (its metadata) and its tensor h.0.attn.c_attn.lora_a has rank 4");
}

// LoRA's recipe refusals, each naming the key.
TEST(RetrofitLora, RecipeErrorsNameTheKey) {
  const test::TempDir tmp("rfl");
  auto err = [&](std::vector<std::string> keys) {
    return thrown_message([&] { tiny(tmp.file("x"), keys); });
  };
  EXPECT_HAS(err({"retrofit.enabled=true", "retrofit.checkpoint=b", "retrofit.lora.rank=-1"}),
             "retrofit.lora.rank must be >= 0, got -1");
  EXPECT_HAS(err({"retrofit.enabled=true", "retrofit.checkpoint=b", "retrofit.lora.rank=4",
                  "retrofit.train_roles=[adapter]", "retrofit.lora.alpha=0"}),
             "retrofit.lora.alpha must be > 0, got 0");
  EXPECT_HAS(err({"retrofit.enabled=true", "retrofit.checkpoint=b", "retrofit.lora.rank=4",
                  "attention.type=focus"}),
             "retrofit.train_roles must include adapter with retrofit.lora.rank > 0");
  EXPECT_HAS(err({"retrofit.lora.rank=4"}), "retrofit.lora applies to a retrofit");
  EXPECT_HAS(err({"retrofit.enabled=true", "retrofit.checkpoint=b", "retrofit.lora.rank=4",
                  "retrofit.train_roles=[adapter]", "retrofit.lora.targets=[c_proj]"}),
             "retrofit.lora.targets: 'c_proj' is not implemented yet");
}

// The base hash (version 2) reads the vocabulary tensors' first vocab_size rows only: a base and
// its Hugging Face copy (padded to 128 rows where the base pads to 64) hash alike, so an adapter
// trained on either applies to the other; version 1 adapters (every row hashed) still load on
// the base they were made on; an unknown hash kind is refused.
TEST(Retrofit, AdapterAppliesAcrossAConvertedCopyOfItsBase) {
  const test::TempDir tmp("rfh");
  const std::string base = tmp.file("base"), hf = tmp.file("hf");
  train(tiny(base, {"checkpoint.at_end=true"}), quiet());
  ConvertOptions co;
  co.to = ModelFormat::hf;
  convert_model(base, hf, co);
  const ModelSource bs = inspect_model_source(base), hs = inspect_model_source(hf);
  ASSERT_EQ(bs.config.padded_vocab, 64);
  ASSERT_EQ(hs.config.padded_vocab, 128);
  auto loaded = [](const ModelSource& src) {
    auto store = std::make_unique<ParameterStore>();
    GPT(src.config).declare_params(*store);
    store->finalize(Device::cpu, DType::f32, {});
    load_model_source(src, *store);
    return store;
  };
  const auto b_store = loaded(bs), h_store = loaded(hs);
  EXPECT_EQ(base_weights_hash(*b_store, 64), base_weights_hash(*h_store, 64));
  EXPECT_NE(base_weights_hash(*b_store, 64, 1), base_weights_hash(*h_store, 64, 1));
  // The hash still sees every value it covers: one changed weight of a real row changes it.
  const uint64_t before = base_weights_hash(*b_store, 64);
  static_cast<float*>(b_store->param("wte.weight").data)[63 * 32] += 1.f;
  EXPECT_NE(base_weights_hash(*b_store, 64), before);

  // Trained on the HF copy, applied on the original (and the other way), with equal outputs.
  for (const auto& [from, to] : {std::pair{hf, base}, std::pair{base, hf}}) {
    const std::string rf = tmp.file("rf_" + fs::path(from).filename().string());
    std::vector<std::string> keys = focus_retrofit(from);
    keys.push_back("checkpoint.at_end=true");
    if (from == hf) keys.push_back("model.vocab_multiple=128");  // the copy's padding
    train(tiny(rf, keys), quiet());
    const std::string adapter = (fs::path(resolve_checkpoint_dir(rf)) / kAdapterFileName).string();
    EXPECT_EQ(io::SafetensorsFile(adapter).metadata().at("base_hash_kind"), kBaseHashKind);
    const auto on_from = loaded(with_adapter(inspect_model_source(from), adapter));
    const auto on_to = loaded(with_adapter(inspect_model_source(to), adapter));
    int focus_tensors = 0;
    for (const auto& e : on_from->entries()) {
      Tensor a = on_from->param(e.spec.name), b = on_to->param(e.spec.name);
      if (e.spec.name == "wte.weight") {  // 64 rows here, 64 or 128 there
        a = a.slice0(0, 64);
        b = b.slice0(0, 64);
      }
      ASSERT_EQ(a.numel(), b.numel()) << e.spec.name;
      EXPECT_EQ(std::memcmp(a.data, b.data, size_t(a.numel()) * sizeof(float)), 0) << e.spec.name;
      focus_tensors += e.spec.name.find(".attn.focus.") != std::string::npos;
    }
    EXPECT_EQ(focus_tensors, 4);
  }

  // A version 1 adapter (every row hashed, padding included) of the HF copy (128 rows) loads on
  // it, and is refused on the original (64 rows): what version 2 mends.
  const std::string rf = tmp.file("rf_hf");
  const std::string adapter = (fs::path(resolve_checkpoint_dir(rf)) / kAdapterFileName).string();
  const std::string v1 = edited_adapter(adapter, tmp.file("v1.safetensors"), [&](auto& m) {
    m["base_hash_kind"] = kBaseHashKindV1;
    m["base_hash"] = io::hash_hex(base_weights_hash(*h_store, 64, 1));
  });
  EXPECT_NO_THROW(loaded(with_adapter(hs, v1)));
  EXPECT_HAS(thrown_message([&] { loaded(with_adapter(bs, v1)); }),
             "was trained on another base model");
  const std::string v9 = edited_adapter(adapter, tmp.file("v9.safetensors"),
                                        [&](auto& m) { m["base_hash_kind"] = "fnv1a64-bf16-v9"; });
  EXPECT_HAS(thrown_message([&] { with_adapter(bs, v9); }),
             "base hash kind 'fnv1a64-bf16-v9' is not one this attnlab computes");
  // A Focus setting in the metadata that its recipe does not give: a damaged adapter.
  const std::string tau = edited_adapter(adapter, tmp.file("tau.safetensors"),
                                         [&](auto& m) { m["focus.tau"] = "0.5"; });
  EXPECT_HAS(thrown_message([&] { with_adapter(bs, tau); }),
             "its metadata gives focus.tau 0.5 but its recipe 0.10000000000000001");
}
