// The steps that the decode kernels share (one block of kDecodeWarps warps per (split, head,
// query row); each lane holds head dims lane, lane + 32, ... of the row, D <= 128): dense
// (attention_decode.cu) and Focus's group-indexed decoding (kernels/focus/focus_decode.cu), which
// differ only in which keys a warp walks. Online softmax in the log2 domain per warp, the warps
// merged in shared memory, then either o (one split) or the split's partial (o[0..D), m, l; m in
// log2 units) that combine_row merges in split order (deterministic).
#pragma once
#include <cstdint>
#include <type_traits>

#include "kernels/common/device.cuh"

namespace attnlab::decode {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kDecodeWarps = 4;
constexpr int kMaxDimsPerLane = 4;  // D <= 128

// qr = the row's query scaled by qs (scale log2 e), acc = 0.
template <typename T>
__device__ __forceinline__ void load_query(float (&qr)[kMaxDimsPerLane],
                                           float (&acc)[kMaxDimsPerLane], const T* q, int D,
                                           float qs, int lane) {
#pragma unroll
  for (int d = 0; d < kMaxDimsPerLane; ++d) {
    const int c = lane + 32 * d;
    qr[d] = c < D ? dev::to_f(q[c]) * qs : 0.f;
    acc[d] = 0.f;
  }
}

// The warp's online-softmax step for keys j[0 .. N) (rows of the k and v caches kc, vc; j < 0:
// no key; at least one >= 0). The loads of all N key and value rows are issued before the first
// dot product's reduction, so 2 N row loads are in flight per warp instead of one dependent pair
// (decoding at batch 1 is latency-bound where the keys' rows are not bandwidth-bound).
template <int N, typename T>
__device__ __forceinline__ void attend_keys(const float (&qr)[kMaxDimsPerLane],
                                            float (&acc)[kMaxDimsPerLane], float& m, float& l,
                                            const T* kc, const T* vc, const int (&j)[N], int D,
                                            int lane) {
  float kr[N][kMaxDimsPerLane], vr[N][kMaxDimsPerLane];
#pragma unroll
  for (int n = 0; n < N; ++n) {
#pragma unroll
    for (int d = 0; d < kMaxDimsPerLane; ++d) {
      const int c = lane + 32 * d;
      const bool ok = j[n] >= 0 && c < D;
      kr[n][d] = ok ? dev::to_f(kc[int64_t(j[n]) * D + c]) : 0.f;
      vr[n][d] = ok ? dev::to_f(vc[int64_t(j[n]) * D + c]) : 0.f;
    }
  }
  float dot[N];
#pragma unroll
  for (int n = 0; n < N; ++n) {
    dot[n] = 0.f;
#pragma unroll
    for (int d = 0; d < kMaxDimsPerLane; ++d) dot[n] += qr[d] * kr[n][d];
  }
#pragma unroll
  for (int n = 0; n < N; ++n) dot[n] = dev::warp_sum(dot[n]);
  float m_new = m;
#pragma unroll
  for (int n = 0; n < N; ++n) {
    if (j[n] >= 0) m_new = fmaxf(m_new, dot[n]);
  }
  const float corr = exp2f(m - m_new);  // 0 on the first keys (m = -inf)
  l *= corr;
#pragma unroll
  for (int d = 0; d < kMaxDimsPerLane; ++d) acc[d] *= corr;
#pragma unroll
  for (int n = 0; n < N; ++n) {
    const float w = j[n] >= 0 ? exp2f(dot[n] - m_new) : 0.f;
    l += w;
#pragma unroll
    for (int d = 0; d < kMaxDimsPerLane; ++d) acc[d] = fmaf(w, vr[n][d], acc[d]);
  }
  m = m_new;
}

// The block's warps merged: one split (!split_partial) o_row()[0..D) = the normalised output
// (the row sees a key, so L > 0), else partial_row()[0..D) = the unnormalised sum, [D] = M (-inf
// for an empty chunk), [D + 1] = L. (The rows' addresses are taken where they are written.)
template <typename OutRow, typename PartialRow>
__device__ __forceinline__ void finish_row(const float (&acc)[kMaxDimsPerLane], float m, float l,
                                           int D, int warp, int lane, bool split_partial,
                                           OutRow o_row, PartialRow partial_row) {
  __shared__ float sm_m[kDecodeWarps], sm_l[kDecodeWarps], sm_o[kDecodeWarps][32 * kMaxDimsPerLane];
  if (lane == 0) {
    sm_m[warp] = m;
    sm_l[warp] = l;
  }
#pragma unroll
  for (int d = 0; d < kMaxDimsPerLane; ++d) sm_o[warp][lane + 32 * d] = acc[d];
  __syncthreads();
  float M = -INFINITY;
#pragma unroll
  for (int w = 0; w < kDecodeWarps; ++w) M = fmaxf(M, sm_m[w]);
  float wt[kDecodeWarps], L = 0.f;
#pragma unroll
  for (int w = 0; w < kDecodeWarps; ++w) {
    wt[w] = sm_m[w] == -INFINITY ? 0.f : exp2f(sm_m[w] - M);
    L += sm_l[w] * wt[w];
  }
  if (!split_partial) {
    auto* o = o_row();
    using T = std::remove_pointer_t<decltype(o)>;
    for (int c = threadIdx.x; c < D; c += blockDim.x) {
      float x = 0.f;
#pragma unroll
      for (int w = 0; w < kDecodeWarps; ++w) x += sm_o[w][c] * wt[w];
      o[c] = dev::from_f<T>(x / L);
    }
  } else {
    float* partial = partial_row();
    for (int c = threadIdx.x; c < D; c += blockDim.x) {
      float x = 0.f;
#pragma unroll
      for (int w = 0; w < kDecodeWarps; ++w) x += sm_o[w][c] * wt[w];
      partial[c] = x;
    }
    if (threadIdx.x == 0) {
      partial[D] = M;
      partial[D + 1] = L;
    }
  }
}

// o_row()[0..D) from a row's n_splits partials (part: [n_splits][D + 2]), in split order.
template <typename OutRow>
__device__ __forceinline__ void combine_row(const float* part, int n_splits, int D, OutRow o_row) {
  float M = -INFINITY;
  for (int s = 0; s < n_splits; ++s) M = fmaxf(M, part[s * (D + 2) + D]);
  float L = 0.f;
  for (int s = 0; s < n_splits; ++s) {
    const float ms = part[s * (D + 2) + D];
    if (ms != -INFINITY) L += part[s * (D + 2) + D + 1] * exp2f(ms - M);
  }
  auto* o = o_row();
  using T = std::remove_pointer_t<decltype(o)>;
  for (int c = threadIdx.x; c < D; c += blockDim.x) {
    float x = 0.f;
    for (int s = 0; s < n_splits; ++s) {
      const float ms = part[s * (D + 2) + D];
      if (ms != -INFINITY) x += part[s * (D + 2) + c] * exp2f(ms - M);
    }
    o[c] = dev::from_f<T>(x / L);
  }
}

}  // namespace attnlab::decode
