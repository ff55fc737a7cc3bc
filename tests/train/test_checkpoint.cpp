// Checkpoint files of the parameter store and the optimizer: optimizer state saved with its
// parameter layout and refused for another layout, old (packed) state, state of another shard
// count, frozen tensors without state, and loading weights by role (a dense checkpoint seeding a
// model with extra tensors; missing, extra, mismatched and allowed tensors).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/context.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"

namespace fs = std::filesystem;

namespace attnlab {
namespace {

using test::expect_error;

std::vector<float> to_vec(const Tensor& t) {
  std::vector<float> out(size_t(t.numel()));
  copy_tensor(Tensor(out.data(), DType::f32, Device::cpu, t.shape), t);
  return out;
}

// w1, b1, w2 base tensors (odd sizes, so the layout has padding) and an attention-role tensor.
void declare_model(ParameterStore& s, Shape w1 = Shape{2, 3}) {
  s.declare({"w1", w1, ParamRole::base, ParamInit::normal, 0.5f, true});
  s.declare({"b1", Shape{3}, ParamRole::base, ParamInit::normal, 0.5f, false});
  s.declare({"w2", Shape{3, 2}, ParamRole::base, ParamInit::normal, 0.5f, true});
  s.declare({"centroids", Shape{4}, ParamRole::attention, ParamInit::normal, 0.5f, false});
}

void fill_grads(const ParameterStore& s, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.f, 0.1f);
  for (const auto& e : s.entries()) {
    if (!e.trainable) continue;
    Tensor g = s.grad(e.spec.name);
    for (int64_t i = 0; i < g.numel(); ++i) g.ptr<float>()[i] = dist(rng);
  }
}

// A checkpoint of `store` with the state of `opt` after two steps; returns its directory.
std::string save_after_two_steps(const std::string& run_dir, ParameterStore& store, AdamW& opt) {
  std::mt19937 rng(17);
  for (int t = 1; t <= 2; ++t) {
    fill_grads(store, rng);
    opt.step(1e-2f, t);
  }
  CheckpointContents c;
  c.store = &store;
  c.optimizer_state = opt.state_tensors();
  c.state.step = 2;
  c.recipe_yaml = "test: 1\n";
  return save_checkpoint(run_dir, c, 2);
}

// Each state tensor's values at the store's tensors (padding left out).
std::map<std::string, std::vector<float>> state_by_tensor(const AdamW& opt,
                                                          const ParameterStore& s) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, t] : opt.state_tensors()) {
    const std::vector<float> all = to_vec(t);
    for (const auto& e : s.entries())
      if (e.trainable)
        for (int64_t i = 0; i < e.spec.shape.numel(); ++i)
          out[name + ":" + e.spec.name].push_back(all[size_t(e.offset + i)]);
  }
  return out;
}

// Two stores of declare_model's model (the centroids frozen), a initialised, and their optimizers.
struct StorePair {
  std::unique_ptr<ExecContext> ctx = ExecContext::make_cpu();
  ParameterStore a, b;
  std::unique_ptr<AdamW> oa, ob;
  StorePair() {
    declare_model(a);
    declare_model(b);
    a.finalize(Device::cpu, DType::f32, {ParamRole::base});
    b.finalize(Device::cpu, DType::f32, {ParamRole::base});
    a.initialize(1);
    oa = std::make_unique<AdamW>(*ctx, a, AdamWConfig{});
    ob = std::make_unique<AdamW>(*ctx, b, AdamWConfig{});
  }
};

