// Fused AdamW over a flat range, and a deterministic sum of squares.
// bf16 params: with an fp32 master the update runs on the master and the result is rounded into
// the bf16 param stochastically (unbiased), with random bits from a counter-based hash of
// (seed, index): the same seed gives the same rounding, on any grid.
// launch_sumsq: a fixed grid of kSumsqBlocks blocks, each with a fixed grid-stride share of the
// range, writes one fp32 partial; a single block then adds the partials in a fixed tree order.
#include "kernels/common/device.cuh"
#include "kernels/optim/adamw.cuh"

namespace attnlab {
namespace {

constexpr int kThreads = 256;
constexpr int kSumsqBlocks = 512;

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

template <typename T>
__global__ void adamw_kernel(T* __restrict__ param, float* __restrict__ master,
                             const T* __restrict__ grad, float* __restrict__ m_,
                             float* __restrict__ v_, int64_t n, float lr, float b1, float b2,
                             float eps, float wd, float grad_scale, float bc1, float bc2,
                             uint32_t seed) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float w = master ? master[i] : dev::to_f(param[i]);
    float m = m_[i], v = v_[i];
    T out;
    adamw_element<T>(w, m, v, dev::to_f(grad[i]), out, i, lr, b1, b2, eps, wd, grad_scale, bc1, bc2,
                     seed);
    m_[i] = m;
    v_[i] = v;
    if (master) master[i] = w;
    param[i] = out;
  }
}

// Four elements per thread with 16-byte loads of m, v, master (and 8- or 16-byte loads of param
// and grad); n % 4 == 0 and every pointer aligned for its width.
template <typename T>
struct alignas(4 * sizeof(T)) Quad {
  T v[4];
};
template <typename T>
__global__ void adamw_vec_kernel(T* __restrict__ param, float* __restrict__ master,
                                 const T* __restrict__ grad, float* __restrict__ m_,
                                 float* __restrict__ v_, int64_t n4, float lr, float b1, float b2,
                                 float eps, float wd, float grad_scale, float bc1, float bc2,
                                 uint32_t seed) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t q = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; q < n4; q += stride) {
    const Quad<T> g = reinterpret_cast<const Quad<T>*>(grad)[q];
    Quad<T> pw = reinterpret_cast<const Quad<T>*>(param)[q];
    float4 m = reinterpret_cast<const float4*>(m_)[q], v = reinterpret_cast<const float4*>(v_)[q];
    float4 w;
    if (master) {
      w = reinterpret_cast<const float4*>(master)[q];
    } else {
      w = make_float4(dev::to_f(pw.v[0]), dev::to_f(pw.v[1]), dev::to_f(pw.v[2]),
                      dev::to_f(pw.v[3]));
    }
    const int64_t i = q * 4;
    adamw_element<T>(w.x, m.x, v.x, dev::to_f(g.v[0]), pw.v[0], i, lr, b1, b2, eps, wd, grad_scale,
                     bc1, bc2, seed);
    adamw_element<T>(w.y, m.y, v.y, dev::to_f(g.v[1]), pw.v[1], i + 1, lr, b1, b2, eps, wd,
                     grad_scale, bc1, bc2, seed);
    adamw_element<T>(w.z, m.z, v.z, dev::to_f(g.v[2]), pw.v[2], i + 2, lr, b1, b2, eps, wd,
                     grad_scale, bc1, bc2, seed);
    adamw_element<T>(w.w, m.w, v.w, dev::to_f(g.v[3]), pw.v[3], i + 3, lr, b1, b2, eps, wd,
                     grad_scale, bc1, bc2, seed);
    reinterpret_cast<float4*>(m_)[q] = m;
    reinterpret_cast<float4*>(v_)[q] = v;
    if (master) reinterpret_cast<float4*>(master)[q] = w;
    reinterpret_cast<Quad<T>*>(param)[q] = pw;
  }
}

template <typename T>
__global__ void sumsq_partial_kernel(const T* __restrict__ g, int64_t n, float* partial) {
  __shared__ float sh[kThreads / 32];
  float acc = 0.f;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
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

template <typename T>
void launch_adamw(const AdamWParams<T>& p, Stream s) {
  if (p.n == 0) return;
  const float bc1 = 1.f - std::pow(p.beta1, float(p.step));
  const float bc2 = 1.f - std::pow(p.beta2, float(p.step));
  auto st = reinterpret_cast<cudaStream_t>(s);
  const bool vec = p.n % 4 == 0 && aligned16(p.m) && aligned16(p.v) &&
                   (p.master == nullptr || aligned16(p.master)) &&
                   reinterpret_cast<uintptr_t>(p.param) % (4 * sizeof(T)) == 0 &&
                   reinterpret_cast<uintptr_t>(p.grad) % (4 * sizeof(T)) == 0;
  const int64_t items = vec ? p.n / 4 : p.n;
  const int blocks = int(std::min<int64_t>(div_up(items, kThreads), 132 * 16));
  if (vec) {
    adamw_vec_kernel<T><<<blocks, kThreads, 0, st>>>(p.param, p.master, p.grad, p.m, p.v, items,
                                                     p.lr, p.beta1, p.beta2, p.eps, p.weight_decay,
                                                     p.grad_scale, bc1, bc2, p.seed);
  } else {
    adamw_kernel<T><<<blocks, kThreads, 0, st>>>(p.param, p.master, p.grad, p.m, p.v, p.n, p.lr,
                                                 p.beta1, p.beta2, p.eps, p.weight_decay,
                                                 p.grad_scale, bc1, bc2, p.seed);
  }
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_sumsq(const T* grad, int64_t n, float* out, Stream s) {
  auto st = reinterpret_cast<cudaStream_t>(s);
  StreamScratch partial(sizeof(float) * kSumsqBlocks, s);
  sumsq_partial_kernel<T><<<kSumsqBlocks, kThreads, 0, st>>>(grad, n, partial.as<float>());
  CUDA_CHECK_LAUNCH();
  sumsq_final_kernel<<<1, kSumsqBlocks, 0, st>>>(partial.as<float>(), out);
  CUDA_CHECK_LAUNCH();
}

template void launch_adamw<float>(const AdamWParams<float>&, Stream);
template void launch_adamw<bf16>(const AdamWParams<bf16>&, Stream);
template void launch_sumsq<float>(const float*, int64_t, float*, Stream);
template void launch_sumsq<bf16>(const bf16*, int64_t, float*, Stream);

}  // namespace attnlab
