// Host ops of group-indexed Focus decoding (kernels/focus/focus_decode.cuh, docs/focus.md
// "Generation"): checks, params, dispatch (CPU reference or CUDA kernel, fp32 or bf16).
#pragma once
#include "core/context.h"
#include "core/tensor.h"
#include "ops/qkv_layout.h"

namespace attnlab::ops {

// The Tq tokens at positions pos .. pos+Tq-1 of groups_cache [B, max_T, top_k] i32 join the
// lists index [B, K, max_T] i32 / counts [B, K] i32 (entries >= pos are dropped first). counts
// must start at 0 for an empty cache.
void focus_group_index_append(const ExecContext& ctx, const Tensor& index, const Tensor& counts,
                              const Tensor& groups_cache, int pos, int Tq);

// Hard-routed attention of the Tq queries of qkv [B, Tq, width] at positions pos .. pos+Tq-1
// against the cache k_cache, v_cache [B, n_kv_head, max_T, D] (the new tokens' keys, groups and
// index entries already written): the local window plus the lists of the query's groups.
// out [B, Tq, n_head*D] written (=). n_splits 0: the launcher chooses (tests force values).
void focus_group_decode(const ExecContext& ctx, const Tensor& out, const Tensor& qkv,
                        const Tensor& k_cache, const Tensor& v_cache, const Tensor& groups_cache,
                        const Tensor& index, const Tensor& counts, int pos, const QKVLayout& layout,
                        int local_window, int n_splits = 0);

}  // namespace attnlab::ops
