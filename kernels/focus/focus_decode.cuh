// Group-indexed decoding of Focus attention with hard routing (docs/focus.md, "Generation").
//
// The decode cache keeps, besides K/V [B, n_kv_head, max_T, D] and each token's top_k groups
// groups [B, max_T, top_k] i32, a per-group index: index [B, K, max_T] i32 and counts [B, K] i32.
// index[b, c, 0 .. counts[b, c]) lists, in increasing order, the cached positions of sequence b
// whose top_k groups include c (capacity max_T per group: a group can hold every token).
//
// focus_group_index_append: the Tq tokens at positions pos .. pos+Tq-1 (their groups already in
//   groups) join the lists of their groups. Entries >= pos (left by a rewound cache: a new
//   prefill, or set_length to a shorter length) are dropped first, so the lists always describe
//   positions 0 .. pos+Tq-1. index, counts updated in place; no host synchronisation.
//
// focus_group_decode: query t of sequence b (q + b*q_batch_stride + t*q_row_stride + h*D) sits at
//   position i = pos + t (its own key already in the cache) and attends to
//     the local window   j in [max(0, i - local_window), i], and
//     for x = 0 .. top_k-1, c = groups[b, i, x]: the positions j < i - local_window of index[b, c],
//       skipping j when it also holds one of the query's earlier groups groups[b, i, y < x]
//   (each pair once): exactly the keys of the hard gate of focus_attention.cuh, found in
//   O(window + size of the query's groups) instead of O(i). o = softmax(scale q k^T) v written (=)
//   at o + b*o_batch_stride + t*o_row_stride + h*D. GQA: head h reads kv head h / (n_head /
//   n_kv_head). D <= 128. The lists must describe positions 0 .. pos+Tq-1 (append first).
//   Split-K (CUDA): each row's key sequence (window, then its groups' lists) is cut on the device
//   into n_splits equal chunks (n_splits chosen on the host from the cache length, so no host
//   synchronisation; empty chunks contribute nothing), combined in split order (deterministic).
//   n_splits = 0 lets the launcher choose (focus_group_decode_splits). The CPU reference ignores
//   n_splits.
#pragma once
#include <cstdint>

#include "kernels/attention/attention_decode.cuh"
#include "kernels/common/launch.h"

namespace attnlab {

struct FocusGroupIndexParams {
  const int32_t* groups = nullptr;  // [B, max_T, top_k]
  int32_t* index = nullptr;         // [B, K, max_T]
  int32_t* counts = nullptr;        // [B, K]
  int B = 0, Tq = 0, pos = 0, max_T = 0, K = 0, top_k = 0;
};

template <typename T>
struct FocusGroupDecodeParams {
  const T* q = nullptr;
  int64_t q_batch_stride = 0, q_row_stride = 0;
  const T* k_cache = nullptr;  // [B, n_kv_head, max_T, D]
  const T* v_cache = nullptr;
  const int32_t* groups = nullptr;  // [B, max_T, top_k]
  const int32_t* index = nullptr;   // [B, K, max_T]
  const int32_t* counts = nullptr;  // [B, K]
  T* o = nullptr;
  int64_t o_batch_stride = 0, o_row_stride = 0;
  int B = 0, Tq = 0, pos = 0, max_T = 0;
  int n_head = 0, n_kv_head = 0, D = 0;
  int K = 0, top_k = 0, local_window = 0;
  int n_splits = 0;  // 0: chosen by the launcher
  float scale = 0.f;
};

// The most groups per token the decode kernel takes (the host op checks).
constexpr int kFocusDecodeMaxTopK = 8;

// Keys per split-K chunk for the host's estimate of a row's keys (the most chunks: dense decoding's
// decode_max_splits, attention_decode.cuh).
constexpr int kFocusDecodeKeysPerSplit = 128;

// The host does not know the lists' lengths (they live on the device): it estimates a row's keys
// as the window plus top_k / K of the cache (balanced groups). Few rows (decoding): enough chunks
// to fill the GPU; many rows (a chunk of tokens): 1.
inline int focus_group_decode_splits(int64_t rows, int cache_len, int local_window, int K,
                                     int top_k) {
  if (rows >= 256) return 1;
  const int64_t keys = int64_t(local_window) + 1 + int64_t(cache_len) * top_k / (K > 0 ? K : 1);
  int64_t s = (keys + kFocusDecodeKeysPerSplit - 1) / kFocusDecodeKeysPerSplit;
  const int most = decode_max_splits(rows);
  return int(s < 1 ? 1 : (s > most ? most : s));
}

void launch_focus_group_index_append(const FocusGroupIndexParams& p, Stream s);
template <typename T>
void launch_focus_group_decode(const FocusGroupDecodeParams<T>& p, Stream s);

}  // namespace attnlab
