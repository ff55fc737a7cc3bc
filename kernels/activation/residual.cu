// Residual add: y = a + b; backward da += dy, db += dy (either may be null). Elementwise; 16-byte
// packs when every pointer is 16-byte aligned, a scalar path otherwise. fp32 math.
#include "kernels/activation/residual.cuh"
#include "kernels/common/device.cuh"

namespace attnlab {
namespace {

// out = a + b. Used for the forward (a, b inputs) and each backward accumulation (out = a = da).
template <typename T, bool kVec>
__global__ void add_kernel(const T* a, const T* b, T* out, int64_t n) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if constexpr (kVec) {
    constexpr int N = dev::Pack<T>::N;
    for (; i < n / N; i += stride) {
      const dev::Pack<T> av = dev::load_pack(a + i * N), bv = dev::load_pack(b + i * N);
      dev::Pack<T> r;
#pragma unroll
      for (int j = 0; j < N; ++j) r.set(j, av.f(j) + bv.f(j));
      dev::store_pack(out + i * N, r);
    }
  } else {
    for (; i < n; i += stride) out[i] = dev::from_f<T>(dev::to_f(a[i]) + dev::to_f(b[i]));
  }
}

template <typename T>
void launch_add(const T* a, const T* b, T* out, int64_t n, Stream s) {
  if (n <= 0) return;
  constexpr int kThreads = 256;
  const bool vec = n % dev::Pack<T>::N == 0 && aligned16(a) && aligned16(b) && aligned16(out);
  const int64_t items = vec ? n / dev::Pack<T>::N : n;
  const int blocks = int(std::min<int64_t>(div_up(items, kThreads), 65536));
  auto st = reinterpret_cast<cudaStream_t>(s);
  if (vec) {
    add_kernel<T, true><<<blocks, kThreads, 0, st>>>(a, b, out, n);
  } else {
    add_kernel<T, false><<<blocks, kThreads, 0, st>>>(a, b, out, n);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace

template <typename T>
void launch_residual_fwd(const ResidualParams<T>& p, Stream s) {
  launch_add<T>(p.a, p.b, p.y, p.n, s);
}
template <typename T>
void launch_residual_bwd(const ResidualParams<T>& p, Stream s) {
  if (p.da) launch_add<T>(p.da, p.dy, p.da, p.n, s);
  if (p.db) launch_add<T>(p.db, p.dy, p.db, p.n, s);
}

template void launch_residual_fwd<float>(const ResidualParams<float>&, Stream);
template void launch_residual_fwd<bf16>(const ResidualParams<bf16>&, Stream);
template void launch_residual_bwd<float>(const ResidualParams<float>&, Stream);
template void launch_residual_bwd<bf16>(const ResidualParams<bf16>&, Stream);

}  // namespace attnlab
