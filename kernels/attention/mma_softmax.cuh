// The online-softmax steps shared by the mma.sync forward kernels (attention_fwd_mma.cu,
// focus_tiled_fwd.cu, focus_hard_fwd.cu): one warp's MT m16 tiles of query rows (its first row
// wrow of the block's Q tile) against one key tile of KT keys in shared memory. Accumulator
// layout of mma16816 (mma_common.cuh): s[mt][nt][c] is row wrow + 16 mt + g + 8 (c >> 1), key
// 8 nt + 2 tig + (c & 1) of the tile (g = lane / 4, tig = lane % 4); o[mt][dt][c] likewise with
// column 8 dt + .. of the head dim. Rows r = 0, 1 of an m16 tile are a thread's two rows (c 0-1
// and 2-3). Device code only.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/attention/mma_common.cuh"

namespace attnlab::mma {

// The start of a row block's state: o = 0, running max -inf, running sum 0.
template <int MT, int D>
__device__ __forceinline__ void init_rows(float (&o)[MT][D / 8][4], float (&row_max)[MT][2],
                                          float (&row_sum)[MT][2]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.f;
    row_max[mt][0] = row_max[mt][1] = -INFINITY;
    row_sum[mt][0] = row_sum[mt][1] = 0.f;
  }
}

// The warp's Q fragments (all D / 16 k-steps of its MT tiles) from the block's Q tile sQ, for
// the kernels that keep Q in registers across the key tiles (KQF = D / 16).
template <int MT, int KQF, int LD>
__device__ __forceinline__ void load_q_frags(uint32_t (&qf)[MT][KQF][4], const bf16* sQ, int wrow,
                                             int lane) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int kk = 0; kk < KQF; ++kk) load_a<LD>(qf[mt][kk], sQ, wrow + mt * 16, kk * 16, lane);
  }
}

// s = Q K^T (raw scores) for keys k_off .. k_off + KT - 1 of the shared tile cK: Q from the
// registers qf (kQInRegs, loaded by load_q_frags) or from sQ, one k-step at a time.
template <int MT, int KT, int D, int LD, bool kQInRegs, int KQF>
__device__ __forceinline__ void qk_scores(float (&s)[MT][KT / 8][4],
                                          const uint32_t (&qf)[MT][KQF][4], const bf16* sQ,
                                          int wrow, const bf16* cK, int k_off, int lane) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int i = 0; i < KT / 8; ++i) s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.f;
  }
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t aq[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      if constexpr (kQInRegs) {
#pragma unroll
        for (int i = 0; i < 4; ++i) aq[mt][i] = qf[mt][kk][i];
      } else {
        load_a<LD>(aq[mt], sQ, wrow + mt * 16, kk * 16, lane);
      }
    }
#pragma unroll
    for (int j = 0; j < KT / 16; ++j) {
      uint32_t bk[4];
      load_b_nk<LD>(bk, cK, k_off + j * 16, kk * 16, lane);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma16816(s[mt][2 * j], aq[mt], bk[0], bk[1]);
        mma16816(s[mt][2 * j + 1], aq[mt], bk[2], bk[3]);
      }
    }
  }
}

