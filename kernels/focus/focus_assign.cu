// CUDA kernels of kernels/focus/focus_assign.cuh (softmax assignment, top-k routing) and
// focus_scores.cuh: one thread per token row (dcentroids: tiles of rows in shared memory, below).
// The Sinkhorn kernels are in focus_sinkhorn.cu. Nothing T-sized in shared memory.
#include <algorithm>

#include "kernels/common/device.cuh"
#include "kernels/common/pdl_launch.h"
#include "kernels/common/stream_scratch.h"
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
// One thread per token row; the centroids, normalised once per block, in shared memory (K d_g <=
// 1024, checked by the host op). Each row's norm is taken once, its dot products in double.
constexpr double kNormEps2 = 1e-12;

template <typename T>
__device__ double row_norm(const T* x, int d) {
  double s = kNormEps2;
  for (int c = 0; c < d; ++c) s += double(dev::to_f(x[c])) * dev::to_f(x[c]);
  return sqrt(s);
}

// c_hat[k d + e] = c[k, e] / |c_k| for the block (then a barrier).
template <typename T>
__device__ void load_unit_centroids(float* c_hat, const FocusScoresParams<T>& p) {
  const int d = p.d_g;
  for (int ke = threadIdx.x; ke < p.K * d; ke += blockDim.x) {
    const int k = ke / d;
    c_hat[ke] = float(dev::to_f(p.centroids[ke]) / row_norm(p.centroids + int64_t(k) * d, d));
  }
  __syncthreads();
}

// (c_hat_k . z_i) in double.
template <typename T>
__device__ double dot_centroid(const float* c_hat_k, const T* z, int d) {
  double s = 0.0;
  for (int e = 0; e < d; ++e) s += double(c_hat_k[e]) * dev::to_f(z[e]);
  return s;
}

template <typename T>
__global__ void focus_scores_fwd_kernel(FocusScoresParams<T> p) {
  extern __shared__ float c_hat[];  // [K][d_g]
  load_unit_centroids(c_hat, p);
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= p.N) return;
  const int d = p.d_g;
  const T* z = p.z + i * d;
  const double scale = 1.0 / (row_norm(z, d) * p.tau);
  for (int k = 0; k < p.K; ++k)
    p.scores[i * p.K + k] = float(dot_centroid(c_hat + k * d, z, d) * scale);
}

// dz = (du - z_hat (du . z_hat)) / |z| with du = sum_k dscores_k / tau c_hat_k, where
// du . z_hat = sum_k dscores_k / tau (c_hat_k . z) / |z|: no du array.
template <typename T>
__global__ void focus_scores_dz_kernel(FocusScoresParams<T> p) {
  extern __shared__ float c_hat[];  // [K][d_g]
  load_unit_centroids(c_hat, p);
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= p.N) return;
  const int d = p.d_g, K = p.K;
  const T* z = p.z + i * d;
  const float* ds = p.dscores + i * K;
  const double zn = row_norm(z, d), inv_tau = 1.0 / p.tau;
  double dot = 0.0;
  for (int k = 0; k < K; ++k) dot += double(ds[k]) * dot_centroid(c_hat + k * d, z, d);
  dot *= inv_tau / zn;
  for (int e = 0; e < d; ++e) {
    double du = 0.0;
    for (int k = 0; k < K; ++k) du += double(ds[k]) * c_hat[k * d + e];
    du *= inv_tau;
    p.dz[i * d + e] = dev::from_f<T>(float((du - dev::to_f(z[e]) / zn * dot) / zn));
  }
}

// dcu[k, e] = sum_i dscores[i, k] / tau * z_hat[i, e]. A grid-stride loop over tiles of `rows`
// token rows: the tile's z_hat and dscores / tau staged in shared memory (one row per thread),
// then thread j of the block adds the tile's sum for the pairs ke = j, j + blockDim.x, .. (at most
// kMaxPairsPerThread) in double; the block's sums written to its row of `partial` [blocks][K d_g]
// (double), which focus_scores_dcu_sum_kernel adds in block order: deterministic, as the grid
// depends on the shape only (kDcuBlocks).
constexpr int kMaxPairsPerThread = 4;  // K d_g <= 1024 = kMaxPairsPerThread kThreads
constexpr int64_t kDcuBlocks = 256;

