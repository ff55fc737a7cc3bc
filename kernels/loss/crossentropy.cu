// Softmax cross-entropy, fused forward + backward. One block per row: pass 1 reads the row once
// with an online max/sum (fp32, per thread, then merged across the block) and picks up the target
// logit; pass 2 (backward only) re-reads the row (mostly from L2) and writes dlogits. The logits
// are never copied to fp32, and dlogits may alias logits: every read of a row happens before the
// barrier that precedes its first write.
#include "kernels/common/device.cuh"
#include "kernels/loss/crossentropy.cuh"

namespace attnlab {
namespace {

constexpr int kThreads = 512;

struct MaxSum {
  float m, s;  // running max and sum of exp(x - m)
};
__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.f};
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}
__device__ __forceinline__ void push(MaxSum& a, float x) {
  if (x > a.m) {
    a.s = a.s * expf(a.m - x) + 1.f;
    a.m = x;
  } else {
    a.s += expf(x - a.m);
  }
}

template <typename T, bool kVec>
__global__ void __launch_bounds__(kThreads)
    crossentropy_kernel(const T* logits, const int32_t* __restrict__ targets,
                        float* __restrict__ losses, T* dlogits, int V, int Vp, int ignore_index,
                        float dloss) {
  constexpr int N = dev::Pack<T>::N;
  __shared__ MaxSum sh[kThreads / 32];
  __shared__ float sh_target;
  const int64_t row = blockIdx.x;
  const T* x = logits + row * Vp;
  const int target = targets[row];
  const bool ignored = target == ignore_index;

  MaxSum ms{-INFINITY, 0.f};
  if (!ignored) {
    if constexpr (kVec) {
      for (int c = threadIdx.x * N; c < V; c += kThreads * N) {
        const dev::Pack<T> v = dev::load_pack(x + c);
#pragma unroll
        for (int j = 0; j < N; ++j) {
          if (c + j < V) push(ms, v.f(j));
        }
      }
    } else {
      for (int c = threadIdx.x; c < V; c += kThreads) push(ms, dev::to_f(x[c]));
    }
    if (threadIdx.x == 0) sh_target = dev::to_f(x[target]);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    MaxSum other{__shfl_xor_sync(0xffffffffu, ms.m, o), __shfl_xor_sync(0xffffffffu, ms.s, o)};
    ms = merge(ms, other);
  }
  if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = ms;
  __syncthreads();  // all reads of the row (in pass 1) happen before any write below
  ms = sh[0];
  for (int w = 1; w < kThreads / 32; ++w) ms = merge(ms, sh[w]);
  const float lse = ms.m + logf(ms.s);
  if (threadIdx.x == 0) losses[row] = ignored ? 0.f : lse - sh_target;
  if (dlogits == nullptr) return;

  T* dx = dlogits + row * Vp;
  // An ignored row has no softmax (lse = -inf): its gradient is exactly zero, never inf * 0.
  const float scale = ignored ? 0.f : dloss;
  if constexpr (kVec) {
    for (int c = threadIdx.x * N; c < Vp; c += kThreads * N) {
      const dev::Pack<T> v = dev::load_pack(x + c);
      dev::Pack<T> r;
#pragma unroll
      for (int j = 0; j < N; ++j) {
        const int cj = c + j;
        const float p = !ignored && cj < V ? expf(v.f(j) - lse) : 0.f;
        r.set(j, (p - (cj == target ? 1.f : 0.f)) * scale);
      }
      dev::store_pack(dx + c, r);
    }
  } else {
    for (int c = threadIdx.x; c < Vp; c += kThreads) {
      const float p = !ignored && c < V ? expf(dev::to_f(x[c]) - lse) : 0.f;
      dx[c] = dev::from_f<T>((p - (c == target ? 1.f : 0.f)) * scale);
    }
  }
}

template <typename T>
void launch_ce(const CrossEntropyParams<T>& p, T* dlogits, Stream s) {
  if (p.N == 0) return;
  ATTN_ASSERT(p.N < (int64_t(1) << 31) && p.V > 0 && p.V <= p.Vp);
  auto st = reinterpret_cast<cudaStream_t>(s);
  const bool vec = p.Vp % dev::Pack<T>::N == 0 && aligned16(p.logits) &&
                   (dlogits == nullptr || aligned16(dlogits));
  if (vec) {
    crossentropy_kernel<T, true><<<unsigned(p.N), kThreads, 0, st>>>(
        p.logits, p.targets, p.losses, dlogits, p.V, p.Vp, p.ignore_index, p.dloss);
  } else {
    crossentropy_kernel<T, false><<<unsigned(p.N), kThreads, 0, st>>>(
        p.logits, p.targets, p.losses, dlogits, p.V, p.Vp, p.ignore_index, p.dloss);
  }
  CUDA_CHECK_LAUNCH();
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
