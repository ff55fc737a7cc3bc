// SFA attention inside the GPT (CPU): finite differences of the whole model; the distillation
// term's gradient through the AuxLossSink by finite differences with the teacher held fixed (its
// stopgrad), its value against a direct computation, decoding with the sparse cache equal to the
// full forward (and its bytes per token), k out of range, a few training steps lower the loss.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "core/context.h"
#include "model/gpt.h"
#include "model/model_fixture.h"
#include "nn/attention_dense.h"
#include "nn/attention_sfa.h"
#include "ops/ops.h"
#include "ops/sfa_ops.h"
#include "ref/sfa_ref.h"
#include "test_util.h"
#include "train/optimizer.h"

using namespace attnlab;

namespace {

// Head dim 4 (n_embd 8, 2 heads); k = 2 of 4 coordinates kept.
GPTConfig sfa_config(int k = 2, float distill = 0.5f) {
  GPTConfig c = test::tiny_gpt_config();
  c.block_size = 12;
  c.attention.type = "sfa";
  c.attention.sfa.k = k;
  c.attention.sfa.distill = distill;
  return c;
}

struct SfaModel : test::ModelFixture {
  explicit SfaModel(GPTConfig c = sfa_config(), int T_ = 5) : ModelFixture(c, 2, T_) {
    aux_scale = 0.5f;
  }
  // The objective backward() differentiates: mean LM loss + aux_scale * distillation terms (the
  // teacher runs in train mode only).
  LossTotals totals(AttentionMode mode = AttentionMode::train) {
    model.forward(*ctx, store, t(tokens), t(targets), mode, 0.f, aux_scale);
    return model.take_loss(*ctx);
  }
  double objective() {
    const LossTotals l = totals();
    return l.mean() + l.aux;
  }
};

// What eval, score and generate say of an SFA model (the resolved k and the path), and the
// start-of-training warning for a head dim the KV cache cannot hold.
TEST(SfaModel, EvalModeAndConfigWarning) {
  SfaModel m(sfa_config(0));  // k 0: (4 + 7) / 8 = 1 of head dim 4
  EXPECT_EQ(m.model.attention(0).eval_mode(), "sfa k 1 of 4 (masked-dense path)");
  EXPECT_TRUE(m.model.attention(0).config_warnings(5).empty());
  GPTConfig wide = sfa_config(4, 0.f);
  wide.n_head = 1;
  wide.n_embd = 264;
  SfaModel w(wide, 3);
  const std::vector<std::string> warned = w.model.attention(1).config_warnings(3);
  ASSERT_EQ(warned.size(), 1u);
  EXPECT_NE(warned[0].find("head dim 264: the model trains and evaluates, but `generate` cannot"),
            std::string::npos);
}

}  // namespace

TEST(SfaModel, FiniteDifferenceGradientsOfTheWholeModel) {
  SfaModel m(sfa_config(2, 0.f));
  m.gradients();
  // A step small enough that no selection changes (the gaps between magnitudes are far larger).
  const auto checked = m.expect_finite_differences([&] { return m.objective(); },
                                                   [](ParamRole) { return 4; }, 2e-3f);
  EXPECT_GT(m.total(checked), 60);
}

// SFA on the LLaMA block: the top-k features are taken of the rotated q and k.
TEST(SfaModel, FiniteDifferenceGradientsLlamaBlock) {
  GPTConfig c = sfa_config(2, 0.f);
  c.norm = NormType::rmsnorm;
  c.mlp = MlpType::swiglu;
  c.position = PositionType::rope;
  c.rope_theta = 100.f;
  c.bias = false;
  SfaModel m(c);
  m.gradients();
  // The rotated features' magnitudes lie closer together: a smaller step keeps every selection.
  const auto checked = m.expect_finite_differences([&] { return m.objective(); },
                                                   [](ParamRole) { return 5; }, 2e-4f);
  EXPECT_GT(m.total(checked), 50);  // (no biases, no position table)
}

