// A whole training step of a small GPT on the GPU against the CPU reference, from identical
// weights and data: logits, loss and every parameter gradient; then 5 AdamW steps on both.
// fp32 (cuBLAS without TF32): 1e-4 relative (max |gpu - cpu| / max |cpu| per tensor).
// bf16: the CPU reference runs on the bf16-rounded weights. The tolerance is derived from a
// same-precision noise run: the CPU gradients when every weight moves by bf16 rounding noise
// (half an ulp, random sign) differ from the unperturbed ones by `noise`; the GPU bf16 run rounds
// weights, activations and gradients to bf16 at every op, so it may differ by kBf16NoiseFactor x
// that (docs/performance.md, "Training step", has the measured numbers).
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/cuda_check.h"
#include "model/gpt.h"
#include "test_util.h"
#include "train/optimizer.h"

using namespace attnlab;

namespace {

constexpr double kBf16NoiseFactor = 8.0;

GPTConfig step_config() {
  GPTConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 128;  // head dim 64
  c.vocab_size = 300;
  c.padded_vocab = 384;
  c.block_size = 64;
  return c;
}
constexpr int kB = 2, kT = 64;

// One model + store on a device.
struct Side {
  std::unique_ptr<ExecContext> ctx;
  std::unique_ptr<GPT> model;
  ParameterStore store;
  Buffer batch;
  Tensor tokens, targets;

  Side(Device dev, DType dt, const GPTConfig& c) {
    ctx = dev == Device::cuda ? ExecContext::make_cuda(0) : ExecContext::make_cpu();
    model = std::make_unique<GPT>(c);
    model->declare_params(store);
    store.finalize(dev, dt, {ParamRole::base, ParamRole::attention});
    model->allocate(*ctx, kB, kT, dt);
    batch = Buffer(dev, size_t(2 * kB * kT) * 4);
    tokens = batch.as(DType::i32, Shape{kB, kT});
    targets = batch.as(DType::i32, Shape{kB, kT}, size_t(kB * kT) * 4);
  }
  // Sets the weights from host f32 values (rounded for bf16 stores).
  void set_weights(const std::vector<float>& w) {
    Tensor all = store.all_params();
    if (all.dtype == DType::f32) {
      copy_tensor(all, Tensor(const_cast<float*>(w.data()), DType::f32, Device::cpu, all.shape));
      return;
    }
    std::vector<bf16> h(w.size());
    for (size_t i = 0; i < w.size(); ++i) h[i] = __float2bfloat16(w[i]);
    copy_tensor(all, Tensor(h.data(), DType::bf16, Device::cpu, all.shape));
  }
  void set_batch(std::vector<int32_t>& tok, std::vector<int32_t>& tgt) {
    copy_tensor(tokens, test::cpu_tensor(tok, Shape{kB, kT}));
    copy_tensor(targets, test::cpu_tensor(tgt, Shape{kB, kT}));
  }
  // Host f32 copy of a tensor on this side.
  static std::vector<float> host(const Tensor& t) {
    std::vector<float> out(size_t(t.numel()));
    if (t.dtype == DType::f32) {
      copy_tensor(Tensor(out.data(), DType::f32, Device::cpu, t.shape), t);
    } else {
      std::vector<bf16> h(out.size());
      copy_tensor(Tensor(h.data(), DType::bf16, Device::cpu, t.shape), t);
      for (size_t i = 0; i < h.size(); ++i) out[i] = __bfloat162float(h[i]);
    }
    return out;
  }
  // The loss totals come from the device-side reduction (GPT::take_loss).
  LossTotals logits_pass() {
    model->forward(*ctx, store, tokens, targets, AttentionMode::eval);
    return model->take_loss(*ctx);
  }
  LossTotals train_pass(float dloss) {
    store.zero_grads();
    model->forward(*ctx, store, tokens, targets, AttentionMode::train, dloss);
    model->backward(*ctx, store, tokens);
    return model->take_loss(*ctx);
  }
  std::map<std::string, std::vector<float>> grads() const {
    std::map<std::string, std::vector<float>> g;
    for (const auto& e : store.entries()) g[e.spec.name] = host(store.grad(e.spec.name));
    return g;
  }
};

std::vector<float> initial_weights(int64_t n, const GPTConfig& c) {
  Side cpu(Device::cpu, DType::f32, c);
  cpu.model->init_params(cpu.store, 1234);
  std::vector<float> w = Side::host(cpu.store.all_params());
  // Small noise everywhere (biases and LayerNorm parameters away from 0 and 1) except the
  // vocabulary padding rows, which stay zero.
  std::vector<float> noise = test::random_vector(size_t(n), 99, -0.02f, 0.02f);
  auto padding = [&](int64_t i) {
    for (const char* name : {"wte.weight", "lm_head.weight"}) {
      if (!cpu.store.contains(name)) continue;
      const int64_t off = cpu.store.entry(name).offset;
      if (i >= off + int64_t(c.vocab_size) * c.n_embd &&
          i < off + int64_t(c.padded_vocab) * c.n_embd)
        return true;
    }
    return false;
  };
  for (int64_t i = 0; i < n; ++i)
    if (!padding(i)) w[size_t(i)] += noise[size_t(i)];
  return w;
}

struct Batch {
  std::vector<int32_t> tok, tgt;
  int64_t valid = 0;
};
Batch make_batch(uint32_t seed) {
  Batch b;
  b.tok = test::random_ints(size_t(kB * kT), seed, 300);
  b.tgt = test::random_ints(size_t(kB * kT), seed + 1, 300);
  b.tgt[3] = GPT::kIgnoreIndex;
  b.tgt[kT + 17] = GPT::kIgnoreIndex;
  for (int32_t t : b.tgt) b.valid += t != GPT::kIgnoreIndex;
  return b;
}

// max over tensors of the per-tensor relative error, with the worst tensor's name.
std::pair<double, std::string> worst_grad_error(
    const std::map<std::string, std::vector<float>>& a,
    const std::map<std::string, std::vector<float>>& ref, bool verbose) {
  double worst = 0.0;
  std::string name;
  for (const auto& [n, r] : ref) {
    double e = test::max_rel_error(a.at(n), r);
    if (verbose) std::printf("    %-28s rel err %.3e\n", n.c_str(), e);
    if (e > worst || name.empty()) worst = e, name = n;
  }
  return {worst, name};
}

void step_check(DType dt, const GPTConfig& c = step_config()) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Side cpu(Device::cpu, DType::f32, c), gpu(Device::cuda, dt, c);
  // Same declaration order and roles: the flat layouts must agree entry by entry.
  ASSERT_EQ(cpu.store.entries().size(), gpu.store.entries().size());
  for (size_t i = 0; i < cpu.store.entries().size(); ++i)
    ASSERT_EQ(cpu.store.entries()[i].offset, gpu.store.entries()[i].offset);
  std::vector<float> w = initial_weights(cpu.store.param_buffer_numel(), c);
  if (dt == DType::bf16)  // the reference sees exactly the weights the GPU sees
    for (float& x : w) x = __bfloat162float(__float2bfloat16(x));
  cpu.set_weights(w);
  gpu.set_weights(w);
  Batch b = make_batch(7);
  cpu.set_batch(b.tok, b.tgt);
  gpu.set_batch(b.tok, b.tgt);
  const float dloss = float(1.0 / double(b.valid));

