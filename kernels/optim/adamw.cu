// Fused AdamW over a flat range or over many ranges in one launch, and a deterministic sum of
// squares.
// bf16 params: with an fp32 master the update runs on the master and the result is rounded into
// the bf16 param stochastically (unbiased), with random bits from a counter-based hash of
// (seed, index): the same seed gives the same rounding, on any grid.
// launch_sumsq: a fixed grid of kSumsqBlocks blocks, each with a fixed grid-stride share of the
// range (16-byte loads when aligned), writes one fp32 partial; a single block then adds the
// partials in a fixed tree order.
#include "kernels/common/device.cuh"
#include "kernels/optim/adamw.cuh"

namespace attnlab {
namespace {

constexpr int kThreads = 256;
constexpr int kSumsqBlocks = 512;
constexpr int kSumsqUnroll = 4;
constexpr int64_t kMultiBlockElems = 4 * 4 * kThreads;  // 4 quads per thread

__device__ __forceinline__ uint32_t hash_u32(uint32_t seed, uint64_t i) {
  // SplitMix64-style mixing of (seed, index); good enough for rounding noise.
  uint64_t z = (uint64_t(seed) << 32 ^ i) + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return uint32_t((z ^ (z >> 31)) >> 16);
}

// Rounds x to bf16 up or down with probability proportional to the distance (random low 16 bits).
__device__ __forceinline__ bf16 stochastic_round_bf16(float x, uint32_t rnd) {
  const uint32_t bits = __float_as_uint(x);
  if ((bits & 0x7f800000u) == 0x7f800000u) return __float2bfloat16(x);  // inf / nan
  uint32_t r = bits + (rnd & 0xffffu);
  if ((r & 0x7f800000u) == 0x7f800000u) r = bits;  // would round up into inf: truncate instead
  return __ushort_as_bfloat16(uint16_t(r >> 16));
}

// One element's update (shared by the scalar and the vectorized kernel: identical results).
template <typename T>
__device__ __forceinline__ void adamw_element(float& w, float& m, float& v, float g_raw, T& out,
                                              int64_t i, float lr, float b1, float b2, float eps,
                                              float wd, float grad_scale, float bc1, float bc2,
                                              uint32_t seed) {
  const float g = g_raw * grad_scale;
  m = b1 * m + (1.f - b1) * g;
  v = b2 * v + (1.f - b2) * g * g;
  const float mhat = m / bc1, vhat = v / bc2;
  w -= lr * (mhat / (sqrtf(vhat) + eps) + wd * w);
  if constexpr (std::is_same_v<T, bf16>) {
    out = stochastic_round_bf16(w, hash_u32(seed, uint64_t(i)));
  } else {
    out = w;
  }
}

// The hyperparameters of one range's update, as the kernels see them.
struct Hyper {
  float lr, b1, b2, eps, wd, grad_scale, bc1, bc2;
  uint32_t seed;
};

// Element i of a range (pointers at the range's start).
template <typename T>
__device__ __forceinline__ void update_scalar(T* __restrict__ param, float* __restrict__ master,
                                              const T* __restrict__ grad, float* __restrict__ m_,
                                              float* __restrict__ v_, int64_t i, const Hyper& h) {
  float w = master ? master[i] : dev::to_f(param[i]);
  float m = m_[i], v = v_[i];
  T out;
  adamw_element<T>(w, m, v, dev::to_f(grad[i]), out, i, h.lr, h.b1, h.b2, h.eps, h.wd, h.grad_scale,
                   h.bc1, h.bc2, h.seed);
  m_[i] = m;
  v_[i] = v;
  if (master) master[i] = w;
  param[i] = out;
}

// Elements 4q .. 4q+3 of a range with 16-byte loads of m, v, master (and 8- or 16-byte loads of
// param and grad); every pointer aligned for its width.
template <typename T>
struct alignas(4 * sizeof(T)) Quad {
  T v[4];
};
template <typename T>
__device__ __forceinline__ void update_quad(T* __restrict__ param, float* __restrict__ master,
                                            const T* __restrict__ grad, float* __restrict__ m_,
                                            float* __restrict__ v_, int64_t q, const Hyper& h) {
  const Quad<T> g = reinterpret_cast<const Quad<T>*>(grad)[q];
  Quad<T> pw = reinterpret_cast<const Quad<T>*>(param)[q];
  float4 m = reinterpret_cast<const float4*>(m_)[q], v = reinterpret_cast<const float4*>(v_)[q];
  float4 w;
  if (master) {
    w = reinterpret_cast<const float4*>(master)[q];
  } else {
    w = make_float4(dev::to_f(pw.v[0]), dev::to_f(pw.v[1]), dev::to_f(pw.v[2]), dev::to_f(pw.v[3]));
  }
  const int64_t i = q * 4;
  adamw_element<T>(w.x, m.x, v.x, dev::to_f(g.v[0]), pw.v[0], i, h.lr, h.b1, h.b2, h.eps, h.wd,
                   h.grad_scale, h.bc1, h.bc2, h.seed);
  adamw_element<T>(w.y, m.y, v.y, dev::to_f(g.v[1]), pw.v[1], i + 1, h.lr, h.b1, h.b2, h.eps, h.wd,
                   h.grad_scale, h.bc1, h.bc2, h.seed);
  adamw_element<T>(w.z, m.z, v.z, dev::to_f(g.v[2]), pw.v[2], i + 2, h.lr, h.b1, h.b2, h.eps, h.wd,
                   h.grad_scale, h.bc1, h.bc2, h.seed);
  adamw_element<T>(w.w, m.w, v.w, dev::to_f(g.v[3]), pw.v[3], i + 3, h.lr, h.b1, h.b2, h.eps, h.wd,
                   h.grad_scale, h.bc1, h.bc2, h.seed);
  reinterpret_cast<float4*>(m_)[q] = m;
  reinterpret_cast<float4*>(v_)[q] = v;
  if (master) reinterpret_cast<float4*>(master)[q] = w;
  reinterpret_cast<Quad<T>*>(param)[q] = pw;
}

template <typename T>
__global__ void adamw_kernel(T* __restrict__ param, float* __restrict__ master,
                             const T* __restrict__ grad, float* __restrict__ m_,
                             float* __restrict__ v_, int64_t n, Hyper h) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    update_scalar<T>(param, master, grad, m_, v_, i, h);
}

// Four elements per thread; n % 4 == 0 (n4 = n / 4 quads).
template <typename T>
__global__ void adamw_vec_kernel(T* __restrict__ param, float* __restrict__ master,
                                 const T* __restrict__ grad, float* __restrict__ m_,
                                 float* __restrict__ v_, int64_t n4, Hyper h) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t q = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; q < n4; q += stride)
    update_quad<T>(param, master, grad, m_, v_, q, h);
}