TEST(OptimizerCheckpoint, StateIsSavedWithItsLayoutAndLoadsBack) {
  const test::TempDir tmp("ckpt");
  StorePair p;
  ParameterStore& a = p.a;
  AdamW &oa = *p.oa, &ob = *p.ob;
  const std::string dir = save_after_two_steps(tmp.file("run"), a, oa);

  io::SafetensorsFile f((fs::path(dir) / "optimizer.safetensors").string());
  ASSERT_TRUE(f.metadata().count("param_layout"));
  const ParamLayout saved = ParamLayout::from_json(f.metadata().at("param_layout"), f.path());
  EXPECT_EQ(layout_difference(saved, a.trainable_layout()), "");
  EXPECT_EQ(saved.tensors.size(), 3u);  // the frozen centroids have no state

  load_optimizer_state(dir, ob);
  for (size_t i = 0; i < oa.state_tensors().size(); ++i)
    EXPECT_EQ(to_vec(oa.state_tensors()[i].second), to_vec(ob.state_tensors()[i].second));
}

// A byte of a checkpoint that changed on disk stops both loads that read tensors (the files'
// data hash, io/data_hash.h), naming the file; the header-only readers (the step check, the
// recipe) still work, so the error comes from the load that would have used the bytes.
TEST(Checkpoint, ChangedBytesStopTheLoadsNamingTheFile) {
  const test::TempDir tmp("ckpt");
  StorePair p;
  const std::string dir = save_after_two_steps(tmp.file("run"), p.a, *p.oa);
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    const std::string path = (fs::path(dir) / file).string();
    std::string bytes = io::read_file(path);
    bytes[bytes.size() - 5] ^= 0x08;  // a bit of the last tensor
    io::write_file_atomic(path, bytes);
  }
  check_checkpoint_steps(dir, 2);
  const std::vector<std::string> corrupt = {"is corrupt", "a byte changed since"};
  expect_error([&] { load_optimizer_state(dir, *p.ob); },
               {"checkpoint '" + (fs::path(dir) / "optimizer.safetensors").string() + "'",
                corrupt[0], corrupt[1]});
  expect_error([&] { load_model_weights_by_role(dir, p.b, WeightLoadOptions{}); },
               {"checkpoint '" + (fs::path(dir) / "model.safetensors").string() + "'", corrupt[0],
                corrupt[1]});
}

// Re-saving a step that exists (a re-run after resume) replaces it whole: the new contents, no
// temporary or aside directory left, `latest` resolving to it. A crash between the fallback's
// two renames leaves the older checkpoint at <step>.old, which the run directory then resolves
// to (a dangling `latest` was the result before).
TEST(Checkpoint, ResavingAStepReplacesItWhole) {
  const test::TempDir tmp("ckpt");
  auto ctx = ExecContext::make_cpu();
  ParameterStore a;
  declare_model(a);
  a.finalize(Device::cpu, DType::f32, {ParamRole::base});
  a.initialize(1);
  AdamW oa(*ctx, a, AdamWConfig{});
  const std::string run = tmp.file("run");
  const std::string first = save_after_two_steps(run, a, oa);
  const fs::path ckpts = fs::path(run) / "checkpoints";
  CheckpointContents c;
  c.store = &a;
  c.optimizer_state = oa.state_tensors();
  c.state.step = 2;
  c.recipe_yaml = "test: 2\n";
  EXPECT_EQ(save_checkpoint(run, c, 2), first);
  EXPECT_EQ(io::read_file((fs::path(first) / "recipe.yaml").string()), "test: 2\n");
  std::vector<std::string> names;
  for (const auto& d : fs::directory_iterator(ckpts)) names.push_back(d.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"latest", "step_00000002"}));
  EXPECT_EQ(resolve_checkpoint_dir(run), first);
  // The fallback's crash window: the step's directory moved aside, the new one not yet in place.
  fs::rename(first, first + ".old");
  EXPECT_EQ(resolve_checkpoint_dir(run), first + ".old");
  fs::remove_all(first + ".old");
  expect_error([&] { resolve_checkpoint_dir(run); }, "which is missing or incomplete");
}

