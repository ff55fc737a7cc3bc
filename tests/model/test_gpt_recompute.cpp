// Activation recomputation (GPTConfig::recompute): none, gelu and block must give bitwise identical
// losses and gradients on the CPU reference, and activation_bytes must shrink as promised. Also
// the start-up out-of-memory message of the trainer (device_memory_shortfall).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "core/context.h"
#include "model/gpt.h"
#include "test_util.h"

using namespace attnlab;

namespace {

GPTConfig small_config(ActivationRecompute r, bool llama = false) {
  GPTConfig c;
  if (llama) {  // the activation recomputed is SwiGLU's; RoPE re-runs in block mode
    c.norm = NormType::rmsnorm;
    c.mlp = MlpType::swiglu;
    c.position = PositionType::rope;
    c.bias = false;
  }
  c.n_layer = 3;
  c.n_head = 2;
  c.n_embd = 16;
  c.vocab_size = 37;
  c.padded_vocab = 40;
  c.block_size = 12;
  c.recompute = r;
  return c;
}

struct RunResult {
  std::vector<double> losses;
  std::vector<float> grads, dlogits;
};

// Two micro-batches accumulated into the gradients, with randomised weights; the dlogits of each
// (what the logits buffer holds after a training forward: GPT::logits).
RunResult run(ActivationRecompute r, bool llama = false) {
  auto ctx = ExecContext::make_cpu();
  GPT model(small_config(r, llama));
  ParameterStore store;
  model.declare_params(store);
  store.finalize(Device::cpu, DType::f32, {ParamRole::base, ParamRole::attention});
  model.init_params(store, 7);
  std::vector<float> noise =
      test::random_vector(size_t(store.param_buffer_numel()), 11, -0.2f, 0.2f);
  float* w = store.all_params().ptr<float>();
  for (int64_t i = 0; i < store.param_buffer_numel(); ++i) w[i] += noise[size_t(i)];
  const int B = 3, T = 12;
  model.allocate(*ctx, B, T, DType::f32);
  store.zero_grads();
  RunResult out;
  for (int mb = 0; mb < 2; ++mb) {
    const int t = T;
    std::vector<int32_t> tok = test::random_ints(size_t(B * t), 100 + mb, 37);
    std::vector<int32_t> tgt = test::random_ints(size_t(B * t), 200 + mb, 37);
    Tensor tt = test::cpu_tensor(tok, Shape{B, t}), tg = test::cpu_tensor(tgt, Shape{B, t});
    model.forward(*ctx, store, tt, tg, AttentionMode::train, 1.f / float(B * t));
    out.losses.push_back(model.take_loss(*ctx).mean());
    Tensor lg = model.logits();
    out.dlogits.insert(out.dlogits.end(), lg.ptr<float>(), lg.ptr<float>() + lg.numel());
    model.backward(*ctx, store, tt);
  }
  Tensor g = store.grads();
  out.grads.assign(g.ptr<float>(), g.ptr<float>() + g.numel());
  return out;
}

}  // namespace

void expect_recompute_bitwise(bool llama) {
  RunResult none = run(ActivationRecompute::none, llama);
  double gsum = 0;
  for (float g : none.grads) gsum += std::fabs(g);
  ASSERT_GT(gsum, 1e-3);  // the gradients carry signal
  for (ActivationRecompute r : {ActivationRecompute::gelu, ActivationRecompute::block}) {
    SCOPED_TRACE(recompute_name(r));
    RunResult other = run(r, llama);
    ASSERT_EQ(other.losses, none.losses);
    ASSERT_EQ(other.dlogits.size(), none.dlogits.size());
    EXPECT_EQ(0, std::memcmp(other.dlogits.data(), none.dlogits.data(), none.dlogits.size() * 4));
    ASSERT_EQ(other.grads.size(), none.grads.size());
    size_t diff = 0;
    for (size_t i = 0; i < none.grads.size(); ++i)
      diff += std::memcmp(&other.grads[i], &none.grads[i], 4) != 0;
    EXPECT_EQ(diff, 0u) << "gradient entries that differ bitwise";
  }
}

TEST(GPTRecompute, GradientsBitwiseIdentical) { expect_recompute_bitwise(false); }
TEST(GPTRecompute, GradientsBitwiseIdenticalLlamaBlock) { expect_recompute_bitwise(true); }