template <typename T>
__global__ void focus_scores_dcu_kernel(FocusScoresParams<T> p, double* partial, int rows) {
  extern __shared__ float tile[];  // z_hat [rows][d_g], then dscores / tau [rows][K]
  const int d = p.d_g, K = p.K, kd = K * d;
  float* zh = tile;
  float* dsr = tile + rows * d;
  double acc[kMaxPairsPerThread] = {};
  for (int64_t r0 = int64_t(blockIdx.x) * rows; r0 < p.N; r0 += int64_t(gridDim.x) * rows) {
    __syncthreads();  // the previous tile is read
    for (int r = threadIdx.x; r < rows; r += blockDim.x) {
      const int64_t i = r0 + r;
      const bool ok = i < p.N;
      const T* z = p.z + (ok ? i : 0) * d;
      const double inv = ok ? 1.0 / row_norm(z, d) : 0.0;
      for (int e = 0; e < d; ++e) zh[r * d + e] = float(dev::to_f(z[e]) * inv);
      for (int k = 0; k < K; ++k) dsr[r * K + k] = ok ? p.dscores[i * K + k] / p.tau : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kMaxPairsPerThread; ++j) {
      const int ke = threadIdx.x + j * blockDim.x;
      if (ke >= kd) break;
      const int k = ke / d, e = ke - k * d;
      double s = 0.0;
      for (int r = 0; r < rows; ++r) s += double(dsr[r * K + k]) * zh[r * d + e];
      acc[j] += s;
    }
  }
#pragma unroll
  for (int j = 0; j < kMaxPairsPerThread; ++j) {
    const int ke = threadIdx.x + j * blockDim.x;
    if (ke < kd) partial[int64_t(blockIdx.x) * kd + ke] = acc[j];
  }
}

// dcu[ke] = the blocks' partial sums in block order.
__global__ void focus_scores_dcu_sum_kernel(const double* __restrict__ partial, int blocks, int kd,
                                            float* __restrict__ dcu) {
  const int ke = blockIdx.x * blockDim.x + threadIdx.x;
  if (ke >= kd) return;
  double s = 0.0;
  for (int i = 0; i < blocks; ++i) s += partial[int64_t(i) * kd + ke];
  dcu[ke] = float(s);
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
  const size_t c_bytes = size_t(p.K) * p.d_g * sizeof(float);
  focus_scores_fwd_kernel<T><<<blocks_of(p.N), kThreads, c_bytes, st(s)>>>(p);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_focus_scores_bwd(const FocusScoresParams<T>& p, Stream s) {
  if (p.N == 0) return;
  const int kd = p.K * p.d_g;
  ATTN_ASSERT(kd <= kMaxPairsPerThread * kThreads);
  focus_scores_dz_kernel<T><<<blocks_of(p.N), kThreads, size_t(kd) * sizeof(float), st(s)>>>(p);
  CUDA_CHECK_LAUNCH();
  if (!p.dcentroids) return;
  // Tiles of up to kThreads rows within 48 KiB of shared memory (d_g + K <= 1088 floats a row),
  // at most kDcuBlocks blocks (about 2 per SM on an H100 / H200).
  const int rows =
      std::max(1, std::min(kThreads, int(48 * 1024 / ((p.d_g + p.K) * sizeof(float)))));
  const int blocks = int(std::min<int64_t>(div_up(p.N, rows), kDcuBlocks));
  const size_t dcu_bytes = (size_t(kd) * sizeof(float) + 15) / 16 * 16;
  StreamScratch scratch(dcu_bytes + size_t(blocks) * kd * sizeof(double), s);
  float* dcu = scratch.as<float>();
  double* partial = reinterpret_cast<double*>(scratch.as<unsigned char>() + dcu_bytes);
  focus_scores_dcu_kernel<T>
      <<<unsigned(blocks), kThreads, size_t(rows) * (p.d_g + p.K) * sizeof(float), st(s)>>>(
          p, partial, rows);
  CUDA_CHECK_LAUNCH();
  focus_scores_dcu_sum_kernel<<<blocks_of(kd), kThreads, 0, st(s)>>>(partial, blocks, kd, dcu);
  CUDA_CHECK_LAUNCH();
  focus_scores_dc_kernel<T><<<1, div_up(p.K, 32) * 32, 0, st(s)>>>(p, dcu);
  CUDA_CHECK_LAUNCH();
}

template void launch_focus_scores_fwd<float>(const FocusScoresParams<float>&, Stream);
template void launch_focus_scores_fwd<bf16>(const FocusScoresParams<bf16>&, Stream);
template void launch_focus_scores_bwd<float>(const FocusScoresParams<float>&, Stream);
template void launch_focus_scores_bwd<bf16>(const FocusScoresParams<bf16>&, Stream);

}  // namespace attnlab