// With distill > 0 the backward differentiates lambda D / n_layer * mean((O~ - O)^2) (one layer of
// head dim D here: lambda times the mean over heads and tokens of ||O~_h - O_h||^2) with the
// teacher O held fixed (stopgrad), so it is not the gradient of the objective as a function of the
// weights (the teacher moves with them too): the finite differences run on one module with the
// teacher frozen at the base point. Through the whole GPT the term changes every gradient.
TEST(SfaModel, DistillationGradientHoldsTheTeacherFixed) {
  auto ctx = ExecContext::make_cpu();
  const QKVLayout l{2, 1, 8};
  const int B = 2, T = 6, W = int(l.width()), Q = int(l.q_width()), k = 3;
  const float scale = 0.25f, lambda = 2.f;
  std::vector<float> qkv = test::random_vector(size_t(B) * T * W, 3, -1.5f, 1.5f);
  std::vector<float> w = test::random_vector(size_t(B) * T * Q, 4), out(w.size());
  std::vector<float> teacher(w.size()), lse(size_t(B) * 2 * T), dqkv(qkv.size());
  std::vector<float> sparse(qkv.size());
  auto qkv_t = [&] { return test::cpu_tensor(qkv, {B, T, W}); };
  auto out_t = [&] { return test::cpu_tensor(out, {B, T, Q}); };
  ops::attention_fwd(*ctx, test::cpu_tensor(teacher, {B, T, Q}), test::cpu_tensor(lse, {B, 2, T}),
                     qkv_t(), l);  // frozen at the base point
  AttentionOptions o;
  o.type = "sfa";
  o.sfa = {k, lambda};
  SfaAttention a(o);
  a.allocate(*ctx, AttentionShape{B, T, l, 8}, DType::f32);
  double total = 0.0;
  AttentionInputs in;
  in.qkv = qkv_t();
  in.layout = l;
  in.mode = AttentionMode::train;
  in.aux = {&total, scale};
  a.forward(*ctx, in, out_t());
  a.backward(*ctx, in, out_t(), test::cpu_tensor(w, {B, T, Q}), test::cpu_tensor(dqkv, {B, T, W}),
             Tensor());
  auto objective = [&] {
    ops::sfa_attention_fwd(*ctx, out_t(), test::cpu_tensor(lse, {B, 2, T}),
                           test::cpu_tensor(sparse, {B, T, W}), qkv_t(), l, k);
    double mse = 0.0;
    for (size_t i = 0; i < out.size(); ++i)
      mse += (double(out[i]) - teacher[i]) * (double(out[i]) - teacher[i]);
    // D = 8 coordinates per head, one layer: the per-head squared norm's mean.
    return test::weighted_sum(w, out) + double(scale * lambda) * 8.0 * mse / double(out.size());
  };
  const float h = 2e-3f;
  int checked = 0;
  std::vector<int32_t> idx(static_cast<size_t>(k));
  for (size_t i = 0; i < qkv.size(); ++i) {
    const int col = int(i % size_t(W));
    if (col < l.v_offset()) {  // q or k: only selected coordinates away from a tie
      const float* x = qkv.data() + (i - size_t(col)) + size_t(col / 8 * 8);
      sfa_select_coords(x, 8, k, idx.data());
      const bool sel = std::find(idx.begin(), idx.end(), col % 8) != idx.end();
      if (!sel) {
        EXPECT_EQ(dqkv[i], 0.f) << i;
        continue;
      }
      std::vector<float> mag(8);
      for (int c = 0; c < 8; ++c) mag[size_t(c)] = std::fabs(x[c]);
      std::sort(mag.begin(), mag.end(), std::greater<float>());
      if (std::fabs(x[col % 8]) - mag[size_t(k)] < 4 * h) continue;
    }
    const std::vector<double> fd = test::finite_difference(&qkv[i], 1, objective, h);
    EXPECT_NEAR(dqkv[i], fd[0], 2e-3 + 1e-2 * std::fabs(fd[0])) << "coordinate " << i;
    ++checked;
  }
  EXPECT_GT(checked, int(qkv.size()) / 3);

  SfaModel with(sfa_config(2, 0.5f)), without(sfa_config(2, 0.f));
  with.gradients();
  without.gradients();
  double diff = 0.0;
  for (int64_t i = 0; i < with.store.num_trainable(); ++i)
    diff += std::fabs(with.store.grads().ptr<float>()[i] - without.store.grads().ptr<float>()[i]);
  EXPECT_GT(diff, 1e-4);
}

