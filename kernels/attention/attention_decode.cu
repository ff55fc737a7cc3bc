// Attention against a KV cache (contract in attention_decode.cuh).
//
// attention_decode: one block of 4 warps per (b * Tq + i, head, split). Warp w walks the keys
// w, w + 4, ... of the block's chunk that the row sees (AttentionMask); each lane holds the head
// dims lane, lane + 32, ... (D <= 128), so a key's dot product is one warp reduction. Online
// softmax in the log2 domain per warp, then the 4 warps merge in shared memory. One split writes o;
// several write (o, m, l) partials that a second kernel merges in split order (deterministic).
// Memory-bound: each key/value byte of the chunk is read once per query head. kv_cache_write: one
// thread per element, a plain strided copy.
#include <cuda_bf16.h>

#include "kernels/attention/attention_decode.cuh"
#include "kernels/attention/decode_steps.cuh"
#include "kernels/common/device.cuh"

namespace attnlab {
namespace {

using decode::kLog2e;
using decode::kMaxDimsPerLane;  // D <= 128
constexpr int kWarps = decode::kDecodeWarps;
// Keys per online-softmax step (decode::attend_keys; 1 / 2 / 4 / 8 measured on an H100:
// docs/performance_variants.md, "Decoding, the masked kernel and a cluster Sinkhorn").
constexpr int kKeyBatch = 4;

template <typename T>
__global__ void kv_cache_write_kernel(KVCacheWriteParams<T> p) {
  const int64_t n = int64_t(p.B) * p.Tq * p.n_kv_head * p.D;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int c = int(e % p.D);
    const int g = int((e / p.D) % p.n_kv_head);
    const int t = int((e / (int64_t(p.D) * p.n_kv_head)) % p.Tq);
    const int b = int(e / (int64_t(p.D) * p.n_kv_head * p.Tq));
    const int64_t src = b * p.src_batch_stride + t * p.src_row_stride + int64_t(g) * p.D + c;
    const int64_t dst = ((int64_t(b) * p.n_kv_head + g) * p.max_T + p.pos + t) * p.D + c;
    p.k_cache[dst] = p.k[src];
    p.v_cache[dst] = p.v[src];
  }
}

// partial layout: [row = (b * Tq + i) * n_head + h][split][D + 2] = (o[0..D), m, l); m in log2
// units.
template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    decode_kernel(AttentionDecodeParams<T> p, int key_begin, int chunk, float* partial) {
  const int split = blockIdx.z, h = blockIdx.y;  // query rows on x: B * Tq up to 2^31 - 1
  const int b = int(blockIdx.x / unsigned(p.Tq)), i = int(blockIdx.x % unsigned(p.Tq));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = h / (p.n_head / p.n_kv_head);
  const int t = p.pos + i;  // the query's position
  // The chunk's keys, clipped to the ones the row sees: [first_key(t), t].
  const int s0 = key_begin + split * chunk;
  const int s1 = min(p.mask.key_end(t, p.pos + p.Tq), s0 + chunk);
  const int s_first = max(s0, p.mask.first_key(t));
  const T* q = p.q + b * p.q_batch_stride + i * p.q_row_stride + int64_t(h) * p.D;
  const T* kc = p.k_cache + (int64_t(b) * p.n_kv_head + g) * p.max_T * p.D;
  const T* vc = p.v_cache + (int64_t(b) * p.n_kv_head + g) * p.max_T * p.D;
  const float qs = p.scale * kLog2e;

  float qr[kMaxDimsPerLane], acc[kMaxDimsPerLane];
  decode::load_query(qr, acc, q, p.D, qs, lane);
  float m = -INFINITY, l = 0.f;
  // Warp w takes keys s_first + w, + kWarps, ..., kKeyBatch of them per step.
  for (int s = s_first + warp; s < s1; s += kWarps * kKeyBatch) {
    int j[kKeyBatch];
#pragma unroll
    for (int n = 0; n < kKeyBatch; ++n) j[n] = s + kWarps * n < s1 ? s + kWarps * n : -1;
    decode::attend_keys(qr, acc, m, l, kc, vc, j, p.D, lane);
  }
  const int64_t row = (int64_t(b) * p.Tq + i) * p.n_head + h;
  decode::finish_row(
      acc, m, l, p.D, warp, lane, partial != nullptr,
      [&] { return p.o + b * p.o_batch_stride + i * p.o_row_stride + int64_t(h) * p.D; },
      [&] { return partial + (row * p.n_splits + split) * (p.D + 2); });
}

template <typename T>
__global__ void decode_combine_kernel(AttentionDecodeParams<T> p, const float* partial) {
  const int64_t row = blockIdx.x;
  const int h = int(row % p.n_head);
  const int i = int((row / p.n_head) % p.Tq);
  const int b = int(row / (int64_t(p.n_head) * p.Tq));
  decode::combine_row(partial + row * p.n_splits * (p.D + 2), p.n_splits, p.D, [&] {
    return p.o + b * p.o_batch_stride + i * p.o_row_stride + int64_t(h) * p.D;
  });
}

}  // namespace

