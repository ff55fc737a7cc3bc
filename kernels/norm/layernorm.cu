// LayerNorm forward and backward. One warp per row, fp32 statistics (two-pass variance), 16-byte
// loads when every row is 16-byte aligned (a scalar path otherwise). Without beta the shift is 0
// (a uniform test of the pointer; nvcc unswitches it out of the column loop, so the with-beta loop
// is the same machine code as before).
// Backward: one kernel reads x, dy and dx once per row, writes dx and accumulates dgamma/dbeta
// per warp in shared memory; each block then writes its column sums to a partial row and a second
// kernel adds the partials in a fixed order. The rows of a block depend on the shape only, so
// dgamma/dbeta are bitwise reproducible.
#include <initializer_list>

#include "kernels/common/device.cuh"
#include "kernels/common/vals.cuh"
#include "kernels/norm/layernorm.cuh"

namespace attnlab {
namespace {

using dev::add_vals;
using dev::load_vals;
using dev::store_vals;

constexpr int kRowWarps = 8;  // rows per block in the forward
constexpr int kBwdWarps = 8;  // warps per block in the backward (fewer for very wide rows)

template <typename T, int V>
__global__ void layernorm_fwd_kernel(const T* __restrict__ x, const T* __restrict__ gamma,
                                     const T* __restrict__ beta, T* __restrict__ y,
                                     float* __restrict__ mean_out, float* __restrict__ rstd_out,
                                     int64_t rows, int C, float eps) {
  const int64_t row = int64_t(blockIdx.x) * kRowWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T* xr = x + row * C;
  float v[V];
  float s = 0.f;
  for (int c = lane * V; c < C; c += 32 * V) {
    load_vals<T, V>(xr + c, v);
#pragma unroll
    for (int j = 0; j < V; ++j) s += v[j];
  }
  const float mean = dev::warp_sum(s) / C;
  float var = 0.f;
  for (int c = lane * V; c < C; c += 32 * V) {
    load_vals<T, V>(xr + c, v);
#pragma unroll
    for (int j = 0; j < V; ++j) var += (v[j] - mean) * (v[j] - mean);
  }
  const float rstd = rsqrtf(dev::warp_sum(var) / C + eps);
  T* yr = y + row * C;
  float g[V], b[V];
  for (int c = lane * V; c < C; c += 32 * V) {
    load_vals<T, V>(xr + c, v);
    load_vals<T, V>(gamma + c, g);
    if (beta) {
      load_vals<T, V>(beta + c, b);
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) b[j] = 0.f;
    }
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = (v[j] - mean) * rstd * g[j] + b[j];
    store_vals<T, V>(yr + c, v);
  }
  if (lane == 0) {
    if (mean_out) mean_out[row] = mean;
    if (rstd_out) rstd_out[row] = rstd;
  }
}

// dx += rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma (when dx != null);
// with partial != null, block b writes partial[b][c] = sum dy * xhat and
// partial[groups + b][c] = sum dy over its rows (rows_per_block consecutive rows).
// Shared memory: [warps][2][C] floats, each warp accumulating its own rows.
template <typename T, int V>
__global__ void layernorm_bwd_kernel(const T* __restrict__ x, const T* __restrict__ gamma,
                                     const float* __restrict__ mean, const float* __restrict__ rstd,
                                     const T* __restrict__ dy, T* __restrict__ dx,
                                     float* __restrict__ partial, int64_t rows, int C,
                                     int rows_per_block) {
  extern __shared__ float4 smem4[];
  float* acc = reinterpret_cast<float*>(smem4);
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* dg = acc + int64_t(warp) * 2 * C;
  float* db = dg + C;
  if (partial) {
    for (int c = lane; c < C; c += 32) dg[c] = db[c] = 0.f;
    __syncwarp();
  }
  const int64_t r0 = int64_t(blockIdx.x) * rows_per_block;
  const int64_t r1 = std::min<int64_t>(rows, r0 + rows_per_block);
  float xv[V], dv[V], gv[V], ov[V];
  for (int64_t row = r0 + warp; row < r1; row += warps) {
    const T* xr = x + row * C;
    const T* dyr = dy + row * C;
    const float mu = mean[row], rs = rstd[row];
    float sg = 0.f, sgx = 0.f;
    if (dx) {
      for (int c = lane * V; c < C; c += 32 * V) {
        load_vals<T, V>(xr + c, xv);
        load_vals<T, V>(dyr + c, dv);
        load_vals<T, V>(gamma + c, gv);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float g = dv[j] * gv[j];
          sg += g;
          sgx += g * (xv[j] - mu) * rs;
        }
      }
      sg = dev::warp_sum(sg) / C;
      sgx = dev::warp_sum(sgx) / C;
    }
    T* dxr = dx ? dx + row * C : nullptr;
    for (int c = lane * V; c < C; c += 32 * V) {
      load_vals<T, V>(xr + c, xv);
      load_vals<T, V>(dyr + c, dv);
      if (dxr) {
        load_vals<T, V>(gamma + c, gv);
        load_vals<T, V>(dxr + c, ov);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float xh = (xv[j] - mu) * rs;
          ov[j] += rs * (dv[j] * gv[j] - sg - xh * sgx);
        }
        store_vals<T, V>(dxr + c, ov);
      }
      if (partial) {
#pragma unroll
        for (int j = 0; j < V; ++j) ov[j] = dv[j] * ((xv[j] - mu) * rs);
        add_vals<V>(dg + c, ov);
        add_vals<V>(db + c, dv);
      }
    }
  }
  if (!partial) return;
  __syncthreads();
  const int groups = gridDim.x;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float g = 0.f, b = 0.f;
    for (int w = 0; w < warps; ++w) {
      g += acc[int64_t(w) * 2 * C + c];
      b += acc[int64_t(w) * 2 * C + C + c];
    }
    partial[int64_t(blockIdx.x) * C + c] = g;
    partial[int64_t(groups + blockIdx.x) * C + c] = b;
  }
}

