// Softmax cross-entropy, fused forward + backward. Per row, three passes:
//   A  max over the row,
//   B  sum of exp(x - max) and the target logit -> lse, loss,
//   C  (backward only) dlogits = (softmax - onehot) * dloss, written once.
// Forward + backward with two rows fitting in shared memory (bf16 GPT-2: 2 x 100 KB): persistent
// blocks stream the next row into shared memory with cp.async while computing the current one, so
// the logits cross HBM once, dlogits once, and the loads overlap the exp work. Otherwise one block
// per row: pass A reads global memory (16-byte loads, several in flight per thread) and copies
// the row to shared memory when it fits; B and C read that copy, or global memory again (mostly
// L2). exp via exp2 of a pre-scaled argument (one FFMA + one MUFU op per element and pass).
// dlogits may alias logits: every read of a row from global memory happens before the barrier
// that precedes its writes.
#include <cuda_pipeline.h>

#include "kernels/common/device.cuh"
#include "kernels/loss/crossentropy.cuh"

namespace attnlab {
namespace {

constexpr int kThreads = 1024;
constexpr int kUnroll = 4;  // loads in flight per thread in pass A
constexpr float kLog2e = 1.4426950408889634f;

// V consecutive elements of T: one 16-byte pack, or one scalar (V = 1).
template <typename T, int V>
struct alignas(sizeof(T) * V) Chunk {
  T v[V];
  __device__ __forceinline__ float f(int j) const { return dev::to_f(v[j]); }
};
template <typename T, int V>
__device__ __forceinline__ Chunk<T, V> load_chunk(const T* p) {
  Chunk<T, V> r;
  if constexpr (sizeof(Chunk<T, V>) == 16) {
    *reinterpret_cast<int4*>(&r) = *reinterpret_cast<const int4*>(p);
  } else {
    r = *reinterpret_cast<const Chunk<T, V>*>(p);
  }
  return r;
}

// Block-wide reduction of one float per thread (op = max or sum); every thread gets the result.
// `red` holds one slot per warp; callers use a different `red` for back-to-back reductions.
template <bool kMax>
__device__ __forceinline__ float block_reduce(float v, float* red) {
  v = kMax ? dev::warp_max(v) : dev::warp_sum(v);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float r = red[0];
  for (int w = 1; w < kThreads / 32; ++w) r = kMax ? fmaxf(r, red[w]) : r + red[w];
  return r;
}

// The per-row passes. Thread t owns the chunks starting at t * V + k * kThreads * V in every
// pass (and in the shared-memory copies), so a thread only ever reads what it loaded itself;
// only the reductions need barriers.
template <typename T, int V>
__device__ __forceinline__ void write_zero_row(T* dx, int Vp) {
  Chunk<T, V> zero;
#pragma unroll
  for (int j = 0; j < V; ++j) zero.v[j] = dev::from_f<T>(0.f);
  for (int c = threadIdx.x * V; c < Vp; c += kThreads * V)
    *reinterpret_cast<Chunk<T, V>*>(dx + c) = zero;
}

template <typename T, int V>
__device__ __forceinline__ float row_max(const T* src, int Vreal) {
  float mx = -INFINITY;
  for (int c = threadIdx.x * V; c < Vreal; c += kThreads * V) {
    const Chunk<T, V> ch = load_chunk<T, V>(src + c);
#pragma unroll
    for (int j = 0; j < V; ++j)
      if (c + j < Vreal) mx = fmaxf(mx, ch.f(j));
  }
  return mx;
}

// This thread's share of sum exp(x - max), mx2 = max * log2(e).
template <typename T, int V>
__device__ __forceinline__ float row_sumexp(const T* src, int Vreal, float mx2) {
  float sum = 0.f;
  for (int c = threadIdx.x * V; c < Vreal; c += kThreads * V) {
    const Chunk<T, V> ch = load_chunk<T, V>(src + c);
#pragma unroll
    for (int j = 0; j < V; ++j)
      if (c + j < Vreal) sum += exp2f(fmaf(ch.f(j), kLog2e, -mx2));
  }
  return sum;
}

// dlogits = (softmax - onehot) * dloss, lse2 = lse * log2(e); padding columns get 0.
template <typename T, int V>
__device__ __forceinline__ void write_grad_row(const T* src, T* dx, int Vreal, int Vp, int target,
                                               float lse2, float dloss) {
  for (int c = threadIdx.x * V; c < Vp; c += kThreads * V) {
    const Chunk<T, V> ch = load_chunk<T, V>(src + c);
    Chunk<T, V> out;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int cj = c + j;
      const float p = cj < Vreal ? exp2f(fmaf(ch.f(j), kLog2e, -lse2)) : 0.f;
      out.v[j] = dev::from_f<T>((p - (cj == target ? 1.f : 0.f)) * dloss);
    }
    *reinterpret_cast<Chunk<T, V>*>(dx + c) = out;
  }
}

// One block per row. V: elements per chunk (Pack<T>::N, or 1 for the scalar path); kSmem: keep
// the row in shared memory (dynamic, Vp * sizeof(T) bytes) for passes B and C.
template <typename T, int V, bool kSmem>
__global__ void __launch_bounds__(kThreads)
    crossentropy_kernel(const T* logits, const int32_t* __restrict__ targets,
                        float* __restrict__ losses, T* dlogits, int Vreal, int Vp, int ignore_index,
                        float dloss) {
  extern __shared__ float4 smem4[];
  T* row_sh = reinterpret_cast<T*>(smem4);
  __shared__ float red_max[kThreads / 32], red_sum[kThreads / 32];
  __shared__ float sh_target;
  const int64_t row = blockIdx.x;
  const T* x = logits + row * Vp;
  T* dx = dlogits ? dlogits + row * Vp : nullptr;
  const int target = targets[row];
  if (target == ignore_index) {  // loss 0, gradient exactly zero (no softmax of this row)
    if (threadIdx.x == 0) losses[row] = 0.f;
    if (dx) write_zero_row<T, V>(dx, Vp);
    return;
  }
  constexpr int kStride = kThreads * V;
  const T* src = kSmem ? row_sh : x;  // what passes B and C read

  // Pass A: max over the real columns, several loads in flight; copy the row to shared memory.
  float mx = -INFINITY;
  for (int c0 = threadIdx.x * V; c0 < Vp; c0 += kUnroll * kStride) {
    Chunk<T, V> ch[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kStride;
      if (c < Vp) ch[u] = load_chunk<T, V>(x + c);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kStride;
      if (c >= Vp) break;
      if constexpr (kSmem) *reinterpret_cast<Chunk<T, V>*>(row_sh + c) = ch[u];
#pragma unroll
      for (int j = 0; j < V; ++j)
        if (c + j < Vreal) mx = fmaxf(mx, ch[u].f(j));
    }
  }
  if (threadIdx.x == 0) sh_target = dev::to_f(x[target]);
  mx = block_reduce<true>(mx, red_max);  // its barrier also publishes sh_target

  const float sum = block_reduce<false>(row_sumexp<T, V>(src, Vreal, mx * kLog2e), red_sum);
  const float lse = mx + logf(sum);
  if (threadIdx.x == 0) losses[row] = lse - sh_target;
  if (dx) write_grad_row<T, V>(src, dx, Vreal, Vp, target, lse * kLog2e, dloss);
}

// Forward + backward, persistent blocks with two row buffers in shared memory: while a block
// computes row r from one buffer, cp.async streams its next row into the other, so HBM reads
// overlap the exp work. Each thread copies exactly the chunks it later reads (see above), so
// waiting on its own copies suffices; dlogits may alias logits (blocks own disjoint rows).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    crossentropy_pipelined_kernel(const T* logits, const int32_t* __restrict__ targets,
                                  float* __restrict__ losses, T* dlogits, int64_t N, int Vreal,
                                  int Vp, int ignore_index, float dloss) {
  constexpr int V = dev::Pack<T>::N;
  extern __shared__ float4 smem4[];
  T* const bufs = reinterpret_cast<T*>(smem4);
  __shared__ float red_max[kThreads / 32], red_sum[kThreads / 32];
  auto fetch = [&](int64_t row, T* dst) {
    const T* src = logits + row * Vp;
    for (int c = threadIdx.x * V; c < Vp; c += kThreads * V)
      __pipeline_memcpy_async(dst + c, src + c, 16);
  };
  int64_t row = blockIdx.x;
  fetch(row, bufs);
  __pipeline_commit();
  for (int it = 0; row < N; row += gridDim.x, ++it) {
    const T* cur = bufs + (it & 1) * int64_t(Vp);
    if (row + gridDim.x < N) fetch(row + gridDim.x, bufs + ((it + 1) & 1) * int64_t(Vp));
    __pipeline_commit();       // one group per iteration (possibly empty): uniform accounting
    __pipeline_wait_prior(1);  // this thread's copies of the current row have landed
    T* dx = dlogits + row * Vp;
    const int target = targets[row];
    if (target == ignore_index) {
      if (threadIdx.x == 0) losses[row] = 0.f;
      write_zero_row<T, V>(dx, Vp);
      continue;
    }
    const float mx = block_reduce<true>(row_max<T, V>(cur, Vreal), red_max);
    // After that barrier every thread's copy is visible. The target logit is read before the
    // next barrier: its owner refills this buffer (row + 2 * gridDim.x) only after that one.
    const float target_logit = threadIdx.x == 0 ? dev::to_f(cur[target]) : 0.f;
    const float sum = block_reduce<false>(row_sumexp<T, V>(cur, Vreal, mx * kLog2e), red_sum);
    const float lse = mx + logf(sum);
    if (threadIdx.x == 0) losses[row] = lse - target_logit;
    write_grad_row<T, V>(cur, dx, Vreal, Vp, target, lse * kLog2e, dloss);
  }
}

