// The first step of every attention backward (attention.cuh): delta = rowsum(dO * O) per query
// row, [B, n_head, T] fp32 written (=); for the fast bf16 backward the same pass zeroes the fp32 dQ
// accumulator (B * n_head * T * D floats), which measured faster than a separate memset
// (docs/performance.md). The fp32 path uses the generic kernel without the accumulator.
#include <cuda_bf16.h>

#include "kernels/attention/attention_impl.cuh"
#include "kernels/common/device.cuh"

namespace attnlab {
namespace {

// ---- backward: delta = rowsum(dO * O) (any T; one warp per row) ------------------------------
// Also zeroes the fp32 dQ accumulator rows ([B, H, T, D], same row order) when one is given.
template <typename T>
__global__ void attn_bwd_delta(const AttentionParams<T> p, float* __restrict__ delta,
                               float* __restrict__ dq_accum) {
  const int64_t row = int64_t(blockIdx.x) * 4 + threadIdx.x / 32;  // (b, h, t)
  const int lane = threadIdx.x % 32;
  const int64_t rows = int64_t(p.B) * p.n_head * p.seq_len;
  if (row >= rows) return;
  const int t = int(row % p.seq_len), h = int((row / p.seq_len) % p.n_head),
            b = int(row / (int64_t(p.seq_len) * p.n_head));
  const int64_t off = b * p.o_batch_stride + int64_t(t) * p.o_row_stride + int64_t(h) * p.D;
  float acc = 0.f;
  for (int d = lane; d < p.D; d += 32) acc += dev::to_f(p.dout[off + d]) * dev::to_f(p.o[off + d]);
  acc = dev::warp_sum(acc);
  if (lane == 0) delta[row] = acc;
  if (dq_accum != nullptr) {  // D is 64 or 128 here: a multiple of 4 floats per row
    float4* z = reinterpret_cast<float4*>(dq_accum + row * p.D);
    for (int i = lane; i < p.D / 4; i += 32) z[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

// The same for bf16 with 16-byte accesses (o and dout 16-byte aligned). Thread i takes 16-byte
// chunk i of the rows of o and dout in (b, t) order, all heads of a row after each other, so that
// consecutive threads read consecutive memory when the heads of a row are packed (a head's D / 8
// lanes sit in one warp); it zeroes floats 8 i .. 8 i + 7 of dq_accum (flat: its layout does not
// matter here). Mapping a block to one head's rows instead (256-byte pieces 4 KiB apart at
// D = 128, H = 16) measured about twice the bandwidth floor on the H200 (docs/performance.md).
// Needs B T H D / 8 < 2^31 (32-bit indices; the caller falls back to attn_bwd_delta otherwise).
template <int D>
__global__ void attn_bwd_delta_bf16(const AttentionParams<bf16> p, float* __restrict__ delta,
                                    float* __restrict__ dq_accum, uint32_t total) {
  constexpr int kLanes = D / 8;  // 8 or 16
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  const uint32_t chunks = uint32_t(p.n_head) * kLanes;  // per (b, t) row
  const bool in = i < total;
  float acc = 0.f;
  int64_t row = 0;  // of delta: (b, h, t)
  if (in) {
    const uint32_t bt = i / chunks, c = i - bt * chunks;
    const uint32_t b = bt / uint32_t(p.seq_len), t = bt - b * uint32_t(p.seq_len), h = c / kLanes;
    const int64_t off = b * p.o_batch_stride + int64_t(t) * p.o_row_stride + c * 8;
    const uint4 u = *reinterpret_cast<const uint4*>(p.dout + off);
    const uint4 w = *reinterpret_cast<const uint4*>(p.o + off);
    const auto* du = reinterpret_cast<const __nv_bfloat162*>(&u);
    const auto* ow = reinterpret_cast<const __nv_bfloat162*>(&w);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 a = __bfloat1622float2(du[k]), x = __bfloat1622float2(ow[k]);
      acc += a.x * x.x + a.y * x.y;
    }
    row = (int64_t(b) * p.n_head + h) * p.seq_len + t;
    if (dq_accum != nullptr) {
      float4* z = reinterpret_cast<float4*>(dq_accum + 8 * int64_t(i));
      z[0] = z[1] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
#pragma unroll
  for (int m = kLanes / 2; m > 0; m >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, m);
  if (in && threadIdx.x % kLanes == 0) delta[row] = acc;
}

}  // namespace

namespace attention_impl {

void bwd_delta_bf16(const AttentionParams<bf16>& p, float* delta, float* dq_accum,
                    cudaStream_t st) {
  const int64_t rows = int64_t(p.B) * p.n_head * p.seq_len;
  const int64_t chunks = rows * (p.D / 8);  // 16-byte chunks of o (and dout)
  if (aligned16(p.o) && aligned16(p.dout) && chunks < (int64_t(1) << 31)) {
    const auto total = uint32_t(chunks);
    const int grid = int(div_up(chunks, 256));
    if (p.D == 64) {
      attn_bwd_delta_bf16<64><<<grid, 256, 0, st>>>(p, delta, dq_accum, total);
    } else {
      attn_bwd_delta_bf16<128><<<grid, 256, 0, st>>>(p, delta, dq_accum, total);
    }
  } else {
    attn_bwd_delta<bf16><<<div_up(rows, 4), 128, 0, st>>>(p, delta, dq_accum);
  }
  CUDA_CHECK_LAUNCH();
}

void bwd_delta_f32(const AttentionParams<float>& p, float* delta, cudaStream_t st) {
  const int64_t rows = int64_t(p.B) * p.n_head * p.seq_len;
  attn_bwd_delta<float><<<div_up(rows, 4), 128, 0, st>>>(p, delta, nullptr);
  CUDA_CHECK_LAUNCH();
}

}  // namespace attention_impl
}  // namespace attnlab