  LossTotals fc = cpu.logits_pass(), fg = gpu.logits_pass();
  std::vector<float> lc = Side::host(cpu.model->logits()), lg = Side::host(gpu.model->logits());
  const double logit_err = test::max_rel_error(lg, lc);
  const double loss_err = std::fabs(fg.mean() - fc.mean()) / fc.mean();
  ASSERT_EQ(fc.valid, b.valid);
  ASSERT_EQ(fg.valid, b.valid);
  cpu.train_pass(dloss);
  gpu.train_pass(dloss);
  auto gc = cpu.grads(), gg = gpu.grads();
  const bool bf = dt == DType::bf16;
  auto [gerr, gname] = worst_grad_error(gg, gc, true);
  std::printf("[%s] loss cpu %.6f gpu %.6f (rel %.2e) | logits rel %.2e | worst grad %s rel %.2e\n",
              dtype_name(dt), fc.mean(), fg.mean(), loss_err, logit_err, gname.c_str(), gerr);

  double tol_logits = 1e-4, tol_loss = 1e-5, tol_grad = 1e-4;
  if (bf) {
    // Same-precision noise: perturb every weight by half a bf16 ulp (random sign) on the CPU.
    Side noisy(Device::cpu, DType::f32, c);
    std::vector<float> wn = w;
    std::mt19937 rng(5);
    for (float& x : wn) {
      float ulp = std::ldexp(1.f, std::ilogb(x == 0.f ? 1e-30f : x) - 7);
      x += ((rng() & 1u) ? 0.5f : -0.5f) * ulp;
    }
    noisy.set_weights(wn);
    noisy.set_batch(b.tok, b.tgt);
    LossTotals fn = noisy.logits_pass();
    const double logit_noise = test::max_rel_error(Side::host(noisy.model->logits()), lc);
    const double loss_noise = std::max(std::fabs(fn.mean() - fc.mean()) / fc.mean(), 1e-7);
    noisy.train_pass(dloss);
    auto [gnoise, nname] = worst_grad_error(noisy.grads(), gc, false);
    std::printf("[bf16] same-precision noise: logits %.2e loss %.2e grads %.2e (%s); factor %.0f\n",
                logit_noise, loss_noise, gnoise, nname.c_str(), kBf16NoiseFactor);
    tol_logits = kBf16NoiseFactor * logit_noise;
    tol_loss = kBf16NoiseFactor * std::max(loss_noise, logit_noise / 10);
    tol_grad = kBf16NoiseFactor * gnoise;
  }
  EXPECT_LE(logit_err, tol_logits);
  EXPECT_LE(loss_err, tol_loss);
  for (const auto& [n, r] : gc) {
    double e = test::max_rel_error(gg.at(n), r);
    EXPECT_LE(e, tol_grad) << n;
  }

