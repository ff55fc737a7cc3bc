// LoRA on the GPU (nn/lora.h) against the CPU reference, skipped without a GPU (and, with the
// same harness, the zero degradation of a Focus retrofit: hard routing over every group or a
// band over the whole sequence gives the dense base model's logits bitwise):
// - the scaled products (ops::matmul_scaled_*) at LoRA shapes (r = 4 and 16, bf16 rows of 8 and
//   32 bytes): fp32 1e-5, bf16 1e-2 of the CPU reference on the rounded inputs (the bounds of
//   cuda_test_util.h);
// - a training step of a 2-layer model with LoRA (rank 4, alpha 8): logits, loss and every
//   gradient vs the CPU f32 model; fp32 within 1e-4 (as test_gpt_cuda.cpp); bf16: the LoRA
//   gradients within kNoiseFactor x the error of the same run's own c_attn.weight gradient (the
//   same dqkv flows into both, so that error is the same-precision noise of this chain), the
//   logits and loss within kNoiseFactor x the bf16 error of the same model without its LoRA;
// - B = 0 equal to the base model bitwise (alpha * 0 + 1 * y = y in cuBLASLt's epilogue);
// - the merged model (W + alpha/r B A, merged on the host) equal to the unmerged one: fp32 1e-5;
//   bf16 within kNoiseFactor x the unmerged bf16 run's own error against the CPU f32 logits (each
//   of the two differs from the exact logits by about that noise).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "model/gpt.h"
#include "nn/lora.h"
#include "ops/ops.h"
#include "train/retrofit.h"

using namespace attnlab;

namespace {

constexpr double kNoiseFactor = 4.0;
constexpr int kB = 2, kT = 64;

GPTConfig lora_gpt(int rank) {
  GPTConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 128;  // head dim 64
  c.vocab_size = 300;
  c.padded_vocab = 384;
  c.block_size = 64;
  c.lora.rank = rank;
  c.lora.alpha = 8.f;
  return c;
}

std::vector<float> host(const Tensor& t) {
  std::vector<float> out(size_t(t.numel()));
  if (t.dtype == DType::f32) {
    copy_tensor(Tensor(out.data(), DType::f32, Device::cpu, t.shape), t);
    return out;
  }
  std::vector<bf16> h(out.size());
  copy_tensor(Tensor(h.data(), DType::bf16, Device::cpu, t.shape), t);
  for (size_t i = 0; i < h.size(); ++i) out[i] = __bfloat162float(h[i]);
  return out;
}

void set(const Tensor& t, const std::vector<float>& v) {
  if (t.dtype == DType::f32) {
    copy_tensor(t, Tensor(const_cast<float*>(v.data()), DType::f32, Device::cpu, t.shape));
    return;
  }
  std::vector<bf16> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = __float2bfloat16(v[i]);
  copy_tensor(t, Tensor(h.data(), DType::bf16, Device::cpu, t.shape));
}

// One model on a device with weights given per tensor name (host f32, rounded for bf16).
struct LoraRun {
  std::unique_ptr<ExecContext> ctx;
  GPTConfig cfg;
  std::unique_ptr<GPT> model;
  ParameterStore store;
  Buffer batch;
  Tensor tokens, targets;

