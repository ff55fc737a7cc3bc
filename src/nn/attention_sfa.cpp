#include "nn/attention_sfa.h"

#include <algorithm>

#include "core/carver.h"
#include "ops/ops.h"
#include "ops/sfa_ops.h"

namespace attnlab {

int sfa_resolve_k(const SfaOptions& o, int head_dim) {
  const int k = o.k == 0 ? (head_dim + 7) / 8 : o.k;
  ATTN_REQUIRE(k >= 1 && k <= head_dim,
               "attention.sfa.k (%d) must be in [1, head dim %d]; 0 picks the default (%d)", o.k,
               head_dim, (head_dim + 7) / 8);
  return k;
}

bool sfa_use_flash(SfaOptions::Kernel kernel, const ExecContext& ctx, DType dtype, int head_dim) {
  if (kernel != SfaOptions::Kernel::flash) return false;  // auto is masked_dense (header)
  ATTN_REQUIRE(ops::sfa_flash_supported(ctx, dtype, head_dim),
               "attention.sfa.kernel flash: FlashSFA runs on the CPU or on CUDA in bf16 with "
               "head dim 64 or 128, got %s with head dim %d; use auto or masked_dense",
               dtype_name(dtype), head_dim);
  return true;
}

namespace {
// A generate-mode chunk's scratch: for a prefill on the forward's kernels (pos 0, several tokens,
// prefill_on_forward: the masked-dense path's tensor-core flash attention) the masked q~, k~, v
// [B, T, width] and the lse; else the q~ (q_idx, q_val [B, T, n_head, k]) that the sparse cache's
// rows read (decode steps, and other prefills).
struct SfaChunk {
  Tensor q_idx, q_val, masked, lse;
  bool prefill = false;
};

SfaChunk carve_chunk(Carver& c, Device dev, int64_t B, int64_t T, int pos, const QKVLayout& l,
                     DType dt, int k) {
  SfaChunk ch;
  ch.prefill = pos == 0 && T > 1 && prefill_on_forward(dev, dt, l.head_dim);
  if (ch.prefill) {
    ch.masked = c.take(dt, Shape{B, T, l.width()});
    ch.lse = c.take(DType::f32, Shape{B, l.n_head, T});
  } else {
    const Shape qs{B, T, l.n_head, k};
    ch.q_idx = c.take(DType::i32, qs);
    ch.q_val = c.take(dt, qs);
  }
  return ch;
}
}  // namespace

struct SfaAttention::Views {
  Tensor qkv_sparse;                  // [B, T, W]: q~, k~, v of the last forward (masked_dense)
  Tensor q_idx, q_val, k_idx, k_val;  // [B, T, heads, k]: the sparse form (flash)
  Tensor lse;                         // [B, H, T] f32
  Tensor teacher;                     // [B, T, H*D] dense output (distillation)
  Tensor teacher_lse;                 // [B, H, T] f32
  Tensor dout;                        // [B, T, H*D] dO~ with the distillation gradient added
};

SfaAttention::SfaAttention(const AttentionOptions& opts) : opts_(opts.sfa), n_layer_(opts.n_layer) {
  ATTN_REQUIRE(n_layer_ >= 1, "sfa: n_layer must be >= 1, got %d", n_layer_);
  ATTN_REQUIRE(opts.window == 0,
               "attention.window (%d) does not apply to sfa (full causal only); set "
               "attention.window=0",
               opts.window);
  ATTN_REQUIRE(opts_.k >= 0, "attention.sfa.k must be >= 0, got %d", opts_.k);
  ATTN_REQUIRE(opts_.distill >= 0.f, "attention.sfa.distill must be >= 0, got %g",
               double(opts_.distill));
}

SfaAttention::Views SfaAttention::views(const Buffer* buf, const QKVLayout& l, DType dt, int64_t B,
                                        int64_t T, bool flash, size_t* used) const {
  Carver c(buf);
  Views v;
  if (flash) {
    const int k = sfa_resolve_k(opts_, l.head_dim);
    const Shape qs{B, T, l.n_head, k}, ks{B, T, l.n_kv_head, k};
    v.q_idx = c.take(DType::i32, qs);
    v.q_val = c.take(dt, qs);
    v.k_idx = c.take(DType::i32, ks);
    v.k_val = c.take(dt, ks);
  } else {
    v.qkv_sparse = c.take(dt, Shape{B, T, l.width()});
  }
  v.lse = c.take(DType::f32, Shape{B, l.n_head, T});
  if (distills()) {
    v.teacher = c.take(dt, Shape{B, T, l.q_width()});
    v.teacher_lse = c.take(DType::f32, Shape{B, l.n_head, T});
    v.dout = c.take(dt, Shape{B, T, l.q_width()});
  }
  if (used) *used = c.bytes();
  return v;
}

void SfaAttention::allocate(const ExecContext& ctx, const AttentionShape& s, DType dtype) {
  k_ = sfa_resolve_k(opts_, s.layout.head_dim);
  shape_ = s;
  dtype_ = dtype;
  buf_ = Buffer(ctx.device, state_bytes(s, dtype));
  last_B_ = last_T_ = 0;
}

void SfaAttention::forward(const ExecContext& ctx, const AttentionInputs& in, const Tensor& out) {
  const int64_t B = in.qkv.dim(0), T = in.qkv.dim(1);
  if (in.mode == AttentionMode::generate) {
    ATTN_REQUIRE(in.cache != nullptr, "sfa attention: generate mode needs a decode cache");
    auto& cache = dynamic_cast<SfaKVCache&>(*in.cache);
    ATTN_ASSERT(in.scratch != nullptr);
    Carver c(in.scratch->at_least(
        decode_scratch_bytes(ctx, int(B), int(T), in.pos, in.layout, in.qkv.dtype)));
    const SfaChunk ch = carve_chunk(c, ctx.device, B, T, in.pos, in.layout, in.qkv.dtype, cache.k);
    ops::sfa_cache_write(ctx, ch.q_idx, ch.q_val, cache.k_idx, cache.k_val, cache.v, in.qkv, in.pos,
                         in.layout);
    if (ch.prefill)
      ops::sfa_attention_fwd(ctx, out, ch.lse, ch.masked, in.qkv, in.layout, cache.k);
    else
      ops::sfa_attention_decode(ctx, out, Tensor(), ch.q_idx, ch.q_val, cache.k_idx, cache.k_val,
                                cache.v, in.pos, in.layout);
    return;
  }
  ATTN_ASSERT(in.pos == 0 && B <= shape_.B && T <= shape_.T);
  last_B_ = B;
  last_T_ = T;
  last_flash_ = sfa_use_flash(opts_.kernel, ctx, dtype_, in.layout.head_dim);
  const Views v = views(&buf_, shape_.layout, dtype_, B, T, last_flash_, nullptr);
  if (last_flash_) {
    ops::sfa_flash_fwd(ctx, out, v.lse, v.q_idx, v.q_val, v.k_idx, v.k_val, in.qkv, in.layout);
  } else {
    ops::sfa_attention_fwd(ctx, out, v.lse, v.qkv_sparse, in.qkv, in.layout, k_);
  }
  // The teacher runs in every train forward that distills (also the recompute's, whose total is
  // null), since the backward reads it.
  last_distilled_ = distills() && in.mode == AttentionMode::train;
  if (!last_distilled_) return;
  ops::attention_fwd(ctx, v.teacher, v.teacher_lse, in.qkv, in.layout);
  if (in.aux.total)
    ops::sfa_distill_fwd(ctx, in.aux.total, out, v.teacher, in.aux.scale * distill_weight());
}

void SfaAttention::backward(const ExecContext& ctx, const AttentionInputs& in, const Tensor& out,
                            const Tensor& dout, const Tensor& dqkv, const Tensor& /*dh*/) {
  const int64_t B = in.qkv.dim(0), T = in.qkv.dim(1);
  ATTN_ASSERT(B == last_B_ && T == last_T_);
  const Views v = views(&buf_, shape_.layout, dtype_, B, T, last_flash_, nullptr);
  Tensor d = dout;
  if (last_distilled_ && in.aux.total) {
    ops::sfa_distill_bwd(ctx, v.dout, dout, out, v.teacher, in.aux.scale * distill_weight());
    d = v.dout;
  }
  if (last_flash_) {
    ops::sfa_flash_bwd(ctx, dqkv, d, out, v.lse, v.q_idx, v.q_val, v.k_idx, v.k_val, in.qkv,
                       in.layout);
  } else {
    ops::sfa_attention_bwd(ctx, dqkv, d, v.qkv_sparse, out, v.lse, in.qkv, in.layout, k_);
  }
}

// The saved state of the path the module runs (kernel flash: either, the larger).
size_t SfaAttention::state_bytes(const AttentionShape& s, DType dtype) const {
  size_t masked = 0, flash = 0;
  views(nullptr, s.layout, dtype, s.B, s.T, false, &masked);
  if (opts_.kernel == SfaOptions::Kernel::flash)
    views(nullptr, s.layout, dtype, s.B, s.T, true, &flash);
  return std::max(masked, flash);
}

size_t SfaAttention::decode_scratch_bytes(const ExecContext& ctx, int B, int T, int pos,
                                          const QKVLayout& layout, DType dtype) const {
  Carver count;
  carve_chunk(count, ctx.device, B, T, pos, layout, dtype, sfa_resolve_k(opts_, layout.head_dim));
  return count.bytes();
}

size_t SfaAttention::saved_bytes(const AttentionShape& s, DType dtype) const {
  return state_bytes(s, dtype);
}

std::unique_ptr<AttentionCache> SfaAttention::make_cache(const ExecContext& ctx, int B, int max_T,
                                                         const QKVLayout& layout,
                                                         DType dtype) const {
  return std::make_unique<SfaKVCache>(ctx, B, max_T, layout, dtype,
                                      sfa_resolve_k(opts_, layout.head_dim));
}

std::string SfaAttention::eval_mode() const {
  if (k_ == 0) return "";  // not allocated: k not resolved yet
  return strformat("sfa k %d of %d (%s path)", k_, shape_.layout.head_dim,
                   opts_.kernel == SfaOptions::Kernel::flash ? "FlashSFA" : "masked-dense");
}

std::string SfaKVCache::decode_mode() const {
  return strformat("sfa k %d of %d (sparse KV cache)", k, int(v.shape[3]));
}

std::vector<std::string> SfaAttention::config_warnings(int64_t /*T*/) const {
  const int D = shape_.layout.head_dim;
  if (D <= ops::kSfaCacheMaxHeadDim) return {};
  return {strformat(
      "attention.sfa with head dim %d: the model trains and evaluates, but `generate` cannot "
      "decode it (its KV cache stores key coordinates in one byte: head dim <= %d)",
      D, ops::kSfaCacheMaxHeadDim)};
}

SfaKVCache::SfaKVCache(const ExecContext& ctx, int B, int max_T, const QKVLayout& layout,
                       DType dtype, int k_)
    : k(k_) {
  ATTN_REQUIRE(B >= 1 && max_T >= 1, "KV cache: batch and length must be >= 1 (got %d, %d)", B,
               max_T);
  const int Hkv = layout.n_kv_head, D = layout.head_dim;
  ATTN_REQUIRE(D <= ops::kSfaCacheMaxHeadDim,
               "sfa KV cache: key coordinates are stored in one byte, so head dim must be <= %d, "
               "got %d",
               ops::kSfaCacheMaxHeadDim, D);
  auto lay = [&](Carver& c) {
    k_idx = c.take(DType::u8, Shape{B, Hkv, max_T, k});
    k_val = c.take(dtype, Shape{B, Hkv, max_T, k});
    v = c.take(dtype, Shape{B, Hkv, max_T, D});
  };
  Carver count;
  lay(count);
  buf_ = Buffer(ctx.device, count.bytes());
  Carver bind(&buf_);
  lay(bind);
  bytes_per_token_ = size_t(Hkv) * (size_t(k) * (sizeof(uint8_t) + dtype_size(dtype)) +
                                    size_t(D) * dtype_size(dtype));
}

}  // namespace attnlab
