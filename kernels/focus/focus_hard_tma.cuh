// The block of the hard-routed forward's TMA passes (focus_hard_sorted.cu: the group pass of top_k
// 1 on the group-sorted rows; focus_hard_band.cu: the local band in token order), both the dense
// wgmma forward's simple schedule (attention_wgmma.cu, D = 64): 2 warpgroups x 64 query rows per
// block, kHardTmaKeys-key K / V tiles double-buffered in shared memory and loaded by TMA (thread 0,
// completion on the stage's mbarrier), Q by cp.async, S = Q K^T and O += P V on wgmma, the online
// softmax of wgmma_softmax.cuh. What differs between the passes is which tiles a warpgroup walks
// and which elements it keeps: the callbacks of hard_tma_mainloop.
// Device code for the sm_90a compilation only (CMake's attnlab_wgmma object library).
#pragma once
#include "core/cuda_check.h"
#include "kernels/attention/wgmma_common.cuh"
#include "kernels/attention/wgmma_softmax.cuh"
#include "kernels/common/device.cuh"
#include "kernels/focus/focus_hard.cuh"

namespace attnlab::focus_hard {

constexpr int kHardTmaWarpgroups = 2;
constexpr int kHardTmaThreads = 128 * kHardTmaWarpgroups;
constexpr int kHardTmaRows = kFocusHardWgmmaRows;  // queries per block
constexpr int kHardTmaKeys = kFocusHardTmaKeys;    // keys per tile, as the dense kernel's
static_assert(kHardTmaRows == 64 * kHardTmaWarpgroups, "one m64 wgmma per warpgroup");
// Two blocks per SM at D = 64 (81 KiB of shared memory each, <= 128 registers), one at D = 128.
template <int D>
constexpr int kHardTmaMinBlocks = D == 64 ? 2 : 1;

// Dynamic shared memory: Q, 2 K and 2 V tiles, 1 KiB of alignment, 2 mbarriers.
template <int D>
constexpr size_t hard_tma_smem_bytes() {
  return size_t(wgmma::tile_bytes(kHardTmaRows, D)) +
         4 * size_t(wgmma::tile_bytes(kHardTmaKeys, D)) + 1024 + 2 * 8;
}

#if ATTN_WGMMA_DEVICE

// The shared-memory operands of a block (addresses in the shared window).
struct HardTmaSmem {
  uint32_t q, k, v, full;
  __device__ explicit HardTmaSmem(uint32_t base, int D) {
    q = (base + 1023u) & ~1023u;
    k = q + wgmma::tile_bytes(kHardTmaRows, D);
    v = k + 2 * wgmma::tile_bytes(kHardTmaKeys, D);
    full = v + 2 * wgmma::tile_bytes(kHardTmaKeys, D);
  }
};

// The tile loop of one block over key tiles [n_begin, n_end) of batch row b, kv head hk (the
// caller initialised the mbarriers, fenced them, issued and committed the Q copies and passed a
// barrier). The caller's per-key data of a tile comes in two steps by every thread:
// `meta_issue(nb, stage)` starts its loads (cp.async into the caller's staging) and
// `meta_finish(nb, stage)` completes them (the thread's own copies waited for) into shared
// stage `stage`, visible after the next barrier; tile nb + 1's are issued before tile nb is
// computed and finished after it, so their latency hides behind tile nb's MMAs. Per tile, for
// this warpgroup, unless `visible(k0)` is false: S, `mask(s, k0, stage)` where `need_mask(k0)`,
// the online softmax, O += P V. o and st hold the warpgroup's rows (row0 and row0 + 8 of this
// thread) at the end.
template <int D, typename MetaIssue, typename MetaFinish, typename Visible, typename NeedMask,
          typename Mask>
__device__ __forceinline__ void hard_tma_mainloop(float (&o)[D / 2], wgmma::RowState& st,
                                                  const HardTmaSmem& sm, const CUtensorMap* tm_k,
                                                  const CUtensorMap* tm_v, int b, int hk,
                                                  int n_begin, int n_end, float sl2,
                                                  MetaIssue meta_issue, MetaFinish meta_finish,
                                                  Visible visible, NeedMask need_mask, Mask mask) {
  using namespace wgmma;
  constexpr int BN = kHardTmaKeys;
  constexpr uint32_t kKVBytes = tile_bytes(BN, D);
  const int wg = threadIdx.x / 128;
  auto load_kv = [&](int nb, int stage) {
    const uint32_t bar = sm.full + 8 * stage;
    mbar_arrive_expect_tx(bar, 2 * kKVBytes);
#pragma unroll
    for (int c = 0; c < D / 64; ++c) {
      tma_load_3d(sm.k + stage * kKVBytes + c * BN * 128, tm_k, bar, hk * D + 64 * c, nb * BN, b);
      tma_load_3d(sm.v + stage * kKVBytes + c * BN * 128, tm_v, bar, hk * D + 64 * c, nb * BN, b);
    }
  };
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  fence_regs(o);
  st = {{-INFINITY, -INFINITY}, {0.f, 0.f}};
  const uint32_t q_rows = sm.q + wg * 64 * 128;
  float s[BN / 2], corr[2];
  uint32_t pa[BN / 16][4];
  if (n_begin < n_end) {
    if (threadIdx.x == 0) load_kv(n_begin, 0);
    meta_issue(n_begin, 0);
    meta_finish(n_begin, 0);
  }
  for (int nb = n_begin; nb < n_end; ++nb) {
    const int buf = (nb - n_begin) & 1;
    tiles_ready();  // Q (first tile), this tile's meta; the other stage free
    if (nb + 1 < n_end) {
      if (threadIdx.x == 0) load_kv(nb + 1, buf ^ 1);
      meta_issue(nb + 1, buf ^ 1);
    }
    mbar_wait(sm.full + 8 * buf, uint32_t((nb - n_begin) >> 1) & 1u);
    const int k0 = nb * BN;
    if (visible(k0)) {  // uniform per warpgroup
      issue_abt<D, kHardTmaRows, BN>(s, q_rows, sm.k + buf * kKVBytes);
      wgmma_wait<0>();
      fence_regs(s);
      if (need_mask(k0)) mask(s, k0, buf);
      online_softmax<BN>(s, st, corr, sl2);
      rescale<D>(o, corr);
      acc_to_a<BN>(pa, s);
      issue_pv<D, BN>(o, pa, sm.v + buf * kKVBytes);
      wgmma_wait<0>();
      fence_regs(o);
      fence_regs(pa);
    }
    if (nb + 1 < n_end) meta_finish(nb + 1, buf ^ 1);
  }
}

#endif  // ATTN_WGMMA_DEVICE

// Host: launches one of the passes' kernels (kernel(p, tm_k, tm_v), kHardTmaThreads threads, the
// dynamic shared memory of hard_tma_smem_bytes) with the largest shared-memory carveout (two 81
// KiB blocks per SM at D = 64).
// One instantiation per kernel (the attributes are set once per kernel and device).
template <int D, auto* kernel>
void launch_hard_tma(dim3 grid, const FocusHardAttnParams& p, const CUtensorMap& tm_k,
                     const CUtensorMap& tm_v, cudaStream_t st) {
  constexpr size_t smem = hard_tma_smem_bytes<D>();
  static std::atomic<uint64_t> attributes_set{0};
  set_max_shared_once(attributes_set, reinterpret_cast<const void*>(kernel), smem);
  kernel<<<grid, kHardTmaThreads, smem, st>>>(p, tm_k, tm_v);
  CUDA_CHECK_LAUNCH();
}

}  // namespace attnlab::focus_hard
