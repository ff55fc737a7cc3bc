// train.init_from starts from the finest values its source holds: a bf16 run's checkpoint (bf16
// weights, the fp32 master in optimizer.safetensors) gives the new run the master, so it trains
// exactly as a start from the same weights in fp32 does: on the CPU (an f32 store: the master's
// values become the weights) and in a bf16 CUDA run (the optimizer's master takes them; an f32
// source file gives its values the same way).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "config/recipe.h"
#include "core/cuda_check.h"
#include "core/parameters.h"
#include "interop/convert.h"
#include "interop/foreign_tensors.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "model/gpt.h"
#include "train/checkpoint.h"
#include "train/from_recipe.h"
#include "train/init_from.h"
#include "train/trainer.h"

namespace fs = std::filesystem;
using namespace attnlab;

namespace {

const char* kRecipe = R"(
model: {n_layer: 2, n_head: 2, n_embd: 128, vocab_size: 64, block_size: 32, vocab_multiple: 64}
data:
  source: synthetic
  synthetic: {vocab_size: 64, train_tokens: 8000, val_tokens: 2048, seed: 3}
optim: {lr: 1.0e-3}
train: {steps: 2, micro_batch: 2, seq_len: 16, device: cpu, seed: 4}
eval: {every: 0, at_end: false}
checkpoint: {every: 0, at_end: true}
)";

TrainResult run(const std::string& out_dir, const std::string& init_from = "",
                const std::string& device = "cpu", std::vector<std::string> keys = {}) {
  keys.push_back("train.out_dir=" + out_dir);
  keys.push_back("train.device=" + device);
  if (!init_from.empty()) keys.push_back("train.init_from=" + init_from);
  TrainOptions o;
  o.quiet = true;
  return train(parse_recipe(kRecipe, "exact.yaml", keys), o);
}

// `from`'s checkpoint as a bf16 run writes it: every weight rounded to bf16 in model.safetensors
// and, when with_master, the exact fp32 values as adamw.master (by the optimizer file's layout).
void write_bf16_form(const std::string& from, const std::string& to, bool with_master) {
  fs::copy(from, to, fs::copy_options::recursive);
  const io::SafetensorsFile model((fs::path(from) / "model.safetensors").string());
  std::vector<std::vector<bf16>> rounded;
  io::SafetensorsWriter w;
  for (const std::string& n : model.names()) {
    const Tensor t = model.view(n);
    std::vector<bf16>& r = rounded.emplace_back(size_t(t.numel()));
    for (int64_t i = 0; i < t.numel(); ++i) r[size_t(i)] = __float2bfloat16(t.ptr<float>()[i]);
    w.add(n, Tensor(r.data(), DType::bf16, Device::cpu, t.shape));
  }
  w.set_metadata(model.metadata());
  w.write((fs::path(to) / "model.safetensors").string());
  if (!with_master) return;
  const io::SafetensorsFile opt((fs::path(from) / "optimizer.safetensors").string());
  const ParamLayout layout = ParamLayout::from_json(opt.metadata().at("param_layout"), opt.path());
  std::vector<float> master(size_t(layout.numel), 0.f);
  for (const ParamLayout::Item& item : layout.tensors) {
    const Tensor t = model.view(item.name);
    std::copy(t.ptr<float>(), t.ptr<float>() + t.numel(), master.begin() + item.offset);
  }
  io::SafetensorsWriter o;
  for (const std::string& n : opt.names()) o.add(n, opt.view(n));
  o.add("adamw.master", Tensor(master.data(), DType::f32, Device::cpu, Shape{layout.numel}));
  o.set_metadata(opt.metadata());
  o.write((fs::path(to) / "optimizer.safetensors").string());
}

}  // namespace

