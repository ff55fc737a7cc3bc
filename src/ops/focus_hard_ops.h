// Host ops of the hard-routed Focus forward on CUDA (kernels/focus/focus_hard.cuh,
// docs/focus_hard.md). focus_attention_fwd dispatches to focus_hard_attention_fwd for bf16,
// head dim 64/128, gate hard, K <= 64; the rows equal those of the plain kernel and of the CPU
// reference.
#pragma once
#include "core/context.h"
#include "core/tensor.h"
#include "kernels/focus/focus_hard.cuh"
#include "ops/qkv_layout.h"

namespace attnlab::ops {

// Which kernel focus_hard_attention_fwd runs (kernels/focus/focus_hard.cuh): automatic = the
// Hopper wgmma kernel (split schedule, focus_hard_wgmma.cu) where this build and device support
// it, with its group pass on the group-sorted copy of qkv for top_k = 1 from T = 32768 on
// (wgmma_sorted, focus_hard_sorted.cu) and on rows gathered per tile otherwise (wgmma); else the
// mma.sync kernel (focus_hard_fwd.cu, one walk per query tile). mma / wgmma / wgmma_sorted force
// one (a wgmma kernel where unsupported, or wgmma_sorted with top_k > 1, is an error).
// wgmma_masked: the soft-gated wgmma forward with the hard mask (launch_focus_wgmma_hard_fwd,
// kernels/focus/focus_wgmma.cuh): dense tile work with a group test per pair, no index, no
// passes to order, K <= 8; automatic for top_k >= 2 at short lengths (plan_focus_hard, measured).
enum class FocusHardKernel { automatic, mma, wgmma, wgmma_sorted, wgmma_masked };

// The order of the wgmma kernel's two passes (kernels/focus/focus_hard.cuh, band_first):
// group_first = the group pass writes partials and the band pass merges them (every top_k);
// band_first = top_k 1 only: the band pass runs on a second stream beside the index build (and
// the gather), the group pass merges its partial. automatic = band_first for top_k 1 with the
// list group pass at head dim 64 (where it measured faster; from T 1025 in the warp-specialised
// fused launch, fused_ws, where that measured faster still), group_first otherwise. Forcing
// band_first without the wgmma kernel or with top_k > 1 is an error; group_first is what the
// mma kernel does anyway. fused = band_first in one launch beside the index build
// (launch_focus_hard_fused: the band's blocks and the list group pass's as items of one grid);
// top_k 1 with the wgmma kernel's list group pass only (not the sorted one). fused_ws = the same
// items warp-specialised (launch_focus_hard_fused_ws: a producer warpgroup loading ahead across
// items, two consumer warpgroups; head dim 64 only).
enum class FocusHardOrder { automatic, group_first, band_first, fused, fused_ws };

// The order of the wgmma group passes' blocks, the list pass's and the sorted pass's
// (kernels/focus/focus_hard.cuh, longest_first): longest_first over all groups and heads, or
// group_major (head after head, each head's group after group or last rows first: the blocks
// running at once share their group's keys in L2); the outputs are bitwise the same. automatic
// (the default): group_major for the sorted pass, longest_first for the list pass (H100,
// 2026-12-05, 12 x 64, K 8, top_k 1, the sorted pass group major against longest first: 2.36-2.64
// / 2.84-2.98 ms at 64K, 29.6-30.6 / 38.7-39.3 at 256K, 465-470 / 586-589 at 1M, 0.81-0.86 /
// 0.84-0.87 at 32K; the list pass at 16K, longest first faster: 0.29 against 0.32;
// docs/performance_variants.md, "The sorted pass group major").
enum class FocusHardBlockOrder { automatic, longest_first, group_major };

// True when the build holds the wgmma kernel's sm_90a code and the current device runs it (compute
// capability 9.0), for head dim 64 or 128.
bool focus_hard_wgmma_available(int head_dim);

// True when focus_hard_attention_fwd takes this call (CUDA, bf16, head dim 64 or 128, K in
// [1, 64]).
bool focus_hard_supported(const ExecContext& ctx, const Tensor& qkv, const QKVLayout& layout,
                          int K);

// The group-sorted index of groups [B, T, top_k] i32 (ids in [0, K)), CUDA only: list
// [B, T * top_k] i32 (the first offsets[b][K] entries written), offsets and tile_offsets
// [B, K + 1] i32, masks [B, T, 2] u32 (each token's 64-bit group set, low word first).
// Written (=).
// tile_rows: the queries per attention block the tile offsets count (64 or 128). path: which
// kernels build it (FocusHardIndexPath, kernels/focus/focus_hard.cuh; forcing fused past its
// limit is an error).
void focus_hard_index(const ExecContext& ctx, const Tensor& list, const Tensor& offsets,
                      const Tensor& tile_offsets, const Tensor& masks, const Tensor& groups, int K,
                      int tile_rows = 64, FocusHardIndexPath path = FocusHardIndexPath::automatic);

// What focus_hard_attention_fwd runs for its options (host only, no device work; every
// combination is checked on the CPU, tests/ops/test_focus_hard_plan.cpp): the wgmma kernel or the
// mma kernel, the sorted or the list group pass and the order of the passes. An option that does
// not apply (FocusHardKernel, FocusHardOrder, FocusHardIndexPath) is an error naming it.
// wgmma_supported: focus_hard_wgmma_available(D).
// longest_first: the group pass's blocks longest first (FocusHardBlockOrder), else group major.
struct FocusHardPlan {
  bool wgmma = false, sorted = false, band_first = false, fused = false, longest_first = true;
  bool warp_specialised = false;  // the fused launch's warp-specialised kernel (fused_ws)
  // The masked kernel (forced, or automatic for top_k >= 2 and K <= 8 up to 8192 tokens, 16384
  // where 8 top_k >= 3 K or at head dim 128): the other fields but wgmma do not apply.
  bool masked = false;
};
FocusHardPlan plan_focus_hard(FocusHardKernel kernel, FocusHardOrder order,
                              FocusHardIndexPath index, int64_t T, int64_t top_k, int K,
                              int head_dim, bool wgmma_supported,
                              FocusHardBlockOrder block_order = FocusHardBlockOrder::automatic);

// out [B, T, n_head*D] bf16 and lse [B, n_head, T] f32 written (=): the hard-routed rows of
// focus_attention_fwd (pos 0) over the packed qkv [B, T, layout.width()] bf16, groups
// [B, T, top_k] i32 with ids in [0, K). Workspace: stream-ordered allocations of O(B T top_k)
// ints (+ B T top_k n_head (D + 1) floats of partials when top_k > 1), freed on the stream.
// tile_rows: queries per block of the mma kernel, 64 (one m-tile per warp) or 128 (two; head dim
// 64 only); 0 = the default (64); checked for every kernel, used by the mma kernel only (the wgmma
// kernel's blocks are 128 queries). The wgmma kernel also takes B T top_k n_head (D + 1) floats
// of partials for every top_k, and with the sorted group pass a copy of qkv (B T width bf16).
// index: which kernels build the index (FocusHardIndexPath).
void focus_hard_attention_fwd(const ExecContext& ctx, const Tensor& out, const Tensor& lse,
                              const Tensor& qkv, const QKVLayout& layout, const Tensor& groups,
                              int K, int local_window, int tile_rows = 0,
                              FocusHardKernel kernel = FocusHardKernel::automatic,
                              FocusHardOrder order = FocusHardOrder::automatic,
                              FocusHardBlockOrder block_order = FocusHardBlockOrder::automatic,
                              FocusHardIndexPath index = FocusHardIndexPath::automatic);

// The masked wgmma kernel's share of focus_hard_attention_fwd (FocusHardKernel::wgmma_masked;
// focus_hard_masked.cpp), after the op's checks: one launch of launch_focus_wgmma_hard_fwd.
constexpr int kFocusHardMaskedMaxGroups = 8;
void focus_hard_masked_fwd(const ExecContext& ctx, const Tensor& out, const Tensor& lse,
                           const Tensor& qkv, const QKVLayout& layout, const Tensor& groups, int K,
                           int local_window);

}  // namespace attnlab::ops
