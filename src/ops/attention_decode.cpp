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
  int64_t B, Tq, C, H, Hkv, D, max_T;
};

// qkv [B, Tq, 3C] (C = n_head * D); caches [B, Hkv, max_T, D] with Hkv = n_head (the packed
// layout has as many kv heads as query heads); new tokens at positions pos .. pos+Tq-1.
CacheDims check_cache(const char* op, const ExecContext& ctx, DType* dt, const Tensor& qkv,
                      const Tensor& k_cache, const Tensor& v_cache, int pos, int n_head) {
  *dt = require_activation(op, "qkv", qkv, ctx, 3);
  ATTN_REQUIRE(qkv.ndim() == 3 && qkv.dim(2) % 3 == 0 && qkv.dim(2) > 0,
               "%s: qkv must be [B, T, 3 * C], got %s", op, qkv.str().c_str());
  const int64_t C = qkv.dim(2) / 3;
  ATTN_REQUIRE(n_head > 0 && C % n_head == 0,
               "%s: n_head (%d) must divide the model width C = %lld", op, n_head,
               static_cast<long long>(C));
  const int64_t D = C / n_head;
  ATTN_REQUIRE(D <= 128, "%s: head dim must be <= 128, got %lld", op, static_cast<long long>(D));
  require_present(op, "k_cache", k_cache);
  ATTN_REQUIRE(k_cache.ndim() == 4 && k_cache.dim(0) == qkv.dim(0) && k_cache.dim(1) == n_head &&
                   k_cache.dim(3) == D,
               "%s: k_cache must be [B = %lld, n_head = %d, max_T, D = %lld], got %s", op,
               static_cast<long long>(qkv.dim(0)), n_head, static_cast<long long>(D),
               k_cache.str().c_str());
  require_tensor(op, "k_cache", k_cache, *dt, k_cache.shape, ctx);
  require_tensor(op, "v_cache", v_cache, *dt, k_cache.shape, ctx);
  const int64_t max_T = k_cache.dim(2);
  ATTN_REQUIRE(pos >= 0 && pos + qkv.dim(1) <= max_T,
               "%s: %lld new tokens at position %d do not fit a cache of %lld positions", op,
               static_cast<long long>(qkv.dim(1)), pos, static_cast<long long>(max_T));
  ATTN_REQUIRE(qkv.dim(0) * qkv.dim(1) <= 65535, "%s: B * T = %lld exceeds 65535", op,
               static_cast<long long>(qkv.dim(0) * qkv.dim(1)));
  return {qkv.dim(0), qkv.dim(1), C, n_head, n_head, D, max_T};
}
}  // namespace

void kv_cache_write(const ExecContext& ctx, const Tensor& k_cache, const Tensor& v_cache,
                    const Tensor& qkv, int pos, const QKVLayout& layout) {
  NvtxRange range("kv_cache_write");
  ATTN_REQUIRE(layout.n_kv_head == layout.n_head, "kv_cache_write: GQA pending");
  const int n_head = layout.n_head;
  constexpr const char* op = "kv_cache_write";
  DType dt;
  const CacheDims d = check_cache(op, ctx, &dt, qkv, k_cache, v_cache, pos, n_head);
  auto make = [&]<typename T>() {
    KVCacheWriteParams<T> p;
    const T* base = static_cast<const T*>(qkv.data);
    p.k = base + d.C;
    p.v = base + 2 * d.C;
    p.src_batch_stride = d.Tq * 3 * d.C;
    p.src_row_stride = 3 * d.C;
    p.k_cache = static_cast<T*>(k_cache.data);
    p.v_cache = static_cast<T*>(v_cache.data);
    p.B = int(d.B);
    p.Tq = int(d.Tq);
    p.n_kv_head = int(d.Hkv);
    p.D = int(d.D);
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
  ATTN_REQUIRE(layout.n_kv_head == layout.n_head && window == 0, "attention_decode: GQA pending");
  const int n_head = layout.n_head;
  DType dt;
  const CacheDims d = check_cache(kOp, ctx, &dt, qkv, k_cache, v_cache, pos, n_head);
  require_tensor(kOp, "out", out, dt, Shape{d.B, d.Tq, d.C}, ctx);
  ATTN_REQUIRE(n_splits >= 0, "%s: n_splits must be >= 0, got %d", kOp, n_splits);
  auto make = [&]<typename T>() {
    AttentionDecodeParams<T> p;
    p.q = static_cast<const T*>(qkv.data);
    p.q_batch_stride = d.Tq * 3 * d.C;
    p.q_row_stride = 3 * d.C;
    p.k_cache = static_cast<const T*>(k_cache.data);
    p.v_cache = static_cast<const T*>(v_cache.data);
    p.o = static_cast<T*>(out.data);
    p.o_batch_stride = d.Tq * d.C;
    p.o_row_stride = d.C;
    p.B = int(d.B);
    p.Tq = int(d.Tq);
    p.n_head = int(d.H);
    p.n_kv_head = int(d.Hkv);
    p.D = int(d.D);
    p.max_T = int(d.max_T);
    p.pos = pos;
    p.n_splits = n_splits;
    p.scale = float(1.0 / std::sqrt(double(d.D)));
    return p;
  };
  run_op(ctx, dt, make, attention_decode_ref, launch_attention_decode<float>,
         launch_attention_decode<bf16>);
}

}  // namespace attnlab::ops
