// RoPE forward and backward (one kernel; the backward negates the angle). One thread per
// (token, i < D/2): it computes cos and sin of its angle once (sincosf, the accurate function; no
// fast intrinsics) and rotates the pair (i, i + D/2) of every q and k head of the token. Adjacent
// threads take adjacent i, so a warp's loads of one head are contiguous. inv_freq comes from the
// host (rope_inv_freq, the CPU reference's values) by value, staged in shared memory.
#include "kernels/common/device.cuh"
#include "kernels/position/rope.cuh"

namespace attnlab {
namespace {

constexpr int kThreads = 256;

struct InvFreqTable {
  float v[kRopeMaxHeadDim / 2];
};

// sign = +1: forward rotation; -1: inverse (sin(-a) = -sin(a)).
template <typename T>
__global__ void rope_kernel(T* __restrict__ qkv, int64_t tokens, int seq_len, int64_t width,
                            int heads, int D, int pos, float sign, const InvFreqTable inv_freq) {
  __shared__ float inv_s[kRopeMaxHeadDim / 2];
  const int half = D / 2;
  for (int j = threadIdx.x; j < half; j += blockDim.x) inv_s[j] = inv_freq.v[j];
  __syncthreads();
  const int64_t items = tokens * half;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < items; k += stride) {
    const int64_t token = k / half;
    const int i = int(k % half);
    const float angle = float(int64_t(pos) + token % seq_len) * inv_s[i];
    float s, c;
    sincosf(angle, &s, &c);
    s *= sign;
    T* lo = qkv + token * width + i;
    for (int h = 0; h < heads; ++h, lo += D) {
      const float x0 = dev::to_f(lo[0]), x1 = dev::to_f(lo[half]);
      lo[0] = dev::from_f<T>(x0 * c - x1 * s);
      lo[half] = dev::from_f<T>(x1 * c + x0 * s);
    }
  }
}

template <typename T>
void launch_rope(const RopeParams<T>& p, float sign, Stream s) {
  if (p.tokens <= 0 || p.heads <= 0) return;
  ATTN_REQUIRE(p.head_dim > 0 && p.head_dim % 2 == 0 && p.head_dim <= kRopeMaxHeadDim,
               "rope: head dim must be even and at most %d, got %d", kRopeMaxHeadDim, p.head_dim);
  const int half = p.head_dim / 2;
  InvFreqTable table{};
  for (int i = 0; i < half; ++i) table.v[i] = rope_inv_freq(i, p.head_dim, p.theta, p.scaling);
  const int blocks = int(std::min<int64_t>(div_up(p.tokens * half, kThreads), 65536));
  rope_kernel<T><<<blocks, kThreads, 0, reinterpret_cast<cudaStream_t>(s)>>>(
      p.qkv, p.tokens, p.seq_len, p.width, p.heads, p.head_dim, p.pos, sign, table);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

template <typename T>
void launch_rope_fwd(const RopeParams<T>& p, Stream s) {
  launch_rope<T>(p, 1.f, s);
}
template <typename T>
void launch_rope_bwd(const RopeParams<T>& p, Stream s) {
  launch_rope<T>(p, -1.f, s);
}

template void launch_rope_fwd<float>(const RopeParams<float>&, Stream);
template void launch_rope_fwd<bf16>(const RopeParams<bf16>&, Stream);
template void launch_rope_bwd<float>(const RopeParams<float>&, Stream);
template void launch_rope_bwd<bf16>(const RopeParams<bf16>&, Stream);

}  // namespace attnlab
