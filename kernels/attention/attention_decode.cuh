// Attention against a KV cache (incremental decoding), and the cache append that feeds it.
//
// Cache layout: k_cache, v_cache [B, n_kv_head, max_T, D] row-major, in the activation dtype;
// position s of sequence b, kv head g lives at k_cache + ((b * n_kv_head + g) * max_T + s) * D.
//
// kv_cache_write: copies the keys/values of Tq new tokens (packed rows like the attention
//   family: token t of sequence b at k + b*src_batch_stride + t*src_row_stride + g*D) into cache
//   positions pos .. pos+Tq-1. Written (=); other positions untouched.
//
// attention_decode: Tq query rows per (b, h): query i (q + b*q_batch_stride + i*q_row_stride + h*D)
//   sits at position t = pos + i and attends to the cache positions AttentionMask (visibility.h)
//   lets it see: [mask.first_key(t), t] (causal; the mask must be causal), with
//   o = softmax(q k^T * scale) v written (=) at o + b*o_batch_stride + i*o_row_stride + h*D.
//   GQA: query head h reads kv head h / (n_head / n_kv_head).
//   D <= 128 (the host op checks). Split-K (CUDA): the positions from the first row's first
//   visible key to the last row's position are cut into n_splits chunks
//   processed by separate blocks, each writing its partial (max, sum, unnormalised o) to
//   stream-ordered fp32 scratch; a second pass combines them in a fixed order, so the result is
//   deterministic. n_splits = 0 lets the launcher choose (attention_decode_splits); tests force
//   values. One split writes o directly. The CPU reference ignores n_splits.
#pragma once
#include "kernels/attention/visibility.h"
#include "kernels/common/launch.h"

namespace attnlab {

template <typename T>
struct KVCacheWriteParams {
  const T* k = nullptr;
  const T* v = nullptr;
  int64_t src_batch_stride = 0;
  int64_t src_row_stride = 0;
  T* k_cache = nullptr;
  T* v_cache = nullptr;
  int B = 0, Tq = 0, n_kv_head = 0, D = 0, max_T = 0, pos = 0;
};

template <typename T>
struct AttentionDecodeParams {
  const T* q = nullptr;
  int64_t q_batch_stride = 0;
  int64_t q_row_stride = 0;
  const T* k_cache = nullptr;
  const T* v_cache = nullptr;
  T* o = nullptr;
  int64_t o_batch_stride = 0;
  int64_t o_row_stride = 0;
  int B = 0, Tq = 0, n_head = 0, n_kv_head = 0, D = 0, max_T = 0, pos = 0;
  int n_splits = 0;  // 0: chosen by the launcher
  float scale = 0.f;
  AttentionMask mask;  // causal; window as in AttentionParams
};

// Keys per split-K chunk and the most chunks: at most kDecodeMaxSplits (bounds the scratch) and
// about kDecodeTargetBlocks blocks in all (rows x chunks). Measured on an H100 (2026-12-05,
// bench_focus_decode, B 1): at 12 heads 64 chunks beat 32 (dense 0.149 against 0.234 ms at 64K
// cached tokens, Focus 0.112 against 0.173) and 128 (0.181, 0.125); at 32 heads 32 chunks beat
// 64 (0.259 against 0.275 ms, Focus 0.178 against 0.194).
constexpr int kDecodeKeysPerSplit = 128;
constexpr int kDecodeMaxSplits = 64;
constexpr int kDecodeTargetBlocks = 1024;

// The most chunks for `rows` query rows.
inline int decode_max_splits(int64_t rows) {
  const int64_t s = kDecodeTargetBlocks / (rows > 0 ? rows : 1);
  return int(s < 1 ? 1 : (s > kDecodeMaxSplits ? kDecodeMaxSplits : s));
}

// Chunks for a call with `rows` = B * Tq * n_head query rows whose longest row sees `keys`
// positions: enough blocks to fill a GPU when there are few rows (decoding), 1 when there are
// many (a chunk at position > 0, or a prefill the forward's kernels do not take:
// prefill_on_forward, src/nn/attention.h), which also keeps the scratch small.
inline int attention_decode_splits(int64_t rows, int keys) {
  if (rows >= 256) return 1;
  const int s = (keys + kDecodeKeysPerSplit - 1) / kDecodeKeysPerSplit;
  return s < 1 ? 1 : (s > decode_max_splits(rows) ? decode_max_splits(rows) : s);
}

template <typename T>
void launch_kv_cache_write(const KVCacheWriteParams<T>& p, Stream s);
template <typename T>
void launch_attention_decode(const AttentionDecodeParams<T>& p, Stream s);

}  // namespace attnlab
