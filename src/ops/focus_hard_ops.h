// Host ops of the hard-routed Focus forward on CUDA (kernels/focus/focus_hard.cuh, docs/focus.md
// "Hard-routed kernel"). focus_attention_fwd dispatches to focus_hard_attention_fwd for bf16,
// head dim 64/128, gate hard, K <= 64; the rows equal those of the plain kernel and of the CPU
// reference.
#pragma once
#include "core/context.h"
#include "core/tensor.h"
#include "ops/qkv_layout.h"

namespace attnlab::ops {

// True when focus_hard_attention_fwd takes this call (CUDA, bf16, head dim 64 or 128, K in
// [1, 64]).
bool focus_hard_supported(const ExecContext& ctx, const Tensor& qkv, const QKVLayout& layout,
                          int K);

// The group-sorted index of groups [B, T, top_k] i32 (ids in [0, K)), CUDA only: list
// [B, T * top_k] i32 (the first offsets[b][K] entries written), offsets and tile_offsets
// [B, K + 1] i32, masks [B, T, 2] u32 (each token's 64-bit group set, low word first).
// Written (=).
// tile_rows: the queries per attention block the tile offsets count (64 or 128).
void focus_hard_index(const ExecContext& ctx, const Tensor& list, const Tensor& offsets,
                      const Tensor& tile_offsets, const Tensor& masks, const Tensor& groups, int K,
                      int tile_rows = 64);

// out [B, T, n_head*D] bf16 and lse [B, n_head, T] f32 written (=): the hard-routed rows of
// focus_attention_fwd (pos 0) over the packed qkv [B, T, layout.width()] bf16, groups
// [B, T, top_k] i32 with ids in [0, K). Workspace: stream-ordered allocations of O(B T top_k)
// ints (+ B T top_k n_head (D + 1) floats of partials when top_k > 1), freed on the stream.
// tile_rows: queries per block, 64 (one m-tile per warp) or 128 (two; head dim 64 only); 0 = the
// default (64).
void focus_hard_attention_fwd(const ExecContext& ctx, const Tensor& out, const Tensor& lse,
                              const Tensor& qkv, const QKVLayout& layout, const Tensor& groups,
                              int K, int local_window, int tile_rows = 0);

}  // namespace attnlab::ops