// dgamma[c] += sum_g partial[g][c]; dbeta[c] += sum_g partial[groups + g][c]. Block: 32 columns x
// 32 group lanes; lane k sums groups k, k + 32, ... in order, then the lanes are added in order.
template <typename T>
__global__ void layernorm_param_final_kernel(const float* __restrict__ partial, T* dgamma, T* dbeta,
                                             int groups, int C) {
  __shared__ float sh[2][32][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  float dg = 0.f, db = 0.f;
  if (c < C) {
    for (int g = threadIdx.y; g < groups; g += 32) {
      dg += partial[int64_t(g) * C + c];
      db += partial[int64_t(groups + g) * C + c];
    }
  }
  sh[0][threadIdx.y][threadIdx.x] = dg;
  sh[1][threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  for (int k = 1; k < 32; ++k) {
    dg += sh[0][k][threadIdx.x];
    db += sh[1][k][threadIdx.x];
  }
  if (dgamma) dgamma[c] = dev::from_f<T>(dev::to_f(dgamma[c]) + dg);
  if (dbeta) dbeta[c] = dev::from_f<T>(dev::to_f(dbeta[c]) + db);
}

template <typename T, int V>
void launch_bwd(const LayerNormParams<T>& p, float* partial, int groups, int rows_per_block,
                int warps, size_t smem, cudaStream_t st) {
  auto kernel = layernorm_bwd_kernel<T, V>;
  if (smem > 48 * 1024) {
    CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  }
  kernel<<<groups, warps * 32, smem, st>>>(p.x, p.gamma, p.mean, p.rstd, p.dy, p.dx, partial,
                                           p.rows, p.cols, rows_per_block);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

template <typename T>
void launch_layernorm_fwd(const LayerNormParams<T>& p, Stream s) {
  if (p.rows == 0) return;
  auto st = reinterpret_cast<cudaStream_t>(s);
  const int blocks = div_up(p.rows, kRowWarps);
  if (rows_vectorizable<T>(p.cols, {p.x, p.gamma, p.beta, p.y})) {
    layernorm_fwd_kernel<T, dev::Pack<T>::N><<<blocks, kRowWarps * 32, 0, st>>>(
        p.x, p.gamma, p.beta, p.y, p.mean, p.rstd, p.rows, p.cols, p.eps);
  } else {
    layernorm_fwd_kernel<T, 1><<<blocks, kRowWarps * 32, 0, st>>>(p.x, p.gamma, p.beta, p.y, p.mean,
                                                                  p.rstd, p.rows, p.cols, p.eps);
  }
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_layernorm_bwd(const LayerNormParams<T>& p, Stream s) {
  if (p.rows == 0) return;
  const bool params = p.dgamma || p.dbeta;
  if (!p.dx && !params) return;
  auto st = reinterpret_cast<cudaStream_t>(s);
  // Per-warp accumulators: 2 * C floats each; as many warps (up to kBwdWarps) as fit.
  int optin = 0, dev_id = 0;
  CUDA_CHECK(cudaGetDevice(&dev_id));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev_id));
  const size_t per_warp = params ? size_t(2) * p.cols * sizeof(float) : 0;
  int warps = kBwdWarps;
  if (per_warp > 0) warps = int(std::min<size_t>(kBwdWarps, size_t(optin) / per_warp));
  ATTN_REQUIRE(warps >= 1,
               "layernorm backward: %d columns need %zu bytes of shared memory per warp for the "
               "parameter gradients; the device allows %d",
               p.cols, per_warp, optin);
  // Rows per block depend on the shape only (determinism): about 512 blocks for large inputs.
  const int rows_per_block = int(std::max<int64_t>(4 * warps, div_up(p.rows, 512)));
  const int groups = div_up(p.rows, rows_per_block);
  StreamScratch partial(params ? sizeof(float) * 2 * size_t(groups) * p.cols : 0, s);
  const size_t smem = per_warp * warps;
  if (rows_vectorizable<T>(p.cols, {p.x, p.gamma, p.dy, p.dx})) {
    launch_bwd<T, dev::Pack<T>::N>(p, partial.as<float>(), groups, rows_per_block, warps, smem, st);
  } else {
    launch_bwd<T, 1>(p, partial.as<float>(), groups, rows_per_block, warps, smem, st);
  }
  if (!params) return;
  layernorm_param_final_kernel<T><<<div_up(p.cols, 32), dim3(32, 32), 0, st>>>(
      partial.as<float>(), p.dgamma, p.dbeta, groups, p.cols);
  CUDA_CHECK_LAUNCH();
}

template void launch_layernorm_fwd<float>(const LayerNormParams<float>&, Stream);
template void launch_layernorm_fwd<bf16>(const LayerNormParams<bf16>&, Stream);
template void launch_layernorm_bwd<float>(const LayerNormParams<float>&, Stream);
template void launch_layernorm_bwd<bf16>(const LayerNormParams<bf16>&, Stream);

}  // namespace attnlab