// Multi-tensor: work block b belongs to the last range with block_begin <= b and covers its
// elements [(b - block_begin) * kMultiBlockElems, +kMultiBlockElems). Blocks stride over the work.
// `aligned`: the five base pointers are 16-byte aligned, so a range with offset and numel
// multiples of 4 takes the quad path (bitwise the same results as the scalar one).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    adamw_multi_kernel(AdamWMultiParams<T> p, float bc1, float bc2, bool aligned) {
  for (int64_t b = blockIdx.x; b < p.num_blocks; b += gridDim.x) {
    int lo = 0, hi = p.num_ranges - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (p.ranges[mid].block_begin <= b)
        lo = mid;
      else
        hi = mid - 1;
    }
    const AdamWRange r = p.ranges[lo];
    const Hyper h{p.lr,         p.beta1, p.beta2, p.eps,          r.decay ? p.weight_decay : 0.f,
                  p.grad_scale, bc1,     bc2,     p.seed ^ r.seed};
    T* param = p.param + r.offset;
    float* master = p.master ? p.master + r.offset : nullptr;
    const T* grad = p.grad + r.offset;
    float* m = p.m + r.offset;
    float* v = p.v + r.offset;
    const int64_t begin = (b - r.block_begin) * kMultiBlockElems;
    const int64_t end = begin + kMultiBlockElems < r.numel ? begin + kMultiBlockElems : r.numel;
    if (aligned && r.offset % 4 == 0 && r.numel % 4 == 0) {
      for (int64_t q = begin / 4 + threadIdx.x; q < end / 4; q += kThreads)
        update_quad<T>(param, master, grad, m, v, q, h);
    } else {
      for (int64_t i = begin + threadIdx.x; i < end; i += kThreads)
        update_scalar<T>(param, master, grad, m, v, i, h);
    }
  }
}

// Each thread adds the squares of its grid-stride share in a fixed order: 16-byte packs
// (kSumsqUnroll loads in flight) when `vec`, then the scalar tail.
template <typename T>
__global__ void sumsq_partial_kernel(const T* __restrict__ g, int64_t n, bool vec, float* partial) {
  __shared__ float sh[kThreads / 32];
  float acc = 0.f;
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t tail = 0;
  if (vec) {
    constexpr int N = dev::Pack<T>::N;
    const int64_t packs = n / N;
    for (int64_t q0 = tid; q0 < packs; q0 += kSumsqUnroll * stride) {
      dev::Pack<T> pk[kSumsqUnroll];
#pragma unroll
      for (int u = 0; u < kSumsqUnroll; ++u)
        if (q0 + u * stride < packs) pk[u] = dev::load_pack(g + (q0 + u * stride) * N);
#pragma unroll
      for (int u = 0; u < kSumsqUnroll; ++u) {
        if (q0 + u * stride >= packs) break;
#pragma unroll
        for (int j = 0; j < N; ++j) acc += pk[u].f(j) * pk[u].f(j);
      }
    }
    tail = packs * N;
  }
  for (int64_t i = tail + tid; i < n; i += stride) {
    const float x = dev::to_f(g[i]);
    acc += x * x;
  }
  acc = dev::warp_sum(acc);
  if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.f;
    for (int w = 0; w < kThreads / 32; ++w) s += sh[w];
    partial[blockIdx.x] = s;
  }
}

