// Group-indexed Focus decoding (contract in focus_decode.cuh).
//
// index_append: one warp per (group, b). Lane 0 drops the entries >= pos (binary search of the
// sorted list); then the warp walks the Tq new tokens 32 at a time (8 rows of 32 loaded before
// their ballots, for long prefills): a ballot marks those in the group and each member's rank
// among them (popc of the lower lanes) is its slot, so the list stays in position order without
// atomics.
//
// decode: one block of 4 warps per (split, head, b * Tq + t), the shape of attention_decode.cu.
// The row's keys form one virtual sequence: the window, then the entries < i - w of each of its
// groups' lists (lengths by binary search, so the block never scans a list). The block takes
// chunk `split` of it, 128 keys at a time interleaved over its warps (one per lane: the dedupe
// test in parallel), and each warp walks its own; each lane holds head dims lane, lane + 32, ...
// (D <= 128), so a key's dot product is one warp reduction; online softmax in the log2 domain
// per warp, merged across warps in shared memory, then across splits by a second kernel in split
// order (deterministic). Memory-bound: each gathered key/value row is read once per query head.
#include <cuda_bf16.h>

#include "kernels/attention/decode_steps.cuh"
#include "kernels/common/device.cuh"
#include "kernels/focus/focus_decode.cuh"