// keep_last keeps the newest checkpoints up to the step being saved, by number: a run resumed
// from step 6 of a run that reached 8 keeps its own history (6, 7) and leaves 8 alone (it used
// to delete 6 and keep 8), and step 100,000,000 is newer than 99,999,999 (text order said not).
// trainer_state.json's fields are read by type and range, the field named when one is wrong (a
// step of 3.5 was taken as 3, a position of -1 as 2^64 - 1, a device "tpu" as given).
TEST(Checkpoint, TrainerStateFieldsAreCheckedByName) {
  test::TempDir dir("ts");
  const std::string good =
      R"({"step": 4, "data_epoch": 1, "data_position": 7, "tokens_seen": 512,
          "elapsed_seconds": 1.5, "data_fingerprint": "1 sources", "device": "cpu",
          "precision": "f32"})";
  auto with = [&](const std::string& key, const std::string& value) {
    nlohmann::json j = nlohmann::json::parse(good);
    if (value.empty())
      j.erase(key);
    else
      j[key] = nlohmann::json::parse(value);
    io::write_file_atomic(dir.file("trainer_state.json"), j.dump());
  };
  with("step", "4");
  const TrainerState st = load_trainer_state(dir.path().string());
  EXPECT_EQ(st.step, 4);
  EXPECT_EQ(st.data_position, 7u);
  EXPECT_EQ(st.device, "cpu");
  const std::pair<std::string, std::string> bad[] = {
      {"step", "3.5"},           {"step", "-1"},           {"data_epoch", "-1"},
      {"data_position", "-5"},   {"tokens_seen", "\"9\""}, {"step", "1e30"},
      {"elapsed_seconds", "-1"}, {"device", "\"tpu\""},    {"precision", "\"fp8\""},
      {"data_position", ""}};
  for (const auto& [key, value] : bad) {
    with(key, value);
    test::expect_error([&] { load_trainer_state(dir.path().string()); },
                       {"corrupt trainer state '", "'" + key + "'"});
  }
  io::write_file_atomic(dir.file("trainer_state.json"), "[1, 2]");
  test::expect_error([&] { load_trainer_state(dir.path().string()); }, {"expected a JSON object"});
}

TEST(Checkpoint, KeepLastPrunesThisRunsHistoryByStepNumber) {
  const test::TempDir tmp("ckpt");
  auto ctx = ExecContext::make_cpu();
  ParameterStore a;
  declare_model(a);
  a.finalize(Device::cpu, DType::f32, {ParamRole::base});
  a.initialize(1);
  AdamW oa(*ctx, a, AdamWConfig{});
  const std::string run = tmp.file("run");
  auto save = [&](int64_t step) {
    CheckpointContents c;
    c.store = &a;
    c.optimizer_state = oa.state_tensors();
    c.state.step = step;
    c.recipe_yaml = "test: 1\n";
    save_checkpoint(run, c, 2);
  };
  auto names = [&] {
    std::vector<std::string> n;
    for (const auto& d : fs::directory_iterator(fs::path(run) / "checkpoints"))
      if (d.is_directory()) n.push_back(d.path().filename());
    std::sort(n.begin(), n.end());
    return n;
  };
  for (int64_t step : {2, 4, 6, 8}) save(step);
  EXPECT_EQ(names(), (std::vector<std::string>{"step_00000006", "step_00000008"}));
  // A crash's leftover beside its complete step directory goes at the next save.
  fs::create_directories(fs::path(run) / "checkpoints" / "step_00000008.old");
  save(7);  // resumed from 6
  EXPECT_EQ(names(), (std::vector<std::string>{"step_00000006", "step_00000007", "step_00000008"}));
  EXPECT_EQ(resolve_checkpoint_dir(run),
            (fs::path(run) / "checkpoints" / "step_00000007").string());
  // Leftovers of interrupted saves: another step's .tmp (a kill or a full disk mid-write) goes;
  // a .old whose step directory is missing is that step's checkpoint: put back, then pruned by
  // keep_last like any other (they stayed forever).
  const fs::path ck = fs::path(run) / "checkpoints";
  fs::create_directories(ck / "step_00000005.tmp");
  fs::rename(ck / "step_00000006", ck / "step_00000006.old");
  save(8);  // 6 put back, then pruned with the rest past keep_last 2
  EXPECT_EQ(names(), (std::vector<std::string>{"step_00000007", "step_00000008"}));
  fs::rename(ck / "step_00000007", ck / "step_00000007.old");
  fs::create_directories(ck / "step_00000007.tmp");
  save(9);  // 7's .tmp goes with the rest; 7 put back, then pruned
  EXPECT_EQ(names(), (std::vector<std::string>{"step_00000008", "step_00000009"}));
  fs::rename(ck / "step_00000008", ck / "step_00000008.old");
  fs::remove_all(ck / "step_00000009");
  save(10);  // keeps 8 (put back from .old) and 10
  EXPECT_EQ(names(), (std::vector<std::string>{"step_00000008", "step_00000010"}));
  save(99999999);
  save(100000000);
  EXPECT_EQ(names(), (std::vector<std::string>{"step_100000000", "step_99999999"}));
}

