// CUDA kernels of kernels/focus/focus_assign.cuh (softmax assignment, top-k routing) and
// focus_scores.cuh: one thread per token row (or per centroid element for dcentroids). The
// Sinkhorn kernels are in focus_sinkhorn.cu. Nothing T-sized in shared memory.
#include "kernels/common/device.cuh"
#include "kernels/focus/focus_assign.cuh"
#include "kernels/focus/focus_scores.cuh"

namespace attnlab {
namespace {

constexpr int kThreads = 256;

__device__ void normalize_row(float* x, int K) {
  double m = -INFINITY;
  for (int k = 0; k < K; ++k) m = fmax(m, double(x[k]));
  double sum = 0.0;
  for (int k = 0; k < K; ++k) sum += exp(double(x[k]) - m);
  const double lse = m + log(sum);
  for (int k = 0; k < K; ++k) x[k] = float(double(x[k]) - lse);
}

__global__ void softmax_assign_fwd_kernel(SoftmaxAssignParams p) {
  const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= p.rows) return;
  float* g = p.g + r * p.K;
  for (int k = 0; k < p.K; ++k) g[k] = p.scores[r * p.K + k];
  normalize_row(g, p.K);
  for (int k = 0; k < p.K; ++k) g[k] = expf(g[k]);
}

__global__ void softmax_assign_bwd_kernel(SoftmaxAssignParams p) {
  const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= p.rows) return;
  const float *g = p.g + r * p.K, *dg = p.dg + r * p.K;
  double dot = 0.0;
  for (int k = 0; k < p.K; ++k) dot += double(g[k]) * dg[k];
  for (int k = 0; k < p.K; ++k) p.dscores[r * p.K + k] = float(g[k] * (dg[k] - dot));
}

__global__ void topk_route_kernel(TopkRouteParams p) {
  const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= p.rows) return;
  const float* g = p.g + r * p.K;
  // Selection: the j-th pick is the largest not yet taken (ties: lower index), as the reference.
  uint64_t taken = 0;  // K <= 64 (checked by the host op)
  for (int j = 0; j < p.top_k; ++j) {
    int best = -1;
    for (int k = 0; k < p.K; ++k)
      if (!((taken >> k) & 1u) && (best < 0 || g[k] > g[best])) best = k;
    taken |= uint64_t(1) << best;
    p.groups[r * p.top_k + j] = best;
  }
}

// ---- scores -------------------------------------------------------------------------------------
constexpr double kNormEps2 = 1e-12;

template <typename T>
__device__ double row_norm(const T* x, int d) {
  double s = kNormEps2;
  for (int c = 0; c < d; ++c) s += double(dev::to_f(x[c])) * dev::to_f(x[c]);
  return sqrt(s);
}

template <typename T>
__global__ void focus_scores_fwd_kernel(FocusScoresParams<T> p) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= p.N) return;
  const int d = p.d_g;
  const T* z = p.z + i * d;
  const double zn = row_norm(z, d);
  for (int k = 0; k < p.K; ++k) {
    const T* c = p.centroids + int64_t(k) * d;
    double s = 0.0;
    for (int e = 0; e < d; ++e) s += double(dev::to_f(z[e])) * dev::to_f(c[e]);
    p.scores[i * p.K + k] = float(s / (zn * row_norm(c, d)) / p.tau);
  }
}

template <typename T>
__global__ void focus_scores_dz_kernel(FocusScoresParams<T> p) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= p.N) return;
  const int d = p.d_g;
  const T* z = p.z + i * d;
  const double zn = row_norm(z, d);
  double du[64];  // d_g <= 64 (checked by the host op)
  for (int e = 0; e < d; ++e) du[e] = 0.0;
  for (int k = 0; k < p.K; ++k) {
    const T* c = p.centroids + int64_t(k) * d;
    const double cn = row_norm(c, d), ds = double(p.dscores[i * p.K + k]) / p.tau;
    for (int e = 0; e < d; ++e) du[e] += ds * dev::to_f(c[e]) / cn;
  }
  double dot = 0.0;
  for (int e = 0; e < d; ++e) dot += du[e] * dev::to_f(z[e]) / zn;
  for (int e = 0; e < d; ++e)
    p.dz[i * d + e] = dev::from_f<T>(float((du[e] - dev::to_f(z[e]) / zn * dot) / zn));
}

