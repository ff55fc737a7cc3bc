// Host side of the hard-routed Focus forward (ops/focus_hard_ops.h): checks, the stream-ordered
// workspace (one stream-ordered allocation), the launches (index, attention: the wgmma kernel's two
// passes, for top_k 1 at head dim 64 below the sorted pass's length the band pass first: up to
// 1024 tokens on a second stream beside the index build, beyond (and with FocusHardOrder::fused /
// fused_ws) both passes in one warp-specialised launch after the index (fused: two blocks per SM),
// its item counters cleared by a memset; or the mma kernel and, for top_k > 1, its merge). No host
// synchronisation, no copies.
#include "kernels/focus/focus_hard.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "kernels/common/side_stream.h"
#include "kernels/common/stream_scratch.h"
#include "ops/focus_hard_ops.h"
#include "ops/op_checks.h"

namespace attnlab::ops {

using namespace detail;

namespace {

constexpr const char* kOp = "focus_hard_attention";
// 64 until the H200 benchmark (bench_focus_hard, both sizes in one call) says otherwise.
constexpr int kDefaultTileRows = 64;

void check_tile_rows(const char* op, int tile_rows) {
  ATTN_REQUIRE(tile_rows == 64 || tile_rows == 128, "%s: tile_rows must be 64 or 128, got %d", op,
               tile_rows);
}

void check_groups(const ExecContext& ctx, const char* op, const Tensor& groups, int K) {
  require_present(op, "groups", groups);
  ATTN_REQUIRE(ctx.device == Device::cuda, "%s: runs on cuda only, got %s", op,
               device_name(ctx.device));
  ATTN_REQUIRE(groups.ndim() == 3 && groups.dtype == DType::i32 && groups.device == ctx.device,
               "%s: groups must be i32 [B, T, top_k] on cuda, got %s", op, groups.str().c_str());
  ATTN_REQUIRE(K >= 1 && K <= kFocusHardMaxGroups, "%s: groups K must be in [1, %d], got %d", op,
               kFocusHardMaxGroups, K);
  ATTN_REQUIRE(groups.dim(2) >= 1 && groups.dim(2) <= K,
               "%s: top_k (the last dim of groups) must be in [1, %d], got %lld", op, K,
               (long long)groups.dim(2));
  ATTN_REQUIRE(groups.dim(0) >= 1 && groups.dim(1) >= 1, "%s: groups must not be empty, got %s", op,
               groups.str().c_str());
}

}  // namespace

bool focus_hard_wgmma_available(int head_dim) { return focus_hard_wgmma_supported(head_dim); }

bool focus_hard_supported(const ExecContext& ctx, const Tensor& qkv, const QKVLayout& layout,
                          int K) {
  return ctx.device == Device::cuda && qkv.dtype == DType::bf16 &&
         (layout.head_dim == 64 || layout.head_dim == 128) && K >= 1 && K <= kFocusHardMaxGroups;
}

void focus_hard_index(const ExecContext& ctx, const Tensor& list, const Tensor& offsets,
                      const Tensor& tile_offsets, const Tensor& masks, const Tensor& groups, int K,
                      int tile_rows, FocusHardIndexPath path) {
  NvtxRange range("focus_hard_index");
  constexpr const char* op = "focus_hard_index";
  check_groups(ctx, op, groups, K);
  const int64_t B = groups.dim(0), T = groups.dim(1), top_k = groups.dim(2);
  require_tensor(op, "list", list, DType::i32, Shape{B, T * top_k}, ctx);
  require_tensor(op, "offsets", offsets, DType::i32, Shape{B, K + 1}, ctx);
  require_tensor(op, "tile_offsets", tile_offsets, DType::i32, Shape{B, K + 1}, ctx);
  require_tensor(op, "masks", masks, DType::u32, Shape{B, T, 2}, ctx);
  check_tile_rows(op, tile_rows);
  FocusHardIndexParams p;
  p.groups = groups.ptr<int32_t>();
  p.B = int(B), p.T = int(T), p.K = K, p.top_k = int(top_k);
  p.tile_rows = tile_rows;
  p.path = path;
  const StreamScratch chunk_counts(sizeof(int32_t) * size_t(B * K * focus_hard_chunks(p.T)),
                                   ctx.stream);
  p.chunk_counts = chunk_counts.as<int32_t>();
  p.offsets = offsets.ptr<int32_t>();
  p.tile_offsets = tile_offsets.ptr<int32_t>();
  p.list = list.ptr<int32_t>();
  p.masks = static_cast<uint64_t*>(masks.data);
  launch_focus_hard_index(p, ctx.stream);
}

FocusHardPlan plan_focus_hard(FocusHardKernel kernel, FocusHardOrder order,
                              FocusHardIndexPath index, int64_t T, int64_t top_k, int K,
                              int head_dim, bool wgmma_supported, FocusHardBlockOrder block_order) {
  FocusHardPlan plan;
  ATTN_REQUIRE(kernel != FocusHardKernel::wgmma_sorted || top_k == 1,
               "%s: the sorted group pass (wgmma_sorted) takes top_k 1 only, got top_k %lld", kOp,
               (long long)top_k);
  const int64_t fused_max_t = int64_t(kFocusHardFusedMaxChunks) * kFocusHardChunk;
  ATTN_REQUIRE(index != FocusHardIndexPath::fused || T <= fused_max_t,
               "%s: the fused index kernel takes T up to %lld (its counts in shared memory), got "
               "T %lld",
               kOp, (long long)fused_max_t, (long long)T);
  if (kernel == FocusHardKernel::wgmma_masked) {
    ATTN_REQUIRE(wgmma_supported,
                 "%s: the masked wgmma kernel (wgmma_masked) needs a build with sm_90a code and a "
                 "compute capability 9.0 device",
                 kOp);
    ATTN_REQUIRE(order == FocusHardOrder::automatic && index == FocusHardIndexPath::automatic,
                 "%s: the masked wgmma kernel (wgmma_masked) has no passes to order and builds no "
                 "index: FocusHardOrder and FocusHardIndexPath must be automatic",
                 kOp);
    plan.wgmma = plan.masked = true;
    return plan;
  }
  // The masked kernel, automatic for top_k >= 2 (each token then has top_k passes of the list
  // pass, whose cost grows with the share of pairs sharing a group; the masked kernel runs at
  // ~0.64x dense's speed whatever the groups) up to 8192 tokens, and up to 16384 where the groups
  // are dense (8 top_k >= 3 K) or at head dim 128, where it measured faster than the list pass
  // (H100, 2026-12-05 19:14 UTC, masked / list ms, K 8 top_k 2 balanced: 12 x 64 0.027 / 0.039 at
  // 1K, 0.110 / 0.153 at 4K, 0.361 / 0.392 at 8K, 1.324 / 1.267 at 16K; 8 x 128 0.329 / 0.456 at
  // 8K, 1.209 / 1.409 at 16K; 12 x 64 K 4 top_k 2 1.340 / 2.300 at 16K; docs/focus_hard.md,
  // item 6).
  const int64_t masked_max_t = (8 * top_k >= 3 * int64_t(K) || head_dim == 128) ? 16384 : 8192;
  if (kernel == FocusHardKernel::automatic && order == FocusHardOrder::automatic &&
      index == FocusHardIndexPath::automatic && wgmma_supported && top_k >= 2 &&
      K <= kFocusHardMaskedMaxGroups && T <= masked_max_t) {
    plan.wgmma = plan.masked = true;
    return plan;
  }
  const bool forced_wgmma =
      kernel == FocusHardKernel::wgmma || kernel == FocusHardKernel::wgmma_sorted;
  plan.wgmma = forced_wgmma || (kernel == FocusHardKernel::automatic && wgmma_supported);
  ATTN_REQUIRE(!plan.wgmma || wgmma_supported,
               "%s: the wgmma kernel needs a build with sm_90a code (CMAKE_CUDA_ARCHITECTURES "
               "containing 90) and a compute capability 9.0 device",
               kOp);
  // The group pass on the group-sorted copy of qkv: top_k 1 (the pairs sharing a group are then
  // causal runs of the sorted order); automatic from kSortedMinT tokens, below which the list
  // group pass is faster (H200, 2026-12-05, K 8, sorted against list: 12 x 64 0.146 / 0.134 ms
  // at T 8K, 0.318 / 0.302 at 16K, 0.864 / 0.869 at 32K; 8 x 128 0.176 / 0.158, 0.393 / 0.383,
  // 1.021 / 1.104; docs/performance_focus_history.md, "The ring and dg_query patches, measured").
  constexpr int64_t kSortedMinT = 32768;
  // (The fused launch runs the list group pass: automatic takes it then at every length.)
  plan.sorted = plan.wgmma && top_k == 1 &&
                (kernel == FocusHardKernel::wgmma_sorted ||
                 (kernel == FocusHardKernel::automatic && order != FocusHardOrder::fused &&
                  order != FocusHardOrder::fused_ws && T >= kSortedMinT));
  // The band pass first: automatic for the list group pass at head dim 64, where it measured
  // faster; at head dim 128 and with the sorted group pass, merging in the group pass's epilogue
  // was slower than the band pass merging last (docs/performance_focus_history.md, "The
  // band pass first, measured"; the sorted pass's epilogue has read its rows' tokens from shared
  // memory since, not measured yet).
  ATTN_REQUIRE(order != FocusHardOrder::band_first || (plan.wgmma && top_k == 1),
               "%s: the band pass first (FocusHardOrder::band_first) needs the wgmma kernel and "
               "top_k 1, got %s kernel and top_k %lld",
               kOp, plan.wgmma ? "the wgmma" : "the mma", (long long)top_k);
  const bool fused_order = order == FocusHardOrder::fused || order == FocusHardOrder::fused_ws;
  ATTN_REQUIRE(!fused_order || (plan.wgmma && top_k == 1 && !plan.sorted),
               "%s: the fused launch (FocusHardOrder::fused, fused_ws) needs the wgmma kernel's "
               "list group pass and top_k 1, got %s kernel%s and top_k %lld",
               kOp, plan.wgmma ? "the wgmma" : "the mma", plan.sorted ? " (sorted pass)" : "",
               (long long)top_k);
  ATTN_REQUIRE(
      order != FocusHardOrder::fused_ws || head_dim == 64,
      "%s: the warp-specialised fused launch (FocusHardOrder::fused_ws) takes head dim 64, "
      "got %d",
      kOp, head_dim);
  plan.band_first = fused_order || order == FocusHardOrder::band_first ||
                    (order == FocusHardOrder::automatic && plan.wgmma && top_k == 1 &&
                     !plan.sorted && head_dim == 64);
  // The fused launch, warp-specialised: automatic where the band pass goes first (head dim 64,
  // the list group pass) from kFusedAutoMinT tokens on, where it measured faster than the band
  // pass first and than the fused launch of two blocks per SM (H100, 2026-12-06, 12 x 64, K 8,
  // top_k 1, balanced / realistic groups, warp-specialised against the automatic order then:
  // 0.022 / 0.021-0.025 ms at 1K, 0.029 / 0.030 at 2K, 0.048 / 0.054 at 4K, 0.104 / 0.119 at
  // 8K, 0.25 / 0.28 at 16K, 0.78-0.84 / 0.85-0.89 at 32K, 2.97 / 3.25 at 64K with the list pass
  // forced; docs/focus_hard_fused.md, "The warp-specialised fused launch"). Below it the band pass
  // first.
  constexpr int64_t kFusedAutoMinT = 1025;
  plan.fused =
      fused_order || (order == FocusHardOrder::automatic && plan.band_first && T >= kFusedAutoMinT);
  plan.warp_specialised =
      order == FocusHardOrder::fused_ws || (order == FocusHardOrder::automatic && plan.fused);
  // Automatic block order: group major for the sorted pass (its blocks at once then walk one
  // group's keys, which stay in L2), longest first for the list pass (focus_hard_ops.h).
  plan.longest_first = block_order == FocusHardBlockOrder::longest_first ||
                       (block_order == FocusHardBlockOrder::automatic && !plan.sorted);
  return plan;
}

void focus_hard_attention_fwd(const ExecContext& ctx, const Tensor& out, const Tensor& lse,
                              const Tensor& qkv, const QKVLayout& l, const Tensor& groups, int K,
                              int local_window, int tile_rows, FocusHardKernel kernel,
                              FocusHardOrder order, FocusHardBlockOrder block_order,
                              FocusHardIndexPath index) {
  NvtxRange range("focus_hard_attention_fwd");
  check_groups(ctx, kOp, groups, K);
  require_present(kOp, "qkv", qkv);
  ATTN_REQUIRE(qkv.ndim() == 3 && qkv.dtype == DType::bf16 && qkv.device == ctx.device,
               "%s: qkv must be bf16 [B, T, width] on cuda, got %s", kOp, qkv.str().c_str());
  ATTN_REQUIRE(l.head_dim == 64 || l.head_dim == 128,
               "%s: head dim must be 64 or 128, got %d (other head dims run the plain kernel of "
               "focus_attention_fwd)",
               kOp, l.head_dim);
  ATTN_REQUIRE(l.n_head > 0 && l.n_kv_head > 0 && l.n_head % l.n_kv_head == 0,
               "%s: n_kv_head (%d) must divide n_head (%d)", kOp, l.n_kv_head, l.n_head);
  const int64_t B = qkv.dim(0), T = qkv.dim(1), top_k = groups.dim(2);
  require_tensor(kOp, "qkv", qkv, DType::bf16, Shape{B, T, l.width()}, ctx);
  require_tensor(kOp, "groups", groups, DType::i32, Shape{B, T, top_k}, ctx);
  require_tensor(kOp, "out", out, DType::bf16, Shape{B, T, l.q_width()}, ctx);
  require_tensor(kOp, "lse", lse, DType::f32, Shape{B, l.n_head, T}, ctx);
  ATTN_REQUIRE(local_window >= 0, "%s: local_window must be >= 0, got %d", kOp, local_window);
  if (tile_rows == 0) tile_rows = kDefaultTileRows;
  check_tile_rows(kOp, tile_rows);
  ATTN_REQUIRE(tile_rows == 64 || l.head_dim == 64,
               "%s: tile_rows 128 needs head dim 64 (at 128 two m-tiles per warp spill registers), "
               "got head dim %d",
               kOp, l.head_dim);
  ATTN_REQUIRE(T * top_k < (int64_t(1) << 31), "%s: T x top_k must be < 2^31, got %lld", kOp,
               (long long)(T * top_k));
  ATTN_REQUIRE(B <= 65535, "%s: batch must be at most 65535 (a grid dimension), got %lld", kOp,
               (long long)B);

  const FocusHardPlan plan = plan_focus_hard(kernel, order, index, T, top_k, K, l.head_dim,
                                             focus_hard_wgmma_supported(l.head_dim), block_order);
  if (plan.masked) {
    ATTN_REQUIRE(K <= kFocusHardMaskedMaxGroups,
                 "%s: the masked wgmma kernel (wgmma_masked) takes at most %d groups, got K %d",
                 kOp, kFocusHardMaskedMaxGroups, K);
    return focus_hard_masked_fwd(ctx, out, lse, qkv, l, groups, K, local_window);
  }
  const bool wgmma = plan.wgmma, sorted = plan.sorted;
  const int rows = wgmma ? kFocusHardWgmmaRows : tile_rows;

  // One stream-ordered workspace (one allocation per call): the index lists, then the group
  // partials (the wgmma kernel always; the mma kernel for top_k > 1).
  const int64_t n_chunks = focus_hard_chunks(int(T));
  const bool partials = wgmma || top_k > 1;
  const int64_t n_part = partials ? B * T * top_k * l.n_head : 0;
  size_t at = 0;
  auto carve = [&at](int64_t n, size_t size) {
    const size_t off = at;
    at += (size_t(n) * size + 255) / 256 * 256;
    return off;
  };
  const size_t o_counts = carve(B * K * n_chunks, 4), o_offs = carve(B * (K + 1), 4),
               o_toffs = carve(B * (K + 1), 4), o_list = carve(B * T * top_k, 4),
               o_masks = carve(B * T, 8), o_part_o = carve(n_part * l.head_dim, 4),
               o_part_lse = carve(n_part, 4), o_sorted = carve(sorted ? B * T * l.width() : 0, 2),
               o_counters = carve(plan.fused ? 2 : 0, 4);
  const StreamScratch work(at, ctx.stream);
  char* base_ws = work.as<char>();

  FocusHardIndexParams ip;
  ip.groups = groups.ptr<int32_t>();
  ip.B = int(B), ip.T = int(T), ip.K = K, ip.top_k = int(top_k);
  ip.tile_rows = rows;
  ip.path = index;
  ip.chunk_counts = reinterpret_cast<int32_t*>(base_ws + o_counts);
  ip.offsets = reinterpret_cast<int32_t*>(base_ws + o_offs);
  ip.tile_offsets = reinterpret_cast<int32_t*>(base_ws + o_toffs);
  ip.list = reinterpret_cast<int32_t*>(base_ws + o_list);
  ip.masks = reinterpret_cast<uint64_t*>(base_ws + o_masks);

  FocusHardAttnParams p;
  const bf16* base = qkv.ptr<bf16>();
  p.q = base;
  p.k = base + l.k_offset();
  p.v = base + l.v_offset();
  p.o = out.ptr<bf16>();
  p.lse = lse.ptr<float>();
  p.groups = ip.groups;
  p.offsets = ip.offsets;
  p.tile_offsets = ip.tile_offsets;
  p.list = ip.list;
  p.masks = ip.masks;
  p.part_o = partials ? reinterpret_cast<float*>(base_ws + o_part_o) : nullptr;
  p.part_lse = partials ? reinterpret_cast<float*>(base_ws + o_part_lse) : nullptr;
  p.sorted = sorted ? reinterpret_cast<bf16*>(base_ws + o_sorted) : nullptr;
  p.q_batch_stride = p.kv_batch_stride = T * l.width();
  p.q_row_stride = p.kv_row_stride = l.width();
  p.o_batch_stride = T * l.q_width();
  p.o_row_stride = l.q_width();
  p.B = int(B), p.T = int(T), p.n_head = l.n_head, p.n_kv_head = l.n_kv_head, p.D = l.head_dim;
  p.K = K, p.top_k = int(top_k);
  p.local_window = int(std::min<int64_t>(local_window, T));  // the kernels add it in 32 bits
  p.scale = float(1.0 / std::sqrt(double(l.head_dim)));
  p.tile_rows = rows;
  p.longest_first = plan.longest_first;
  // The band pass first (FocusHardOrder): it reads nothing of the index, so the index build and
  // the gather run on a second stream beside it (launched first, so that the index's one block
  // per row starts before the band's blocks fill the GPU), and the group pass merges its partial.
  // The band, the longer of the two at head dim 64 (23 against 14 us at 4K), stays on the
  // caller's stream, so the group pass follows it directly and the join waits on an event that
  // has usually completed (the cross-stream signal off the critical path).
  p.band_first = plan.band_first;
  // Fused: the index build, then the band and list group passes in one launch that may start
  // beside it (its programmatic dependent), its two item counters cleared first.
  if (plan.fused) {
    int* counters = reinterpret_cast<int*>(base_ws + o_counters);
    CUDA_CHECK(
        cudaMemsetAsync(counters, 0, 2 * sizeof(int), reinterpret_cast<cudaStream_t>(ctx.stream)));
    launch_focus_hard_index(ip, ctx.stream);
    if (plan.warp_specialised)
      launch_focus_hard_fused_ws(p, counters, ctx.stream);
    else
      launch_focus_hard_fused(p, counters, ctx.stream);
    return;
  }
  if (p.band_first) {
    const SideStream side(ctx.stream);
    launch_focus_hard_index(ip, side.get());
    if (sorted) launch_focus_hard_gather(p, side.get());
    launch_focus_hard_band(p, ctx.stream);
    side.join();
    launch_focus_hard_wgmma(p, ctx.stream);
    return;
  }
  launch_focus_hard_index(ip, ctx.stream);
  if (wgmma) {
    if (sorted) launch_focus_hard_gather(p, ctx.stream);
    launch_focus_hard_wgmma(p, ctx.stream);
    return;
  }
  launch_focus_hard_fwd(p, ctx.stream);
}

}  // namespace attnlab::ops