TEST(OptimizerCheckpoint, RefusesStateOfAnotherLayoutOfTheSameSize) {
  const test::TempDir tmp("ckpt");
  auto ctx = ExecContext::make_cpu();
  ParameterStore a, transposed, reordered;
  declare_model(a);
  declare_model(transposed, Shape{3, 2});  // w1 transposed: the same element count
  reordered.declare({"b1", Shape{3}});
  reordered.declare({"w1", Shape{2, 3}});
  reordered.declare({"w2", Shape{3, 2}});
  for (ParameterStore* s : {&a, &transposed, &reordered})
    s->finalize(Device::cpu, DType::f32, {ParamRole::base});
  AdamW oa(*ctx, a, AdamWConfig{}), ot(*ctx, transposed, AdamWConfig{}),
      orr(*ctx, reordered, AdamWConfig{});
  const std::string dir = save_after_two_steps(tmp.file("run"), a, oa);
  const std::string file = (fs::path(dir) / "optimizer.safetensors").string();
  expect_error([&] { load_optimizer_state(dir, ot); },
               "optimizer state in " + file +
                   " was saved for a different parameter layout: tensor w1 is [2, 3] at offset 0 "
                   "there, [3, 2] at offset 0 here");
  expect_error([&] { load_optimizer_state(dir, orr); },
               "tensor b1 is [3] at offset 64 there, [3] at offset 0 here");
  // Nothing was copied into the refused optimizer.
  for (float m : to_vec(ot.state_tensors()[0].second)) ASSERT_EQ(m, 0.f);
  // Retrofit: training another set of roles is another layout.
  ParameterStore attention_only;
  declare_model(attention_only);
  attention_only.finalize(Device::cpu, DType::f32, {ParamRole::attention});
  AdamW oatt(*ctx, attention_only, AdamWConfig{});
  expect_error([&] { load_optimizer_state(dir, oatt); },
               "tensor centroids ([4] at offset 0 here) is not in it");
}

TEST(OptimizerCheckpoint, StateOfAnotherShardCountLoads) {
  // The shard padding sits at the end of the trainable range: tensor offsets are the same.
  const test::TempDir tmp("ckpt");
  auto ctx = ExecContext::make_cpu();
  ParameterStore a, b;
  declare_model(a);
  declare_model(b);
  a.finalize(Device::cpu, DType::f32, {ParamRole::base});
  b.finalize(Device::cpu, DType::f32, {ParamRole::base}, 8);
  ASSERT_NE(a.trainable_buffer_numel(), b.trainable_buffer_numel());
  AdamW oa(*ctx, a, AdamWConfig{}), ob(*ctx, b, AdamWConfig{});
  const std::string dir = save_after_two_steps(tmp.file("run"), a, oa);
  load_optimizer_state(dir, ob);
  EXPECT_EQ(state_by_tensor(oa, a), state_by_tensor(ob, b));
  // The padding of the longer range stays zero.
  const std::vector<float> m = to_vec(ob.state_tensors()[0].second);
  for (size_t i = size_t(a.trainable_buffer_numel()); i < m.size(); ++i) ASSERT_EQ(m[i], 0.f);
}