  LoraRun(Device dev, DType dt, const GPTConfig& c, const std::set<ParamRole>& trainable)
      : ctx(dev == Device::cuda ? ExecContext::make_cuda(0) : ExecContext::make_cpu()), cfg(c) {
    model = std::make_unique<GPT>(c);
    model->declare_params(store);
    store.finalize(dev, dt, trainable);
    model->allocate(*ctx, kB, kT, dt);
    batch = Buffer(dev, size_t(2 * kB * kT) * 4);
    tokens = batch.as(DType::i32, Shape{kB, kT});
    targets = batch.as(DType::i32, Shape{kB, kT}, size_t(kB * kT) * 4);
    std::vector<int32_t> tok(kB * kT), tgt(kB * kT);
    for (int i = 0; i < kB * kT; ++i) tok[size_t(i)] = (i * 37 + 11) % c.vocab_size;
    for (int i = 0; i < kB * kT; ++i) tgt[size_t(i)] = (i * 53 + 7) % c.vocab_size;
    copy_tensor(tokens, test::cpu_tensor(tok, Shape{kB, kT}));
    copy_tensor(targets, test::cpu_tensor(tgt, Shape{kB, kT}));
  }
  void set_weights(const ParameterStore& from) {
    for (const auto& e : store.entries())
      set(store.param(e.spec.name), host(from.param(e.spec.name)));
  }
  std::vector<float> logits() {
    model->forward(*ctx, store, tokens, targets, AttentionMode::eval);
    model->take_loss(*ctx);
    return host(model->logits());
  }
  double train_step() {
    store.zero_grads();
    model->forward(*ctx, store, tokens, targets, AttentionMode::train, 1.f / float(kB * kT));
    model->backward(*ctx, store, tokens);
    return model->take_loss(*ctx).mean();
  }
};

// The CPU f32 reference with GPT-2 init plus noise everywhere (B nonzero), padding rows zero.
std::unique_ptr<LoraRun> reference(const GPTConfig& c, const std::set<ParamRole>& trainable) {
  auto r = std::make_unique<LoraRun>(Device::cpu, DType::f32, c, trainable);
  r->model->init_params(r->store, 1234);
  uint32_t seed = 1;
  for (const auto& e : r->store.entries()) {
    std::vector<float> w = host(r->store.param(e.spec.name));
    const std::vector<float> n = test::random_vector(w.size(), seed++, -0.05f, 0.05f);
    for (size_t i = 0; i < w.size(); ++i) w[i] += n[i];
    if (e.spec.name == "wte.weight")
      std::fill(w.begin() + int64_t(c.vocab_size) * c.n_embd, w.end(), 0.f);
    set(r->store.param(e.spec.name), w);
  }
  return r;
}

template <typename T>
void check_scaled_matmul(int64_t N, int64_t in, int64_t out, float s) {
  const DType dt = dtype_of<T>();
  auto gpu = ExecContext::make_cuda(0);
  auto cpu = ExecContext::make_cpu();
  auto x = test::to_precision<T>(test::random_vector(size_t(N * in), 1));
  auto w = test::to_precision<T>(test::random_vector(size_t(out * in), 2));
  auto y0 = test::to_precision<T>(test::random_vector(size_t(N * out), 3));
  auto dy = test::to_precision<T>(test::random_vector(size_t(N * out), 4));
  auto dw0 = test::to_precision<T>(test::random_vector(size_t(out * in), 5));
  test::DeviceArray<T> gx(x), gw(w), gy(y0), gdy(dy), gdx(size_t(N * in)), gdw(dw0);
  auto dev = [&](auto& a, Shape sh) { return Tensor(a.ptr(), dt, Device::cuda, sh); };
  ops::matmul_scaled_fwd(*gpu, dev(gy, Shape{N, out}), dev(gx, Shape{N, in}),
                         dev(gw, Shape{out, in}), s, /*accumulate=*/true);
  ops::matmul_scaled_bwd(*gpu, dev(gdx, Shape{N, in}), dev(gdw, Shape{out, in}),
                         dev(gdy, Shape{N, out}), dev(gx, Shape{N, in}), dev(gw, Shape{out, in}), s,
                         /*accumulate_dx=*/false);
  std::vector<float> ry = y0, rdx(size_t(N * in)), rdw = dw0;
  ops::matmul_scaled_fwd(*cpu, test::cpu_tensor(ry, Shape{N, out}),
                         test::cpu_tensor(x, Shape{N, in}), test::cpu_tensor(w, Shape{out, in}), s,
                         true);
  ops::matmul_scaled_bwd(*cpu, test::cpu_tensor(rdx, Shape{N, in}),
                         test::cpu_tensor(rdw, Shape{out, in}), test::cpu_tensor(dy, Shape{N, out}),
                         test::cpu_tensor(x, Shape{N, in}), test::cpu_tensor(w, Shape{out, in}), s,
                         false);
  const double tol = std::is_same_v<T, bf16> ? 1e-2 : 1e-5;
  const std::string what = strformat("%s N %lld in %lld out %lld", test::type_name<T>(),
                                     (long long)N, (long long)in, (long long)out);
  EXPECT_LT(test::report(("lora y  " + what).c_str(), test::max_rel_error(gy.download(), ry)), tol);
  EXPECT_LT(test::report(("lora dx " + what).c_str(), test::max_rel_error(gdx.download(), rdx)),
            tol);
  EXPECT_LT(test::report(("lora dw " + what).c_str(), test::max_rel_error(gdw.download(), rdw)),
            tol);
}

}  // namespace

