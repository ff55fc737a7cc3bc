// GPT incremental decoding: prefill and decode_step over a KVCache (declared in model/gpt.h).
//
// A chunk of T new tokens at positions pos .. pos+T-1 runs the same block forward as training
// (Block::forward in generate mode: each attention module appends to its own layer cache and
// attends over it), keeps only one layer's activations (no backward), and computes the LM head for
// the last position only. Positions index wpe (or RoPE's angles) from pos, so the logits equal
// those of forward() on the whole prefix. The activations live in the cache's scratch buffer,
// carved by the same code that sizes it, for B * max_T tokens, so a prefill needs no training-sized
// allocation.
#include "core/error.h"
#include "core/nvtx.h"
#include "model/gpt.h"
#include "ops/ops.h"

namespace attnlab {

namespace {

// The decoding activations for chunks of up to B x T_max tokens (a counting carver sizes them).
struct DecodeActs {
  BlockActs layer;  // shared by every layer; layer.out alternates between x0 and x1
  Tensor x0, x1;    // [rows, C] the residual stream in and out of a layer
  Tensor last, last_norm, last_mean, last_rstd, logits;  // [B, ...]
};

DecodeActs carve_decode(Carver& cv, const GPTConfig& cfg, int B, int T_max, DType dt) {
  DecodeActs a;
  const int64_t rows = int64_t(B) * T_max, C = cfg.n_embd;
  a.layer = Block::carve(cv, cfg, B, T_max, dt, /*keep_gelu=*/true, /*keep_out=*/false);
  a.x0 = cv.take(dt, Shape{rows, C});
  a.x1 = cv.take(dt, Shape{rows, C});
  a.last = cv.take(dt, Shape{B, C});
  a.last_norm = cv.take(dt, Shape{B, C});
  if (cfg.norm == NormType::layernorm) a.last_mean = cv.take(DType::f32, Shape{B});
  a.last_rstd = cv.take(DType::f32, Shape{B});
  a.logits = cv.take(dt, Shape{B, cfg.padded_vocab});
  return a;
}

// The first B x T tokens' view of a layer's activations carved for B x T_max.
BlockActs chunk_view(const BlockActs& f, int B, int T) {
  const int64_t BT = int64_t(B) * T;
  auto rows = [&](const Tensor& t) { return t.empty() ? t : t.slice0(0, BT); };
  auto bt = [&](const Tensor& t) {
    return t.view(Shape{t.dim(0) * t.dim(1), t.dim(2)}).slice0(0, BT).view(Shape{B, T, t.dim(2)});
  };
  BlockActs a;
  a.ln1 = rows(f.ln1), a.ln1_mean = rows(f.ln1_mean), a.ln1_rstd = rows(f.ln1_rstd);
  a.qkv = bt(f.qkv), a.atty = bt(f.atty), a.res2 = rows(f.res2);
  a.ln2 = rows(f.ln2), a.ln2_mean = rows(f.ln2_mean), a.ln2_rstd = rows(f.ln2_rstd);
  a.fch = rows(f.fch), a.fch_act = rows(f.fch_act);
  if (!f.lora_u.empty()) a.lora_u = rows(f.lora_u);
  return a;
}

}  // namespace

KVCache GPT::make_kv_cache(const ExecContext& ctx, int B, int max_T, DType dtype) const {
  ATTN_REQUIRE(max_T >= 1 && max_T <= cfg_.block_size,
               "KV cache length %d must be in [1, model.block_size = %d]", max_T, cfg_.block_size);
  ATTN_REQUIRE(B >= 1, "KV cache batch must be >= 1, got %d", B);
  Carver count;
  carve_decode(count, cfg_, B, max_T, dtype);
  std::vector<std::unique_ptr<AttentionCache>> layers;
  for (const Block& b : blocks_)
    layers.push_back(b.attention().make_cache(ctx, B, max_T, cfg_.qkv_layout(), dtype));
  return KVCache(ctx, std::move(layers), B, max_T, dtype, count.bytes());
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
               "decode_step: tokens must be i32[B, 1], got %s", tokens.str().c_str());
  ATTN_REQUIRE(cache.free_positions() > 0,
               "decode_step: the KV cache is full (%d tokens); prefill a shorter context to "
               "continue",
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
               "%d new tokens after %d cached ones exceed the KV cache length %d", T, pos,
               cache.max_len());
  bind(store);
  const DType dt = wte_.dtype;
  ATTN_REQUIRE(cache.dtype() == dt && cache.device() == ctx.device,
               "KV cache is %s on %s, the parameters %s on %s", dtype_name(cache.dtype()),
               device_name(cache.device()), dtype_name(dt), device_name(ctx.device));
  const int64_t C = cfg_.n_embd, BT = int64_t(B) * T;
  Carver cv(cache.scratch());
  const DecodeActs full = carve_decode(cv, cfg_, B, cache.max_len(), dt);
  BlockActs a = chunk_view(full.layer, B, T);
  Tensor x = full.x0.slice0(0, BT), y = full.x1.slice0(0, BT);
  ops::embedding_fwd(ctx, x.view(Shape{B, T, C}), tokens, wte_,
                     wpe_.empty() ? wpe_ : wpe_.slice0(pos, wpe_.dim(0)));
  BlockRun run;
  run.mode = AttentionMode::generate;
  run.pos = pos;
  for (int l = 0; l < cfg_.n_layer; ++l) {
    NvtxRange lr("layer.decode");
    a.out = y;
    run.cache = &cache.layer(l);
    blocks_[size_t(l)].forward(ctx, x, a, run, /*ob=*/nullptr);
    std::swap(x, y);
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
  const Tensor last_mean = full.last_mean.empty() ? Tensor() : full.last_mean.slice0(0, B);
  norm_fwd(ctx, cfg_, last_norm, last_mean, full.last_rstd.slice0(0, B), last, {lnf_w_, lnf_b_});
  ops::matmul_fwd(ctx, logits, last_norm, head_weight(false), Tensor());
  return logits;
}

}  // namespace attnlab
