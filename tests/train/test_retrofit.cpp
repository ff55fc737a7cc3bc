// Retrofit (docs/retrofit.md): the recipe's refusals, a frozen base that stays bit-identical, the
// backward's skipped products (counted), adapters (written per checkpoint, applied on the base,
// refused on another base), zero degradation by construction (hard routing over every group).
// The LoRA retrofit and adapters across a converted base: test_retrofit_lora.cpp.
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

namespace {

using test::focus_retrofit;
using test::quiet;
using test::thrown_message;
using test::tiny;

// A store for `cfg` where exactly the tensors for which keep(name) holds are trainable: every
// other tensor is declared with role base and the store trains only role attention.
void declare_trainable_subset(const GPT& model, ParameterStore& store,
                              const std::function<bool(const std::string&)>& keep) {
  ParameterStore all;
  model.declare_params(all);
  for (auto e : all.entries()) {
    e.spec.role = keep(e.spec.name) ? ParamRole::attention : ParamRole::base;
    store.declare(e.spec);
  }
  store.finalize(Device::cpu, DType::f32, {ParamRole::attention});
}

}  // namespace

TEST(Retrofit, RecipeErrorsNameTheBaseAndTheWayOut) {
  const test::TempDir tmp("rf");
  // A base that does not exist.
  EXPECT_HAS(thrown_message(
                 [&] { train(tiny(tmp.file("r1"), focus_retrofit(tmp.file("nope"))), quiet()); }),
             "retrofit.checkpoint: ");
  const std::string base = tmp.file("base");
  train(tiny(base, {"checkpoint.at_end=true"}), quiet());
  // A base of another architecture than the recipe gives.
  std::vector<std::string> other = focus_retrofit(base);
  other.push_back("model.n_layer=3");
  const std::string arch = thrown_message([&] { train(tiny(tmp.file("r2"), other), quiet()); });
  EXPECT_HAS(arch, "retrofit.checkpoint '" + base);
  EXPECT_HAS(arch, "n_layer");
  // Dense attention has no attention-role tensor: nothing would train.
  const std::string none = thrown_message([&] {
    train(tiny(tmp.file("r3"), {"retrofit.enabled=true", "retrofit.checkpoint=" + base}), quiet());
  });
  EXPECT_HAS(none,
             "retrofit.train_roles [attention] selects no parameter of this model "
             "(attention.type 'dense', no retrofit.lora)");
  // A windowed dense base cannot take Focus at all: the message says so (no key would help).
  const std::string windowed = tmp.file("windowed");
  train(tiny(windowed, {"checkpoint.at_end=true", "attention.window=8"}), quiet());
  EXPECT_HAS(
      thrown_message([&] { train(tiny(tmp.file("r5"), focus_retrofit(windowed)), quiet()); }),
      "a base trained with attention.window 8 cannot take attention.type focus");
  // retrofit.checkpoint without retrofit.enabled would be ignored (a random model would train).
  EXPECT_HAS(thrown_message([&] { tiny(tmp.file("r4"), {"retrofit.checkpoint=" + base}); }),
             "retrofit.checkpoint ('" + base + "') is set but retrofit.enabled is false");
  // A resume keeps what trains: another train_roles or retrofit.enabled is refused by name.
  const std::string rf = tmp.file("rf");
  std::vector<std::string> every2 = focus_retrofit(base);
  every2.push_back("checkpoint.every=2");
  train(tiny(rf, every2), quiet());
  TrainOptions o = quiet();
  o.resume = rf + "/checkpoints/step_00000002";
  std::vector<std::string> roles = every2;
  roles.push_back("retrofit.train_roles=[attention,base]");
  EXPECT_HAS(
      thrown_message([&] { train(tiny(rf, roles), o); }),
      "retrofit.train_roles: [attention, base] in the recipe, [attention] in the checkpoint");
  // The same roles in another order (or repeated) are the same run: resumed.
  std::vector<std::string> both = every2;
  both.push_back("retrofit.train_roles=[base,attention]");
  const std::string rf_both = tmp.file("rf_both");
  train(tiny(rf_both, both), quiet());
  o.resume = rf_both + "/checkpoints/step_00000002";
  both.back() = "retrofit.train_roles=[attention,base,attention]";
  EXPECT_EQ(train(tiny(rf_both, both), o).steps, 4);
  // Focus tensors the base lacks, left frozen by the roles (a LoRA trains), would stay random.
  std::vector<std::string> lora_only = focus_retrofit(base);
  lora_only.insert(lora_only.end(), {"retrofit.lora.rank=2", "retrofit.train_roles=[adapter]"});
  EXPECT_HAS(thrown_message([&] { train(tiny(tmp.file("r6"), lora_only), quiet()); }),
             "retrofit: 4 parameter(s) are not in the base '" + base +
                 "' and retrofit.train_roles [adapter] leaves them frozen at their random "
                 "initialisation: h.0.attn.focus.w_g, h.0.attn.focus.centroids, "
                 "h.1.attn.focus.w_g, h.1.attn.focus.centroids (role attention); add attention");
}