// dcu[k, e] = sum_i dscores[i, k] / tau * z_hat[i, e]: block x handles a chunk of rows, thread
// (k, e) its sum; one atomic per thread and chunk into fp32 scratch.
template <typename T>
__global__ void focus_scores_dcu_kernel(FocusScoresParams<T> p, float* dcu, int64_t chunk) {
  const int ke = threadIdx.x, d = p.d_g;
  if (ke >= p.K * d) return;
  const int k = ke / d, e = ke % d;
  const int64_t i0 = int64_t(blockIdx.x) * chunk, i1 = min(p.N, i0 + chunk);
  double s = 0.0;
  for (int64_t i = i0; i < i1; ++i) {
    const T* z = p.z + i * d;
    s += double(p.dscores[i * p.K + k]) / p.tau * dev::to_f(z[e]) / row_norm(z, d);
  }
  atomicAdd(dcu + ke, float(s));
}

template <typename T>
__global__ void focus_scores_dc_kernel(FocusScoresParams<T> p, const float* dcu) {
  const int k = threadIdx.x, d = p.d_g;
  if (k >= p.K) return;
  const T* c = p.centroids + int64_t(k) * d;
  const double cn = row_norm(c, d);
  double dot = 0.0;
  for (int e = 0; e < d; ++e) dot += double(dcu[k * d + e]) * dev::to_f(c[e]) / cn;
  for (int e = 0; e < d; ++e) {
    T& out = p.dcentroids[int64_t(k) * d + e];
    out =
        dev::from_f<T>(dev::to_f(out) + float((dcu[k * d + e] - dev::to_f(c[e]) / cn * dot) / cn));
  }
}

cudaStream_t st(Stream s) { return reinterpret_cast<cudaStream_t>(s); }
int blocks_of(int64_t n) { return div_up(n, kThreads); }

}  // namespace

void launch_softmax_assign_fwd(const SoftmaxAssignParams& p, Stream s) {
  if (p.rows == 0) return;
  softmax_assign_fwd_kernel<<<blocks_of(p.rows), kThreads, 0, st(s)>>>(p);
  CUDA_CHECK_LAUNCH();
}
void launch_softmax_assign_bwd(const SoftmaxAssignParams& p, Stream s) {
  if (p.rows == 0) return;
  softmax_assign_bwd_kernel<<<blocks_of(p.rows), kThreads, 0, st(s)>>>(p);
  CUDA_CHECK_LAUNCH();
}
void launch_topk_route(const TopkRouteParams& p, Stream s) {
  if (p.rows == 0) return;
  topk_route_kernel<<<blocks_of(p.rows), kThreads, 0, st(s)>>>(p);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_focus_scores_fwd(const FocusScoresParams<T>& p, Stream s) {
  if (p.N == 0) return;
  focus_scores_fwd_kernel<T><<<blocks_of(p.N), kThreads, 0, st(s)>>>(p);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_focus_scores_bwd(const FocusScoresParams<T>& p, Stream s) {
  if (p.N == 0) return;
  focus_scores_dz_kernel<T><<<blocks_of(p.N), kThreads, 0, st(s)>>>(p);
  CUDA_CHECK_LAUNCH();
  if (!p.dcentroids) return;
  const int kd = p.K * p.d_g;
  StreamScratch dcu(size_t(kd) * sizeof(float), s);
  CUDA_CHECK(cudaMemsetAsync(dcu.as<float>(), 0, size_t(kd) * sizeof(float), st(s)));
  const int64_t chunk = 256;
  focus_scores_dcu_kernel<T>
      <<<div_up(p.N, chunk), div_up(kd, 32) * 32, 0, st(s)>>>(p, dcu.as<float>(), chunk);
  CUDA_CHECK_LAUNCH();
  focus_scores_dc_kernel<T><<<1, div_up(p.K, 32) * 32, 0, st(s)>>>(p, dcu.as<float>());
  CUDA_CHECK_LAUNCH();
}

template void launch_focus_scores_fwd<float>(const FocusScoresParams<float>&, Stream);
template void launch_focus_scores_fwd<bf16>(const FocusScoresParams<bf16>&, Stream);
template void launch_focus_scores_bwd<float>(const FocusScoresParams<float>&, Stream);
template void launch_focus_scores_bwd<bf16>(const FocusScoresParams<bf16>&, Stream);

}  // namespace attnlab
