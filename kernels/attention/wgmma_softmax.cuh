// The online-softmax steps of one key tile shared by the wgmma forward kernels (attention_wgmma.cu,
// focus_hard_wgmma.cu, focus_hard_tma.cuh for the sorted and band passes, focus_wgmma_fwd.cu for
// the row state, rescale, P V and the epilogue): the row state, the update of a tile's scores
// into exponentials, the rescale of O, O += P V, and o / l and lse written (store_o_lse: the
// dense and the Focus soft-gate forwards). Masks are the caller's (scores set to -inf before
// the update). Layout: a thread's accumulator element 4 j + c is row row0 + 8 (c >> 1), column
// 8 j + 2 tig + (c & 1) of the warpgroup's 64 x N tile (attention_wgmma.cu).
#pragma once
#include "kernels/attention/wgmma_common.cuh"

namespace attnlab::wgmma {

// Per-thread state of a warpgroup's rows row0 and row0 + 8: running max (scaled log2 domain) and
// partial sum (over this thread's columns; completed over the 4 threads of a row at the end).
struct RowState {
  float max[2], sum[2];
};

#if ATTN_WGMMA_DEVICE

// The online-softmax update of raw scores s of a BN-key tile (masked entries -inf): s becomes
// exp2(s * sl2 - new max), the row state is updated and corr (the factor for O accumulated so
// far) returned. O itself is not touched (it may still be in flight). The scale is folded into
// the exponent (exact for the max because sl2 > 0); a row with no visible key yet keeps max -inf.
// kSum = false: the row sums are left to the caller (after it changed s: the Focus gate,
// focus_wgmma_fwd_steps.cuh); where offset_on, the exponent also subtracts `offset` (the Focus
// gate's folded unscale).
template <int BN, bool kSum = true>
__device__ __forceinline__ void online_softmax(float (&s)[BN / 2], RowState& st, float (&corr)[2],
                                               float sl2, bool offset_on = false,
                                               float offset = 0.f) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      mx = fmaxf(mx, fmaxf(s[4 * j + 2 * r], s[4 * j + 2 * r + 1]));
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(st.max[r], mx * sl2);
    const float m_use = m_new == -INFINITY ? 0.f : m_new;  // a row with no visible key yet
    corr[r] = exp2_ftz(st.max[r] - m_use);
    st.max[r] = m_new;
    const float m_exp = offset_on ? m_use + offset : m_use;
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      s[4 * j + 2 * r] = exp2_ftz(fmaf(s[4 * j + 2 * r], sl2, -m_exp));
      s[4 * j + 2 * r + 1] = exp2_ftz(fmaf(s[4 * j + 2 * r + 1], sl2, -m_exp));
      if constexpr (kSum) sum += s[4 * j + 2 * r] + s[4 * j + 2 * r + 1];
    }
    if constexpr (kSum) st.sum[r] = st.sum[r] * corr[r] + sum;
  }
}

template <int D>
__device__ __forceinline__ void rescale(float (&o)[D / 2], const float (&corr)[2]) {
#pragma unroll
  for (int j = 0; j < D / 8; ++j) {
    o[4 * j + 0] *= corr[0];
    o[4 * j + 1] *= corr[0];
    o[4 * j + 2] *= corr[1];
    o[4 * j + 3] *= corr[1];
  }
}

// Issues O += P V as one wgmma group (not waited): BN / 16 k-steps of 16 keys = 2 groups of 8
// rows (SBO = 1024) starting 16 x 128 B apart; N = D spans D / 64 column blocks BN x 128 B apart
// (LBO). V is the [BN][D] tile at v_tile (MN-major: D contiguous).
template <int D, int BN>
__device__ __forceinline__ void issue_pv(float (&o)[D / 2], uint32_t (&pa)[BN / 16][4],
                                         uint32_t v_tile) {
  fence_regs(o);
  fence_regs(pa);
  wgmma_fence();
  const uint64_t b0 = smem_desc(v_tile, BN * 128, 1024);
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk) wgmma_rs<D>(o, pa[kk], desc_add(b0, kk * 16 * 128));
  wgmma_commit();
}

// Epilogue of a warpgroup (the dense and the Focus soft-gate forwards): o / l in bf16 and lse =
// (max + log2 l) ln 2 (where p.lse is not null) for this thread's rows row0 and row0 + 8 (rows < T
// only); the row sums are completed over the 4 threads of a row. Params: the kernel's parameters
// (o, its strides, lse, n_head, seq_len).
template <int D, typename Params>
__device__ __forceinline__ void store_o_lse(const float (&o)[D / 2], const RowState& st,
                                            const Params& p, int b, int h, int row0, int tig) {
  const int T = p.seq_len;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = st.sum[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int qi = row0 + 8 * r;
    if (qi >= T) continue;
    const float inv = l > 0.f ? 1.f / l : 0.f;
    bf16* out = p.o + b * p.o_batch_stride + int64_t(qi) * p.o_row_stride + h * D;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      *reinterpret_cast<__nv_bfloat162*>(out + 8 * j + 2 * tig) =
          __floats2bfloat162_rn(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv);
    }
    if (tig == 0 && p.lse != nullptr) {
      p.lse[(int64_t(b) * p.n_head + h) * T + qi] = (st.max[r] + log2f(l)) * kLn2;
    }
  }
}

#endif  // ATTN_WGMMA_DEVICE

}  // namespace attnlab::wgmma