TEST(InitFromExact, ABf16RunsMasterIsTheStart) {
  const fs::path dir = fs::temp_directory_path() / ("attnlab_exact_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  run((dir / "a").string());  // an fp32 (CPU) run: exact weights in its model file
  const std::string a = resolve_checkpoint_dir((dir / "a").string());
  write_bf16_form(a, (dir / "bf16").string(), /*with_master=*/true);
  write_bf16_form(a, (dir / "bf16-no-master").string(), /*with_master=*/false);

  for (const std::string device : {"cpu", "cuda"}) {
    if (device == "cuda" && !cuda_available()) continue;
    SCOPED_TRACE(device);  // head dim 64: the CUDA kernels' (bf16)
    const fs::path d = dir / device;
    const TrainResult from_f32 = run((d / "c").string(), a, device);
    const TrainResult from_master = run((d / "d").string(), (dir / "bf16").string(), device);
    const TrainResult from_rounded =
        run((d / "e").string(), (dir / "bf16-no-master").string(), device);
    ASSERT_EQ(from_f32.losses.size(), 2u);
    EXPECT_EQ(from_master.losses, from_f32.losses);  // bitwise: the same start
    // The control: the bf16 weights alone are another start (so the comparison above can fail):
    // on the CPU from the first step; in bf16 on CUDA, whose forward uses the same bf16 weights,
    // from the second (the first update starts from another master).
    EXPECT_NE(from_rounded.losses[device == "cpu" ? 0 : 1],
              from_f32.losses[device == "cpu" ? 0 : 1]);
  }
  fs::remove_all(dir);
}

// The bf16 store's side, on the CPU: load_init_from hands back the f32 values it rounded into the
// store (from an f32 model file), or a bf16 checkpoint's master, for every trainable tensor.
TEST(InitFromExact, ABf16StoreGetsTheValuesItRounds) {
  const fs::path dir =
      fs::temp_directory_path() / ("attnlab_exact_store_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  run((dir / "a").string());
  const std::string a = resolve_checkpoint_dir((dir / "a").string());
  write_bf16_form(a, (dir / "bf16").string(), /*with_master=*/true);
  const io::SafetensorsFile file((fs::path(a) / "model.safetensors").string());
  for (const std::string& source : {a, (dir / "bf16").string()}) {
    SCOPED_TRACE(source);
    const Recipe r = resolve_init_from(
        parse_recipe(kRecipe, "exact.yaml",
                     {"train.out_dir=" + (dir / "x").string(), "train.init_from=" + source}));
    GPT model(gpt_config_of(r));
    ParameterStore store;
    model.declare_params(store);
    store.finalize(Device::cpu, DType::bf16, {ParamRole::base});
    model.init_params(store, 1);
    std::vector<float> exact;
    load_init_from(r, store, &exact);
    ASSERT_EQ(int64_t(exact.size()), store.trainable_buffer_numel());
    int64_t rounded = 0;
    for (const auto& e : store.entries()) {
      const Tensor want = file.view(e.spec.name);
      const float* got = exact.data() + e.offset;
      const std::vector<float> kept = tensor_to_host_f32(store.param(e.spec.name));
      for (int64_t i = 0; i < want.numel(); ++i) {
        ASSERT_EQ(got[i], want.ptr<float>()[i]) << e.spec.name << "[" << i << "]";
        rounded += kept[size_t(i)] != got[i];
      }
    }
    EXPECT_GT(rounded, 0);  // the store holds them rounded: the exact values are not its own
  }
  fs::remove_all(dir);
}

// --resume of an fp32 run's checkpoint (a CPU run, or train.precision fp32) in a bf16 run: the
// master starts from the model file's f32 values, as train.init_from's does (it started from
// their bf16 rounding, up to 2^-8 relative off). On the CPU, load_model_weights hands a bf16
// store those values (and none from a bf16 file); on CUDA the resumed bf16 run trains bitwise as
// a resume of the same checkpoint with those values as its master.
TEST(InitFromExact, AnF32CheckpointResumedInBf16KeepsItsValuesAsMaster) {
  const fs::path dir =
      fs::temp_directory_path() / ("attnlab_exact_resume_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  run((dir / "a").string());
  const std::string a = resolve_checkpoint_dir((dir / "a").string());
  write_bf16_form(a, (dir / "bf16").string(), /*with_master=*/true);
  write_bf16_form(a, (dir / "bf16-no-master").string(), /*with_master=*/false);
  const io::SafetensorsFile file((fs::path(a) / "model.safetensors").string());
  const Recipe r = parse_recipe(kRecipe, "exact.yaml", {});
  for (const std::string& source : {a, (dir / "bf16").string()}) {
    GPT model(gpt_config_of(r));
    ParameterStore store;
    model.declare_params(store);
    store.finalize(Device::cpu, DType::bf16, {ParamRole::base});
    std::vector<float> exact;
    load_model_weights(source, store, &exact);
    if (source != a) {
      EXPECT_TRUE(exact.empty());  // a bf16 file: its master (optimizer file) is the finer one
      continue;
    }
    ASSERT_EQ(int64_t(exact.size()), store.trainable_buffer_numel());
    for (const auto& e : store.entries()) {
      const Tensor want = file.view(e.spec.name);
      for (int64_t i = 0; i < want.numel(); ++i)
        ASSERT_EQ(exact[size_t(e.offset + i)], want.ptr<float>()[i]) << e.spec.name;
    }
  }
  if (cuda_available()) {
    auto resume = [&](const fs::path& from, const std::string& out) {
      const fs::path ckpts = dir / out / "checkpoints";
      fs::create_directories(ckpts);
      fs::copy(from, ckpts / "step_00000002", fs::copy_options::recursive);
      io::write_file_atomic((ckpts / "latest").string(), "step_00000002\n");
      TrainOptions o;
      o.quiet = true;
      o.resume = (dir / out).string();
      return train(parse_recipe(kRecipe, "exact.yaml",
                                {"train.out_dir=" + (dir / out).string(), "train.device=cuda",
                                 "train.precision=bf16", "train.steps=4"}),
                   o);
    };
    const TrainResult from_f32 = resume(a, "rf");
    const TrainResult from_master = resume(dir / "bf16", "rm");
    const TrainResult from_rounded = resume(dir / "bf16-no-master", "rr");
    ASSERT_EQ(from_f32.losses.size(), 2u);
    EXPECT_EQ(from_f32.losses, from_master.losses);         // bitwise: the same master
    EXPECT_NE(from_rounded.losses[1], from_f32.losses[1]);  // the control: another master
  }
  fs::remove_all(dir);
}

// The Hugging Face and llm.c exports of an f32 checkpoint (f32 files both) start the same run as
// the checkpoint itself, bit for bit: no value is lost on the way out and back in.
TEST(InitFromExact, HfAndLlmcExportsStartTheSameRun) {
  const fs::path dir =
      fs::temp_directory_path() / ("attnlab_exact_export_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  run((dir / "a").string());
  const std::string a = resolve_checkpoint_dir((dir / "a").string());
  ConvertOptions hf;
  hf.to = ModelFormat::hf;
  convert_model(a, (dir / "hf").string(), hf);
  ConvertOptions llmc;
  llmc.to = ModelFormat::llmc;
  convert_model(a, (dir / "model.bin").string(), llmc);
  const TrainResult from_a = run((dir / "c").string(), a);
  // (Neither format keeps the padding multiple: the default 128 pads the 64 ids to 128 rows,
  // which no real logit reads.)
  const std::vector<std::string> pad{"model.vocab_multiple=128"};
  const TrainResult from_hf = run((dir / "h").string(), (dir / "hf").string(), "cpu", pad);
  const TrainResult from_llmc = run((dir / "l").string(), (dir / "model.bin").string(), "cpu", pad);
  ASSERT_EQ(from_a.losses.size(), 2u);
  EXPECT_EQ(from_hf.losses, from_a.losses);
  EXPECT_EQ(from_llmc.losses, from_a.losses);
  // The control: another start gives other losses (the comparison can fail).
  EXPECT_NE(run((dir / "x").string()).losses[0], from_a.losses[0]);
  fs::remove_all(dir);
}
