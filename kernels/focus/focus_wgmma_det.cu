// The dg sum of the deterministic wgmma Focus backward (focus_wgmma_det.h).
#include "kernels/common/device.cuh"
#include "kernels/focus/focus_wgmma_det.h"

namespace attnlab::focus_det {
namespace {

// One thread per (b, t, group): the slices in a fixed order.
__global__ void dg_sum_kernel(float* __restrict__ dg, const float* __restrict__ dgq,
                              const float* __restrict__ dgk, int T, int K, int q_slices,
                              int k_slices) {
  const int64_t per_row = int64_t(T) * K;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= per_row) return;
  const int b = blockIdx.y;
  const float* q = dgq + int64_t(b) * q_slices * per_row + i;
  const float* k = dgk + int64_t(b) * k_slices * per_row + i;
  float s = 0.f;
  for (int j = 0; j < q_slices; ++j) s += q[j * per_row];
  for (int j = 0; j < k_slices; ++j) s += k[j * per_row];
  dg[int64_t(b) * per_row + i] = s;
}

}  // namespace

void launch_focus_dg_sum(float* dg, const Scratch& s, int B, int T, int K, int n_head,
                         int n_kv_head, Stream st) {
  const int64_t per_row = int64_t(T) * K;
  if (per_row == 0 || B == 0) return;
  const dim3 grid(unsigned(div_up(per_row, 256)), unsigned(B));
  dg_sum_kernel<<<grid, 256, 0, reinterpret_cast<cudaStream_t>(st)>>>(
      dg, s.dgq, s.dgk, T, K, n_head * s.dgq_slices, n_kv_head);
  CUDA_CHECK_LAUNCH();
}

}  // namespace attnlab::focus_det