// A Focus retrofit of a dense run: only the centroid parameters change, the checkpoint carries an
// adapter that rebuilds the retrofit model on the base, and the adapter refuses another base.
TEST(Retrofit, FocusRetrofitFreezesTheBaseAndItsAdapterAppliesOnlyToThatBase) {
  const test::TempDir tmp("rf");
  const std::string base = tmp.file("base"), other = tmp.file("other"), rf = tmp.file("rf");
  train(tiny(base, {"checkpoint.at_end=true"}), quiet());
  train(tiny(other, {"checkpoint.at_end=true", "train.seed=12"}), quiet());
  const TrainResult res = train(tiny(rf,
                                     [&] {
                                       auto v = focus_retrofit(base);
                                       v.push_back("checkpoint.at_end=true");
                                       return v;
                                     }()),
                                quiet());
  EXPECT_TRUE(std::isfinite(res.final_train_loss));
  const std::string rf_ckpt = resolve_checkpoint_dir(rf), base_ckpt = resolve_checkpoint_dir(base);
  io::SafetensorsFile rm((fs::path(rf_ckpt) / "model.safetensors").string());
  io::SafetensorsFile bm((fs::path(base_ckpt) / "model.safetensors").string());
  int base_tensors = 0, focus_tensors = 0;
  for (const std::string& n : rm.names()) {
    if (bm.contains(n)) {
      const auto a = rm.raw(n), b = bm.raw(n);
      ASSERT_EQ(a.size(), b.size()) << n;
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0) << n << " changed";
      ++base_tensors;
    } else {
      EXPECT_NE(n.find(".attn.focus."), std::string::npos) << n;
      ++focus_tensors;
    }
  }
  EXPECT_GT(base_tensors, 10);
  EXPECT_EQ(focus_tensors, 4);  // W_g and C per layer

  const std::string adapter = (fs::path(rf_ckpt) / kAdapterFileName).string();
  io::SafetensorsFile af(adapter);
  EXPECT_EQ(af.names().size(), 4u);
  EXPECT_EQ(af.metadata().at("format"), "attnlab-adapter");
  EXPECT_EQ(af.metadata().at("focus.groups"), "4");
  EXPECT_EQ(af.metadata().at("focus.d_g"), "8");
  EXPECT_EQ(af.metadata().at("base_hash").size(), 16u);

  // Applied on its base, the adapter gives the retrofit checkpoint's model, tensor for tensor.
  const ModelSource src = with_adapter(inspect_model_source(base), adapter);
  EXPECT_EQ(src.config.attention.type, "focus");
  GPT model(src.config);
  ParameterStore store;
  model.declare_params(store);
  store.finalize(Device::cpu, DType::f32, {ParamRole::base});
  load_model_source(src, store);
  for (const std::string& n : rm.names()) {
    const auto a = rm.raw(n);
    EXPECT_EQ(std::memcmp(a.data(), store.param(n).data, a.size()), 0) << n;
  }
  // On another base of the same shape: refused by the hash.
  const ModelSource wrong = with_adapter(inspect_model_source(other), adapter);
  ParameterStore store2;
  model.declare_params(store2);
  store2.finalize(Device::cpu, DType::f32, {ParamRole::base});
  EXPECT_HAS(
      thrown_message([&] { load_model_source(wrong, store2); }),
      "was trained on another base model: its base hash is " + af.metadata().at("base_hash"));
  // A base of another architecture: refused naming the keys.
  const std::string wide = tmp.file("wide");
  train(tiny(wide, {"checkpoint.at_end=true", "model.n_embd=64"}), quiet());
  EXPECT_HAS(thrown_message([&] { with_adapter(inspect_model_source(wide), adapter); }),
             "model.n_embd: 32 in the adapter's model, 64 in the base");
  // The default precision of eval / generate on CUDA is the adapter's run's (its
  // trainer_state.json), not the base's: both CPU runs here (fp32), then the retrofit's made bf16.
  EXPECT_EQ(source_precision(src), Precision::fp32);
  const fs::path state = fs::path(rf_ckpt) / "trainer_state.json";
  std::string js = io::read_file(state.string());
  const size_t at = js.find("\"f32\"");
  ASSERT_NE(at, std::string::npos) << js;
  io::write_file_atomic(state.string(), js.replace(at, 5, "\"bf16\""));
  EXPECT_EQ(source_precision(src), Precision::bf16);
  EXPECT_EQ(source_precision(inspect_model_source(base)), Precision::fp32);
}