template <typename T>
void launch_kv_cache_write(const KVCacheWriteParams<T>& p, Stream s) {
  const int64_t n = int64_t(p.B) * p.Tq * p.n_kv_head * p.D;
  if (n == 0) return;
  const int threads = 256;
  const int blocks = int(std::min<int64_t>(div_up(n, threads), 65535));
  kv_cache_write_kernel<T><<<blocks, threads, 0, reinterpret_cast<cudaStream_t>(s)>>>(p);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_attention_decode(const AttentionDecodeParams<T>& p_in, Stream s) {
  ATTN_ASSERT(p_in.D >= 1 && p_in.D <= 32 * kMaxDimsPerLane && p_in.n_head % p_in.n_kv_head == 0);
  ATTN_ASSERT(int64_t(p_in.B) * p_in.Tq < (int64_t(1) << 31) && p_in.pos + p_in.Tq <= p_in.max_T);
  ATTN_ASSERT(p_in.mask.causal && p_in.mask.window >= 0);
  if (p_in.B == 0 || p_in.Tq == 0) return;
  AttentionDecodeParams<T> p = p_in;
  // Positions key_begin .. pos + Tq - 1: from the first row's first visible key (0 without a
  // window) to the last row's own position.
  const int key_begin = p.mask.first_key(p.pos);
  const int keys = p.pos + p.Tq - key_begin;
  const int64_t rows = int64_t(p.B) * p.Tq * p.n_head;
  if (p.n_splits <= 0) p.n_splits = attention_decode_splits(rows, keys);
  p.n_splits = std::min(p.n_splits, keys);
  const int chunk = div_up(keys, p.n_splits);
  p.n_splits = div_up(keys, chunk);  // no empty trailing split
  const cudaStream_t st = reinterpret_cast<cudaStream_t>(s);
  const dim3 grid(unsigned(int64_t(p.B) * p.Tq), p.n_head, p.n_splits);
  if (p.n_splits == 1) {
    decode_kernel<T><<<grid, kWarps * 32, 0, st>>>(p, key_begin, chunk, nullptr);
    CUDA_CHECK_LAUNCH();
    return;
  }
  ATTN_ASSERT(rows < (int64_t(1) << 31));  // the combine kernel's grid
  StreamScratch scratch(size_t(rows) * p.n_splits * (p.D + 2) * sizeof(float), s);
  decode_kernel<T><<<grid, kWarps * 32, 0, st>>>(p, key_begin, chunk, scratch.as<float>());
  CUDA_CHECK_LAUNCH();
  decode_combine_kernel<T><<<unsigned(rows), 128, 0, st>>>(p, scratch.as<float>());
  CUDA_CHECK_LAUNCH();
}

template void launch_kv_cache_write<float>(const KVCacheWriteParams<float>&, Stream);
template void launch_kv_cache_write<bf16>(const KVCacheWriteParams<bf16>&, Stream);
template void launch_attention_decode<float>(const AttentionDecodeParams<float>&, Stream);
template void launch_attention_decode<bf16>(const AttentionDecodeParams<bf16>&, Stream);

}  // namespace attnlab
