// The shipped CPU quickstart recipes of issue 16's baselines, end to end on a smaller base than
// recipes/quickstart.yaml's (so the test takes seconds): the LoRA retrofit (only the adapters
// change; that LoRA training lowers the loss is LoraModel.TrainingLowersTheLossOnAFixedBatch, as
// this 40-step base's remaining loss is mostly bigram statistics that c_attn cannot reach) and
// Focus two-phase fine-tuning (phase 2 starts from phase 1's trained centroids, then every weight
// trains).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "config/recipe.h"
#include "interop/model_source.h"
#include "io/safetensors.h"
#include "model/gpt.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/from_recipe.h"
#include "train/init_from.h"
#include "train/retrofit.h"
#include "train/trainer.h"

namespace fs = std::filesystem;
using namespace attnlab;

namespace {

std::string recipe_path(const char* name) {
  return (fs::path(test::source_dir()) / "recipes" / name).string();
}

// The shipped recipe on the CPU with a short run and no periodic work.
Recipe shipped(const char* name, const std::vector<std::string>& keys) {
  std::vector<std::string> all = {"train.device=cpu",        "train.steps=12", "log.every=1000",
                                  "schedule.warmup_steps=2", "eval.every=0",   "eval.at_end=false",
                                  "checkpoint.every=0"};
  all.insert(all.end(), keys.begin(), keys.end());  // the caller's keys win
  return load_recipe(recipe_path(name), all);
}

TrainOptions quiet() {
  TrainOptions o;
  o.quiet = true;
  return o;
}

// recipes/quickstart.yaml made small: 2 layers of width 64.
std::string train_base(const test::TempDir& tmp) {
  const std::string base = tmp.file("base");
  train(shipped("quickstart.yaml", {"model.n_layer=2", "model.n_head=2", "model.n_embd=64",
                                    "train.steps=40", "train.out_dir=" + base}),
        quiet());
  return base;
}

io::SafetensorsFile model_file(const std::string& run) {
  return io::SafetensorsFile(
      (fs::path(resolve_checkpoint_dir(run)) / "model.safetensors").string());
}

bool same_bytes(const io::SafetensorsFile& a, const io::SafetensorsFile& b, const std::string& n) {
  const auto x = a.raw(n), y = b.raw(n);
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size()) == 0;
}

}  // namespace

TEST(RetrofitRecipes, QuickstartLoraTrainsOnlyTheAdapters) {
  const test::TempDir tmp("rrl");
  const std::string base = train_base(tmp), run = tmp.file("lora");
  const TrainResult res = train(
      shipped("quickstart-lora.yaml", {"retrofit.checkpoint=" + base, "train.out_dir=" + run}),
      quiet());
  ASSERT_EQ(res.losses.size(), 12u);
  for (double l : res.losses) EXPECT_TRUE(std::isfinite(l));
  const io::SafetensorsFile rm = model_file(run), bm = model_file(base);
  int lora = 0;
  for (const std::string& n : rm.names()) {
    if (bm.contains(n)) {
      EXPECT_TRUE(same_bytes(rm, bm, n)) << n << " changed";
    } else {
      EXPECT_NE(n.find(".attn.c_attn.lora_"), std::string::npos) << n;
      ++lora;
    }
  }
  EXPECT_EQ(lora, 4);
  EXPECT_TRUE(fs::exists(fs::path(resolve_checkpoint_dir(run)) / kAdapterFileName));
}

TEST(RetrofitRecipes, QuickstartFocusTwoPhaseStartsPhaseTwoFromPhaseOnesCentroids) {
  const test::TempDir tmp("rr2");
  const std::string base = train_base(tmp), p1 = tmp.file("p1"), p2 = tmp.file("p2");
  train(shipped("quickstart-focus-two-phase-1.yaml",
                {"retrofit.checkpoint=" + base, "train.out_dir=" + p1}),
        quiet());
  const Recipe r2 = resolve_init_from(shipped("quickstart-focus-two-phase-2.yaml",
                                              {"train.init_from=" + p1, "train.out_dir=" + p2}));
  // Phase 2's init load: every tensor from phase 1 (centroids included), none initialised.
  GPT model(gpt_config_of(r2));
  ParameterStore store;
  model.declare_params(store);
  store.finalize(Device::cpu, DType::f32, r2.retrofit.trainable_roles());
  EXPECT_EQ(store.num_trainable(), store.num_params());  // every weight trains in phase 2
  const WeightLoadReport rep = load_init_from(r2, store);
  EXPECT_TRUE(rep.initialised.empty()) << rep.summary();
  int focus_loaded = 0;
  for (const std::string& n : rep.loaded)
    focus_loaded += n.find(".attn.focus.") != std::string::npos;
  EXPECT_EQ(focus_loaded, 2 * 2);  // W_g and C of both layers

  train(r2, quiet());
  const io::SafetensorsFile m1 = model_file(p1), m2 = model_file(p2), mb = model_file(base);
  int changed_base = 0, changed_focus = 0, focus = 0;
  for (const std::string& n : m2.names()) {
    const bool is_focus = n.find(".attn.focus.") != std::string::npos;
    focus += is_focus;
    if (is_focus) {
      EXPECT_TRUE(m1.contains(n)) << n;
      changed_focus += !same_bytes(m2, m1, n);
    } else {
      EXPECT_TRUE(same_bytes(m1, mb, n)) << n << " changed in phase 1 (frozen there)";
      changed_base += !same_bytes(m2, m1, n);
    }
  }
  EXPECT_EQ(focus, 4);
  EXPECT_EQ(changed_focus, 4);
  EXPECT_GT(changed_base, 10);  // phase 2 trains the base weights too
}