// The frozen base costs no weight-gradient product, and below the lowest trainable tensor no
// data-gradient product either (counted): with only layer 1's Focus parameters trainable, layer
// 0 runs nothing and layer 1 stops after its attention; the gradients are those of the fully
// trainable model.
TEST(Retrofit, FrozenBaseSkipsEveryProductNoTrainableTensorNeeds) {
  GPTConfig c = test::tiny_gpt_config();
  c.attention.type = "focus";
  c.attention.focus.groups = 3;
  c.attention.focus.d_g = 4;
  c.attention.focus.local_window = 2;
  c.attention.focus.top_k = 1;
  test::ModelFixture full(c, 2, 6);
  auto counts_of = [&](const std::function<bool(const std::string&)>& keep, MatmulCounts& n,
                       ParameterStore& store) {
    GPT model(c);
    declare_trainable_subset(model, store, keep);
    for (const auto& e : store.entries())
      copy_tensor(store.param(e.spec.name), full.store.param(e.spec.name));
    model.allocate(*full.ctx, full.B, full.T, DType::f32);
    full.ctx->matmul_counts = &n;
    store.zero_grads();
    model.forward(*full.ctx, store, full.t(full.tokens), full.t(full.targets), AttentionMode::train,
                  1.f / float(full.B * full.T));
    model.backward(*full.ctx, store, full.t(full.tokens));
    full.ctx->matmul_counts = nullptr;
  };
  const auto is_focus = [](const std::string& n) {
    return n.find(".attn.focus.") != std::string::npos;
  };
  MatmulCounts all, both, top;
  ParameterStore s_all, s_both, s_top;
  counts_of([](const std::string&) { return true; }, all, s_all);
  counts_of(is_focus, both, s_both);
  counts_of([&](const std::string& n) { return is_focus(n) && n.rfind("h.1.", 0) == 0; }, top,
            s_top);
  // Each Focus layer runs one product of its own (h W_g: dW_g of a trainable tensor, and its dx
  // into h, which the module computes whenever it runs); the rest are the base's.
  const int L = c.n_layer;
  EXPECT_EQ(all.weight_grad, 4 * L + 1 + L);
  EXPECT_EQ(all.data_grad, 4 * L + 1 + L);       // the head, four per layer, Focus's
  EXPECT_EQ(both.weight_grad, L);                // W_g only: no base weight-gradient product
  EXPECT_EQ(both.data_grad, 4 * L + 1 + L - 1);  // layer 0's q/k/v dx (into ln_1) skipped
  EXPECT_EQ(top.weight_grad, 1);                 // layer 1's W_g
  // The head, layer 1's mlp proj, fc and attention proj, and its Focus product; nothing of
  // layer 0.
  EXPECT_EQ(top.data_grad, 1 + 3 + 1);
  int compared = 0;
  for (const auto& e : s_top.entries()) {
    if (!e.trainable) continue;
    const Tensor a = s_all.grad(e.spec.name), b = s_top.grad(e.spec.name);
    for (int64_t i = 0; i < a.numel(); ++i)
      ASSERT_EQ(a.ptr<float>()[i], b.ptr<float>()[i]) << e.spec.name << "[" << i << "]";
    ++compared;
  }
  EXPECT_EQ(compared, 2);
}

