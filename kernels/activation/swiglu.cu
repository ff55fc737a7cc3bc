// SwiGLU forward and backward. Elementwise over the [rows, F] outputs (one item = V consecutive
// columns of one row); 16-byte packs when F is a multiple of the pack and every pointer is
// 16-byte aligned (then a pack never straddles rows or the gate | up boundary), a scalar path
// otherwise. fp32 math throughout, accurate expf (no fast intrinsics).
#include "kernels/activation/swiglu.cuh"
#include "kernels/common/device.cuh"
#include "kernels/common/vals.cuh"

namespace attnlab {
namespace {

using dev::load_vals;
using dev::store_vals;

constexpr int kThreads = 256;

__device__ __forceinline__ float sigmoid_f(float g) { return 1.f / (1.f + expf(-g)); }

// One kernel for both directions: dy == nullptr is the forward (out = y [rows, F]); otherwise the
// backward (out = dpre [rows, 2F]).
template <typename T, int V>
__global__ void swiglu_kernel(const T* __restrict__ pre, const T* __restrict__ dy,
                              T* __restrict__ out, int64_t rows, int64_t F) {
  const int64_t items = rows * (F / V);
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < items; k += stride) {
    const int64_t row = k / (F / V), col = (k % (F / V)) * V;
    const T* gate_p = pre + row * 2 * F + col;
    float g[V], u[V], r[V];
    load_vals<T, V>(gate_p, g);
    load_vals<T, V>(gate_p + F, u);
    if (dy == nullptr) {
#pragma unroll
      for (int j = 0; j < V; ++j) r[j] = g[j] * sigmoid_f(g[j]) * u[j];
      store_vals<T, V>(out + row * F + col, r);
    } else {
      float d[V], r_up[V];
      load_vals<T, V>(dy + row * F + col, d);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float sg = sigmoid_f(g[j]);
        r[j] = d[j] * u[j] * sg * (1.f + g[j] * (1.f - sg));
        r_up[j] = d[j] * g[j] * sg;
      }
      T* dgate_p = out + row * 2 * F + col;
      store_vals<T, V>(dgate_p, r);
      store_vals<T, V>(dgate_p + F, r_up);
    }
  }
}

template <typename T>
void launch_swiglu(const T* pre, const T* dy, T* out, int64_t rows, int64_t F, Stream s) {
  if (rows <= 0 || F <= 0) return;
  constexpr int N = dev::Pack<T>::N;
  const bool vec = F % N == 0 && aligned16(pre) && aligned16(out) && (!dy || aligned16(dy));
  const int64_t items = rows * (vec ? F / N : F);
  const int blocks = int(std::min<int64_t>(div_up(items, kThreads), 65536));
  auto st = reinterpret_cast<cudaStream_t>(s);
  if (vec) {
    swiglu_kernel<T, N><<<blocks, kThreads, 0, st>>>(pre, dy, out, rows, F);
  } else {
    swiglu_kernel<T, 1><<<blocks, kThreads, 0, st>>>(pre, dy, out, rows, F);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace

template <typename T>
void launch_swiglu_fwd(const SwiGluParams<T>& p, Stream s) {
  launch_swiglu<T>(p.pre, nullptr, p.y, p.rows, p.f, s);
}
template <typename T>
void launch_swiglu_bwd(const SwiGluParams<T>& p, Stream s) {
  launch_swiglu<T>(p.pre, p.dy, p.dpre, p.rows, p.f, s);
}

template void launch_swiglu_fwd<float>(const SwiGluParams<float>&, Stream);
template void launch_swiglu_fwd<bf16>(const SwiGluParams<bf16>&, Stream);
template void launch_swiglu_bwd<float>(const SwiGluParams<float>&, Stream);
template void launch_swiglu_bwd<bf16>(const SwiGluParams<bf16>&, Stream);

}  // namespace attnlab
