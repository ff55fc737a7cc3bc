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
  int64_t B, T, C, H, D;
};

// qkv must be [B, T, 3C] with C = n_head * D.
Dims check_qkv(const ExecContext& ctx, DType* dt, const Tensor& qkv, int n_head) {
  *dt = require_activation(kOp, "qkv", qkv, ctx, 3);
  ATTN_REQUIRE(qkv.ndim() == 3 && qkv.dim(2) % 3 == 0 && qkv.dim(2) > 0,
               "attention: qkv must be [B, T, 3 * C], got %s", qkv.str().c_str());
  ATTN_REQUIRE(n_head > 0 && (qkv.dim(2) / 3) % n_head == 0,
               "attention: n_head (%d) must divide the model width C = %lld", n_head,
               static_cast<long long>(qkv.dim(2) / 3));
  const int64_t C = qkv.dim(2) / 3;
  const int64_t D = C / n_head;
  // The tensor-core kernels are written for these head dims; fp32 (debug) and CPU take any D.
  ATTN_REQUIRE(
      ctx.device != Device::cuda || *dt != DType::bf16 || D == 64 || D == 128,
      "attention: head dim must be 64 or 128 for bf16 on CUDA, got %lld (n_embd %lld / n_head %d); "
      "use train.precision: fp32 or change model.n_embd / model.n_head",
      (long long)D, (long long)C, n_head);
  ATTN_REQUIRE(ctx.device != Device::cuda || D <= 128,
               "attention: head dim must be <= 128 on CUDA, got %lld", (long long)D);
  return {qkv.dim(0), qkv.dim(1), C, n_head, D};
}

// Packed layout: q, k, v of token (b, t) are consecutive blocks of C in one row of 3C.
template <typename T>
AttentionParams<T> packed_params(const Dims& d, const Tensor& qkv, const Tensor& out,
                                 const Tensor& lse) {
  AttentionParams<T> p;
  const T* base = static_cast<const T*>(qkv.data);
  p.q = base;
  p.k = base + d.C;
  p.v = base + 2 * d.C;
  p.o = static_cast<T*>(out.data);
  p.lse = static_cast<float*>(lse.data);
  p.qkv_batch_stride = d.T * 3 * d.C;
  p.qkv_row_stride = 3 * d.C;
  p.o_batch_stride = d.T * d.C;
  p.o_row_stride = d.C;
  p.B = int(d.B);
  p.seq_len = int(d.T);
  p.n_head = int(d.H);
  p.n_kv_head = int(d.H);
  p.D = int(d.D);
  p.scale = float(1.0 / std::sqrt(double(d.D)));
  p.mask.causal = true;
  return p;
}
}  // namespace

void attention_fwd(const ExecContext& ctx, const Tensor& out, const Tensor& lse, const Tensor& qkv,
                   int n_head) {
  NvtxRange range("attention_fwd");
  DType dt;
  const Dims d = check_qkv(ctx, &dt, qkv, n_head);
  require_tensor(kOp, "out", out, dt, Shape{d.B, d.T, d.C}, ctx);
  require_tensor(kOp, "lse", lse, DType::f32, Shape{d.B, d.H, d.T}, ctx);
  auto make = [&]<typename T>() { return packed_params<T>(d, qkv, out, lse); };
  run_op(ctx, dt, make, attention_fwd_ref, launch_attention_fwd<float>, launch_attention_fwd<bf16>);
}

// dqkv is written (=) in the packed layout of qkv.
void attention_bwd(const ExecContext& ctx, const Tensor& dqkv, const Tensor& dout,
                   const Tensor& qkv, const Tensor& out, const Tensor& lse, int n_head) {
  NvtxRange range("attention_bwd");
  DType dt;
  const Dims d = check_qkv(ctx, &dt, qkv, n_head);
  require_tensor(kOp, "out", out, dt, Shape{d.B, d.T, d.C}, ctx);
  require_tensor(kOp, "dout", dout, dt, out.shape, ctx);
  require_tensor(kOp, "lse", lse, DType::f32, Shape{d.B, d.H, d.T}, ctx);
  require_tensor(kOp, "dqkv", dqkv, dt, qkv.shape, ctx);
  auto make = [&]<typename T>() {
    AttentionParams<T> p = packed_params<T>(d, qkv, out, lse);
    T* dbase = static_cast<T*>(dqkv.data);
    p.dout = static_cast<const T*>(dout.data);
    p.deterministic = ctx.deterministic;
    p.dq = dbase;
    p.dk = dbase + d.C;
    p.dv = dbase + 2 * d.C;
    return p;
  };
  run_op(ctx, dt, make, attention_bwd_ref, launch_attention_bwd<float>, launch_attention_bwd<bf16>);
}

}  // namespace attnlab::ops
