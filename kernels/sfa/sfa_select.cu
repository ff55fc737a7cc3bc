// CUDA kernel of kernels/sfa/sfa_select.cuh: one warp per head vector (q heads, then k heads, of
// each token), D <= 128 so a lane holds at most 4 coordinates (c = lane + 32 j). The warp
// finds the k-th largest |x| by a bitwise search over its float bits (31 warp-wide counts, each
// one ballot per slot; the ranking by comparison of all pairs it replaces took D shuffles and 4 D
// comparisons per lane), keeps what is above it and the lowest-index ties, and a ballot prefix
// gives each selected coordinate its place in ascending order. The warps of the k
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
  // |x_c| as its float bits (non-negative floats order as unsigned integers); 0 past D.
  uint32_t a[kMaxSlots];
#pragma unroll
  for (int j = 0; j < kMaxSlots; ++j) {
    const int c = lane + 32 * j;
    a[j] = c < D ? __float_as_uint(fabsf(dev::to_f(p.qkv[off + c]))) : 0u;
  }
  // thr = the k-th largest |x_c|: the largest u with #{c : bits_c >= u} >= k, bit by bit from the
  // top (31 warp counts). Then every c above thr is selected, and of those equal to thr the
  // lowest indices up to k in all: the rank rule of sfa_select.cuh.
  const int slots = (D + 31) / 32;
  auto count_at_least = [&](uint32_t u) {
    int n = 0;
#pragma unroll
    for (int j = 0; j < kMaxSlots; ++j) {  // unrolled: a[] stays in registers
      if (j < slots) n += __popc(__ballot_sync(0xffffffffu, lane + 32 * j < D && a[j] >= u));
    }
    return n;
  };
  uint32_t thr = 0;
  for (int bit = 30; bit >= 0; --bit) {
    const uint32_t cand = thr | (1u << bit);
    if (count_at_least(cand) >= p.k) thr = cand;
  }
  int ties_left = p.k - count_at_least(thr + 1);  // thr <= 0x7fffffff: no overflow
  bool sel_slot[kMaxSlots];
#pragma unroll
  for (int j = 0; j < kMaxSlots; ++j) {
    const bool valid = lane + 32 * j < D;
    const unsigned eq = __ballot_sync(0xffffffffu, valid && a[j] == thr);
    const int before_eq = __popc(eq & ((1u << lane) - 1u));
    sel_slot[j] = valid && (a[j] > thr || (a[j] == thr && before_eq < ties_left));
    ties_left -= __popc(eq);
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
    const bool sel = sel_slot[j];
    const unsigned m = __ballot_sync(0xffffffffu, sel);
    if (sel) {
      const int i = before + __popc(m & lower);
      if (oi) oi[at + i] = c;
      if (!is_q && p.k_idx8) p.k_idx8[at + i] = uint8_t(c);  // D <= 128 here
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
