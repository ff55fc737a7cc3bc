#include "kernels/attention/attention_decode.cuh"

#include <cmath>

#include "core/nvtx.h"
#include "ops/op_checks.h"
#include "ops/ops.h"
#include "ref/attention_decode_ref.h"

namespace attnlab::ops {

using namespace detail;

namespace {
constexpr const char* kOp = "attention_decode";

struct CacheDims {
  int64_t B, Tq, max_T;
};

// qkv [B, Tq, layout.width()]; caches [B, n_kv_head, max_T, head_dim]; new tokens at positions
// pos .. pos+Tq-1.
CacheDims check_cache(const char* op, const ExecContext& ctx, DType* dt, const Tensor& qkv,
                      const Tensor& k_cache, const Tensor& v_cache, int pos,
                      const QKVLayout& layout) {
  *dt = require_packed_qkv(op, "qkv", qkv, layout, ctx);
  const int Hkv = layout.n_kv_head, D = layout.head_dim;
  ATTN_REQUIRE(D <= 128, "%s: head dim must be <= 128, got %d", op, D);
  require_present(op, "k_cache", k_cache);
  ATTN_REQUIRE(k_cache.ndim() == 4 && k_cache.dim(0) == qkv.dim(0) && k_cache.dim(1) == Hkv &&
                   k_cache.dim(3) == D,
               "%s: k_cache must be [B = %lld, n_kv_head = %d, max_T, D = %d], got %s", op,
               static_cast<long long>(qkv.dim(0)), Hkv, D, k_cache.str().c_str());
  require_tensor(op, "k_cache", k_cache, *dt, k_cache.shape, ctx);
  require_tensor(op, "v_cache", v_cache, *dt, k_cache.shape, ctx);
  const int64_t max_T = k_cache.dim(2);
  ATTN_REQUIRE(pos >= 0 && pos + qkv.dim(1) <= max_T,
               "%s: %lld new tokens at position %d do not fit a cache of %lld positions", op,
               static_cast<long long>(qkv.dim(1)), pos, static_cast<long long>(max_T));
  return {qkv.dim(0), qkv.dim(1), max_T};
}
}  // namespace

void kv_cache_write(const ExecContext& ctx, const Tensor& k_cache, const Tensor& v_cache,
                    const Tensor& qkv, int pos, const QKVLayout& layout) {
  NvtxRange range("kv_cache_write");
  constexpr const char* op = "kv_cache_write";
  DType dt;
  const CacheDims d = check_cache(op, ctx, &dt, qkv, k_cache, v_cache, pos, layout);
  auto make = [&]<typename T>() {
    KVCacheWriteParams<T> p;
    const T* base = static_cast<const T*>(qkv.data);
    p.k = base + layout.k_offset();
    p.v = base + layout.v_offset();
    p.src_batch_stride = d.Tq * layout.width();
    p.src_row_stride = layout.width();
    p.k_cache = static_cast<T*>(k_cache.data);
    p.v_cache = static_cast<T*>(v_cache.data);
    p.B = int(d.B);
    p.Tq = int(d.Tq);
    p.n_kv_head = layout.n_kv_head;
    p.D = layout.head_dim;
    p.max_T = int(d.max_T);
    p.pos = pos;
    return p;
  };
  run_op(ctx, dt, make, kv_cache_write_ref, launch_kv_cache_write<float>,
         launch_kv_cache_write<bf16>);
}

void attention_decode(const ExecContext& ctx, const Tensor& out, const Tensor& qkv,
                      const Tensor& k_cache, const Tensor& v_cache, int pos,
                      const QKVLayout& layout, int n_splits, int window) {
  NvtxRange range("attention_decode");
  DType dt;
  const CacheDims d = check_cache(kOp, ctx, &dt, qkv, k_cache, v_cache, pos, layout);
  require_tensor(kOp, "out", out, dt, Shape{d.B, d.Tq, layout.q_width()}, ctx);
  ATTN_REQUIRE(n_splits >= 0, "%s: n_splits must be >= 0, got %d", kOp, n_splits);
  ATTN_REQUIRE(window >= 0, "%s: window must be >= 0 (0 = full causal), got %d", kOp, window);
  auto make = [&]<typename T>() {
    AttentionDecodeParams<T> p;
    p.q = static_cast<const T*>(qkv.data);
    p.q_batch_stride = d.Tq * layout.width();
    p.q_row_stride = layout.width();
    p.k_cache = static_cast<const T*>(k_cache.data);
    p.v_cache = static_cast<const T*>(v_cache.data);
    p.o = static_cast<T*>(out.data);
    p.o_batch_stride = d.Tq * layout.q_width();
    p.o_row_stride = layout.q_width();
    p.B = int(d.B);
    p.Tq = int(d.Tq);
    p.n_head = layout.n_head;
    p.n_kv_head = layout.n_kv_head;
    p.D = layout.head_dim;
    p.max_T = int(d.max_T);
    p.pos = pos;
    p.n_splits = n_splits;
    p.scale = float(1.0 / std::sqrt(double(layout.head_dim)));
    p.mask.causal = true;
    p.mask.window = window >= d.max_T ? 0 : window;  // every cached key (ops/attention.cpp)
    return p;
  };
  run_op(ctx, dt, make, attention_decode_ref, launch_attention_decode<float>,
         launch_attention_decode<bf16>);
}

}  // namespace attnlab::ops
