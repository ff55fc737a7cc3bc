// GPT incremental decoding: prefill and decode_step over a KVCache (declared in model/gpt.h).
//
// A chunk of T new tokens at positions pos .. pos+T-1 runs the same ops as GPT::forward, but
// keeps only one layer's activations (no backward), asks each attention module to append its
// keys/values to the cache and attend over it (AttentionModule::decode), and computes the LM head
// for the last position only. Positions index wpe from pos, so the logits equal those of forward()
// on the whole prefix. The activations live in the cache's scratch buffer, sized for
// B * max_T tokens, so a prefill needs no training-sized allocation (GPT::allocate is not needed).
#include <algorithm>

#include "core/error.h"
#include "core/nvtx.h"
#include "model/gpt.h"
#include "ops/ops.h"

namespace attnlab {

namespace {

// The decoding activations, carved from one buffer for chunks of up to `rows` = B * max_T tokens.
struct DecodeActs {
  Tensor x, h, mean, rstd, qkv, atty, fch, fch_gelu;     // [rows, ...]
  Tensor last, last_norm, last_mean, last_rstd, logits;  // [B, ...]
  size_t bytes = 0;

  // With buf == nullptr only counts the bytes.
  DecodeActs(const Buffer* buf, int64_t B, int64_t rows, int64_t C, int64_t Vp, DType dt) {
    auto take = [&](DType t, Shape s) {
      Tensor v = buf ? buf->as(t, s, bytes) : Tensor(nullptr, t, Device::cpu, s);
      bytes += (size_t(s.numel()) * dtype_size(t) + 255) / 256 * 256;
      return v;
    };
    x = take(dt, Shape{rows, C});
    h = take(dt, Shape{rows, C});
    mean = take(DType::f32, Shape{rows});
    rstd = take(DType::f32, Shape{rows});
    qkv = take(dt, Shape{rows, 3 * C});
    atty = take(dt, Shape{rows, C});
    fch = take(dt, Shape{rows, 4 * C});
    fch_gelu = take(dt, Shape{rows, 4 * C});
    last = take(dt, Shape{B, C});
    last_norm = take(dt, Shape{B, C});
    last_mean = take(DType::f32, Shape{B});
    last_rstd = take(DType::f32, Shape{B});
    logits = take(dt, Shape{B, Vp});
  }
};

}  // namespace

KVCache GPT::make_kv_cache(const ExecContext& ctx, int B, int max_T, DType dtype) const {
  ATTN_REQUIRE(max_T >= 1 && max_T <= cfg_.block_size,
               "KV cache length %d must be in [1, model.block_size = %d]", max_T, cfg_.block_size);
  ATTN_REQUIRE(B >= 1, "KV cache batch must be >= 1, got %d", B);
  DecodeActs count(nullptr, B, int64_t(B) * max_T, cfg_.n_embd, cfg_.padded_vocab, dtype);
  return KVCache(ctx, cfg_.n_layer, B, cfg_.kv_heads(), max_T, cfg_.head_dim(), dtype, count.bytes);
}

Tensor GPT::prefill(const ExecContext& ctx, const ParameterStore& store, const Tensor& tokens,
                    KVCache& cache) {
  NvtxRange range("gpt.prefill");
  cache.reset();
  return decode_chunk(ctx, store, tokens, cache);
}

Tensor GPT::decode_step(const ExecContext& ctx, const ParameterStore& store, const Tensor& tokens,
                        KVCache& cache) {
  NvtxRange range("gpt.decode_step");
  ATTN_REQUIRE(tokens.ndim() == 2 && tokens.dim(1) == 1,
               "decode_step: tokens must be i32[B, 1], "
               "got %s",
               tokens.str().c_str());
  ATTN_REQUIRE(cache.free_positions() > 0,
               "decode_step: the KV cache is full (%d tokens); "
               "prefill a shorter context to continue",
               cache.max_len());
  return decode_chunk(ctx, store, tokens, cache);
}

Tensor GPT::decode_chunk(const ExecContext& ctx, const ParameterStore& store, const Tensor& tokens,
                         KVCache& cache) {
  ATTN_REQUIRE(!cache.empty() && cache.n_layer() == cfg_.n_layer,
               "KV cache has %d layers, the model %d (make it with GPT::make_kv_cache)",
               cache.n_layer(), cfg_.n_layer);
  ATTN_REQUIRE(tokens.ndim() == 2 && tokens.dtype == DType::i32 && tokens.device == ctx.device,
               "model input must be i32[B, T] on %s, got %s", device_name(ctx.device),
               tokens.str().c_str());
  const int B = int(tokens.dim(0)), T = int(tokens.dim(1)), pos = cache.length();
  ATTN_REQUIRE(B == cache.batch(), "tokens have batch %d, the KV cache %d", B, cache.batch());
  ATTN_REQUIRE(T >= 1 && pos + T <= cache.max_len(),
               "%d new tokens after %d cached ones exceed "
               "the KV cache length %d",
               T, pos, cache.max_len());
  const Tensor wte = store.param("wte.weight");
  const DType dt = wte.dtype;
  ATTN_REQUIRE(cache.dtype() == dt && cache.device() == ctx.device,
               "KV cache is %s on %s, the "
               "parameters %s on %s",
               dtype_name(cache.dtype()), device_name(cache.device()), dtype_name(dt),
               device_name(ctx.device));
  const int64_t C = cfg_.n_embd, Vp = cfg_.padded_vocab, BT = int64_t(B) * T;
  const DecodeActs full(&cache.scratch(), B, int64_t(B) * cache.max_len(), C, Vp, dt);
  const Tensor x = full.x.slice0(0, BT), h = full.h.slice0(0, BT), mean = full.mean.slice0(0, BT),
               rstd = full.rstd.slice0(0, BT), qkv = full.qkv.slice0(0, BT),
               atty = full.atty.slice0(0, BT), fch = full.fch.slice0(0, BT),
               fch_gelu = full.fch_gelu.slice0(0, BT);
  const Tensor wpe = store.param("wpe.weight");
  ops::embedding_fwd(ctx, x.view(Shape{B, T, C}), tokens, wte, wpe.slice0(pos, wpe.dim(0)));
  for (int l = 0; l < cfg_.n_layer; ++l) {
    NvtxRange lr("layer.decode");
    ops::layernorm_fwd(ctx, h, mean, rstd, x, store.param(p(l, "ln_1.weight")),
                       store.param(p(l, "ln_1.bias")), cfg_.norm_eps);
    ops::matmul_fwd(ctx, qkv, h, store.param(p(l, "attn.c_attn.weight")),
                    store.param(p(l, "attn.c_attn.bias")));
    attn_[l]->decode(ctx, store, h.view(Shape{B, T, C}), qkv.view(Shape{B, T, 3 * C}),
                     cache.layer(l), pos, atty.view(Shape{B, T, C}));
    // h is free again: it takes each branch's projection before the residual add.
    ops::matmul_fwd(ctx, h, atty, store.param(p(l, "attn.c_proj.weight")),
                    store.param(p(l, "attn.c_proj.bias")));
    ops::residual_fwd(ctx, x, h, x);
    ops::layernorm_fwd(ctx, h, mean, rstd, x, store.param(p(l, "ln_2.weight")),
                       store.param(p(l, "ln_2.bias")), cfg_.norm_eps);
    ops::matmul_fwd(ctx, fch, h, store.param(p(l, "mlp.c_fc.weight")),
                    store.param(p(l, "mlp.c_fc.bias")));
    ops::gelu_fwd(ctx, fch_gelu, fch);
    ops::matmul_fwd(ctx, h, fch_gelu, store.param(p(l, "mlp.c_proj.weight")),
                    store.param(p(l, "mlp.c_proj.bias")));
    ops::residual_fwd(ctx, x, h, x);
  }
  cache.set_length(pos + T);
  // The LM head only for the last position of each sequence.
  Tensor last = full.last.slice0(0, B);
  if (T == 1) {
    last = x;
  } else {
    for (int b = 0; b < B; ++b)
      copy_tensor(last.slice0(b, b + 1), x.slice0(int64_t(b) * T + T - 1, int64_t(b) * T + T));
  }
  const Tensor last_norm = full.last_norm.slice0(0, B), logits = full.logits.slice0(0, B);
  ops::layernorm_fwd(ctx, last_norm, full.last_mean.slice0(0, B), full.last_rstd.slice0(0, B), last,
                     store.param("ln_f.weight"), store.param("ln_f.bias"), cfg_.norm_eps);
  ops::matmul_fwd(ctx, logits, last_norm, wte, Tensor());
  return logits;
}

}  // namespace attnlab
