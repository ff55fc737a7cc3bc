// Softmax cross-entropy, fused forward + backward. One block per row, three passes:
//   A  max over the row (one read of the logits from global memory, 16-byte loads, several in
//      flight per thread); the row is kept in shared memory when it fits (bf16 GPT-2: 100 KB),
//   B  sum of exp(x - max) and the target logit -> lse, loss,
//   C  (backward only) dlogits = (softmax - onehot) * dloss, written once.
// B and C read the shared-memory copy, so the logits cross HBM once and dlogits once. Rows that do
// not fit (or unaligned rows: scalar path) re-read global memory (mostly L2). exp via exp2 of a
// pre-scaled argument (one FFMA + one MUFU op per element and pass). dlogits may alias logits:
// every read of a row from global memory happens before the barrier that precedes its writes.
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

// V: elements per chunk (Pack<T>::N, or 1 for the scalar path); kSmem: keep the row in shared
// memory (dynamic, Vp * sizeof(T) bytes).
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
    if (dx) {
      Chunk<T, V> zero;
#pragma unroll
      for (int j = 0; j < V; ++j) zero.v[j] = dev::from_f<T>(0.f);
      for (int c = threadIdx.x * V; c < Vp; c += kThreads * V)
        *reinterpret_cast<Chunk<T, V>*>(dx + c) = zero;
    }
    return;
  }
  constexpr int kStride = kThreads * V;
  const T* src = kSmem ? row_sh : x;  // what passes B and C read

  // Pass A: max over the real columns; copy the row to shared memory.
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
  mx = block_reduce<true>(mx, red_max);  // its barrier also publishes row_sh and sh_target

  // Pass B: sum of exp(x - max).
  const float mx2 = mx * kLog2e;
  float sum = 0.f;
  for (int c = threadIdx.x * V; c < Vreal; c += kStride) {
    const Chunk<T, V> ch = load_chunk<T, V>(src + c);
#pragma unroll
    for (int j = 0; j < V; ++j)
      if (c + j < Vreal) sum += exp2f(fmaf(ch.f(j), kLog2e, -mx2));
  }
  sum = block_reduce<false>(sum, red_sum);
  const float lse = mx + logf(sum);
  if (threadIdx.x == 0) losses[row] = lse - sh_target;
  if (!dx) return;

  // Pass C: dlogits = (softmax - onehot) * dloss; padding columns get 0.
  const float lse2 = lse * kLog2e;
  for (int c = threadIdx.x * V; c < Vp; c += kStride) {
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
  // The forward alone reads the row twice (A, B) and gains little from the copy. Static shared
  // memory of the kernel (reductions) comes on top of the dynamic row.
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