__global__ void sumsq_final_kernel(const float* __restrict__ partial, float* out) {
  __shared__ float sh[kSumsqBlocks / 32];
  float acc = 0.f;
  for (int i = threadIdx.x; i < kSumsqBlocks; i += blockDim.x) acc += partial[i];
  acc = dev::warp_sum(acc);
  if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.f;
    for (int w = 0; w < int(blockDim.x / 32); ++w) s += sh[w];
    out[0] = s;
  }
}

}  // namespace

namespace {
// Bias corrections, computed on the host exactly as before (both launchers share them).
void bias_corrections(float b1, float b2, int step, float& bc1, float& bc2) {
  bc1 = 1.f - std::pow(b1, float(step));
  bc2 = 1.f - std::pow(b2, float(step));
}
}  // namespace

template <typename T>
void launch_adamw(const AdamWParams<T>& p, Stream s) {
  if (p.n == 0) return;
  float bc1, bc2;
  bias_corrections(p.beta1, p.beta2, p.step, bc1, bc2);
  const Hyper h{p.lr, p.beta1, p.beta2, p.eps, p.weight_decay, p.grad_scale, bc1, bc2, p.seed};
  auto st = reinterpret_cast<cudaStream_t>(s);
  const bool vec = p.n % 4 == 0 && aligned16(p.m) && aligned16(p.v) &&
                   (p.master == nullptr || aligned16(p.master)) &&
                   reinterpret_cast<uintptr_t>(p.param) % (4 * sizeof(T)) == 0 &&
                   reinterpret_cast<uintptr_t>(p.grad) % (4 * sizeof(T)) == 0;
  const int64_t items = vec ? p.n / 4 : p.n;
  const int blocks = int(std::min<int64_t>(div_up(items, kThreads), 132 * 16));
  if (vec) {
    adamw_vec_kernel<T><<<blocks, kThreads, 0, st>>>(p.param, p.master, p.grad, p.m, p.v, items, h);
  } else {
    adamw_kernel<T><<<blocks, kThreads, 0, st>>>(p.param, p.master, p.grad, p.m, p.v, p.n, h);
  }
  CUDA_CHECK_LAUNCH();
}

int64_t adamw_multi_plan(AdamWRange* ranges, int num_ranges) {
  int64_t blocks = 0;
  for (int r = 0; r < num_ranges; ++r) {
    ATTN_ASSERT(ranges[r].numel > 0 && ranges[r].offset >= 0);
    ranges[r].block_begin = blocks;
    blocks += (ranges[r].numel + kMultiBlockElems - 1) / kMultiBlockElems;
  }
  return blocks;
}

template <typename T>
void launch_adamw_multi(const AdamWMultiParams<T>& p, Stream s) {
  if (p.num_blocks == 0) return;
  ATTN_ASSERT(p.ranges != nullptr && p.num_ranges > 0);
  float bc1, bc2;
  bias_corrections(p.beta1, p.beta2, p.step, bc1, bc2);
  const bool aligned = aligned16(p.param) && aligned16(p.grad) && aligned16(p.m) &&
                       aligned16(p.v) && (p.master == nullptr || aligned16(p.master));
  // Enough resident blocks to fill the GPU (8 blocks of 256 threads per SM on 132 SMs); each
  // strides over the work blocks.
  const int blocks = int(std::min<int64_t>(p.num_blocks, 132 * 8));
  adamw_multi_kernel<T>
      <<<blocks, kThreads, 0, reinterpret_cast<cudaStream_t>(s)>>>(p, bc1, bc2, aligned);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_sumsq(const T* grad, int64_t n, float* out, Stream s) {
  auto st = reinterpret_cast<cudaStream_t>(s);
  StreamScratch partial(sizeof(float) * kSumsqBlocks, s);
  sumsq_partial_kernel<T>
      <<<kSumsqBlocks, kThreads, 0, st>>>(grad, n, aligned16(grad), partial.as<float>());
  CUDA_CHECK_LAUNCH();
  sumsq_final_kernel<<<1, kSumsqBlocks, 0, st>>>(partial.as<float>(), out);
  CUDA_CHECK_LAUNCH();
}

template void launch_adamw<float>(const AdamWParams<float>&, Stream);
template void launch_adamw<bf16>(const AdamWParams<bf16>&, Stream);
template void launch_adamw_multi<float>(const AdamWMultiParams<float>&, Stream);
template void launch_adamw_multi<bf16>(const AdamWMultiParams<bf16>&, Stream);
template void launch_sumsq<float>(const float*, int64_t, float*, Stream);
template void launch_sumsq<bf16>(const bf16*, int64_t, float*, Stream);

}  // namespace attnlab