TEST(LoraCuda, ScaledMatmulMatchesTheCpuReference) {
  CUDA_TEST_PREAMBLE();
  for (int r : {4, 16}) {
    // u = x A^T ([N, C] x [r, C]) and y += s u B^T ([N, r] x [3C, r]) at GPT-2 124M widths.
    check_scaled_matmul<float>(1024, 768, r, 1.f);
    check_scaled_matmul<float>(1024, r, 2304, 16.f / float(r));
    check_scaled_matmul<bf16>(1024, 768, r, 1.f);
    check_scaled_matmul<bf16>(1024, r, 2304, 16.f / float(r));
  }
}

TEST(LoraCuda, TrainingStepMatchesTheCpuReference) {
  CUDA_TEST_PREAMBLE();
  const GPTConfig c = lora_gpt(4);
  const std::set<ParamRole> all = {ParamRole::base, ParamRole::adapter};
  auto ref = reference(c, all);
  const std::vector<float> ref_logits = ref->logits();
  const double ref_loss = ref->train_step();
  for (DType dt : {DType::f32, DType::bf16}) {
    LoraRun gpu(Device::cuda, dt, c, all);
    gpu.set_weights(ref->store);
    // The bf16 reference is the CPU model on the bf16-rounded weights.
    auto rounded = reference(c, all);
    rounded->set_weights(gpu.store);
    const std::vector<float> rl = dt == DType::f32 ? ref_logits : rounded->logits();
    const double rloss = dt == DType::f32 ? ref_loss : rounded->train_step();
    const std::vector<float> gl = gpu.logits();
    const double gloss = gpu.train_step();
    const char* name = dt == DType::f32 ? "f32" : "bf16";
    // bf16 noise of the logits: the same model without its LoRA, same weights, GPU vs CPU.
    double logit_tol = 1e-4;
    if (dt == DType::bf16) {
      GPTConfig dense = c;
      dense.lora = LoraOptions{};
      LoraRun dg(Device::cuda, dt, dense, {ParamRole::base});
      dg.set_weights(gpu.store);
      LoraRun dc(Device::cpu, DType::f32, dense, {ParamRole::base});
      dc.set_weights(gpu.store);
      const double noise = test::max_rel_error(dg.logits(), dc.logits());
      test::report("dense logits bf16 (noise of the model)", noise);
      logit_tol = kNoiseFactor * noise;
    }
    const double logit_err = test::max_rel_error(gl, rl);
    test::report(strformat("lora model logits %s", name).c_str(), logit_err);
    EXPECT_LT(logit_err, logit_tol);
    EXPECT_LT(std::fabs(gloss - rloss), logit_tol * std::fabs(rloss)) << gloss << " vs " << rloss;
    const LoraRun& cpu_side = dt == DType::f32 ? *ref : *rounded;
    double c_attn_err = 0.0;
    for (int l = 0; l < c.n_layer; ++l) {
      const std::string n = lora_linear_name(l, "c_attn") + ".weight";
      c_attn_err = std::max(
          c_attn_err, test::max_rel_error(host(gpu.store.grad(n)), host(cpu_side.store.grad(n))));
    }
    test::report(strformat("c_attn.weight grad %s (noise of the chain)", name).c_str(), c_attn_err);
    const double tol = dt == DType::f32 ? 1e-4 : kNoiseFactor * c_attn_err;
    for (const auto& e : gpu.store.entries()) {
      if (e.spec.role != ParamRole::adapter) continue;
      const double err = test::max_rel_error(host(gpu.store.grad(e.spec.name)),
                                             host(cpu_side.store.grad(e.spec.name)));
      test::report(strformat("grad %s %s", e.spec.name.c_str(), name).c_str(), err);
      EXPECT_LT(err, tol) << e.spec.name << " " << name;
    }
  }
}