// aux = aux_scale * lambda * the mean over layers, heads and tokens of ||O~_h - O_h||^2 (issue
// 15's term): computed here for one module of a 1- and a 3-layer model directly; only in train
// mode; zero when k = D (student = teacher).
TEST(SfaModel, DistillationTermValue) {
  SfaModel m;
  const LossTotals train = m.totals(AttentionMode::train);
  EXPECT_GT(train.aux, 0.0);
  EXPECT_EQ(m.totals(AttentionMode::eval).aux, 0.0);
  SfaModel full(sfa_config(4, 0.5f));
  EXPECT_EQ(full.totals().aux, 0.0);

  auto ctx = ExecContext::make_cpu();
  const QKVLayout l{2, 2, 4};
  const int B = 2, T = 5, W = int(l.width()), Q = int(l.q_width());
  std::vector<float> qkv = test::random_vector(size_t(B) * T * W, 3), out(size_t(B) * T * Q);
  std::vector<float> teacher(out.size()), lse(size_t(B) * 2 * T);
  for (int n_layer : {1, 3}) {
    AttentionOptions o;
    o.type = "sfa";
    o.sfa = {2, 0.5f};
    o.n_layer = n_layer;
    SfaAttention a(o);
    AttentionShape s{B, T, l, 8};
    a.allocate(*ctx, s, DType::f32);
    double total = 0.0;
    AttentionInputs in;
    in.h = Tensor();
    in.qkv = test::cpu_tensor(qkv, {B, T, W});
    in.layout = l;
    in.mode = AttentionMode::train;
    in.aux = {&total, 0.25f};
    a.forward(*ctx, in, test::cpu_tensor(out, {B, T, Q}));
    ops::attention_fwd(*ctx, test::cpu_tensor(teacher, {B, T, Q}), test::cpu_tensor(lse, {B, 2, T}),
                       in.qkv, l);
    // Per (token, head): the squared norm of the head's 4 coordinates; their mean over the
    // B T n_head vectors, over n_layer layers (this one's share).
    double norms = 0.0;
    for (size_t i = 0; i < out.size(); ++i)
      norms += (double(out[i]) - teacher[i]) * (double(out[i]) - teacher[i]);
    EXPECT_GT(norms, 0.0);
    const double mean_norm = norms / double(B * T * l.n_head);
    const double want = double(0.25f * 0.5f) * mean_norm / n_layer;  // the weight is a float
    EXPECT_NEAR(total, want, 1e-6 * want) << n_layer;
  }
  // The model gives its blocks its layer count, so its aux is the mean of its layers' terms:
  // tiny_gpt_config has 2 layers of head dim 4, distill 0.5.
  ASSERT_EQ(m.model.config().n_layer, 2);
  for (int layer = 0; layer < 2; ++layer) {
    const auto* sfa = dynamic_cast<const SfaAttention*>(&m.model.attention(layer));
    ASSERT_NE(sfa, nullptr);
    EXPECT_FLOAT_EQ(sfa->distill_weight(), 0.5f * 4 / 2);
  }
}

// prefill + decode_step with the sparse cache (k~ as indices + values, dense V) equals the full
// eval forward; the cache holds fewer bytes per token than dense K/V when k is small.
TEST(SfaModel, DecodeWithTheSparseCacheEqualsTheForward) {
  for (int k : {1, 2, 4}) {
    SfaModel m(sfa_config(k, 0.f), 12);
    m.expect_decode_matches(m.logits(), {1, 5}, 1e-5, "k " + std::to_string(k));
  }
}

// What a decoding run reserves of the shared attention scratch covers its decode steps too: on a
// bf16 CUDA cache (only the context's device is read: no GPU needed) a prefill of 2 tokens runs
// the forward's kernels and carves the masked q, k, v [B, 2, width] and the lse, a decode step the
// query's top-k features [B, 1, n_head, k] (i32 + bf16), which at GQA 8:1, D 128 and k 120 are
// more. Reserving the prefill's alone let the first decode step grow the buffer.
TEST(SfaModel, DecodeReserveCoversTheStepAfterAShortPrefill) {
  ExecContext on_cuda;
  on_cuda.device = Device::cuda;
  const QKVLayout l{32, 4, 128};
  AttentionOptions o;
  o.type = "sfa";
  o.sfa.k = 120;
  const SfaAttention module(o);
  const size_t prefill = module.decode_scratch_bytes(on_cuda, 1, 2, 0, l, DType::bf16);
  const size_t step = module.decode_scratch_bytes(on_cuda, 1, 1, 1, l, DType::bf16);
  EXPECT_GE(step, size_t(32) * 120 * (4 + 2));
  EXPECT_GT(step, prefill);
  EXPECT_EQ(module.decode_reserve_bytes(on_cuda, 1, 2, 8, l, DType::bf16), step);
  // A cache of one position has no decode step; a long prefill takes more than a step.
  EXPECT_EQ(module.decode_reserve_bytes(on_cuda, 1, 1, 1, l, DType::bf16),
            module.decode_scratch_bytes(on_cuda, 1, 1, 0, l, DType::bf16));
  EXPECT_EQ(module.decode_reserve_bytes(on_cuda, 1, 64, 128, l, DType::bf16),
            module.decode_scratch_bytes(on_cuda, 1, 64, 0, l, DType::bf16));
}

