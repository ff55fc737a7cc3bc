#include "kernels/focus/focus_decode.cuh"

#include <cmath>

#include "core/nvtx.h"
#include "ops/focus_decode_ops.h"
#include "ops/op_checks.h"
#include "ref/focus_decode_ref.h"

namespace attnlab::ops {

using namespace detail;

namespace {

struct IndexDims {
  int64_t B, max_T, K, top_k;
};

// groups_cache [B, max_T, top_k], counts [B, K] (K from here), index [B, K, max_T], all i32 on the
// device.
IndexDims check_index(const char* op, const ExecContext& ctx, const Tensor& groups_cache,
                      const Tensor& index, const Tensor& counts) {
  require_present(op, "groups_cache", groups_cache);
  require_present(op, "counts", counts);
  ATTN_REQUIRE(groups_cache.ndim() == 3 && counts.ndim() == 2,
               "%s: groups_cache must be [B, max_T, top_k] and counts [B, K], got %s and %s", op,
               groups_cache.str().c_str(), counts.str().c_str());
  const IndexDims d{groups_cache.dim(0), groups_cache.dim(1), counts.dim(1), groups_cache.dim(2)};
  require_tensor(op, "groups_cache", groups_cache, DType::i32, groups_cache.shape, ctx);
  require_tensor(op, "index", index, DType::i32, Shape{d.B, d.K, d.max_T}, ctx);
  require_tensor(op, "counts", counts, DType::i32, Shape{d.B, d.K}, ctx);
  ATTN_REQUIRE(d.top_k >= 1 && d.top_k <= d.K, "%s: top_k (%lld) must be in [1, K = %lld]", op,
               (long long)d.top_k, (long long)d.K);
  return d;
}

void check_positions(const char* op, int pos, int64_t Tq, int64_t max_T) {
  ATTN_REQUIRE(pos >= 0 && Tq >= 1 && pos + Tq <= max_T,
               "%s: %lld new tokens at position %d do not fit a cache of %lld positions", op,
               (long long)Tq, pos, (long long)max_T);
}

}  // namespace

void focus_group_index_append(const ExecContext& ctx, const Tensor& index, const Tensor& counts,
                              const Tensor& groups_cache, int pos, int Tq) {
  NvtxRange range("focus_group_index_append");
  constexpr const char* op = "focus_group_index_append";
  const IndexDims d = check_index(op, ctx, groups_cache, index, counts);
  check_positions(op, pos, Tq, d.max_T);
  FocusGroupIndexParams p;
  p.groups = static_cast<const int32_t*>(groups_cache.data);
  p.index = static_cast<int32_t*>(index.data);
  p.counts = static_cast<int32_t*>(counts.data);
  p.B = int(d.B);
  p.Tq = Tq;
  p.pos = pos;
  p.max_T = int(d.max_T);
  p.K = int(d.K);
  p.top_k = int(d.top_k);
  if (ctx.device == Device::cpu)
    focus_group_index_append_ref(p);
  else
    launch_focus_group_index_append(p, ctx.stream);
}

void focus_group_decode(const ExecContext& ctx, const Tensor& out, const Tensor& qkv,
                        const Tensor& k_cache, const Tensor& v_cache, const Tensor& groups_cache,
                        const Tensor& index, const Tensor& counts, int pos, const QKVLayout& layout,
                        int local_window, int n_splits) {
  NvtxRange range("focus_group_decode");
  constexpr const char* op = "focus_group_decode";
  const DType dt = require_activation(op, "qkv", qkv, ctx, 3);
  const int H = layout.n_head, Hkv = layout.n_kv_head, D = layout.head_dim;
  ATTN_REQUIRE(H > 0 && Hkv > 0 && D > 0 && H % Hkv == 0,
               "%s: n_kv_head (%d) must divide n_head (%d), head_dim %d must be positive", op, Hkv,
               H, D);
  ATTN_REQUIRE(qkv.ndim() == 3 && qkv.dim(2) == layout.width(),
               "%s: qkv must be [B, Tq, %lld], got %s", op, (long long)layout.width(),
               qkv.str().c_str());
  ATTN_REQUIRE(ctx.device == Device::cpu || D <= 128, "%s: head dim must be <= 128 on CUDA, got %d",
               op, D);
  const int64_t B = qkv.dim(0), Tq = qkv.dim(1);
  const IndexDims d = check_index(op, ctx, groups_cache, index, counts);
  ATTN_REQUIRE(d.B == B, "%s: the cache holds %lld sequences, qkv %lld", op, (long long)d.B,
               (long long)B);
  ATTN_REQUIRE(ctx.device == Device::cpu || d.top_k <= kFocusDecodeMaxTopK,
               "%s: top_k must be <= %d on CUDA, got %lld", op, kFocusDecodeMaxTopK,
               (long long)d.top_k);
  const Shape kv{B, Hkv, d.max_T, D};
  require_tensor(op, "k_cache", k_cache, dt, kv, ctx);
  require_tensor(op, "v_cache", v_cache, dt, kv, ctx);
  require_tensor(op, "out", out, dt, Shape{B, Tq, layout.q_width()}, ctx);
  check_positions(op, pos, Tq, d.max_T);
  ATTN_REQUIRE(local_window >= 0, "%s: local_window must be >= 0, got %d", op, local_window);
  ATTN_REQUIRE(n_splits >= 0, "%s: n_splits must be >= 0, got %d", op, n_splits);
  auto make = [&]<typename T>() {
    FocusGroupDecodeParams<T> p;
    p.q = static_cast<const T*>(qkv.data);
    p.q_batch_stride = Tq * layout.width();
    p.q_row_stride = layout.width();
    p.k_cache = static_cast<const T*>(k_cache.data);
    p.v_cache = static_cast<const T*>(v_cache.data);
    p.groups = static_cast<const int32_t*>(groups_cache.data);
    p.index = static_cast<const int32_t*>(index.data);
    p.counts = static_cast<const int32_t*>(counts.data);
    p.o = static_cast<T*>(out.data);
    p.o_batch_stride = Tq * layout.q_width();
    p.o_row_stride = layout.q_width();
    p.B = int(B);
    p.Tq = int(Tq);
    p.pos = pos;
    p.max_T = int(d.max_T);
    p.n_head = H;
    p.n_kv_head = Hkv;
    p.D = D;
    p.K = int(d.K);
    p.top_k = int(d.top_k);
    p.local_window = local_window;
    p.n_splits = n_splits;
    p.scale = float(1.0 / std::sqrt(double(D)));
    return p;
  };
  run_op<FocusGroupDecodeParams>(ctx, dt, make, focus_group_decode_ref,
                                 launch_focus_group_decode<float>, launch_focus_group_decode<bf16>);
}

}  // namespace attnlab::ops