template <typename T, int V, bool kSmem>
void launch_kernel(const CrossEntropyParams<T>& p, T* dlogits, size_t smem, cudaStream_t st) {
  auto kernel = crossentropy_kernel<T, V, kSmem>;
  if (smem > 48 * 1024) {
    CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  }
  kernel<<<unsigned(p.N), kThreads, smem, st>>>(p.logits, p.targets, p.losses, dlogits, p.V, p.Vp,
                                                p.ignore_index, p.dloss);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_ce(const CrossEntropyParams<T>& p, T* dlogits, Stream s) {
  if (p.N == 0) return;
  ATTN_ASSERT(p.N < (int64_t(1) << 31) && p.V > 0 && p.V <= p.Vp);
  auto st = reinterpret_cast<cudaStream_t>(s);
  constexpr int N = dev::Pack<T>::N;
  const bool vec =
      p.Vp % N == 0 && aligned16(p.logits) && (dlogits == nullptr || aligned16(dlogits));
  if (!vec) return launch_kernel<T, 1, false>(p, dlogits, 0, st);
  int optin = 0, dev_id = 0;
  CUDA_CHECK(cudaGetDevice(&dev_id));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev_id));
  const size_t row_bytes = size_t(p.Vp) * sizeof(T);
  // The forward alone reads the row twice (A, B) and gains little from a copy. Static shared
  // memory of the kernels (reductions) comes on top of the dynamic rows.
  if (dlogits && 2 * row_bytes + 512 <= size_t(optin)) {
    auto kernel = crossentropy_pipelined_kernel<T>;
    const size_t smem = 2 * row_bytes;
    if (smem > 48 * 1024) {
      CUDA_CHECK(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    }
    int sms = 0, per_sm = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev_id));
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
    const int64_t grid = std::min<int64_t>(p.N, int64_t(sms) * std::max(per_sm, 1));
    kernel<<<unsigned(grid), kThreads, smem, st>>>(p.logits, p.targets, p.losses, dlogits, p.N, p.V,
                                                   p.Vp, p.ignore_index, p.dloss);
    CUDA_CHECK_LAUNCH();
    return;
  }
  if (dlogits && row_bytes + 512 <= size_t(optin))
    return launch_kernel<T, N, true>(p, dlogits, row_bytes, st);
  launch_kernel<T, N, false>(p, dlogits, 0, st);
}

}  // namespace

template <typename T>
void launch_crossentropy_fwd(const CrossEntropyParams<T>& p, Stream s) {
  launch_ce<T>(p, nullptr, s);
}
template <typename T>
void launch_crossentropy_fwd_bwd(const CrossEntropyParams<T>& p, Stream s) {
  launch_ce<T>(p, p.dlogits, s);
}

template void launch_crossentropy_fwd<float>(const CrossEntropyParams<float>&, Stream);
template void launch_crossentropy_fwd<bf16>(const CrossEntropyParams<bf16>&, Stream);
template void launch_crossentropy_fwd_bwd<float>(const CrossEntropyParams<float>&, Stream);
template void launch_crossentropy_fwd_bwd<bf16>(const CrossEntropyParams<bf16>&, Stream);

}  // namespace attnlab