TEST(LoraCuda, ZeroBEqualsTheBaseModelBitwise) {
  CUDA_TEST_PREAMBLE();
  GPTConfig dense = lora_gpt(4);
  dense.lora = LoraOptions{};
  auto ref = reference(lora_gpt(4), {ParamRole::adapter});
  for (const auto& e : ref->store.entries())
    if (e.spec.name.ends_with(".lora_b")) zero_tensor(ref->store.param(e.spec.name));
  for (DType dt : {DType::f32, DType::bf16}) {
    LoraRun with(Device::cuda, dt, lora_gpt(4), {ParamRole::adapter});
    with.set_weights(ref->store);
    LoraRun base(Device::cuda, dt, dense, {ParamRole::base});
    base.set_weights(ref->store);
    const std::vector<float> a = with.logits(), b = base.logits();
    EXPECT_TRUE(test::bitwise_equal(a, b))
        << (dt == DType::f32 ? "f32" : "bf16") << ": max rel " << test::max_rel_error(a, b);
  }
}

TEST(LoraCuda, MergedModelEqualsTheUnmergedOne) {
  CUDA_TEST_PREAMBLE();
  const GPTConfig c = lora_gpt(16);
  auto ref = reference(c, {ParamRole::adapter});
  const std::vector<float> cpu_logits = ref->logits();
  ParameterStore merged;
  const GPTConfig mc = merge_lora(c, ref->store, merged);  // (merges into ref's W too)
  for (DType dt : {DType::f32, DType::bf16}) {
    auto unmerged_ref = reference(c, {ParamRole::adapter});  // W without the merge
    LoraRun with(Device::cuda, dt, c, {ParamRole::adapter});
    with.set_weights(unmerged_ref->store);
    LoraRun plain(Device::cuda, dt, mc, {ParamRole::base});
    plain.set_weights(merged);
    const std::vector<float> a = with.logits(), b = plain.logits();
    const double diff = test::max_rel_error(b, a);
    const char* name = dt == DType::f32 ? "f32" : "bf16";
    test::report(strformat("merged vs unmerged logits %s", name).c_str(), diff);
    if (dt == DType::f32) {
      EXPECT_LT(diff, 1e-5);
    } else {
      const double noise = test::max_rel_error(a, cpu_logits);
      test::report("unmerged bf16 vs cpu f32 logits (noise)", noise);
      EXPECT_LT(diff, kNoiseFactor * noise);
    }
  }
}

// A Focus retrofit evaluated with hard routing at top_k = K, or with a local band covering the
// sequence, equals its dense base model bitwise on the GPU too (f32 and bf16).
TEST(RetrofitCuda, HardRoutingOverEveryGroupEqualsTheDenseBaseBitwise) {
  CUDA_TEST_PREAMBLE();
  const GPTConfig dense = lora_gpt(0);
  for (int variant = 0; variant < 2; ++variant) {
    GPTConfig focus = dense;
    focus.attention.type = "focus";
    focus.attention.focus.groups = 4;
    focus.attention.focus.d_g = 8;
    focus.attention.focus.top_k = variant == 0 ? 4 : 1;
    focus.attention.focus.local_window = variant == 0 ? 3 : kT;
    auto ref = reference(focus, {ParamRole::attention});  // Focus weights: the base plus W_g, C
    for (DType dt : {DType::f32, DType::bf16}) {
      LoraRun base(Device::cuda, dt, dense, {ParamRole::base});
      base.set_weights(ref->store);
      LoraRun retrofit(Device::cuda, dt, focus, {ParamRole::attention});
      retrofit.set_weights(ref->store);
      const std::vector<float> a = retrofit.logits(), b = base.logits();
      EXPECT_TRUE(test::bitwise_equal(a, b))
          << (variant == 0 ? "top_k = K, " : "local_window >= T, ")
          << (dt == DType::f32 ? "f32" : "bf16") << ": max rel " << test::max_rel_error(a, b);
    }
  }
}
