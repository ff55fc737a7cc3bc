#include <cmath>

#include "core/nvtx.h"
#include "kernels/focus/focus_assign.cuh"
#include "kernels/focus/focus_scores.cuh"
#include "kernels/focus/focus_tiled.cuh"
#include "kernels/focus/focus_wgmma.cuh"
#include "kernels/focus/focus_wgmma_det.h"
#include "kernels/focus/focus_wgmma_layout.h"
#include "ops/focus_hard_ops.h"
#include "ops/focus_ops.h"
#include "ops/op_checks.h"
#include "ref/focus_ref.h"

namespace attnlab::ops {

using namespace detail;

namespace {

// The assignment ops are f32 on every device: the reference on the CPU, else the launcher.
template <typename P>
void run_f32(const ExecContext& ctx, const P& p, void (*ref)(const P&),
             void (*launch)(const P&, Stream)) {
  if (ctx.device == Device::cpu)
    ref(p);
  else
    launch(p, ctx.stream);
}

template <typename T>
T* ptr(const Tensor& t) {
  return t.empty() ? nullptr : static_cast<T*>(t.data);
}

}  // namespace

void focus_scores_fwd(const ExecContext& ctx, const Tensor& scores, const Tensor& z,
                      const Tensor& centroids, float tau) {
  NvtxRange range("focus_scores_fwd");
  constexpr const char* op = "focus_scores";
  const DType dt = require_activation(op, "z", z, ctx, 2);
  const int64_t d = z.dim(z.ndim() - 1), N = z.numel() / d;
  ATTN_REQUIRE(centroids.ndim() == 2 && centroids.dim(1) == d,
               "focus_scores: centroids must be [K, %lld], got %s", (long long)d,
               centroids.str().c_str());
  const int64_t K = centroids.dim(0);
  require_tensor(op, "centroids", centroids, dt, Shape{K, d}, ctx);
  require_numel(op, "scores", scores, DType::f32, N * K, ctx);
  ATTN_REQUIRE(tau > 0.f, "focus_scores: tau must be > 0, got %g", double(tau));
  ATTN_REQUIRE(
      ctx.device == Device::cpu || (d <= kFocusCudaMaxDg && K * d <= kFocusCudaMaxGroupsTimesDg),
      "focus_scores: d_g must be <= %d and groups x d_g <= %d on CUDA, got %lld, %lld",
      kFocusCudaMaxDg, kFocusCudaMaxGroupsTimesDg, (long long)d, (long long)(K * d));
  auto make = [&]<typename T>() {
    FocusScoresParams<T> p;
    p.z = ptr<T>(z);
    p.centroids = ptr<T>(centroids);
    p.scores = ptr<float>(scores);
    p.N = N;
    p.K = int(K);
    p.d_g = int(d);
    p.tau = tau;
    return p;
  };
  run_op<FocusScoresParams>(ctx, dt, make, focus_scores_fwd_ref, launch_focus_scores_fwd<float>,
                            launch_focus_scores_fwd<bf16>);
}

void focus_scores_bwd(const ExecContext& ctx, const Tensor& dz, const Tensor& dcentroids,
                      const Tensor& dscores, const Tensor& z, const Tensor& centroids, float tau) {
  NvtxRange range("focus_scores_bwd");
  constexpr const char* op = "focus_scores";
  const DType dt = require_activation(op, "z", z, ctx, 2);
  const int64_t d = z.dim(z.ndim() - 1), N = z.numel() / d, K = centroids.dim(0);
  require_tensor(op, "centroids", centroids, dt, Shape{K, d}, ctx);
  require_tensor(op, "dz", dz, dt, z.shape, ctx);
  if (!dcentroids.empty()) require_tensor(op, "dcentroids", dcentroids, dt, centroids.shape, ctx);
  require_numel(op, "dscores", dscores, DType::f32, N * K, ctx);
  auto make = [&]<typename T>() {
    FocusScoresParams<T> p;
    p.z = ptr<T>(z);
    p.centroids = ptr<T>(centroids);
    p.dscores = ptr<float>(dscores);
    p.dz = ptr<T>(dz);
    p.dcentroids = ptr<T>(dcentroids);
    p.N = N;
    p.K = int(K);
    p.d_g = int(d);
    p.tau = tau;
    return p;
  };
  run_op<FocusScoresParams>(ctx, dt, make, focus_scores_bwd_ref, launch_focus_scores_bwd<float>,
                            launch_focus_scores_bwd<bf16>);
}

namespace {
// `name`: what `scores` is in the caller's contract ("scores" forward, "g" backward).
SinkhornParams sinkhorn_params(const ExecContext& ctx, const Tensor& scores, const Tensor& iterates,
                               bool causal, const char* name = "scores") {
  constexpr const char* op = "focus_sinkhorn";
  require_present(op, name, scores);
  ATTN_REQUIRE(scores.ndim() == 3 && scores.dtype == DType::f32 && scores.device == ctx.device,
               "focus_sinkhorn: %s must be f32 [B, T, K] on %s, got %s", name,
               device_name(ctx.device), scores.str().c_str());
  ATTN_REQUIRE(iterates.ndim() == 4 && iterates.dim(0) >= 2,
               "focus_sinkhorn: iterates must be [iterations + 1, B, T, K], got %s",
               iterates.str().c_str());
  const Shape s = scores.shape;
  require_tensor(op, "iterates", iterates, DType::f32,
                 Shape{iterates.dim(0), s.dims[0], s.dims[1], s.dims[2]}, ctx);
  SinkhornParams p;
  p.B = int(s.dims[0]);
  p.T = int(s.dims[1]);
  p.K = int(s.dims[2]);
  p.iterations = int(iterates.dim(0) - 1);
  ATTN_REQUIRE(ctx.device == Device::cpu || p.K <= kFocusCudaMaxSinkhornGroups,
               "focus_sinkhorn: at most %d groups on CUDA, got %d", kFocusCudaMaxSinkhornGroups,
               p.K);
  p.causal = causal;
  p.scores = ptr<float>(scores);
  p.iterates = ptr<float>(iterates);
  return p;
}
}  // namespace

void focus_sinkhorn_fwd(const ExecContext& ctx, const Tensor& g, const Tensor& iterates,
                        const Tensor& scores, bool causal, const Tensor& state, int pos,
                        SinkhornPath path) {
  NvtxRange range("focus_sinkhorn_fwd");
  SinkhornParams p = sinkhorn_params(ctx, scores, iterates, causal);
  require_tensor("focus_sinkhorn", "g", g, DType::f32, scores.shape, ctx);
  ATTN_REQUIRE(state.empty() || causal,
               "focus_sinkhorn: decoding with a carried state needs sinkhorn_scope causal");
  if (!state.empty())
    require_tensor("focus_sinkhorn", "state", state, DType::f32,
                   Shape{p.B, p.iterations, p.K, focus_sinkhorn_state::kSinkhornStateWords}, ctx);
  ATTN_REQUIRE(pos >= 0 && (pos == 0 || !state.empty()),
               "focus_sinkhorn: pos > 0 needs the carried state, got pos %d", pos);
  p.g = ptr<float>(g);
  p.state = ptr<float>(state);
  p.pos = pos;
  p.path = path;
  run_f32(ctx, p, sinkhorn_fwd_ref, launch_sinkhorn_fwd);
}

void focus_sinkhorn_bwd(const ExecContext& ctx, const Tensor& dscores, const Tensor& dg,
                        const Tensor& g, const Tensor& iterates, bool causal, SinkhornPath path) {
  NvtxRange range("focus_sinkhorn_bwd");
  SinkhornParams p = sinkhorn_params(ctx, g, iterates, causal, "g");
  require_tensor("focus_sinkhorn", "dg", dg, DType::f32, g.shape, ctx);
  require_tensor("focus_sinkhorn", "dscores", dscores, DType::f32, g.shape, ctx);
  p.scores = nullptr;
  p.g = ptr<float>(g);
  p.dg = ptr<float>(dg);
  p.dscores = ptr<float>(dscores);
  p.path = path;
  run_f32(ctx, p, sinkhorn_bwd_ref, launch_sinkhorn_bwd);
}

void focus_softmax_assign_fwd(const ExecContext& ctx, const Tensor& g, const Tensor& scores) {
  constexpr const char* op = "focus_softmax_assign";
  require_tensor(op, "scores", scores, DType::f32, scores.shape, ctx);
  require_tensor(op, "g", g, DType::f32, scores.shape, ctx);
  SoftmaxAssignParams p;
  p.scores = ptr<float>(scores);
  p.g = ptr<float>(g);
  p.K = int(scores.dim(scores.ndim() - 1));
  p.rows = scores.numel() / p.K;
  run_f32(ctx, p, softmax_assign_fwd_ref, launch_softmax_assign_fwd);
}

void focus_softmax_assign_bwd(const ExecContext& ctx, const Tensor& dscores, const Tensor& dg,
                              const Tensor& g) {
  constexpr const char* op = "focus_softmax_assign";
  require_tensor(op, "g", g, DType::f32, g.shape, ctx);
  require_tensor(op, "dg", dg, DType::f32, g.shape, ctx);
  require_tensor(op, "dscores", dscores, DType::f32, g.shape, ctx);
  SoftmaxAssignParams p;
  p.g = ptr<float>(g);
  p.dg = ptr<float>(dg);
  p.dscores = ptr<float>(dscores);
  p.K = int(g.dim(g.ndim() - 1));
  p.rows = g.numel() / p.K;
  run_f32(ctx, p, softmax_assign_bwd_ref, launch_softmax_assign_bwd);
}

void focus_route_topk(const ExecContext& ctx, const Tensor& groups, const Tensor& g) {
  constexpr const char* op = "focus_route_topk";
  require_tensor(op, "g", g, DType::f32, g.shape, ctx);
  const int64_t top_k = groups.empty() ? 0 : groups.dim(groups.ndim() - 1);
  require_tensor(op, "groups", groups, DType::i32, with_last_dim(g.shape, top_k), ctx);
  TopkRouteParams p;
  p.g = ptr<float>(g);
  p.groups = ptr<int32_t>(groups);
  p.K = int(g.dim(g.ndim() - 1));
  p.rows = g.numel() / p.K;
  p.top_k = int(top_k);
  ATTN_REQUIRE(ctx.device == Device::cpu || p.K <= 64,
               "focus_route_topk: at most 64 groups on CUDA, got %d", p.K);
  ATTN_REQUIRE(p.top_k >= 1 && p.top_k <= p.K, "topk_route: top_k must be in [1, %d], got %d", p.K,
               p.top_k);
  run_f32(ctx, p, topk_route_ref, launch_topk_route);
}

namespace {

constexpr const char* kAttn = "focus_attention";

// Checks qkv, g and groups; the params for keys = queries (training, eval).
void check_attention(const ExecContext& ctx, const Tensor& qkv, const QKVLayout& l) {
  require_activation(kAttn, "qkv", qkv, ctx, 3);
  // Exactly [B, T, W] (a fourth dimension passed with n times the elements), and heads that
  // group (the decode path has no other host check of them).
  ATTN_REQUIRE(qkv.ndim() == 3, "focus_attention: qkv must be [B, T, W], got %s",
               qkv.str().c_str());
  ATTN_REQUIRE(l.n_head > 0 && l.n_kv_head > 0 && l.head_dim > 0 && l.n_head % l.n_kv_head == 0,
               "focus_attention: n_kv_head (%d) must divide n_head (%d)", l.n_kv_head, l.n_head);
  ATTN_REQUIRE(ctx.device == Device::cpu || l.head_dim <= 128,
               "focus_attention: head dim must be <= 128 on CUDA, got %d", l.head_dim);
}

template <typename E>
FocusAttentionParams<E> attention_params(const ExecContext& ctx, const Tensor& qkv,
                                         const QKVLayout& l, const Tensor& g, const Tensor& groups,
                                         const FocusGateParams& gate) {
  ATTN_REQUIRE(l.n_head > 0 && l.n_kv_head > 0 && l.head_dim > 0 && l.n_head % l.n_kv_head == 0,
               "focus_attention: n_kv_head (%d) must divide n_head (%d)", l.n_kv_head, l.n_head);
  ATTN_REQUIRE(qkv.dim(2) == l.width(), "focus_attention: qkv must be [B, T, %lld], got %s",
               (long long)l.width(), qkv.str().c_str());
  const int64_t B = qkv.dim(0), T = qkv.dim(1);
  FocusAttentionParams<E> p;
  p.deterministic = ctx.deterministic;
  const bool hard = gate.kind == FocusGateKind::hard;
  if (!g.empty()) {
    ATTN_REQUIRE(g.ndim() == 3, "focus_attention: g must be [B, T, K], got %s", g.str().c_str());
    require_tensor(kAttn, "g", g, DType::f32, Shape{B, T, g.dim(2)}, ctx);
    p.K = int(g.dim(2));
  } else {
    ATTN_REQUIRE(hard, "focus_attention: the soft gates need the assignment g");
  }
  if (hard) {
    require_present(kAttn, "groups (the hard gate's group ids)", groups);
    require_tensor(kAttn, "groups", groups, DType::i32, Shape{B, T, groups.dim(2)}, ctx);
    p.top_k = int(groups.dim(2));
  }
  ATTN_REQUIRE(gate.local_window >= 0, "focus_attention: local_window must be >= 0, got %d",
               gate.local_window);
  const E* base = ptr<E>(qkv);
  p.q = base;
  p.k = base + l.k_offset();
  p.v = base + l.v_offset();
  p.g = ptr<float>(g);
  p.groups = ptr<int32_t>(groups);
  p.q_batch_stride = p.kv_batch_stride = T * l.width();
  p.q_row_stride = p.kv_row_stride = l.width();
  p.kv_head_stride = l.head_dim;
  p.o_batch_stride = T * l.q_width();
  p.o_row_stride = l.q_width();
  p.g_batch_stride = T * p.K;
  p.groups_batch_stride = T * p.top_k;
  p.B = int(B);
  p.seq_len = int(T);
  p.n_head = l.n_head;
  p.n_kv_head = l.n_kv_head;
  p.D = l.head_dim;
  p.scale = float(1.0 / std::sqrt(double(l.head_dim)));
  p.gate = gate;
  return p;
}

// Whether the call p runs on the wgmma kernel (FocusSoftKernel): the forward takes the additive
// gate, the backward also the hard gate (route_training: hard's straight-through backward);
// forcing it where it does not apply is an error naming what is missing.
bool use_wgmma(const FocusAttentionParams<bf16>& p, FocusSoftKernel kernel, bool backward) {
  const bool forced = kernel == FocusSoftKernel::wgmma;
  const bool gate_ok =
      p.gate.kind == FocusGateKind::additive || (backward && p.gate.kind == FocusGateKind::hard);
  if (kernel == FocusSoftKernel::tiled || !gate_ok) {
    ATTN_REQUIRE(!forced,
                 "focus_attention: the wgmma kernel takes the additive gate (and the hard gate in "
                 "the backward) only");
    return false;
  }
  const bool ok = backward ? focus_wgmma_bwd_supported(p) : focus_wgmma_supported(p);
  ATTN_REQUIRE(ok || !forced,
               "focus_attention: the wgmma kernel needs a build with sm_90a code "
               "(CMAKE_CUDA_ARCHITECTURES containing 90), a compute capability 9.0 device, "
               "head dim 64 or 128 (got %d) and 1 .. %d groups (got %d)",
               p.D, focus_wgmma::kMaxGroups, p.K);
  return ok;
}

}  // namespace

bool focus_soft_wgmma_available(int head_dim, int K) {
  return (head_dim == 64 || head_dim == 128) && K >= 1 && K <= focus_wgmma::kMaxGroups &&
         focus_wgmma_device_supported();
}

bool focus_deterministic_backward_available(int head_dim, int K) {
  return focus_soft_wgmma_available(head_dim, K) && focus_det::available(K, /*with_dg=*/true);
}

void focus_attention_fwd(const ExecContext& ctx, const Tensor& out, const Tensor& lse,
                         const Tensor& qkv, const QKVLayout& layout, const Tensor& g,
                         const Tensor& groups, const FocusGateParams& gate,
                         FocusSoftKernel kernel) {
  NvtxRange range("focus_attention_fwd");
  // Hard routing, bf16, D 64/128: the group-sorted tensor-core kernel (ops/focus_hard_ops.h).
  if (gate.kind == FocusGateKind::hard && g.ndim() == 3 &&
      focus_hard_supported(ctx, qkv, layout, int(g.dim(2)))) {
    focus_hard_attention_fwd(ctx, out, lse, qkv, layout, groups, int(g.dim(2)), gate.local_window);
    return;
  }
  check_attention(ctx, qkv, layout);
  const int64_t B = qkv.dim(0), T = qkv.dim(1);
  require_tensor(kAttn, "out", out, qkv.dtype, Shape{B, T, layout.q_width()}, ctx);
  require_tensor(kAttn, "lse", lse, DType::f32, Shape{B, layout.n_head, T}, ctx);
  auto make = [&]<typename E>() {
    FocusAttentionParams<E> p = attention_params<E>(ctx, qkv, layout, g, groups, gate);
    p.o = ptr<E>(out);
    p.lse = ptr<float>(lse);
    return p;
  };
  // bf16 CUDA: the additive gate on Hopper (D 64 / 128, <= 32 groups) on the wgmma kernel, else
  // D 64 / 128, <= 64 groups on the tiled tensor-core kernel (every gate).
  if (ctx.device == Device::cuda && qkv.dtype == DType::bf16) {
    const FocusAttentionParams<bf16> p = make.template operator()<bf16>();
    if (use_wgmma(p, kernel, false)) return launch_focus_wgmma_fwd(p, ctx.stream);
    if (focus_tiled_supported(p)) return launch_focus_tiled_fwd(p, ctx.stream);
  }
  run_op<FocusAttentionParams>(ctx, qkv.dtype, make, focus_attention_fwd_ref,
                               launch_focus_attention_fwd<float>, launch_focus_attention_fwd<bf16>);
}

void focus_attention_bwd(const ExecContext& ctx, const Tensor& dqkv, const Tensor& dg,
                         const Tensor& dout, const Tensor& qkv, const Tensor& out,
                         const Tensor& lse, const QKVLayout& layout, const Tensor& g,
                         const Tensor& groups, const FocusGateParams& gate,
                         FocusSoftKernel kernel) {
  NvtxRange range("focus_attention_bwd");
  check_attention(ctx, qkv, layout);
  const int64_t B = qkv.dim(0), T = qkv.dim(1);
  require_tensor(kAttn, "out", out, qkv.dtype, Shape{B, T, layout.q_width()}, ctx);
  require_tensor(kAttn, "dout", dout, qkv.dtype, out.shape, ctx);
  require_tensor(kAttn, "lse", lse, DType::f32, Shape{B, layout.n_head, T}, ctx);
  require_tensor(kAttn, "dqkv", dqkv, qkv.dtype, qkv.shape, ctx);
  if (!dg.empty()) {
    require_present(kAttn, "g (for dg)", g);
    require_tensor(kAttn, "dg", dg, DType::f32, g.shape, ctx);
  }
  auto make = [&]<typename E>() {
    FocusAttentionParams<E> p = attention_params<E>(ctx, qkv, layout, g, groups, gate);
    E* d = ptr<E>(dqkv);
    p.o = ptr<E>(out);
    p.lse = ptr<float>(lse);
    p.dout = ptr<E>(dout);
    p.dq = d;
    p.dk = d + layout.k_offset();
    p.dv = d + layout.v_offset();
    p.dg = ptr<float>(dg);
    return p;
  };
  // bf16 CUDA: the kernels of the forward (above).
  if (ctx.device == Device::cuda && qkv.dtype == DType::bf16) {
    const FocusAttentionParams<bf16> p = make.template operator()<bf16>();
    if (use_wgmma(p, kernel, true)) return launch_focus_wgmma_bwd(p, ctx.stream);
    if (focus_tiled_supported(p)) return launch_focus_tiled_bwd(p, ctx.stream);
  }
  run_op<FocusAttentionParams>(ctx, qkv.dtype, make, focus_attention_bwd_ref,
                               launch_focus_attention_bwd<float>, launch_focus_attention_bwd<bf16>);
}

void focus_attention_decode(const ExecContext& ctx, const Tensor& out, const Tensor& qkv,
                            const Tensor& k_cache, const Tensor& v_cache, const Tensor& g_cache,
                            const Tensor& groups_cache, int pos, const QKVLayout& layout,
                            const FocusGateParams& gate) {
  NvtxRange range("focus_attention_decode");
  constexpr const char* op = "focus_attention_decode";
  check_attention(ctx, qkv, layout);
  const int64_t B = qkv.dim(0), Tq = qkv.dim(1);
  ATTN_REQUIRE(qkv.dim(2) == layout.width(), "%s: qkv must be [B, Tq, %lld], got %s", op,
               (long long)layout.width(), qkv.str().c_str());
  ATTN_REQUIRE(k_cache.ndim() == 4, "%s: k_cache must be [B, n_kv_head, max_T, D], got %s", op,
               k_cache.str().c_str());
  const int64_t max_T = k_cache.dim(2);
  const Shape kv{B, layout.n_kv_head, max_T, layout.head_dim};
  require_tensor(op, "k_cache", k_cache, qkv.dtype, kv, ctx);
  require_tensor(op, "v_cache", v_cache, qkv.dtype, kv, ctx);
  ATTN_REQUIRE(pos >= 0 && pos + Tq <= max_T, "%s: positions %d .. %lld exceed the cache (%lld)",
               op, pos, (long long)(pos + Tq - 1), (long long)max_T);
  require_tensor(op, "g_cache", g_cache, DType::f32, Shape{B, max_T, g_cache.dim(2)}, ctx);
  require_tensor(op, "groups_cache", groups_cache, DType::i32, Shape{B, max_T, groups_cache.dim(2)},
                 ctx);
  require_tensor(op, "out", out, qkv.dtype, Shape{B, Tq, layout.q_width()}, ctx);
  auto make = [&]<typename E>() {
    FocusAttentionParams<E> p;
    p.q = ptr<E>(qkv);
    p.k = ptr<E>(k_cache);
    p.v = ptr<E>(v_cache);
    p.o = ptr<E>(out);
    p.g = ptr<float>(g_cache);
    p.groups = ptr<int32_t>(groups_cache);
    p.q_batch_stride = Tq * layout.width();
    p.q_row_stride = layout.width();
    p.kv_batch_stride = layout.n_kv_head * max_T * layout.head_dim;
    p.kv_row_stride = layout.head_dim;
    p.kv_head_stride = max_T * layout.head_dim;
    p.o_batch_stride = Tq * layout.q_width();
    p.o_row_stride = layout.q_width();
    p.K = int(g_cache.dim(2));
    p.top_k = int(groups_cache.dim(2));
    p.g_batch_stride = max_T * p.K;
    p.groups_batch_stride = max_T * p.top_k;
    p.B = int(B);
    p.seq_len = int(Tq);
    p.pos = pos;
    p.n_head = layout.n_head;
    p.n_kv_head = layout.n_kv_head;
    p.D = layout.head_dim;
    p.scale = float(1.0 / std::sqrt(double(layout.head_dim)));
    p.gate = gate;
    return p;
  };
  run_op<FocusAttentionParams>(ctx, qkv.dtype, make, focus_attention_fwd_ref,
                               launch_focus_attention_decode<float>,
                               launch_focus_attention_decode<bf16>);
}

}  // namespace attnlab::ops
