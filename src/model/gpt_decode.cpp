// GPT incremental decoding: prefill and decode_step over a KVCache (declared in model/gpt.h).
//
// A chunk of T new tokens at positions pos .. pos+T-1 runs the same block forward as training
// (Block::forward in generate mode: each attention module appends to its own layer cache and
// attends over it), keeps only one layer's activations (no backward), and computes the LM head for
// the last position only. Positions index wpe (or RoPE's angles) from pos, so the logits equal
// those of forward() on the whole prefix. The activations live in the cache's scratch buffer,
// carved for the chunk's B x T tokens by the same code that sizes it (the buffer grows to the
// largest chunk run), so a prefill needs no training-sized allocation and a long-context cache no
// max_T-sized one.
#include <algorithm>

#include "core/error.h"
#include "core/nvtx.h"
#include "model/gpt.h"
#include "ops/ops.h"

namespace attnlab {

namespace {

// The decoding activations of a chunk of B x T tokens (a counting carver sizes them).
struct DecodeActs {
  BlockActs layer;  // shared by every layer; layer.out alternates between x0 and x1
  Tensor x0, x1;    // [B T, C] the residual stream in and out of a layer
  Tensor last, last_norm, last_mean, last_rstd, logits;  // [B, ...]
};

DecodeActs carve_decode(Carver& cv, const GPTConfig& cfg, int B, int T, DType dt) {
  DecodeActs a;
  const int64_t rows = int64_t(B) * T, C = cfg.n_embd;
  a.layer = Block::carve(cv, cfg, B, T, dt, /*keep_gelu=*/true, /*keep_out=*/false);
  a.x0 = cv.take(dt, Shape{rows, C});
  a.x1 = cv.take(dt, Shape{rows, C});
  a.last = cv.take(dt, Shape{B, C});
  a.last_norm = cv.take(dt, Shape{B, C});
  if (cfg.norm == NormType::layernorm) a.last_mean = cv.take(DType::f32, Shape{B});
  a.last_rstd = cv.take(DType::f32, Shape{B});
  a.logits = cv.take(dt, Shape{B, cfg.padded_vocab});
  return a;
}

}  // namespace

KVCache GPT::make_kv_cache(const ExecContext& ctx, int B, int max_T, DType dtype) const {
  ATTN_REQUIRE(max_T >= 1 && max_T <= cfg_.block_size,
               "KV cache length %d must be in [1, model.block_size = %d]", max_T, cfg_.block_size);
  ATTN_REQUIRE(B >= 1, "KV cache batch must be >= 1, got %d", B);
  std::vector<std::unique_ptr<AttentionCache>> layers;
  for (const Block& b : blocks_)
    layers.push_back(b.attention().make_cache(ctx, B, max_T, cfg_.qkv_layout(), dtype));
  return KVCache(ctx, std::move(layers), B, max_T, dtype);
}

void GPT::reserve_decode(const ExecContext& ctx, KVCache& cache, int T) const {
  ATTN_REQUIRE(T >= 1 && T <= cache.max_len(), "reserve_decode: %d tokens outside [1, %d]", T,
               cache.max_len());
  const int B = cache.batch();
  Carver count;
  carve_decode(count, cfg_, B, T, cache.dtype());
  cache.scratch_for(count.bytes());
  size_t attention = 0;
  for (const Block& b : blocks_)
    attention =
        std::max(attention, b.attention().decode_reserve_bytes(ctx, B, T, cache.max_len(),
                                                               cfg_.qkv_layout(), cache.dtype()));
  cache.attention_scratch().at_least(attention);
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
  const int64_t C = cfg_.n_embd;
  Carver count;
  carve_decode(count, cfg_, B, T, dt);
  Carver cv(cache.scratch_for(count.bytes()));
  const DecodeActs full = carve_decode(cv, cfg_, B, T, dt);
  BlockActs a = full.layer;
  Tensor x = full.x0, y = full.x1;
  ops::embedding_fwd(ctx, x.view(Shape{B, T, C}), tokens, wte_,
                     wpe_.empty() ? wpe_ : wpe_.slice0(pos, wpe_.dim(0)));
  BlockRun run;
  run.mode = AttentionMode::generate;
  run.pos = pos;
  run.scratch = &cache.attention_scratch();
  for (int l = 0; l < cfg_.n_layer; ++l) {
    NvtxRange lr("layer.decode");
    a.out = y;
    run.cache = &cache.layer(l);
    blocks_[size_t(l)].forward(ctx, x, a, run, /*ob=*/nullptr);
    std::swap(x, y);
  }
  cache.set_length(pos + T);
  // The LM head only for the last position of each sequence.
  Tensor last = full.last;
  if (T == 1) {
    last = x;
  } else {
    for (int b = 0; b < B; ++b)
      copy_tensor(last.slice0(b, b + 1), x.slice0(int64_t(b) * T + T - 1, int64_t(b) * T + T));
  }
  norm_fwd(ctx, cfg_, full.last_norm, full.last_mean, full.last_rstd, last, {lnf_w_, lnf_b_});
  ops::matmul_fwd(ctx, full.logits, full.last_norm, head_weight(false), Tensor());
  return full.logits;
}

}  // namespace attnlab