TEST(OptimizerCheckpoint, PackedStateWithoutLayoutLoadsByCount) {
  // Files written before layouts were saved hold the trainable tensors packed, in store order.
  const test::TempDir tmp("ckpt");
  auto ctx = ExecContext::make_cpu();
  ParameterStore s;
  declare_model(s);
  s.finalize(Device::cpu, DType::f32, {ParamRole::base});
  AdamW opt(*ctx, s, AdamWConfig{});
  std::vector<float> m(15), v(15);
  for (size_t i = 0; i < 15; ++i) m[i] = float(i) + 1.f, v[i] = float(i) * 0.5f + 0.25f;
  const fs::path dir = tmp.path() / "old";
  fs::create_directories(dir);
  io::SafetensorsWriter w;
  w.add("adamw.m", Tensor(m.data(), DType::f32, Device::cpu, Shape{15}));
  w.add("adamw.v", Tensor(v.data(), DType::f32, Device::cpu, Shape{15}));
  w.write((dir / "optimizer.safetensors").string());
  load_optimizer_state(dir.string(), opt);
  const auto got = state_by_tensor(opt, s);
  EXPECT_EQ(got.at("adamw.m:w1"), std::vector<float>(m.begin(), m.begin() + 6));
  EXPECT_EQ(got.at("adamw.m:b1"), std::vector<float>(m.begin() + 6, m.begin() + 9));
  EXPECT_EQ(got.at("adamw.v:w2"), std::vector<float>(v.begin() + 9, v.end()));
  const std::vector<float> flat = to_vec(opt.state_tensors()[0].second);
  EXPECT_EQ(flat[6], 0.f);  // padding after w1
  EXPECT_EQ(flat[64], m[6]);

  io::SafetensorsWriter short_file;
  short_file.add("adamw.m", Tensor(m.data(), DType::f32, Device::cpu, Shape{14}));
  short_file.add("adamw.v", Tensor(v.data(), DType::f32, Device::cpu, Shape{14}));
  short_file.write((dir / "optimizer.safetensors").string());
  expect_error([&] { load_optimizer_state(dir.string(), opt); },
               "'adamw.m' must be f32 with 15 elements");
}

TEST(OptimizerCheckpoint, FrozenRolesHaveNoStateAndStayBitIdentical) {
  // Retrofit: train the attention role only. Gradients and optimizer state hold the attention
  // tensors alone; an AdamW step leaves every frozen tensor (and the padding) bit for bit.
  auto ctx = ExecContext::make_cpu();
  ParameterStore s;
  declare_model(s);
  s.declare(
      {"h.0.attn.focus.w_g", Shape{5, 7}, ParamRole::attention, ParamInit::normal, 0.5f, true});
  s.finalize(Device::cpu, DType::f32, {ParamRole::attention});
  s.initialize(8);
  EXPECT_EQ(s.num_trainable(), 4 + 35);
  EXPECT_EQ(s.grads().numel(), 2 * kParamAlignElements);  // centroids [0, 4), w_g [64, 99)
  EXPECT_EQ(s.trainable_layout().tensors.size(), 2u);
  for (const auto& e : s.entries())
    EXPECT_EQ(s.grad(e.spec.name).empty(), e.spec.role == ParamRole::base) << e.spec.name;
  AdamW opt(*ctx, s, AdamWConfig{});
  for (const auto& [name, t] : opt.state_tensors()) EXPECT_EQ(t.numel(), 128) << name;

  const auto bytes = [&](const std::string& n) {
    const Tensor t = s.param(n);
    return std::string(static_cast<const char*>(t.data), t.nbytes());
  };
  std::map<std::string, std::string> before;
  for (const auto& e : s.entries()) before[e.spec.name] = bytes(e.spec.name);
  const std::vector<float> all_before = to_vec(s.all_params());
  std::mt19937 rng(2);
  for (int t = 1; t <= 3; ++t) {
    fill_grads(s, rng);
    opt.step(1e-2f, t);
  }
  for (const auto& e : s.entries()) {
    if (e.spec.role == ParamRole::base)
      EXPECT_EQ(bytes(e.spec.name), before[e.spec.name]) << e.spec.name << " changed";
    else
      EXPECT_NE(bytes(e.spec.name), before[e.spec.name]) << e.spec.name << " not updated";
  }
  const std::vector<float> all_after = to_vec(s.all_params());
  std::vector<bool> in_tensor(all_after.size(), false);
  for (const auto& e : s.entries())
    for (int64_t i = 0; i < e.spec.shape.numel(); ++i) in_tensor[size_t(e.offset + i)] = true;
  for (size_t i = 0; i < all_after.size(); ++i)
    if (!in_tensor[i]) {
      ASSERT_EQ(all_after[i], 0.f) << "padding element " << i;
    }
  EXPECT_EQ(all_before.size(), all_after.size());
}

