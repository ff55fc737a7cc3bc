#include <cmath>

#include "core/nvtx.h"
#include "ops/op_checks.h"
#include "ops/ops.h"
#include "ops/sfa_ops.h"
#include "ref/sfa_ref.h"

namespace attnlab::ops {

using namespace detail;

namespace {

constexpr const char* kOp = "sfa";

template <typename T>
T* ptr(const Tensor& t) {
  return t.empty() ? nullptr : static_cast<T*>(t.data);
}

// qkv [B, T, width], a valid layout and 1 <= k <= head_dim; returns the activation dtype.
DType check_qkv(const char* op, const ExecContext& ctx, const Tensor& qkv, const QKVLayout& l,
                int k) {
  const DType dt = require_activation(op, "qkv", qkv, ctx, 3);
  ATTN_REQUIRE(l.n_head > 0 && l.n_kv_head > 0 && l.head_dim > 0 && l.n_head % l.n_kv_head == 0,
               "%s: n_kv_head (%d) must divide n_head (%d), head dim %d", op, l.n_kv_head, l.n_head,
               l.head_dim);
  ATTN_REQUIRE(qkv.ndim() == 3 && qkv.dim(2) == l.width(), "%s: qkv must be [B, T, %lld], got %s",
               op, (long long)l.width(), qkv.str().c_str());
  ATTN_REQUIRE(k >= 1 && k <= l.head_dim,
               "%s: k (attention.sfa.k) must be in [1, head dim %d], got %d", op, l.head_dim, k);
  ATTN_REQUIRE(ctx.device == Device::cpu || l.head_dim <= 128,
               "%s: head dim must be <= 128 on CUDA, got %d", op, l.head_dim);
  return dt;
}

template <typename T>
SfaSelectParams<T> select_params(const Tensor& qkv, const QKVLayout& l, int k) {
  SfaSelectParams<T> p;
  p.qkv = ptr<T>(qkv);
  p.B = int(qkv.dim(0));
  p.T = int(qkv.dim(1));
  p.n_head = l.n_head;
  p.n_kv_head = l.n_kv_head;
  p.D = l.head_dim;
  p.k = k;
  return p;
}

// Packed [B, T, heads, k] strides.
void packed_strides(int64_t T, int heads, int k, int64_t* batch, int64_t* row, int64_t* head) {
  *head = k;
  *row = int64_t(heads) * k;
  *batch = T * *row;
}

// A cache [B, n_kv_head, max_T, width] from position pos: (offset, batch, row, head) strides.
struct CacheStrides {
  int64_t offset, batch, row, head;
};
CacheStrides cache_strides(int n_kv_head, int64_t max_T, int width, int pos) {
  return {int64_t(pos) * width, int64_t(n_kv_head) * max_T * width, width, max_T * width};
}

void run_select(const ExecContext& ctx, DType dt, auto&& make) {
  run_op<SfaSelectParams>(ctx, dt, make, sfa_select_ref, launch_sfa_select<float>,
                          launch_sfa_select<bf16>);
}

}  // namespace

void sfa_select(const ExecContext& ctx, const Tensor& qkv, const QKVLayout& layout, int k,
                const Tensor& q_idx, const Tensor& q_val, const Tensor& k_idx,
                const Tensor& k_val) {
  NvtxRange range("sfa_select");
  const DType dt = check_qkv("sfa_select", ctx, qkv, layout, k);
  const int64_t B = qkv.dim(0), T = qkv.dim(1);
  const Shape qs{B, T, layout.n_head, k}, ks{B, T, layout.n_kv_head, k};
  if (!q_idx.empty()) require_tensor("sfa_select", "q_idx", q_idx, DType::i32, qs, ctx);
  if (!q_val.empty()) require_tensor("sfa_select", "q_val", q_val, dt, qs, ctx);
  if (!k_idx.empty()) require_tensor("sfa_select", "k_idx", k_idx, DType::i32, ks, ctx);
  if (!k_val.empty()) require_tensor("sfa_select", "k_val", k_val, dt, ks, ctx);
  auto make = [&]<typename T_>() {
    SfaSelectParams<T_> p = select_params<T_>(qkv, layout, k);
    p.q_idx = ptr<int32_t>(q_idx);
    p.q_val = ptr<T_>(q_val);
    packed_strides(T, layout.n_head, k, &p.q_batch_stride, &p.q_row_stride, &p.q_head_stride);
    p.k_idx = ptr<int32_t>(k_idx);
    p.k_val = ptr<T_>(k_val);
    packed_strides(T, layout.n_kv_head, k, &p.k_batch_stride, &p.k_row_stride, &p.k_head_stride);
    return p;
  };
  run_select(ctx, dt, make);
}

void sfa_sparsify(const ExecContext& ctx, const Tensor& dst, const Tensor& src, const Tensor& qkv,
                  const QKVLayout& layout, int k) {
  NvtxRange range("sfa_sparsify");
  const DType dt = check_qkv("sfa_sparsify", ctx, qkv, layout, k);
  require_tensor("sfa_sparsify", "src", src, dt, qkv.shape, ctx);
  require_tensor("sfa_sparsify", "dst", dst, dt, qkv.shape, ctx);
  auto make = [&]<typename T_>() {
    SfaSelectParams<T_> p = select_params<T_>(qkv, layout, k);
    p.mask_src = ptr<T_>(src);
    p.mask_dst = ptr<T_>(dst);
    return p;
  };
  run_select(ctx, dt, make);
}

void sfa_attention_fwd(const ExecContext& ctx, const Tensor& out, const Tensor& lse,
                       const Tensor& qkv_sparse, const Tensor& qkv, const QKVLayout& layout,
                       int k) {
  NvtxRange range("sfa_attention_fwd");
  sfa_sparsify(ctx, qkv_sparse, qkv, qkv, layout, k);
  attention_fwd(ctx, out, lse, qkv_sparse, layout);
}

void sfa_attention_bwd(const ExecContext& ctx, const Tensor& dqkv, const Tensor& dout,
                       const Tensor& qkv_sparse, const Tensor& out, const Tensor& lse,
                       const Tensor& qkv, const QKVLayout& layout, int k) {
  NvtxRange range("sfa_attention_bwd");
  attention_bwd(ctx, dqkv, dout, qkv_sparse, out, lse, layout);
  sfa_sparsify(ctx, dqkv, dqkv, qkv, layout, k);  // straight-through: dq, dk on the selection
}

namespace {
// k_idx_cache (u8: one byte per coordinate, so head dim <= 256), k_val_cache
// [B, n_kv_head, max_T, k], v_cache [B, n_kv_head, max_T, D]; returns (max_T, k).
std::pair<int64_t, int> check_cache(const char* op, const ExecContext& ctx, DType dt, int64_t B,
                                    const Tensor& k_idx, const Tensor& k_val, const Tensor& v,
                                    const QKVLayout& l) {
  ATTN_REQUIRE(l.head_dim <= kSfaCacheMaxHeadDim,
               "%s: the sparse KV cache stores key coordinates in one byte, so head dim must be "
               "<= %d, got %d",
               op, kSfaCacheMaxHeadDim, l.head_dim);
  require_present(op, "k_idx_cache", k_idx);
  ATTN_REQUIRE(k_idx.ndim() == 4, "%s: k_idx_cache must be [B, n_kv_head, max_T, k], got %s", op,
               k_idx.str().c_str());
  const int64_t max_T = k_idx.dim(2);
  const int k = int(k_idx.dim(3));
  require_tensor(op, "k_idx_cache", k_idx, DType::u8, Shape{B, l.n_kv_head, max_T, k}, ctx);
  require_tensor(op, "k_val_cache", k_val, dt, k_idx.shape, ctx);
  require_tensor(op, "v_cache", v, dt, Shape{B, l.n_kv_head, max_T, l.head_dim}, ctx);
  return {max_T, k};
}
}  // namespace

void sfa_cache_write(const ExecContext& ctx, const Tensor& q_idx, const Tensor& q_val,
                     const Tensor& k_idx_cache, const Tensor& k_val_cache, const Tensor& v_cache,
                     const Tensor& qkv, int pos, const QKVLayout& layout) {
  NvtxRange range("sfa_cache_write");
  constexpr const char* op = "sfa_cache_write";
  const DType dt = require_activation(op, "qkv", qkv, ctx, 3);
  const int64_t B = qkv.dim(0), Tq = qkv.dim(1);
  const auto [max_T, k] = check_cache(op, ctx, dt, B, k_idx_cache, k_val_cache, v_cache, layout);
  check_qkv(op, ctx, qkv, layout, k);
  ATTN_REQUIRE(pos >= 0 && pos + Tq <= max_T,
               "%s: %lld new tokens at position %d do not fit a cache of %lld positions", op,
               (long long)Tq, pos, (long long)max_T);
  const Shape qs{B, Tq, layout.n_head, k};
  if (!q_idx.empty()) require_tensor(op, "q_idx", q_idx, DType::i32, qs, ctx);
  if (!q_val.empty()) require_tensor(op, "q_val", q_val, dt, qs, ctx);
  auto make = [&]<typename T_>() {
    SfaSelectParams<T_> p = select_params<T_>(qkv, layout, k);
    p.q_idx = ptr<int32_t>(q_idx);
    p.q_val = ptr<T_>(q_val);
    packed_strides(Tq, layout.n_head, k, &p.q_batch_stride, &p.q_row_stride, &p.q_head_stride);
    const CacheStrides ks = cache_strides(layout.n_kv_head, max_T, k, pos);
    p.k_idx8 = ptr<uint8_t>(k_idx_cache) + ks.offset;
    p.k_val = ptr<T_>(k_val_cache) + ks.offset;
    p.k_batch_stride = ks.batch, p.k_row_stride = ks.row, p.k_head_stride = ks.head;
    const CacheStrides vs = cache_strides(layout.n_kv_head, max_T, layout.head_dim, pos);
    p.v_out = ptr<T_>(v_cache) + vs.offset;
    p.v_batch_stride = vs.batch, p.v_row_stride = vs.row, p.v_head_stride = vs.head;
    return p;
  };
  run_select(ctx, dt, make);
}

void sfa_attention_decode(const ExecContext& ctx, const Tensor& out, const Tensor& lse,
                          const Tensor& q_idx, const Tensor& q_val, const Tensor& k_idx_cache,
                          const Tensor& k_val_cache, const Tensor& v_cache, int pos,
                          const QKVLayout& l) {
  NvtxRange range("sfa_attention_decode");
  constexpr const char* op = "sfa_attention_decode";
  const DType dt = require_activation(op, "q_val", q_val, ctx, 4);
  const int64_t B = q_val.dim(0), Tq = q_val.dim(1);
  const auto [max_T, k] = check_cache(op, ctx, dt, B, k_idx_cache, k_val_cache, v_cache, l);
  ATTN_REQUIRE(l.n_head > 0 && l.n_kv_head > 0 && l.n_head % l.n_kv_head == 0,
               "%s: n_kv_head (%d) must divide n_head (%d)", op, l.n_kv_head, l.n_head);
  const Shape qs{B, Tq, l.n_head, k};
  require_tensor(op, "q_val", q_val, dt, qs, ctx);
  require_tensor(op, "q_idx", q_idx, DType::i32, qs, ctx);
  require_tensor(op, "out", out, dt, Shape{B, Tq, l.q_width()}, ctx);
  if (!lse.empty()) require_tensor(op, "lse", lse, DType::f32, Shape{B, l.n_head, Tq}, ctx);
  ATTN_REQUIRE(pos >= 0 && pos + Tq <= max_T,
               "%s: queries at positions %d .. %lld exceed the cache (%lld positions)", op, pos,
               (long long)(pos + Tq - 1), (long long)max_T);
  ATTN_REQUIRE(ctx.device == Device::cpu || l.head_dim <= 128,
               "%s: head dim must be <= 128 on CUDA, got %d", op, l.head_dim);
  auto make = [&]<typename T_>() {
    SfaAttentionParams<T_> p;
    p.q_idx = ptr<int32_t>(q_idx);
    p.q_val = ptr<T_>(q_val);
    packed_strides(Tq, l.n_head, k, &p.q_batch_stride, &p.q_row_stride, &p.q_head_stride);
    const CacheStrides ks = cache_strides(l.n_kv_head, max_T, k, 0);
    p.k_idx8 = ptr<uint8_t>(k_idx_cache);
    p.k_val = ptr<T_>(k_val_cache);
    p.k_batch_stride = ks.batch, p.k_row_stride = ks.row, p.k_head_stride = ks.head;
    const CacheStrides vs = cache_strides(l.n_kv_head, max_T, l.head_dim, 0);
    p.v = ptr<T_>(v_cache);
    p.v_batch_stride = vs.batch, p.v_row_stride = vs.row, p.v_head_stride = vs.head;
    p.o = ptr<T_>(out);
    p.lse = ptr<float>(lse);
    p.o_batch_stride = Tq * l.q_width();
    p.o_row_stride = l.q_width();
    p.B = int(B);
    p.Tq = int(Tq);
    p.pos = pos;
    p.n_head = l.n_head;
    p.n_kv_head = l.n_kv_head;
    p.D = l.head_dim;
    p.k = k;
    p.scale = float(1.0 / std::sqrt(double(l.head_dim)));
    return p;
  };
  run_op<SfaAttentionParams>(ctx, dt, make, sfa_attention_fwd_ref, launch_sfa_attention_fwd<float>,
                             launch_sfa_attention_fwd<bf16>);
}

void sfa_distill_fwd(const ExecContext& ctx, double* total, const Tensor& student,
                     const Tensor& teacher, float weight) {
  NvtxRange range("sfa_distill_fwd");
  constexpr const char* op = "sfa_distill";
  const DType dt = require_activation(op, "student", student, ctx);
  require_tensor(op, "teacher", teacher, dt, student.shape, ctx);
  ATTN_REQUIRE(total != nullptr, "sfa_distill: the total is required");
  auto make = [&]<typename T_>() {
    SfaDistillParams<T_> p;
    p.student = ptr<T_>(student);
    p.teacher = ptr<T_>(teacher);
    p.n = student.numel();
    p.weight = weight;
    p.total = total;
    return p;
  };
  run_op<SfaDistillParams>(ctx, dt, make, sfa_distill_fwd_ref, launch_sfa_distill_fwd<float>,
                           launch_sfa_distill_fwd<bf16>);
}

void sfa_distill_bwd(const ExecContext& ctx, const Tensor& dstudent, const Tensor& dout,
                     const Tensor& student, const Tensor& teacher, float weight) {
  NvtxRange range("sfa_distill_bwd");
  constexpr const char* op = "sfa_distill";
  const DType dt = require_activation(op, "student", student, ctx);
  require_tensor(op, "teacher", teacher, dt, student.shape, ctx);
  require_tensor(op, "dout", dout, dt, student.shape, ctx);
  require_tensor(op, "dstudent", dstudent, dt, student.shape, ctx);
  auto make = [&]<typename T_>() {
    SfaDistillParams<T_> p;
    p.student = ptr<T_>(student);
    p.teacher = ptr<T_>(teacher);
    p.n = student.numel();
    p.weight = weight;
    p.dout = ptr<T_>(dout);
    p.dstudent = ptr<T_>(dstudent);
    return p;
  };
  run_op<SfaDistillParams>(ctx, dt, make, sfa_distill_bwd_ref, launch_sfa_distill_bwd<float>,
                           launch_sfa_distill_bwd<bf16>);
}

}  // namespace attnlab::ops