// Zero degradation by construction: a Focus model on a dense model's weights whose hard routing
// keeps every group (top_k = K), or whose local window covers the sequence, sees every pair as
// dense attention does. Measured: the logits agree to the bound below (see docs/retrofit.md).
TEST(Retrofit, HardRoutingOverEveryGroupEqualsTheDenseBase) {
  GPTConfig dense = test::tiny_gpt_config();
  test::ModelFixture base(dense, 2, 8, {ParamRole::base});
  base.model.forward(*base.ctx, base.store, base.t(base.tokens), Tensor(), AttentionMode::eval);
  const Tensor ref = base.model.logits();
  for (int variant = 0; variant < 2; ++variant) {
    GPTConfig c = dense;
    c.attention.type = "focus";
    c.attention.focus.groups = 3;
    c.attention.focus.d_g = 4;
    c.attention.focus.top_k = variant == 0 ? 3 : 1;         // every group, or
    c.attention.focus.local_window = variant == 0 ? 1 : 8;  // a window over the whole sequence
    c.attention.focus.eval_routing = FocusOptions::Routing::hard;
    GPT model(c);
    ParameterStore store;
    model.declare_params(store);
    store.finalize(Device::cpu, DType::f32, {ParamRole::attention});
    model.init_params(store, 7);
    for (const auto& e : base.store.entries())
      copy_tensor(store.param(e.spec.name), base.store.param(e.spec.name));
    model.allocate(*base.ctx, base.B, base.T, DType::f32);
    model.forward(*base.ctx, store, base.t(base.tokens), Tensor(), AttentionMode::eval);
    const Tensor got = model.logits();
    double worst = 0.0;
    int64_t identical = 0;
    for (int64_t i = 0; i < ref.numel(); ++i) {
      worst = std::max(worst, double(std::fabs(got.ptr<float>()[i] - ref.ptr<float>()[i])));
      identical += got.ptr<float>()[i] == ref.ptr<float>()[i];
    }
    std::printf("[zero degradation] %s: max |logit diff| %.3g, %lld of %lld bitwise equal\n",
                variant == 0 ? "top_k = K" : "local_window >= T", worst, (long long)identical,
                (long long)ref.numel());
    // Such routing runs the dense op (FocusAttention::attends_every_pair): bitwise the base.
    EXPECT_EQ(identical, ref.numel()) << (variant == 0 ? "top_k = K" : "local_window >= T");
  }
}

// The Focus retrofit of a LLaMA-family base given as a Hugging Face LlamaForCausalLM directory
// (RMSNorm, SwiGLU, RoPE, GQA 2:1): the base weights stay bitwise, only W_g and C are added, and
// hard routing over every group gives the base's logits bitwise (zero degradation on the LLaMA
// block too).
TEST(Retrofit, FocusOnAHuggingFaceLlamaBase) {
  const test::TempDir tmp("rfllama");
  const std::string base = tmp.file("base"), hf = tmp.file("hf"), rf = tmp.file("rf");
  train(tiny(base, {"checkpoint.at_end=true", "model.family=llama", "model.n_kv_head=1"}), quiet());
  ConvertOptions co;
  co.to = ModelFormat::hf;
  convert_model(base, hf, co);
  EXPECT_HAS(io::read_file(hf + "/config.json"), "LlamaForCausalLM");
  std::vector<std::string> keys = focus_retrofit(hf);
  keys.push_back("checkpoint.at_end=true");
  keys.push_back("model.vocab_multiple=128");  // the Hugging Face copy's padding
  const TrainResult res = train(tiny(rf, keys), quiet());
  EXPECT_TRUE(std::isfinite(res.final_train_loss));

  const ModelSource hs = inspect_model_source(hf), rs = inspect_model_source(rf);
  EXPECT_EQ(rs.config.norm, NormType::rmsnorm);
  EXPECT_EQ(rs.config.n_kv_head, 1);
  auto load = [](const GPTConfig& c, const ModelSource& src, ParameterStore& store) {
    GPT(c).declare_params(store);
    store.finalize(Device::cpu, DType::f32, {});
    load_model_source(src, store);
  };
  ParameterStore hstore, rstore;
  load(hs.config, hs, hstore);
  load(rs.config, rs, rstore);
  int focus_tensors = 0;
  for (const auto& e : rstore.entries()) {
    if (e.spec.name.find(".attn.focus.") != std::string::npos) {
      ++focus_tensors;
      continue;
    }
    const Tensor a = rstore.param(e.spec.name), b = hstore.param(e.spec.name);
    ASSERT_EQ(a.numel(), b.numel()) << e.spec.name;
    EXPECT_EQ(std::memcmp(a.data, b.data, size_t(a.numel()) * sizeof(float)), 0)
        << e.spec.name << " changed";
  }
  EXPECT_EQ(focus_tensors, 4);

  GPTConfig every = rs.config;  // hard routing over all 4 groups
  every.attention.focus.top_k = every.attention.focus.groups;
  every.attention.focus.eval_routing = FocusOptions::Routing::hard;
  const auto ctx = ExecContext::make_cpu();
  std::vector<int32_t> ids = test::random_ints(2 * 16, 5, 64);
  auto logits = [&](const GPTConfig& c, const ParameterStore& store) {
    GPT model(c);
    model.allocate(*ctx, 2, 16, DType::f32);
    model.forward(*ctx, store, test::cpu_tensor(ids, Shape{2, 16}), Tensor(), AttentionMode::eval);
    const Tensor l = model.logits();
    return std::vector<float>(l.ptr<float>(), l.ptr<float>() + l.numel());
  };
  EXPECT_EQ(logits(every, rstore), logits(hs.config, hstore));
}
