// GELU (tanh approximation), forward and backward. Elementwise; 16-byte packs when every pointer
// is 16-byte aligned (bf16: 8 values per load), a scalar path otherwise. fp32 math throughout.
#include "kernels/activation/gelu.cuh"
#include "kernels/common/device.cuh"

namespace attnlab {
namespace {

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluA = 0.044715f;

__device__ __forceinline__ float gelu_f(float x) {
  const float u = kGeluK * (x + kGeluA * x * x * x);
  return 0.5f * x * (1.f + tanhf(u));
}
__device__ __forceinline__ float gelu_grad_f(float x) {
  const float u = kGeluK * (x + kGeluA * x * x * x);
  const float th = tanhf(u);
  const float du = kGeluK * (1.f + 3.f * kGeluA * x * x);
  return 0.5f * (1.f + th) + 0.5f * x * (1.f - th * th) * du;
}

// y = gelu(x) (fwd, dy == nullptr) or out = dy * gelu'(x) (bwd). `out` may alias dy.
template <typename T, bool kVec>
__global__ void gelu_kernel(const T* __restrict__ x, const T* dy, T* out, int64_t n) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if constexpr (kVec) {
    constexpr int N = dev::Pack<T>::N;
    for (; i < n / N; i += stride) {
      const dev::Pack<T> xv = dev::load_pack(x + i * N);
      dev::Pack<T> r;
      if (dy) {
        const dev::Pack<T> g = dev::load_pack(dy + i * N);
#pragma unroll
        for (int j = 0; j < N; ++j) r.set(j, g.f(j) * gelu_grad_f(xv.f(j)));
      } else {
#pragma unroll
        for (int j = 0; j < N; ++j) r.set(j, gelu_f(xv.f(j)));
      }
      dev::store_pack(out + i * N, r);
    }
  } else {
    for (; i < n; i += stride) {
      const float xf = dev::to_f(x[i]);
      out[i] = dev::from_f<T>(dy ? dev::to_f(dy[i]) * gelu_grad_f(xf) : gelu_f(xf));
    }
  }
}

template <typename T>
void launch_gelu(const T* x, const T* dy, T* out, int64_t n, Stream s) {
  if (n <= 0) return;
  constexpr int kThreads = 256;
  const bool vec = n % dev::Pack<T>::N == 0 && aligned16(x) && aligned16(out) &&
                   (dy == nullptr || aligned16(dy));
  const int64_t items = vec ? n / dev::Pack<T>::N : n;
  const int blocks = int(std::min<int64_t>(div_up(items, kThreads), 65536));
  auto st = reinterpret_cast<cudaStream_t>(s);
  if (vec) {
    gelu_kernel<T, true><<<blocks, kThreads, 0, st>>>(x, dy, out, n);
  } else {
    gelu_kernel<T, false><<<blocks, kThreads, 0, st>>>(x, dy, out, n);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace

template <typename T>
void launch_gelu_fwd(const GeluParams<T>& p, Stream s) {
  launch_gelu<T>(p.x, nullptr, p.y, p.n, s);
}
template <typename T>
void launch_gelu_bwd(const GeluParams<T>& p, Stream s) {
  launch_gelu<T>(p.x, p.dy, p.dx, p.n, s);
}

template void launch_gelu_fwd<float>(const GeluParams<float>&, Stream);
template void launch_gelu_fwd<bf16>(const GeluParams<bf16>&, Stream);
template void launch_gelu_bwd<float>(const GeluParams<float>&, Stream);
template void launch_gelu_bwd<bf16>(const GeluParams<bf16>&, Stream);

}  // namespace attnlab
