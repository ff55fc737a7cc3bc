// Host ops of FlashSFA (kernels/sfa/sfa_flash.cuh, ops/sfa_ops.h): checks, params, dispatch
// between the CPU reference (overlap form) and the bf16 CUDA kernels.
#include <cmath>

#include "core/nvtx.h"
#include "ops/op_checks.h"
#include "ops/sfa_ops.h"
#include "ref/sfa_ref.h"

namespace attnlab::ops {

using namespace detail;

namespace {

struct FlashArgs {
  const Tensor &out, &lse, &q_idx, &q_val, &k_idx, &k_val, &qkv;
  const Tensor* dout = nullptr;
  const Tensor* dqkv = nullptr;
};

// Checks the tensors of a FlashSFA call; returns k.
int check_flash(const char* op, const ExecContext& ctx, const FlashArgs& a, const QKVLayout& l) {
  const DType dt = require_activation(op, "qkv", a.qkv, ctx, 3);
  ATTN_REQUIRE(l.n_head > 0 && l.n_kv_head > 0 && l.n_head % l.n_kv_head == 0,
               "%s: n_kv_head (%d) must divide n_head (%d)", op, l.n_kv_head, l.n_head);
  ATTN_REQUIRE(a.qkv.ndim() == 3 && a.qkv.dim(2) == l.width(),
               "%s: qkv must be [B, T, %lld], got %s", op, (long long)l.width(),
               a.qkv.str().c_str());
  ATTN_REQUIRE(sfa_flash_supported(ctx, dt, l.head_dim),
               "%s: FlashSFA runs on the CPU or on CUDA in bf16 with head dim 64 or 128, got %s "
               "with head dim %d; use attention.sfa.kernel: masked_dense (or auto)",
               op, dtype_name(dt), l.head_dim);
  require_present(op, "q_idx", a.q_idx);
  ATTN_REQUIRE(a.q_idx.ndim() == 4, "%s: q_idx must be [B, T, n_head, k], got %s", op,
               a.q_idx.str().c_str());
  const int64_t B = a.qkv.dim(0), T = a.qkv.dim(1);
  const int k = int(a.q_idx.dim(3));
  ATTN_REQUIRE(k >= 1 && k <= l.head_dim,
               "%s: k (attention.sfa.k) must be in [1, head dim %d], got %d", op, l.head_dim, k);
  const Shape qs{B, T, l.n_head, k}, ks{B, T, l.n_kv_head, k};
  require_tensor(op, "q_idx", a.q_idx, DType::i32, qs, ctx);
  require_tensor(op, "q_val", a.q_val, dt, qs, ctx);
  require_tensor(op, "k_idx", a.k_idx, DType::i32, ks, ctx);
  require_tensor(op, "k_val", a.k_val, dt, ks, ctx);
  require_tensor(op, "out", a.out, dt, Shape{B, T, l.q_width()}, ctx);
  require_tensor(op, "lse", a.lse, DType::f32, Shape{B, l.n_head, T}, ctx);
  if (a.dout) require_tensor(op, "dout", *a.dout, dt, a.out.shape, ctx);
  if (a.dqkv) require_tensor(op, "dqkv", *a.dqkv, dt, a.qkv.shape, ctx);
  return k;
}

template <typename T>
SfaFlashParams<T> flash_params(const FlashArgs& a, const QKVLayout& l, int k) {
  SfaFlashParams<T> p;
  p.q_idx = data_or_null<int32_t>(a.q_idx);
  p.q_val = data_or_null<T>(a.q_val);
  p.k_idx = data_or_null<int32_t>(a.k_idx);
  p.k_val = data_or_null<T>(a.k_val);
  p.qkv = data_or_null<T>(a.qkv);
  p.o = data_or_null<T>(a.out);
  p.lse = data_or_null<float>(a.lse);
  p.dout = a.dout ? data_or_null<T>(*a.dout) : nullptr;
  p.dqkv = a.dqkv ? data_or_null<T>(*a.dqkv) : nullptr;
  p.B = int(a.qkv.dim(0));
  p.T = int(a.qkv.dim(1));
  p.qkv_row_stride = l.width();
  p.qkv_batch_stride = p.T * l.width();
  p.o_row_stride = l.q_width();
  p.o_batch_stride = p.T * l.q_width();
  p.n_head = l.n_head;
  p.n_kv_head = l.n_kv_head;
  p.D = l.head_dim;
  p.k = k;
  p.scale = float(1.0 / std::sqrt(double(l.head_dim)));
  return p;
}

}  // namespace

bool sfa_flash_supported(const ExecContext& ctx, DType dtype, int head_dim) {
  return ctx.device == Device::cpu || (dtype == DType::bf16 && (head_dim == 64 || head_dim == 128));
}

void sfa_flash_fwd(const ExecContext& ctx, const Tensor& out, const Tensor& lse,
                   const Tensor& q_idx, const Tensor& q_val, const Tensor& k_idx,
                   const Tensor& k_val, const Tensor& qkv, const QKVLayout& layout) {
  NvtxRange range("sfa_flash_fwd");
  const FlashArgs a{out, lse, q_idx, q_val, k_idx, k_val, qkv};
  const int k = check_flash("sfa_flash_fwd", ctx, a, layout);
  sfa_select(ctx, qkv, layout, k, q_idx, q_val, k_idx, k_val);
  if (ctx.device == Device::cpu) {
    sfa_flash_fwd_ref(flash_params<float>(a, layout, k));
  } else {
    launch_sfa_flash_fwd(flash_params<bf16>(a, layout, k), ctx.stream);
  }
}

void sfa_flash_bwd(const ExecContext& ctx, const Tensor& dqkv, const Tensor& dout,
                   const Tensor& out, const Tensor& lse, const Tensor& q_idx, const Tensor& q_val,
                   const Tensor& k_idx, const Tensor& k_val, const Tensor& qkv,
                   const QKVLayout& layout) {
  NvtxRange range("sfa_flash_bwd");
  FlashArgs a{out, lse, q_idx, q_val, k_idx, k_val, qkv};
  a.dout = &dout;
  a.dqkv = &dqkv;
  const int k = check_flash("sfa_flash_bwd", ctx, a, layout);
  if (ctx.device == Device::cpu) {
    sfa_flash_bwd_ref(flash_params<float>(a, layout, k));
  } else {
    launch_sfa_flash_bwd(flash_params<bf16>(a, layout, k), ctx.stream);
  }
}

}  // namespace attnlab::ops
