// The steps of one key tile of the wgmma Focus soft forwards (focus_wgmma_fwd.cu: the simple
// schedule, and the hard-masked forward on it; focus_wgmma_fwd_pp.cu: the producer and ping-pong
// schedule): S = Q K^T with the affinity A = G_q G_k^T issued as one wgmma group, and the masks,
// the online-softmax update and the gate of the tile's scores. Device code only (sm_90a).
#pragma once
#include <cuda_bf16.h>

#include "kernels/attention/visibility.h"
#include "kernels/attention/wgmma_common.cuh"
#include "kernels/attention/wgmma_softmax.cuh"
#include "kernels/focus/focus_attention.cuh"
#include "kernels/focus/focus_wgmma_gate.cuh"
#include "kernels/focus/focus_wgmma_layout.h"

namespace attnlab::focus_wgmma {

using namespace wgmma;

constexpr int kFwdBlockM = 128;  // queries per block (2 consumer warpgroups of 64)

#if ATTN_WGMMA_DEVICE
// Issues S = Q K^T and the affinity a = G_q G_k^T of the tile's first AN keys (affinity_ksteps(KP)
// fp16 k-steps, scaled by kAffinityScale^2) as one wgmma group (not waited). q_rows / gq_rows: the
// warpgroup's 64 rows of the Q and query g tiles; k_tile / gk_tile: the key tiles. The affinity is
// issued on every tile, also where no pair is distant (it is unused there): a wgmma under a
// condition made ptxas inject warpgroup arrivals (C7519), and it costs one or two k-steps against
// S's D / 16. AN < BN (the ping-pong forward at D 128, for registers): the other keys' affinity
// by issue_affinity later.
// The affinity's k-steps alone (no fence, no commit): AN keys from row gk_rows of the keys' g
// tile against the warpgroup's query rows gq_rows.
template <int KP, int AN>
__device__ __forceinline__ void affinity_steps(float (&a)[AN / 2], uint32_t gq_rows,
                                               uint32_t gk_rows) {
  const uint64_t ga = smem_desc(gq_rows, 16, 1024), gb = smem_desc(gk_rows, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < affinity_ksteps(KP); ++kk) {
    wgmma_ss<AN, 0, 0, true>(a, desc_add(ga, kk * 32u), desc_add(gb, kk * 32u), kk > 0);
  }
}

template <int D, int KP, int BN, int AN = BN>
__device__ __forceinline__ void issue_s_affinity(float (&s)[BN / 2], float (&a)[AN / 2],
                                                 uint32_t q_rows, uint32_t k_tile, uint32_t gq_rows,
                                                 uint32_t gk_tile) {
  fence_regs(s);
  fence_regs(a);
  wgmma_fence();
  issue_abt_steps<D, kFwdBlockM, BN>(s, q_rows, k_tile);
  affinity_steps<KP, AN>(a, gq_rows, gk_tile);
  wgmma_commit();
}

// The affinity of AN keys alone (gk_rows: their first row in the keys' g tile), one wgmma group.
template <int KP, int AN>
__device__ __forceinline__ void issue_affinity(float (&a)[AN / 2], uint32_t gq_rows,
                                               uint32_t gk_rows) {
  fence_regs(a);
  wgmma_fence();
  affinity_steps<KP, AN>(a, gq_rows, gk_rows);
  wgmma_commit();
}

// The causal mask of the scores s of keys k0 .. k0 + BN - 1 (-inf past a row's diagonal and T),
// where the tile needs it.
template <int BN>
__device__ __forceinline__ void mask_keys(float (&s)[BN / 2], int k0, int wq0, int row0, int tig,
                                          int T) {
  const AttentionMask mask{};  // causal
  if (!ATTN_MASK_NEEDS_KEY_MASK(mask, wq0, 64, k0, BN, T)) return;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int qi = row0 + 8 * r, base = k0 + 2 * tig;
    int lo, hi;
    mask.key_bounds(qi, T, base, &lo, &hi);
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        if (8 * j + e > hi || 8 * j + e < lo) s[4 * j + 2 * r + e] = -INFINITY;
      }
    }
  }
}

// The online-softmax update of masked scores s (online_softmax without the sums, which are
// add_row_sums's, after the gate): s becomes exp2(s scale log2 e - new max), times
// 2^-kAffinityLog2Scale where folded_tile (the folded gate's unscale); the row maxima updated
// and corr returned.
template <int BN>
__device__ __forceinline__ void exp_update(float (&s)[BN / 2], RowState& st, float (&corr)[2],
                                           float sl2, bool folded_tile) {
  online_softmax<BN, false>(s, st, corr, sl2, folded_tile, kAffinityLog2Scale);
}

// The additive gate of N exponentials s (columns col0 .., col0 = the keys' first column + 2 tig)
// with their affinity a (the same accumulator layout): times (a + eps) on the distant pairs where
// the tile is `gated` (all of them where all_distant; folded_tile: eps in a and the unscale in
// the exponent, one multiply).
template <int N>
__device__ __forceinline__ void gate_cols(float (&s)[N / 2], const float (&a)[N / 2], int row0,
                                          int col0, const FocusAttentionParams<bf16>& p, bool gated,
                                          bool all_distant, bool fold, bool folded_tile) {
  if (folded_tile)
    gate_acc_all_folded(s, a);
  else if (all_distant)
    gate_acc_all(s, a, p.gate.eps);
  else if (gated)  // (with fold, a holds eps already)
    gate_acc(s, a, row0, col0, p.gate.local_window, fold ? 0.f : p.gate.eps);
}

template <int BN>
__device__ __forceinline__ void add_row_sums(const float (&s)[BN / 2], RowState& st,
                                             const float (&corr)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) sum += s[4 * j + 2 * r] + s[4 * j + 2 * r + 1];
    st.sum[r] = st.sum[r] * corr[r] + sum;
  }
}

// Masks (where needed), the online-softmax update and the gate of scores s of keys k0 ..: s
// becomes exp2(s scale log2 e - new max), times (a + eps) on distant pairs when `gated` (a: the
// affinity accumulator of issue_s_affinity; all_distant: every pair of the tile is, so without the
// per-element test; kHard: the hard mask instead, before the max); the row state is updated and
// corr (the factor for O so far) returned.
template <int BN, bool kHard>
__device__ __forceinline__ void softmax_gate_tile(float (&s)[BN / 2], const float (&a)[BN / 2],
                                                  RowState& st, float (&corr)[2],
                                                  const FocusAttentionParams<bf16>& p, int k0,
                                                  int wq0, int row0, int lane, float sl2,
                                                  bool gated, bool all_distant, bool fold) {
  const int tig = lane & 3;
  mask_keys<BN>(s, k0, wq0, row0, tig, p.seq_len);
  if constexpr (kHard) {  // the hard mask, before the row max (as the causal mask)
    if (all_distant)
      mask_acc_hard_all(s, a);
    else if (gated)
      mask_acc_hard(s, a, row0, k0 + 2 * tig, p.gate.local_window);
  }
  // eps folded into a (fold, focus_wgmma_layout.h): on an all-distant tile the exponent also
  // takes the affinity's unscale, and the gate is one multiply.
  const bool folded_tile = !kHard && fold && all_distant;
  exp_update<BN>(s, st, corr, sl2, folded_tile);
  if constexpr (!kHard) {
    gate_cols<BN>(s, a, row0, k0 + 2 * tig, p, gated, all_distant, fold, folded_tile);
  }
  add_row_sums<BN>(s, st, corr);
}

#endif  // ATTN_WGMMA_DEVICE

}  // namespace attnlab::focus_wgmma