  // 5 AdamW steps from the same weights, a new batch every step; the losses must agree.
  AdamWConfig oc;
  oc.lr = 3e-3f;
  oc.weight_decay = 0.1f;
  AdamW oc_cpu(*cpu.ctx, cpu.store, oc), oc_gpu(*gpu.ctx, gpu.store, oc);
  double worst_loss = 0.0;
  for (int step = 1; step <= 5; ++step) {
    Batch sb = make_batch(100 + uint32_t(step));
    cpu.set_batch(sb.tok, sb.tgt);
    gpu.set_batch(sb.tok, sb.tgt);
    const float dl = float(1.0 / double(sb.valid));
    LossTotals a = cpu.train_pass(dl), g = gpu.train_pass(dl);
    StepStats sc = oc_cpu.step(oc.lr, step);
    StepStats sg = oc_gpu.step(oc.lr, step);
    gpu.ctx->synchronize();
    ASSERT_TRUE(sc.finite && sg.finite)
        << "step " << step << ": grad norm cpu " << sc.grad_norm << " gpu " << sg.grad_norm;
    EXPECT_NEAR(sg.grad_norm, sc.grad_norm, (bf ? 2e-2 : 1e-4) * sc.grad_norm) << "step " << step;
    if (step == 1) {
      // Diagnostics: the update of each tensor on both sides after the first step.
      std::printf("[%s] step 1 grad norm cpu %.6e gpu %.6e clip %.6f / %.6f\n", dtype_name(dt),
                  sc.grad_norm, sg.grad_norm, sc.clip_scale, sg.clip_scale);
      for (const auto& e : cpu.store.entries()) {
        double err = test::max_rel_error(Side::host(gpu.store.param(e.spec.name)),
                                         Side::host(cpu.store.param(e.spec.name)));
        if (err > 1e-4)
          std::printf("    after step 1: %-28s param rel err %.3e\n", e.spec.name.c_str(), err);
      }
    }
    const double rel = std::fabs(g.mean() - a.mean()) / a.mean();
    worst_loss = std::max(worst_loss, rel);
    std::printf("[%s] adamw step %d loss cpu %.6f gpu %.6f rel %.2e\n", dtype_name(dt), step,
                a.mean(), g.mean(), rel);
  }
  // Later steps add the divergence of the weights (bf16 master rounding): allow 4x the one-step
  // tolerance for bf16, and 1e-4 for fp32.
  EXPECT_LE(worst_loss, bf ? 4 * tol_loss : 1e-4);
}

}  // namespace

TEST(GPTCuda, TrainingStepF32) { step_check(DType::f32); }
TEST(GPTCuda, TrainingStepBF16) { step_check(DType::bf16); }

// The other block configurations on the GPU: grouped-query attention, a sliding window shorter
// than the sequence, no biases, an untied head (head dim 64 for the bf16 tensor-core kernels).
GPTConfig variant_config() {
  GPTConfig c = step_config();
  c.n_head = 2;
  c.n_kv_head = 1;
  c.attention.window = 24;
  c.bias = false;
  c.tied_embeddings = false;
  return c;
}
TEST(GPTCuda, TrainingStepGqaWindowNoBiasUntiedF32) { step_check(DType::f32, variant_config()); }
TEST(GPTCuda, TrainingStepGqaWindowNoBiasUntiedBF16) { step_check(DType::bf16, variant_config()); }

// The LLaMA block on the GPU (RMSNorm, SwiGLU, RoPE, grouped-query attention, no biases, an untied
// head): a whole training step against the CPU reference, as above.
GPTConfig llama_config() {
  GPTConfig c = step_config();
  c.n_head = 2;
  c.n_kv_head = 1;
  c.norm = NormType::rmsnorm;
  c.mlp = MlpType::swiglu;
  c.position = PositionType::rope;
  c.rope_theta = 1000.f;
  c.bias = false;
  c.tied_embeddings = false;
  return c;
}
TEST(GPTCuda, TrainingStepLlamaBlockF32) { step_check(DType::f32, llama_config()); }
TEST(GPTCuda, TrainingStepLlamaBlockBF16) { step_check(DType::bf16, llama_config()); }

// The LLaMA block with LLaMA 3.1's RoPE scaling (a short original context, so that most
// frequencies are scaled within the 64 tokens) and Focus attention (local window 8: most pairs
// distant, gated by the groups): the model's whole GPU path for a retrofitted LLaMA 3.1.
GPTConfig llama_scaled_focus_config() {
  GPTConfig c = llama_config();
  c.rope_scaling.type = RopeScalingType::llama3;
  c.rope_scaling.factor = 8.f;
  c.rope_scaling.original_context = 16;
  c.attention.type = "focus";
  c.attention.focus.local_window = 8;
  c.attention.focus.groups = 4;
  return c;
}
TEST(GPTCuda, TrainingStepLlamaBlockScaledRopeFocusF32) {
  step_check(DType::f32, llama_scaled_focus_config());
}
TEST(GPTCuda, TrainingStepLlamaBlockScaledRopeFocusBF16) {
  step_check(DType::bf16, llama_scaled_focus_config());
}