namespace attnlab {
namespace {

using decode::kLog2e;
using decode::kMaxDimsPerLane;  // D <= 128
constexpr int kWarps = decode::kDecodeWarps;
constexpr int kMaxTopK = kFocusDecodeMaxTopK;
constexpr int kAppendUnroll = 8;  // index_append: 32-token rows per iteration
// Keys per online-softmax step (decode::attend_keys; 1 / 2 / 4 / 8 measured on an H100:
// docs/performance_variants.md, "Decoding, the masked kernel and a cluster Sinkhorn").
constexpr int kKeyBatch = 2;

// First e in [0, n) with list[e] >= x (n if none).
__device__ __forceinline__ int lower_bound(const int32_t* list, int n, int x) {
  int lo = 0, hi = n;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (list[mid] < x)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

__global__ void index_append_kernel(FocusGroupIndexParams p) {
  const int c = blockIdx.x, b = blockIdx.y, lane = threadIdx.x;
  int32_t* list = p.index + (int64_t(b) * p.K + c) * p.max_T;
  int32_t* count = p.counts + b * p.K + c;
  int n = 0;
  if (lane == 0) n = lower_bound(list, *count, p.pos);
  n = __shfl_sync(0xffffffffu, n, 0);
  const int32_t* groups = p.groups + (int64_t(b) * p.max_T + p.pos) * p.top_k;
  for (int t0 = 0; t0 < p.Tq; t0 += 32 * kAppendUnroll) {  // the loads of 8 x 32 tokens in flight
    bool member[kAppendUnroll];
#pragma unroll
    for (int u = 0; u < kAppendUnroll; ++u) {
      const int t = t0 + 32 * u + lane;
      member[u] = false;
      if (t < p.Tq)
        for (int x = 0; x < p.top_k; ++x) member[u] |= groups[int64_t(t) * p.top_k + x] == c;
    }
#pragma unroll
    for (int u = 0; u < kAppendUnroll; ++u) {
      const unsigned ballot = __ballot_sync(0xffffffffu, member[u]);
      if (member[u]) list[n + __popc(ballot & ((1u << lane) - 1u))] = p.pos + t0 + 32 * u + lane;
      n += __popc(ballot);
    }
  }
  if (lane == 0) *count = n;
}

// partial layout: [row = (b * Tq + t) * n_head + h][split][D + 2] = (o[0..D), m, l); m in log2
// units.
template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    decode_kernel(FocusGroupDecodeParams<T> p, float* partial) {
  const int split = blockIdx.z, h = blockIdx.y;  // query rows on x: B * Tq up to 2^31 - 1
  const int b = int(blockIdx.x / unsigned(p.Tq)), t = int(blockIdx.x % unsigned(p.Tq));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int kvh = h / (p.n_head / p.n_kv_head);
  const int i = p.pos + t, near = i - p.local_window;  // distant keys: j < near
  const int win_first = max(0, near), n_win = i - win_first + 1;
  const int32_t* qg = p.groups + (int64_t(b) * p.max_T + i) * p.top_k;

  __shared__ const int32_t* sm_list[kMaxTopK];
  __shared__ int sm_len[kMaxTopK], sm_qg[kMaxTopK];
  if (threadIdx.x < p.top_k) {
    const int c = qg[threadIdx.x];
    const int32_t* list = p.index + (int64_t(b) * p.K + c) * p.max_T;
    sm_list[threadIdx.x] = list;
    sm_len[threadIdx.x] = lower_bound(list, p.counts[b * p.K + c], near);
    sm_qg[threadIdx.x] = c;
  }
  __syncthreads();
  int total = n_win;
  for (int x = 0; x < p.top_k; ++x) total += sm_len[x];
  const int chunk = (total + p.n_splits - 1) / p.n_splits;
  const int v0 = split * chunk, v1 = min(total, v0 + chunk);

  const T* q = p.q + b * p.q_batch_stride + t * p.q_row_stride + int64_t(h) * p.D;
  const T* kc = p.k_cache + (int64_t(b) * p.n_kv_head + kvh) * p.max_T * p.D;
  const T* vc = p.v_cache + (int64_t(b) * p.n_kv_head + kvh) * p.max_T * p.D;
  const int32_t* key_groups = p.groups + int64_t(b) * p.max_T * p.top_k;
  const float qs = p.scale * kLog2e;

  float qr[kMaxDimsPerLane], acc[kMaxDimsPerLane];
  decode::load_query(qr, acc, q, p.D, qs, lane);
  float m = -INFINITY, l = 0.f;
  // The block resolves 128 virtual indices at a time, interleaved over the warps (lane l of warp
  // w takes base + 4 l + w, as the dense kernel interleaves its keys): each lane resolves one
  // (window position or list entry, and the dedupe test), so only the key and value loads remain,
  // the loads of kKeyBatch keys in flight per step. (Batches of 32 consecutive indices per warp
  // left a chunk of fewer than 32 keys, the common case with many splits, to warp 0 alone.)
  for (int base = v0; base < v1; base += kWarps * 32) {
    const int v = base + kWarps * lane + warp;
    int mine = -1;  // this lane's key, -1: none (past the chunk, or counted in an earlier group)
    if (v < v1 && v < n_win) {
      mine = win_first + v;
    } else if (v < v1) {
      int e = v - n_win, x = 0;
      while (e >= sm_len[x]) e -= sm_len[x++];
      mine = sm_list[x][e];
      const int32_t* kg = key_groups + int64_t(mine) * p.top_k;
      for (int y = 0; y < x; ++y)
        for (int z = 0; z < p.top_k; ++z)
          if (kg[z] == sm_qg[y]) mine = -1;  // j holds an earlier query group
    }
    // The batch's keys, kKeyBatch per online-softmax step (todo is uniform in the warp).
    for (unsigned todo = __ballot_sync(0xffffffffu, mine >= 0); todo != 0;) {
      int j[kKeyBatch];
#pragma unroll
      for (int n = 0; n < kKeyBatch; ++n) {
        j[n] = todo != 0 ? __shfl_sync(0xffffffffu, mine, __ffs(todo) - 1) : -1;
        todo &= todo - 1;
      }
      decode::attend_keys(qr, acc, m, l, kc, vc, j, p.D, lane);
    }
  }

  // One split: the row's own key i makes L > 0.
  const int64_t row = (int64_t(b) * p.Tq + t) * p.n_head + h;
  decode::finish_row(
      acc, m, l, p.D, warp, lane, partial != nullptr,
      [&] { return p.o + b * p.o_batch_stride + t * p.o_row_stride + int64_t(h) * p.D; },
      [&] { return partial + (row * p.n_splits + split) * (p.D + 2); });
}

template <typename T>
__global__ void combine_kernel(FocusGroupDecodeParams<T> p, const float* partial) {
  const int64_t row = blockIdx.x;
  const int h = int(row % p.n_head);
  const int t = int((row / p.n_head) % p.Tq);
  const int b = int(row / (int64_t(p.n_head) * p.Tq));
  decode::combine_row(partial + row * p.n_splits * (p.D + 2), p.n_splits, p.D, [&] {
    return p.o + b * p.o_batch_stride + t * p.o_row_stride + int64_t(h) * p.D;
  });
}

}  // namespace

void launch_focus_group_index_append(const FocusGroupIndexParams& p, Stream s) {
  ATTN_ASSERT(p.pos >= 0 && p.pos + p.Tq <= p.max_T && p.B <= 65535 && p.K <= 65535);
  if (p.B == 0 || p.Tq == 0 || p.K == 0) return;
  index_append_kernel<<<dim3(p.K, p.B), 32, 0, reinterpret_cast<cudaStream_t>(s)>>>(p);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_focus_group_decode(const FocusGroupDecodeParams<T>& p_in, Stream s) {
  ATTN_ASSERT(p_in.D >= 1 && p_in.D <= 32 * kMaxDimsPerLane && p_in.n_head % p_in.n_kv_head == 0);
  ATTN_ASSERT(p_in.top_k >= 1 && p_in.top_k <= kMaxTopK && p_in.local_window >= 0);
  ATTN_ASSERT(int64_t(p_in.B) * p_in.Tq < (int64_t(1) << 31) && p_in.pos + p_in.Tq <= p_in.max_T);
  if (p_in.B == 0 || p_in.Tq == 0) return;
  FocusGroupDecodeParams<T> p = p_in;
  const int64_t rows = int64_t(p.B) * p.Tq * p.n_head;
  if (p.n_splits <= 0)
    p.n_splits = focus_group_decode_splits(rows, p.pos + p.Tq, p.local_window, p.K, p.top_k);
  const cudaStream_t st = reinterpret_cast<cudaStream_t>(s);
  const dim3 grid(unsigned(int64_t(p.B) * p.Tq), p.n_head, p.n_splits);
  if (p.n_splits == 1) {
    decode_kernel<T><<<grid, kWarps * 32, 0, st>>>(p, nullptr);
    CUDA_CHECK_LAUNCH();
    return;
  }
  ATTN_ASSERT(rows < (int64_t(1) << 31));  // the combine kernel's grid
  StreamScratch scratch(size_t(rows) * p.n_splits * (p.D + 2) * sizeof(float), s);
  decode_kernel<T><<<grid, kWarps * 32, 0, st>>>(p, scratch.as<float>());
  CUDA_CHECK_LAUNCH();
  combine_kernel<T><<<unsigned(rows), 128, 0, st>>>(p, scratch.as<float>());
  CUDA_CHECK_LAUNCH();
}

template void launch_focus_group_decode<float>(const FocusGroupDecodeParams<float>&, Stream);
template void launch_focus_group_decode<bf16>(const FocusGroupDecodeParams<bf16>&, Stream);

}  // namespace attnlab