// ---- loading weights by role -----------------------------------------------------------------

struct FileTensor {
  std::string name;
  Shape shape;
  float value;  // every element
};

// A checkpoint directory with a model.safetensors of the given f32 tensors.
std::string write_model(const test::TempDir& tmp, const std::string& name,
                        const std::vector<FileTensor>& tensors) {
  const fs::path dir = tmp.path() / name;
  fs::create_directories(dir);
  std::vector<std::vector<float>> data;
  data.reserve(tensors.size());
  io::SafetensorsWriter w;
  for (const auto& t : tensors) {
    data.emplace_back(size_t(t.shape.numel()), t.value);
    w.add(t.name, Tensor(data.back().data(), DType::f32, Device::cpu, t.shape));
  }
  w.write((dir / "model.safetensors").string());
  return dir.string();
}

std::vector<float> values(const ParameterStore& s, const std::string& n) {
  return to_vec(s.param(n));
}

// A dense model (w1, b1, w2) with Focus-like extra attention tensors.
void declare_focus(ParameterStore& s) {
  declare_model(s);
  s.declare({"h.0.attn.focus.w_g", Shape{5, 7}, ParamRole::attention});
}

TEST(LoadWeightsByRole, DenseCheckpointSeedsAModelWithExtraTensors) {
  const test::TempDir tmp("ckpt");
  const std::string dense = write_model(
      tmp, "dense", {{"w1", Shape{2, 3}, 1.f}, {"b1", Shape{3}, 2.f}, {"w2", {3, 2}, 3.f}});
  ParameterStore s;
  declare_focus(s);
  s.finalize(Device::cpu, DType::f32, {ParamRole::attention});
  s.initialize(4);
  const std::vector<float> centroids = values(s, "centroids");
  const std::vector<float> w_g = values(s, "h.0.attn.focus.w_g");

  // The strict load (resume) refuses: the file lacks tensors of the model.
  expect_error([&] { load_model_weights(dense, s); }, "has no tensor 'centroids'");

  const WeightLoadReport r = load_model_weights_by_role(dense, s, WeightLoadOptions{});
  EXPECT_EQ(r.loaded, (std::vector<std::string>{"w1", "b1", "w2"}));
  // Entries order: the trainable attention tensors first.
  EXPECT_EQ(r.initialised, (std::vector<std::string>{"centroids", "h.0.attn.focus.w_g"}));
  EXPECT_TRUE(r.ignored.empty());
  EXPECT_EQ(r.summary(), "initialised (not in checkpoint): centroids, h.0.attn.focus.w_g");
  EXPECT_EQ(values(s, "w1"), std::vector<float>(6, 1.f));
  EXPECT_EQ(values(s, "b1"), std::vector<float>(3, 2.f));
  EXPECT_EQ(values(s, "w2"), std::vector<float>(6, 3.f));
  EXPECT_EQ(values(s, "centroids"), centroids);  // kept their initialisation
  EXPECT_EQ(values(s, "h.0.attn.focus.w_g"), w_g);

  // When the attention role is required too, its absence is an error.
  WeightLoadOptions both;
  both.required_roles = {ParamRole::base, ParamRole::attention};
  expect_error([&] { load_model_weights_by_role(dense, s, both); },
               "has no tensor 'centroids' (role attention) that the model needs");
  // A checkpoint with every tensor loads all of them, whatever the roles.
  const std::string full = write_model(tmp, "full",
                                       {{"w1", Shape{2, 3}, 1.f},
                                        {"b1", Shape{3}, 2.f},
                                        {"w2", {3, 2}, 3.f},
                                        {"centroids", {4}, 4.f},
                                        {"h.0.attn.focus.w_g", {5, 7}, 5.f}});
  const WeightLoadReport all = load_model_weights_by_role(full, s, both);
  EXPECT_EQ(all.loaded.size(), 5u);
  EXPECT_EQ(all.summary(), "");
  EXPECT_EQ(values(s, "centroids"), std::vector<float>(4, 4.f));
}