TEST(GPTRecompute, ActivationBytesReflectTheSaving) {
  const int B = 8, T = 1024;
  GPTConfig c;  // GPT-2 124M
  auto bytes = [&](ActivationRecompute r) {
    c.recompute = r;
    return GPT(c).activation_bytes(B, T, DType::bf16);
  };
  const size_t none = bytes(ActivationRecompute::none), gelu = bytes(ActivationRecompute::gelu),
               block = bytes(ActivationRecompute::block);
  const size_t BT = size_t(B) * T, C = 768, L = 12;
  // gelu drops L-1 copies of [B,T,4C] bf16.
  EXPECT_EQ(none - gelu, (L - 1) * BT * 4 * C * 2);
  // block keeps per layer only the [B,T,C] input: 19 C-wide tensors + 4 stat rows per layer
  // become one shared set.
  const size_t per_layer_saved = BT * 2 * (4 * C + 3 * C + 4 * C + 4 * C) + 4 * BT * 4;
  EXPECT_EQ(none - block, (L - 1) * per_layer_saved);
  EXPECT_LT(block * 2, none);  // the [B,T,Vp] logits of the head dominate what is left
}

TEST(GPTRecompute, OutOfMemoryMessage) {
  GPTConfig c;
  GPT model(c);
  ParameterStore store;
  model.declare_params(store);
  int64_t n = 0;
  for (const auto& e : store.entries()) n += e.spec.shape.numel();
  TrainingMemoryEstimate e = estimate_training_memory(model, n, n, 64, 1024, DType::bf16);
  EXPECT_EQ(e.weights, size_t(n) * 2);
  EXPECT_EQ(e.optimizer, size_t(n) * 12);
  // ZeRO-1 over 4 ranks: a quarter of m, v and the master copy on each (rounded up).
  const TrainingMemoryEstimate z = estimate_training_memory(model, n, n, 64, 1024, DType::bf16, 4);
  EXPECT_EQ(z.optimizer, size_t((n + 3) / 4) * 12);
  EXPECT_EQ(z.weights + z.grads + z.activations, e.weights + e.grads + e.activations);
  EXPECT_GT(e.activations, size_t(20) << 30);  // GPT-2 124M at 64 x 1024 without recompute
  const size_t GiB = size_t(1) << 30;
  EXPECT_EQ(device_memory_shortfall(e, 139 * GiB, 64, ActivationRecompute::none), "");
  std::string m = device_memory_shortfall(e, 16 * GiB, 64, ActivationRecompute::none);
  EXPECT_NE(m.find("out of device memory"), std::string::npos) << m;
  EXPECT_NE(m.find("16.00 GiB free"), std::string::npos) << m;
  EXPECT_NE(m.find("train.micro_batch"), std::string::npos) << m;
  EXPECT_NE(m.find("train.recompute: block"), std::string::npos) << m;
  // The micro-batch hint is what actually fits: recompute the estimate at that size.
  size_t at = m.find("about ", m.find("train.micro_batch"));
  ASSERT_NE(at, std::string::npos) << m;
  int mb = std::stoi(m.substr(at + 6));
  EXPECT_GE(mb, 1);
  EXPECT_LT(mb, 64);
  EXPECT_EQ(device_memory_shortfall(estimate_training_memory(model, n, n, mb, 1024, DType::bf16),
                                    16 * GiB, mb, ActivationRecompute::none),
            "");
  EXPECT_NE(
      device_memory_shortfall(estimate_training_memory(model, n, n, mb + 2, 1024, DType::bf16),
                              16 * GiB, mb + 2, ActivationRecompute::none),
      "");
  // Already on block: no recompute hint. Weights alone too big: a different hint.
  std::string mblock = device_memory_shortfall(e, 16 * GiB, 64, ActivationRecompute::block);
  EXPECT_EQ(mblock.find("train.recompute"), std::string::npos) << mblock;
  std::string tiny = device_memory_shortfall(e, GiB, 64, ActivationRecompute::none);
  // The CPU path's check names the host's memory and no GPU remedy.
  const std::string host = device_memory_shortfall(e, GiB, 64, ActivationRecompute::none, true);
  EXPECT_NE(host.find("out of host memory at start-up"), std::string::npos) << host;
  EXPECT_NE(host.find("this machine has 1.00 GiB available"), std::string::npos) << host;
  EXPECT_EQ(host.find("GPU with more memory"), std::string::npos) << host;
  EXPECT_NE(tiny.find("alone do not fit"), std::string::npos) << tiny;
}