// Row r of an m16 tile, first half of the online softmax: the running max moves to the tile's
// (max of scale2 s over the row's 4 threads; log2 units) and s becomes exp2(scale2 s - max).
// Returns the factor exp2(old max - new max) that row_sum and o take (softmax_rescale_row), 1
// while the row has seen only -inf. scale2: the score scale in log2 units, or 1 where s holds
// scaled logits already (fmaf(x, 1, -m) is x - m exactly).
template <int KT>
__device__ __forceinline__ float softmax_exp_row(float (&s)[KT / 8][4], int r, float scale2,
                                                 float& row_max) {
  float mx = -INFINITY;
#pragma unroll
  for (int nt = 0; nt < KT / 8; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  const float m_new = fmaxf(row_max, mx * scale2);
  const float m_use = m_new == -INFINITY ? 0.f : m_new;
  const float corr = exp2_ftz(row_max - m_use);
  row_max = m_new;
#pragma unroll
  for (int nt = 0; nt < KT / 8; ++nt) {
    s[nt][2 * r] = exp2_ftz(fmaf(s[nt][2 * r], scale2, -m_use));
    s[nt][2 * r + 1] = exp2_ftz(fmaf(s[nt][2 * r + 1], scale2, -m_use));
  }
  return corr;
}

// Second half: row_sum = row_sum corr + the row's weights s (this thread's quarter), o's row
// scaled by corr.
template <int KT, int D>
__device__ __forceinline__ void softmax_rescale_row(const float (&s)[KT / 8][4], int r, float corr,
                                                    float& row_sum, float (&o)[D / 8][4]) {
  float sum = 0.f;
#pragma unroll
  for (int nt = 0; nt < KT / 8; ++nt) sum += s[nt][2 * r] + s[nt][2 * r + 1];
  row_sum = row_sum * corr + sum;
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) {
    o[dt][2 * r] *= corr;
    o[dt][2 * r + 1] *= corr;
  }
}

// Both halves for every row of the warp's tiles (the kernels with no step between them).
template <int MT, int KT, int D>
__device__ __forceinline__ void online_softmax_rows(float (&s)[MT][KT / 8][4], float scale2,
                                                    float (&row_max)[MT][2],
                                                    float (&row_sum)[MT][2],
                                                    float (&o)[MT][D / 8][4]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float corr = softmax_exp_row<KT>(s[mt], r, scale2, row_max[mt][r]);
      softmax_rescale_row<KT, D>(s[mt], r, corr, row_sum[mt][r], o[mt]);
    }
  }
}

// o += P V with P the weights s (rounded to bf16 as mma's A operand) and V's rows k_off ..
// k_off + KT - 1 of the shared tile cV.
template <int MT, int KT, int D, int LD>
__device__ __forceinline__ void pv_accumulate(float (&o)[MT][D / 8][4],
                                              const float (&s)[MT][KT / 8][4], const bf16* cV,
                                              int k_off, int lane) {
#pragma unroll
  for (int kk = 0; kk < KT / 16; ++kk) {
    uint32_t a[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) c_to_a(a[mt], s[mt][2 * kk], s[mt][2 * kk + 1]);
#pragma unroll
    for (int dt = 0; dt < D / 16; ++dt) {
      uint32_t bv[4];
      load_b_kn<LD>(bv, cV, k_off + kk * 16, dt * 16, lane);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma16816(o[mt][2 * dt], a[mt], bv[0], bv[1]);
        mma16816(o[mt][2 * dt + 1], a[mt], bv[2], bv[3]);
      }
    }
  }
}

// The epilogue: each of the warp's rows (query q_first + 16 mt + g + 8 r, those below T) as o /
// row sum in bf16 at out + q out_stride (out: query 0 of this batch row and head), and its lse
// (natural log) at lse[q] where lse is not null (a row that took no key: o 0, lse -inf).
template <int MT, int D>
__device__ __forceinline__ void write_rows(const float (&o)[MT][D / 8][4],
                                           const float (&row_max)[MT][2],
                                           const float (&row_sum)[MT][2], bf16* out,
                                           int64_t out_stride, float* lse, int q_first, int T,
                                           int lane) {
  const int g = lane >> 2, tig = lane & 3;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = row_sum[mt][r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const int qi = q_first + mt * 16 + g + 8 * r;
      if (qi >= T) continue;
      const float inv = l > 0.f ? 1.f / l : 0.f;
      bf16* row = out + int64_t(qi) * out_stride;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        *reinterpret_cast<__nv_bfloat162*>(row + dt * 8 + 2 * tig) =
            __floats2bfloat162_rn(o[mt][dt][2 * r] * inv, o[mt][dt][2 * r + 1] * inv);
      }
      if (tig == 0 && lse != nullptr) lse[qi] = (row_max[mt][r] + log2f(l)) * kLn2;
    }
  }
}

}  // namespace attnlab::mma
