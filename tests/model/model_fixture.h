// Shared by the model-level tests: a small GPT on the CPU (f32) with weights larger than GPT-2's
// init, drawn per tensor in name order (so every trainable set, which orders the flat buffer
// differently, gets the same values), and random tokens and targets.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/context.h"
#include "model/gpt.h"
#include "test_util.h"

namespace attnlab::test {

// 2 layers, 2 heads, n_embd 8, vocabulary 11 (padded 16), block 8.
inline GPTConfig tiny_gpt_config() {
  GPTConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.vocab_size = 11;
  c.padded_vocab = 16;
  c.block_size = 8;
  return c;
}

struct ModelFixture {
  std::unique_ptr<ExecContext> ctx = ExecContext::make_cpu();
  GPTConfig cfg;
  GPT model;
  ParameterStore store;
  std::vector<int32_t> tokens, targets;
  int B, T;
  float aux_scale = 1.f;  // the weight of the variants' auxiliary losses in the objective

  ModelFixture(const GPTConfig& c, int B_, int T_,
               std::set<ParamRole> trainable = {ParamRole::base, ParamRole::attention})
      : cfg(c), model(c), B(B_), T(T_) {
    model.declare_params(store);
    store.finalize(Device::cpu, DType::f32, trainable);
    model.init_params(store, 42);
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.f, 0.3f);
    std::vector<std::string> names;
    for (const auto& e : store.entries()) names.push_back(e.spec.name);
    std::sort(names.begin(), names.end());
    for (const auto& n : names) {
      Tensor p = store.param(n);
      for (int64_t i = 0; i < p.numel(); ++i) p.ptr<float>()[i] += nd(rng);
    }
    for (const char* head : {"wte.weight", "lm_head.weight"})  // padding rows stay zero
      if (store.contains(head)) zero_tensor(store.param(head).slice0(c.vocab_size, c.padded_vocab));
    model.allocate(*ctx, B, T, DType::f32);
    std::uniform_int_distribution<int> tok(0, c.vocab_size - 1);
    for (int i = 0; i < B * T; ++i) tokens.push_back(tok(rng)), targets.push_back(tok(rng));
  }
  Tensor t(std::vector<int32_t>& v) {
    return Tensor(v.data(), DType::i32, Device::cpu, Shape{B, T});
  }
  // Gradients of the objective (mean LM loss over the targets + aux_scale * auxiliary losses) in
  // the store's gradient buffer.
  void gradients() {
    store.zero_grads();
    model.forward(*ctx, store, t(tokens), t(targets), AttentionMode::train, 1.f / float(B * T),
                  aux_scale);
    model.backward(*ctx, store, t(tokens));
    model.take_loss(*ctx);
  }
  // Central differences of `objective` at picks(role) random entries of every parameter (the
  // embedding's padding rows and positions beyond T, which get no gradient, skipped) against the
  // gradient that gradients() left in the store: |g - fd| <= 2e-3 + rel_tol |fd|. Returns the
  // number of entries checked by role.
  std::map<ParamRole, int> expect_finite_differences(const std::function<double()>& objective,
                                                     const std::function<int(ParamRole)>& picks,
                                                     float h = 1e-2f, double rel_tol = 3e-2) {
    std::mt19937 rng(5);
    std::map<ParamRole, int> checked;
    for (const auto& e : store.entries()) {
      float* w = store.param(e.spec.name).ptr<float>();
      const float* g = store.grad(e.spec.name).ptr<float>();
      std::uniform_int_distribution<int64_t> pick(0, e.spec.shape.numel() - 1);
      for (int k = 0; k < picks(e.spec.role); ++k) {
        const int64_t i = pick(rng);
        if (e.spec.name == "wte.weight" && i >= int64_t(cfg.vocab_size) * cfg.n_embd) continue;
        if (e.spec.name == "wpe.weight" && i >= int64_t(T) * cfg.n_embd) continue;
        const float w0 = w[i];
        w[i] = w0 + h;
        const double lp = objective();
        w[i] = w0 - h;
        const double lm = objective();
        w[i] = w0;
        const double fd = (lp - lm) / (2.0 * h);
        EXPECT_NEAR(g[i], fd, 2e-3 + rel_tol * std::fabs(fd)) << e.spec.name << "[" << i << "]";
        ++checked[e.spec.role];
      }
    }
    return checked;
  }
  static int total(const std::map<ParamRole, int>& checked) {
    int n = 0;
    for (const auto& [role, count] : checked) n += count;
    return n;
  }
  // Logits [B, T, Vp] of a forward on the tokens.
  std::vector<float> logits(AttentionMode mode = AttentionMode::eval) {
    model.forward(*ctx, store, t(tokens), Tensor(), mode);
    Tensor l = model.logits();
    return std::vector<float>(l.ptr<float>(), l.ptr<float>() + l.numel());
  }
  // prefill of the first P tokens (for each P of `prefills`), then decode_step token by token:
  // every position's logits within `tol` (max relative error) of `full`, the forward's.
  void expect_decode_matches(const std::vector<float>& full, std::initializer_list<int> prefills,
                             double tol, const std::string& what) {
    const int Vp = cfg.padded_vocab;
    for (int P : prefills) {
      KVCache cache = model.make_kv_cache(*ctx, B, T, DType::f32);
      // What reserve_decode allocates for the prefill is all the run takes (the modules' counts
      // equal what their chunks carve); dense attention's scratch is its prefill's lse alone.
      model.reserve_decode(*ctx, cache, P);
      const size_t reserved = cache.scratch_bytes(), attention = cache.attention_scratch_bytes();
      EXPECT_EQ(attention > 0, model.attention(0).name() != "dense" || P > 1) << what;
      std::vector<int32_t> buf;
      auto cols = [&](int t0, int n) {
        buf.clear();
        for (int b = 0; b < B; ++b)
          for (int i = t0; i < t0 + n; ++i) buf.push_back(tokens[size_t(b) * T + i]);
        return Tensor(buf.data(), DType::i32, Device::cpu, Shape{B, n});
      };
      Tensor logits = model.prefill(*ctx, store, cols(0, P), cache);
      for (int i = P - 1; i < T; ++i) {
        if (i > P - 1) logits = model.decode_step(*ctx, store, cols(i, 1), cache);
        for (int b = 0; b < B; ++b)
          EXPECT_LT(max_rel_error(logits.ptr<float>() + size_t(b) * Vp,
                                  full.data() + (size_t(b) * T + i) * Vp, size_t(Vp)),
                    tol)
              << what << " P " << P << " t " << i << " b " << b;
      }
      EXPECT_EQ(cache.scratch_bytes(), reserved) << what << " P " << P;
      EXPECT_EQ(cache.attention_scratch_bytes(), attention) << what << " P " << P;
    }
  }
};

}  // namespace attnlab::test
