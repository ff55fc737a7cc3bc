// CUDA kernel of kernels/sfa/sfa_select.cuh: one warp per head vector (q heads, then k heads, of
// each token), D <= 128 so a lane holds at most 4 coordinates (c = lane + 32 j). Each lane ranks
// its coordinates against all D by the selection order (|x| descending, index ascending), and a
// ballot prefix gives each selected coordinate its place in ascending order. The warps of the k
// heads also copy that kv head's v vector (mask_dst, v_out). Deterministic: no reductions.
#include "kernels/common/device.cuh"
#include "kernels/sfa/sfa_select.cuh"

namespace attnlab {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kMaxSlots = 4;  // D <= 128

template <typename T>
__global__ void sfa_select_kernel(SfaSelectParams<T> p) {
  const int lane = threadIdx.x & 31;
  const int heads = p.n_head + p.n_kv_head, D = p.D;
  const int64_t warp = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (warp >= int64_t(p.B) * p.T * heads) return;  // whole warps leave together
  const int hv = int(warp % heads);
  const int64_t r = warp / heads, b = r / p.T, t = r % p.T,
                W = int64_t(p.n_head + 2 * p.n_kv_head) * p.D;
  const int64_t off = r * W + int64_t(hv) * D;
  float a[kMaxSlots];
#pragma unroll
  for (int j = 0; j < kMaxSlots; ++j) {
    const int c = lane + 32 * j;
    a[j] = c < D ? fabsf(dev::to_f(p.qkv[off + c])) : 0.f;
  }
  int rank[kMaxSlots] = {0, 0, 0, 0};
#pragma unroll
  for (int j2 = 0; j2 < kMaxSlots; ++j2) {
    for (int src = 0; src < 32; ++src) {
      const float o = __shfl_sync(0xffffffffu, a[j2], src);
      const int c2 = src + 32 * j2;
      if (c2 >= D) continue;
#pragma unroll
      for (int j = 0; j < kMaxSlots; ++j) {
        const int c = lane + 32 * j;
        rank[j] += (o > a[j] || (o == a[j] && c2 < c)) ? 1 : 0;
      }
    }
  }
  const bool is_q = hv < p.n_head;
  const int h = is_q ? hv : hv - p.n_head;
  int32_t* oi = is_q ? p.q_idx : p.k_idx;
  T* ov = is_q ? p.q_val : p.k_val;
  const int64_t at = is_q ? b * p.q_batch_stride + t * p.q_row_stride + h * p.q_head_stride
                          : b * p.k_batch_stride + t * p.k_row_stride + h * p.k_head_stride;
  const unsigned lower = (1u << lane) - 1u;
  int before = 0;  // selected coordinates in earlier slots
#pragma unroll
  for (int j = 0; j < kMaxSlots; ++j) {
    const int c = lane + 32 * j;
    const bool sel = c < D && rank[j] < p.k;
    const unsigned m = __ballot_sync(0xffffffffu, sel);
    if (sel) {
      const int i = before + __popc(m & lower);
      if (oi) oi[at + i] = c;
      if (ov) ov[at + i] = p.qkv[off + c];
    }
    before += __popc(m);
    if (p.mask_dst && c < D) p.mask_dst[off + c] = sel ? p.mask_src[off + c] : dev::from_f<T>(0.f);
  }
  if (is_q) return;
  const int64_t voff = r * W + int64_t(p.n_head + p.n_kv_head + h) * D;
  for (int c = lane; c < D; c += 32) {
    if (p.mask_dst && p.mask_dst != p.mask_src) p.mask_dst[voff + c] = p.mask_src[voff + c];
    if (p.v_out)
      p.v_out[b * p.v_batch_stride + t * p.v_row_stride + h * p.v_head_stride + c] =
          p.qkv[voff + c];
  }
}

}  // namespace

template <typename T>
void launch_sfa_select(const SfaSelectParams<T>& p, Stream s) {
  ATTN_REQUIRE(p.D <= 32 * kMaxSlots, "sfa_select: head dim must be <= %d on CUDA, got %d",
               32 * kMaxSlots, p.D);
  const int64_t warps = int64_t(p.B) * p.T * (p.n_head + p.n_kv_head);
  if (warps == 0) return;
  sfa_select_kernel<T><<<div_up(warps, kWarpsPerBlock), 32 * kWarpsPerBlock, 0,
                         reinterpret_cast<cudaStream_t>(s)>>>(p);
  CUDA_CHECK_LAUNCH();
}

template void launch_sfa_select<float>(const SfaSelectParams<float>&, Stream);
template void launch_sfa_select<bf16>(const SfaSelectParams<bf16>&, Stream);

}  // namespace attnlab
