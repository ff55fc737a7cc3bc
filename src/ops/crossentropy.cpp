#include "kernels/loss/crossentropy.cuh"

#include "core/nvtx.h"
#include "ops/op_checks.h"
#include "ops/ops.h"
#include "ref/crossentropy_ref.h"

namespace attnlab::ops {

using namespace detail;

namespace {
constexpr const char* kOp = "crossentropy";

// logits [..., Vp]; targets and losses hold one entry per row. Returns the number of rows.
int64_t check_common(const ExecContext& ctx, DType* dt, const Tensor& losses, const Tensor& logits,
                     const Tensor& targets, int V, int ignore_index) {
  *dt = require_activation(kOp, "logits", logits, ctx, 2);
  const int64_t Vp = logits.dim(-1);
  ATTN_REQUIRE(V > 0 && V <= Vp,
               "crossentropy: vocab size V = %d must be in [1, %lld] (the "
               "padded vocab of logits %s)",
               V, static_cast<long long>(Vp), logits.str().c_str());
  ATTN_REQUIRE(ignore_index < 0 || ignore_index >= V,
               "crossentropy: ignore_index %d is a valid token id (V = %d)", ignore_index, V);
  const int64_t N = logits.numel() / Vp;
  require_numel(kOp, "targets", targets, DType::i32, N, ctx);
  require_numel(kOp, "losses", losses, DType::f32, N, ctx);
  if (ctx.device == Device::cpu) {  // on CUDA this check would cost a copy
    const int32_t* tgt = static_cast<const int32_t*>(targets.data);
    for (int64_t i = 0; i < N; ++i)
      ATTN_REQUIRE(tgt[i] == ignore_index || (tgt[i] >= 0 && tgt[i] < V),
                   "crossentropy: target %d at row %lld is outside [0, %d) and not the "
                   "ignore_index %d",
                   tgt[i], static_cast<long long>(i), V, ignore_index);
  }
  return N;
}

template <typename T>
CrossEntropyParams<T> make_params(const Tensor& losses, const Tensor& logits, const Tensor& targets,
                                  int V, int ignore_index, int64_t N) {
  CrossEntropyParams<T> p;
  p.logits = static_cast<const T*>(logits.data);
  p.targets = static_cast<const int32_t*>(targets.data);
  p.losses = static_cast<float*>(losses.data);
  p.N = N;
  p.V = V;
  p.Vp = int(logits.dim(-1));
  p.ignore_index = ignore_index;
  return p;
}
}  // namespace

void crossentropy_fwd(const ExecContext& ctx, const Tensor& losses, const Tensor& logits,
                      const Tensor& targets, int V, int ignore_index) {
  NvtxRange range("crossentropy_fwd");
  DType dt;
  const int64_t N = check_common(ctx, &dt, losses, logits, targets, V, ignore_index);
  auto make = [&]<typename T>() {
    return make_params<T>(losses, logits, targets, V, ignore_index, N);
  };
  run_op(ctx, dt, make, crossentropy_fwd_ref, launch_crossentropy_fwd<float>,
         launch_crossentropy_fwd<bf16>);
}

void crossentropy_fwd_bwd(const ExecContext& ctx, const Tensor& losses, const Tensor& dlogits,
                          const Tensor& logits, const Tensor& targets, int V, int ignore_index,
                          float dloss) {
  NvtxRange range("crossentropy_fwd_bwd");
  DType dt;
  const int64_t N = check_common(ctx, &dt, losses, logits, targets, V, ignore_index);
  require_tensor(kOp, "dlogits", dlogits, dt, logits.shape, ctx);
  auto make = [&]<typename T>() {
    CrossEntropyParams<T> p = make_params<T>(losses, logits, targets, V, ignore_index, N);
    p.dlogits = static_cast<T*>(dlogits.data);
    p.dloss = dloss;
    return p;
  };
  run_op(ctx, dt, make, crossentropy_fwd_bwd_ref, launch_crossentropy_fwd_bwd<float>,
         launch_crossentropy_fwd_bwd<bf16>);
}

void crossentropy_loss_sum(const ExecContext& ctx, double* totals, const Tensor& losses,
                           const Tensor& targets, int ignore_index) {
  NvtxRange range("crossentropy_loss_sum");
  ATTN_REQUIRE(totals != nullptr, "crossentropy_loss_sum: totals must not be null");
  const int64_t N = losses.numel();
  require_numel(kOp, "losses", losses, DType::f32, N, ctx);
  require_numel(kOp, "targets", targets, DType::i32, N, ctx);
  if (ctx.device == Device::cpu) {
    crossentropy_loss_sum_ref(losses.ptr<float>(), targets.ptr<int32_t>(), N, ignore_index, totals);
  } else {
    launch_crossentropy_loss_sum(losses.ptr<float>(), targets.ptr<int32_t>(), N, ignore_index,
                                 totals, ctx.stream);
  }
}

}  // namespace attnlab::ops
