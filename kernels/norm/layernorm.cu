// LayerNorm forward and backward. One warp per row (fp32 statistics, two-pass variance).
// dgamma/dbeta: deterministic two-stage reduction: stage 1 sums fixed row groups per column into
// fp32 partials (the grouping depends on the shape only), stage 2 adds the partials in order.
#include "kernels/common/device.cuh"
#include "kernels/norm/layernorm.cuh"

namespace attnlab {
namespace {

constexpr int kRowWarps = 8;  // rows per block in the row kernels

template <typename T>
__global__ void layernorm_fwd_kernel(const T* __restrict__ x, const T* __restrict__ gamma,
                                     const T* __restrict__ beta, T* __restrict__ y,
                                     float* __restrict__ mean_out, float* __restrict__ rstd_out,
                                     int64_t rows, int C, float eps) {
  const int64_t row = int64_t(blockIdx.x) * kRowWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T* xr = x + row * C;
  float s = 0.f;
  for (int c = lane; c < C; c += 32) s += dev::to_f(xr[c]);
  const float mean = dev::warp_sum(s) / C;
  float v = 0.f;
  for (int c = lane; c < C; c += 32) {
    const float d = dev::to_f(xr[c]) - mean;
    v += d * d;
  }
  const float rstd = rsqrtf(dev::warp_sum(v) / C + eps);
  T* yr = y + row * C;
  for (int c = lane; c < C; c += 32) {
    const float xh = (dev::to_f(xr[c]) - mean) * rstd;
    yr[c] = dev::from_f<T>(xh * dev::to_f(gamma[c]) + dev::to_f(beta[c]));
  }
  if (lane == 0) {
    if (mean_out) mean_out[row] = mean;
    if (rstd_out) rstd_out[row] = rstd;
  }
}

// dx += rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma.
template <typename T>
__global__ void layernorm_bwd_dx_kernel(const T* __restrict__ x, const T* __restrict__ gamma,
                                        const float* __restrict__ mean,
                                        const float* __restrict__ rstd, const T* __restrict__ dy,
                                        T* __restrict__ dx, int64_t rows, int C) {
  const int64_t row = int64_t(blockIdx.x) * kRowWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T* xr = x + row * C;
  const T* dyr = dy + row * C;
  const float mu = mean[row], rs = rstd[row];
  float sg = 0.f, sgx = 0.f;
  for (int c = lane; c < C; c += 32) {
    const float g = dev::to_f(dyr[c]) * dev::to_f(gamma[c]);
    sg += g;
    sgx += g * (dev::to_f(xr[c]) - mu) * rs;
  }
  sg = dev::warp_sum(sg) / C;
  sgx = dev::warp_sum(sgx) / C;
  T* dxr = dx + row * C;
  for (int c = lane; c < C; c += 32) {
    const float g = dev::to_f(dyr[c]) * dev::to_f(gamma[c]);
    const float xh = (dev::to_f(xr[c]) - mu) * rs;
    dxr[c] = dev::from_f<T>(dev::to_f(dxr[c]) + rs * (g - sg - xh * sgx));
  }
}

// Stage 1: block (32 columns x 8 row lanes); blockIdx.y = row group. partial[2][groups][C].
template <typename T>
__global__ void layernorm_param_partial_kernel(const T* __restrict__ x,
                                               const float* __restrict__ mean,
                                               const float* __restrict__ rstd,
                                               const T* __restrict__ dy,
                                               float* __restrict__ partial, int64_t rows, int C) {
  __shared__ float sh[2][8][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  const int groups = gridDim.y;
  float dg = 0.f, db = 0.f;
  if (c < C) {
    for (int64_t r = int64_t(blockIdx.y) * 8 + threadIdx.y; r < rows; r += int64_t(groups) * 8) {
      const float d = dev::to_f(dy[r * C + c]);
      dg += d * (dev::to_f(x[r * C + c]) - mean[r]) * rstd[r];
      db += d;
    }
  }
  sh[0][threadIdx.y][threadIdx.x] = dg;
  sh[1][threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int k = 1; k < 8; ++k) {
      dg += sh[0][k][threadIdx.x];
      db += sh[1][k][threadIdx.x];
    }
    partial[int64_t(blockIdx.y) * C + c] = dg;
    partial[int64_t(groups + blockIdx.y) * C + c] = db;
  }
}

template <typename T>
__global__ void layernorm_param_final_kernel(const float* __restrict__ partial, T* dgamma, T* dbeta,
                                             int groups, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float dg = 0.f, db = 0.f;
  for (int g = 0; g < groups; ++g) {
    dg += partial[int64_t(g) * C + c];
    db += partial[int64_t(groups + g) * C + c];
  }
  if (dgamma) dgamma[c] = dev::from_f<T>(dev::to_f(dgamma[c]) + dg);
  if (dbeta) dbeta[c] = dev::from_f<T>(dev::to_f(dbeta[c]) + db);
}

}  // namespace

template <typename T>
void launch_layernorm_fwd(const LayerNormParams<T>& p, Stream s) {
  if (p.rows == 0) return;
  layernorm_fwd_kernel<T>
      <<<div_up(p.rows, kRowWarps), kRowWarps * 32, 0, reinterpret_cast<cudaStream_t>(s)>>>(
          p.x, p.gamma, p.beta, p.y, p.mean, p.rstd, p.rows, p.cols, p.eps);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_layernorm_bwd(const LayerNormParams<T>& p, Stream s) {
  if (p.rows == 0) return;
  auto st = reinterpret_cast<cudaStream_t>(s);
  if (p.dx) {
    layernorm_bwd_dx_kernel<T><<<div_up(p.rows, kRowWarps), kRowWarps * 32, 0, st>>>(
        p.x, p.gamma, p.mean, p.rstd, p.dy, p.dx, p.rows, p.cols);
    CUDA_CHECK_LAUNCH();
  }
  if (!p.dgamma && !p.dbeta) return;
  // Row groups depend on the shape only, so the summation order (and result) is reproducible.
  const int groups = int(std::min<int64_t>(div_up(p.rows, 64), 128));
  StreamScratch partial(sizeof(float) * 2 * size_t(groups) * p.cols, s);
  layernorm_param_partial_kernel<T><<<dim3(div_up(p.cols, 32), groups), dim3(32, 8), 0, st>>>(
      p.x, p.mean, p.rstd, p.dy, partial.as<float>(), p.rows, p.cols);
  CUDA_CHECK_LAUNCH();
  layernorm_param_final_kernel<T>
      <<<div_up(p.cols, 256), 256, 0, st>>>(partial.as<float>(), p.dgamma, p.dbeta, groups, p.cols);
  CUDA_CHECK_LAUNCH();
}

template void launch_layernorm_fwd<float>(const LayerNormParams<float>&, Stream);
template void launch_layernorm_fwd<bf16>(const LayerNormParams<bf16>&, Stream);
template void launch_layernorm_bwd<float>(const LayerNormParams<float>&, Stream);
template void launch_layernorm_bwd<bf16>(const LayerNormParams<bf16>&, Stream);

}  // namespace attnlab
