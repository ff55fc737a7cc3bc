#include "kernels/embed/embedding.cuh"

#include "core/nvtx.h"
#include "ops/op_checks.h"
#include "ops/ops.h"
#include "ref/embedding_ref.h"

namespace attnlab::ops {

using namespace detail;

namespace {
constexpr const char* kOp = "embedding";

void check_tokens(const ExecContext& ctx, const Tensor& tokens) {
  require_present(kOp, "tokens", tokens);
  ATTN_REQUIRE(tokens.dtype == DType::i32 && tokens.ndim() == 2 && tokens.device == ctx.device,
               "embedding: tokens must be i32[B, T] on %s, got %s", device_name(ctx.device),
               tokens.str().c_str());
}

// On the CPU every token id is checked against the table (on CUDA that would cost a copy).
void check_token_range(const ExecContext& ctx, const Tensor& tokens, int64_t vocab) {
  if (ctx.device != Device::cpu) return;
  const int32_t* tok = static_cast<const int32_t*>(tokens.data);
  for (int64_t i = 0; i < tokens.numel(); ++i)
    ATTN_REQUIRE(tok[i] >= 0 && tok[i] < vocab,
                 "embedding: token id %d at position %lld is outside the table [0, %lld)", tok[i],
                 static_cast<long long>(i), static_cast<long long>(vocab));
}

// A [rows, C] table with rows >= min_rows.
void check_table(const ExecContext& ctx, const char* name, const Tensor& t, DType dt, int64_t C,
                 int64_t min_rows) {
  require_present(kOp, name, t);
  ATTN_REQUIRE(t.dtype == dt && t.ndim() == 2 && t.dim(1) == C && t.dim(0) >= min_rows &&
                   t.device == ctx.device,
               "embedding: %s must be %s[rows >= %lld, %lld] on %s, got %s", name, dtype_name(dt),
               static_cast<long long>(min_rows), static_cast<long long>(C), device_name(ctx.device),
               t.str().c_str());
}
}  // namespace

void embedding_fwd(const ExecContext& ctx, const Tensor& out, const Tensor& tokens,
                   const Tensor& wte, const Tensor& wpe) {
  NvtxRange range("embedding_fwd");
  check_tokens(ctx, tokens);
  const DType dt = require_activation(kOp, "wte", wte, ctx, 2);
  const int64_t B = tokens.dim(0), T = tokens.dim(1), C = wte.dim(1);
  check_table(ctx, "wte", wte, dt, C, 1);
  if (!wpe.empty()) check_table(ctx, "wpe", wpe, dt, C, T);  // empty: no position table (RoPE)
  require_tensor(kOp, "out", out, dt, Shape{B, T, C}, ctx);
  check_token_range(ctx, tokens, wte.dim(0));
  auto make = [&]<typename T_>() {
    EmbeddingParams<T_> p;
    p.tokens = static_cast<const int32_t*>(tokens.data);
    p.wte = static_cast<const T_*>(wte.data);
    p.wpe = data_or_null<const T_>(wpe);
    p.out = static_cast<T_*>(out.data);
    p.B = B;
    p.T_ = int(T);
    p.C = int(C);
    p.vocab = int(wte.dim(0));
    return p;
  };
  run_op(ctx, dt, make, embedding_fwd_ref, launch_embedding_fwd<float>, launch_embedding_fwd<bf16>);
}

// dwte and dwpe may each be empty (frozen, or no position table); both empty: nothing to do.
void embedding_bwd(const ExecContext& ctx, const Tensor& dwte, const Tensor& dwpe,
                   const Tensor& dout, const Tensor& tokens) {
  NvtxRange range("embedding_bwd");
  if (dwte.empty() && dwpe.empty()) return;
  check_tokens(ctx, tokens);
  const DType dt = require_activation(kOp, "dout", dout, ctx, 3);
  const int64_t B = tokens.dim(0), T = tokens.dim(1), C = dout.dim(-1);
  require_tensor(kOp, "dout", dout, dt, Shape{B, T, C}, ctx);
  if (!dwpe.empty()) check_table(ctx, "dwpe", dwpe, dt, C, T);
  if (!dwte.empty()) {
    check_table(ctx, "dwte", dwte, dt, C, 1);
    check_token_range(ctx, tokens, dwte.dim(0));
  }
  auto make = [&]<typename T_>() {
    EmbeddingParams<T_> p;
    p.tokens = static_cast<const int32_t*>(tokens.data);
    p.dout = static_cast<const T_*>(dout.data);
    p.dwte = data_or_null<T_>(dwte);
    p.dwpe = data_or_null<T_>(dwpe);
    p.B = B;
    p.T_ = int(T);
    p.C = int(C);
    p.vocab = dwte.empty() ? 0 : int(dwte.dim(0));
    return p;
  };
  run_op(ctx, dt, make, embedding_bwd_ref, launch_embedding_bwd<float>, launch_embedding_bwd<bf16>);
}

}  // namespace attnlab::ops
