#include "kernels/attention/attention.cuh"

#include <cmath>

#include "core/nvtx.h"
#include "ops/op_checks.h"
#include "ops/ops.h"
#include "ref/attention_ref.h"

namespace attnlab::ops {

using namespace detail;

namespace {
constexpr const char* kOp = "attention";

struct Dims {
  int64_t B, T;
  QKVLayout layout;
};

// qkv must be [B, T, layout.width()]; the layout and the window must make sense, and the head dim
// must be one the kernels for this device and dtype support.
Dims check_qkv(const ExecContext& ctx, DType* dt, const Tensor& qkv, const QKVLayout& layout,
               int window) {
  *dt = require_packed_qkv(kOp, "qkv", qkv, layout, ctx);
  const int D = layout.head_dim;
  ATTN_REQUIRE(window >= 0, "attention: window must be >= 0 (0 = full causal), got %d", window);
  // The tensor-core kernels are written for these head dims; fp32 (debug) and CPU take any D.
  ATTN_REQUIRE(ctx.device != Device::cuda || *dt != DType::bf16 || D == 64 || D == 128,
               "attention: head dim must be 64 or 128 for bf16 on CUDA, got %d; use "
               "train.precision: fp32 or change model.n_embd / model.n_head",
               D);
  ATTN_REQUIRE(ctx.device != Device::cuda || D <= 128,
               "attention: head dim must be <= 128 on CUDA, got %d", D);
  return {qkv.dim(0), qkv.dim(1), layout};
}

// Packed layout (QKVLayout): q, k, v of token (b, t) are consecutive blocks of one row of qkv.
template <typename T>
AttentionParams<T> packed_params(const Dims& d, const Tensor& qkv, const Tensor& out,
                                 const Tensor& lse, int window) {
  const QKVLayout& l = d.layout;
  AttentionParams<T> p;
  const T* base = static_cast<const T*>(qkv.data);
  p.q = base;
  p.k = base + l.k_offset();
  p.v = base + l.v_offset();
  p.o = static_cast<T*>(out.data);
  p.lse = static_cast<float*>(lse.data);
  p.qkv_batch_stride = d.T * l.width();
  p.qkv_row_stride = l.width();
  p.o_batch_stride = d.T * l.q_width();
  p.o_row_stride = l.q_width();
  p.B = int(d.B);
  p.seq_len = int(d.T);
  p.n_head = l.n_head;
  p.n_kv_head = l.n_kv_head;
  p.D = l.head_dim;
  p.scale = float(1.0 / std::sqrt(double(l.head_dim)));
  p.mask.causal = true;
  // A window of T or more is every causal pair (the kernels' window arithmetic is 32-bit: a window
  // near INT_MAX wrapped and zeroed the backward).
  p.mask.window = window >= d.T ? 0 : window;
  return p;
}
}  // namespace

void attention_fwd(const ExecContext& ctx, const Tensor& out, const Tensor& lse, const Tensor& qkv,
                   const QKVLayout& layout, int window) {
  NvtxRange range("attention_fwd");
  DType dt;
  const Dims d = check_qkv(ctx, &dt, qkv, layout, window);
  require_tensor(kOp, "out", out, dt, Shape{d.B, d.T, layout.q_width()}, ctx);
  require_tensor(kOp, "lse", lse, DType::f32, Shape{d.B, layout.n_head, d.T}, ctx);
  auto make = [&]<typename T>() { return packed_params<T>(d, qkv, out, lse, window); };
  run_op(ctx, dt, make, attention_fwd_ref, launch_attention_fwd<float>, launch_attention_fwd<bf16>);
}

// dqkv is written (=) in the packed layout of qkv.
void attention_bwd(const ExecContext& ctx, const Tensor& dqkv, const Tensor& dout,
                   const Tensor& qkv, const Tensor& out, const Tensor& lse, const QKVLayout& layout,
                   int window) {
  NvtxRange range("attention_bwd");
  DType dt;
  const Dims d = check_qkv(ctx, &dt, qkv, layout, window);
  require_tensor(kOp, "out", out, dt, Shape{d.B, d.T, layout.q_width()}, ctx);
  require_tensor(kOp, "dout", dout, dt, out.shape, ctx);
  require_tensor(kOp, "lse", lse, DType::f32, Shape{d.B, layout.n_head, d.T}, ctx);
  require_tensor(kOp, "dqkv", dqkv, dt, qkv.shape, ctx);
  auto make = [&]<typename T>() {
    AttentionParams<T> p = packed_params<T>(d, qkv, out, lse, window);
    T* dbase = static_cast<T*>(dqkv.data);
    p.dout = static_cast<const T*>(dout.data);
    p.deterministic = ctx.deterministic;
    p.dq = dbase;
    p.dk = dbase + layout.k_offset();
    p.dv = dbase + layout.v_offset();
    return p;
  };
  run_op(ctx, dt, make, attention_bwd_ref, launch_attention_bwd<float>, launch_attention_bwd<bf16>);
}

}  // namespace attnlab::ops