TEST(LoadWeightsByRole, MissingBaseTensorIsAnError) {
  const test::TempDir tmp("ckpt");
  const std::string dir =
      write_model(tmp, "partial", {{"w1", Shape{2, 3}, 1.f}, {"w2", {3, 2}, 3.f}});
  ParameterStore s;
  declare_focus(s);
  s.finalize(Device::cpu, DType::f32, {ParamRole::base});
  s.initialize(4);
  const std::vector<float> w1 = values(s, "w1");
  expect_error([&] { load_model_weights_by_role(dir, s, WeightLoadOptions{}); },
               {dir + "/model.safetensors", "has no tensor 'b1' (role base) that the model needs"});
  EXPECT_EQ(values(s, "w1"), w1);  // refused before anything was copied
}

TEST(LoadWeightsByRole, ExtraTensorIsAnErrorUnlessAllowed) {
  const test::TempDir tmp("ckpt");
  const std::string focus = write_model(tmp, "focus",
                                        {{"w1", Shape{2, 3}, 1.f},
                                         {"b1", Shape{3}, 2.f},
                                         {"w2", {3, 2}, 3.f},
                                         {"centroids", {4}, 4.f},
                                         {"h.0.attn.focus.w_g", {5, 7}, 5.f}});
  ParameterStore dense;  // a dense model seeded from a Focus checkpoint: the centroids go unused
  dense.declare({"w1", Shape{2, 3}});
  dense.declare({"b1", Shape{3}});
  dense.declare({"w2", Shape{3, 2}});
  dense.finalize(Device::cpu, DType::f32, {ParamRole::base});
  dense.initialize(1);
  const std::vector<float> w1 = values(dense, "w1");
  expect_error([&] { load_model_weights_by_role(focus, dense, WeightLoadOptions{}); },
               {focus + "/model.safetensors", "has 2 tensor(s) that the model does not have",
                "centroids, h.0.attn.focus.w_g"});
  EXPECT_EQ(values(dense, "w1"), w1);
  WeightLoadOptions named;  // train.init_from's load names the key that allows them
  named.allow_extra_key = "train.init_allow_extra";
  expect_error([&] { load_model_weights_by_role(focus, dense, named); },
               {"centroids, h.0.attn.focus.w_g; set train.init_allow_extra: true to load the "
                "others and skip these"});
  WeightLoadOptions allow;
  allow.allow_extra = true;
  const WeightLoadReport r = load_model_weights_by_role(focus, dense, allow);
  EXPECT_EQ(r.ignored, (std::vector<std::string>{"centroids", "h.0.attn.focus.w_g"}));
  EXPECT_EQ(r.summary(), "ignored (not in the model): centroids, h.0.attn.focus.w_g");
  EXPECT_EQ(values(dense, "w1"), std::vector<float>(6, 1.f));
}