// The sparse cache's bytes per token: k (one-byte index + bf16 value) + D bf16 values per kv head,
// vs 2 D bf16 values dense: D 64, k 8: 152 / 256 = 59%; D 128, k 8: 280 / 512 = 55%. The buffer
// holds exactly that per position (the indices are u8), and head dims above 256 are refused.
TEST(SfaModel, SparseCacheBytesPerToken) {
  auto ctx = ExecContext::make_cpu();
  struct S {
    int H, D, k, bytes, pct;
  };
  for (const S s : {S{12, 64, 8, 8 * 3 + 128, 59}, S{8, 128, 8, 8 * 3 + 256, 55}}) {
    const QKVLayout l{s.H, s.H, s.D};
    const int max_T = 4;
    SfaKVCache sparse(*ctx, 1, max_T, l, DType::bf16, s.k);
    EXPECT_EQ(sparse.bytes_per_token(), size_t(s.H * s.bytes)) << "D " << s.D;
    EXPECT_EQ(sparse.k_idx.dtype, DType::u8);
    EXPECT_EQ(sparse.k_idx.nbytes() + sparse.k_val.nbytes() + sparse.v.nbytes(),
              size_t(max_T) * sparse.bytes_per_token());
    const double dense = 2.0 * s.H * s.D * 2;
    EXPECT_EQ(int(std::lround(100.0 * double(sparse.bytes_per_token()) / dense)), s.pct);
  }
  test::expect_error(
      [&] {
        SfaKVCache c(*ctx, 1, 4, QKVLayout{1, 1, 512}, DType::f32, 8);
      },
      "sfa KV cache: key coordinates are stored in one byte, so head dim must be "
      "<= 256, got 512");
}

TEST(SfaModel, KOutOfRangeAndWindowAreClearErrors) {
  test::expect_error([&] { SfaModel m(sfa_config(5, 0.f)); },
                     "attention.sfa.k (5) must be in [1, head dim 4]; 0 picks the default (1)");
  GPTConfig c = sfa_config();
  c.attention.window = 3;
  test::expect_error([&] { SfaModel m(c); }, "attention.window (3) does not apply to sfa");
  SfaModel d(sfa_config(0, 0.f));  // default: (4 + 7) / 8 = 1
  EXPECT_GT(d.totals(AttentionMode::eval).mean(), 0.0);
}

TEST(SfaModel, TrainingLowersTheLoss) {
  SfaModel m(sfa_config(2, 0.5f), 12);
  AdamWConfig oc;
  oc.lr = 1e-2f;
  AdamW opt(*m.ctx, m.store, oc);
  const double first = m.objective();
  for (int step = 1; step <= 15; ++step) {
    m.gradients();
    opt.step(1e-2f, step);
  }
  EXPECT_LT(m.objective(), first - 0.1);
}

// attention.sfa.kernel flash (FlashSFA; on the CPU its overlap-form reference) gives the GPT the
// same loss and gradients as masked_dense, with distillation on.
TEST(SfaModel, FlashKernelEqualsMaskedDense) {
  std::vector<std::vector<float>> grads[2];
  double loss[2];
  for (int i = 0; i < 2; ++i) {
    GPTConfig c = sfa_config(2, 0.5f);
    c.attention.sfa.kernel = i == 0 ? SfaOptions::Kernel::masked_dense : SfaOptions::Kernel::flash;
    SfaModel m(c);
    m.gradients();
    loss[i] = m.objective();
    for (const auto& e : m.store.entries()) {
      const Tensor g = m.store.grad(e.spec.name);
      grads[i].emplace_back(g.ptr<float>(), g.ptr<float>() + g.numel());
    }
  }
  EXPECT_NEAR(loss[1], loss[0], 1e-6);
  ASSERT_EQ(grads[0].size(), grads[1].size());
  for (size_t p = 0; p < grads[0].size(); ++p)
    for (size_t j = 0; j < grads[0][p].size(); ++j)
      EXPECT_NEAR(grads[1][p][j], grads[0][p][j], 1e-5 + 1e-4 * std::fabs(grads[0][p][j]))
          << "param " << p << " [" << j << "]";
}