// Unmerged LoRA adapters in the checkpoint: refused even where extra tensors are allowed (the
// model would be the base without its fine-tune), pointing at the merge.
TEST(LoadWeightsByRole, UnmergedLoraIsRefusedEvenWhereExtraIsAllowed) {
  const test::TempDir tmp("ckpt");
  const std::string lora = write_model(tmp, "lora",
                                       {{"w1", Shape{2, 3}, 1.f},
                                        {"b1", Shape{3}, 2.f},
                                        {"w2", {3, 2}, 3.f},
                                        {"h.0.attn.c_attn.lora_a", {2, 3}, 0.5f},
                                        {"h.0.attn.c_attn.lora_b", {3, 2}, 0.25f}});
  ParameterStore dense;
  dense.declare({"w1", Shape{2, 3}});
  dense.declare({"b1", Shape{3}});
  dense.declare({"w2", Shape{3, 2}});
  dense.finalize(Device::cpu, DType::f32, {ParamRole::base});
  dense.initialize(1);
  const std::vector<float> w1 = values(dense, "w1");
  WeightLoadOptions allow;
  allow.allow_extra = true;
  expect_error([&] { load_model_weights_by_role(lora, dense, allow); },
               {lora + "/model.safetensors", "holds unmerged LoRA adapters",
                "h.0.attn.c_attn.lora_a, h.0.attn.c_attn.lora_b", "--to attnlab"});
  EXPECT_EQ(values(dense, "w1"), w1);  // refused before anything was copied
}

TEST(LoadWeightsByRole, ShapeOrDtypeMismatchIsAnErrorNamingBoth) {
  const test::TempDir tmp("ckpt");
  const std::string dir = write_model(
      tmp, "transposed", {{"w1", Shape{3, 2}, 1.f}, {"b1", Shape{3}, 2.f}, {"w2", {3, 2}, 3.f}});
  ParameterStore s;
  declare_focus(s);
  s.finalize(Device::cpu, DType::f32, {ParamRole::base});
  s.initialize(4);
  const std::vector<float> b1 = values(s, "b1");
  expect_error([&] { load_model_weights_by_role(dir, s, WeightLoadOptions{}); },
               "checkpoint '" + dir +
                   "/model.safetensors': tensor 'w1' has shape [3, 2], the model expects [2, 3]");
  EXPECT_EQ(values(s, "b1"), b1);  // nothing loaded

  // Integer data where the model has float weights.
  const fs::path idir = tmp.path() / "ints";
  fs::create_directories(idir);
  std::vector<int32_t> ints(6, 1);
  std::vector<float> b(3, 2.f), w2(6, 3.f);
  io::SafetensorsWriter w;
  w.add("w1", Tensor(ints.data(), DType::i32, Device::cpu, Shape{2, 3}));
  w.add("b1", Tensor(b.data(), DType::f32, Device::cpu, Shape{3}));
  w.add("w2", Tensor(w2.data(), DType::f32, Device::cpu, Shape{3, 2}));
  w.write((idir / "model.safetensors").string());
  expect_error([&] { load_model_weights_by_role(idir.string(), s, WeightLoadOptions{}); },
               "tensor 'w1' is I32, which cannot load into the model's f32");

  // bf16 weights convert into an f32 model (as the strict load does).
  const fs::path bdir = tmp.path() / "bf16";
  fs::create_directories(bdir);
  std::vector<bf16> wb(6, __float2bfloat16(1.5f));
  io::SafetensorsWriter wbf;
  wbf.add("w1", Tensor(wb.data(), DType::bf16, Device::cpu, Shape{2, 3}));
  wbf.add("b1", Tensor(b.data(), DType::f32, Device::cpu, Shape{3}));
  wbf.add("w2", Tensor(w2.data(), DType::f32, Device::cpu, Shape{3, 2}));
  wbf.write((bdir / "model.safetensors").string());
  load_model_weights_by_role(bdir.string(), s, WeightLoadOptions{});
  EXPECT_EQ(values(s, "w1"), std::vector<float>(6, 1.5f));
}

}  // namespace
}  // namespace attnlab
