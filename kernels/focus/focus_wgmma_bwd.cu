// The wgmma Focus attention backward, additive gate (focus_wgmma.cuh): dq, dk, dv written (=),
// dg (if wanted) written (=). The dense wgmma backward's loop with two block barriers per query
// tile (kernels/attention/attention_wgmma_bwd.cu, kLagDq = false, whose comments describe the
// layout and the synchronization) for both head dims, with the gate: P^T = exp(s - lse) times
// (a + eps) on distant pairs, the affinity per 16-query chunk on fp16 mma.sync (the forward's fp16
// operands, converted from the hi and lo tiles in registers: focus_wgmma_gate.cuh) on tiles where
// the warpgroup's keys have a distant query. dS^T = P^T (dP^T - delta) with the
// gated P is the gradient of the logit, so the rest is the dense arithmetic. Beside K and V the
// split g rows of the block's keys (once) and, double-buffered with Q and dO, of the tile's
// queries (cp.async, landed by the barrier at the top of each tile).
// kFusedDg (wherever dg is wanted; without it the same loop without dg): dg in the same loop. dP
// is waited for before the gate; per 16-query chunk on the distant pairs dA = P (dP - delta) from
// the ungated P, then the gate (gate_chunk_da), then the dg products (pack_da, dg_key_products,
// dg_query_products, focus_wgmma_gate.cuh: bf16 dA times g hi + lo on mma.sync): dg_key in
// registers over the loop, at KP 8 (wgmma_dgq, focus_wgmma_layout.h) the chunk's bf16 dA^T
// stored into a [keys][queries] tile and, after the tile's second barrier, dg_query = dA G_k by one
// wgmma per warpgroup beside dQ's, reduced into dg from its accumulator; wider KP dg_query in a
// fp32 shared tile, added to dg by fp32 atomics after the tile's second barrier (overlapping the dQ
// wgmma). Where that tile does not fit beside two (D 64, KP 32) the queries' g tile is
// single-buffered: the next one is loaded after the second barrier, when no warp reads it any more.
// kHard (the hard gate's straight-through backward): no affinity; the group sets of the warp's two
// key rows in registers and of the tile's queries beside lse and delta (cp.async, double-buffered),
// a distant pair's P kept iff the sets meet (gate_chunk_hard[_da]); dA and the dg products as
// above. (A second dg pass over the query tiles, recomputing S and dP, was the earlier
// design: 3.6-6.1x dense forward+backward against this loop's 2.0-2.9x, H200, 2026-12-02; 1.7-2.2x
// with the fp16 affinity.)
#include <cuda.h>
#include <cuda_bf16.h>

#include "kernels/attention/attention.cuh"
#include "kernels/attention/dq_layout.h"
#include "kernels/attention/visibility.h"
#include "kernels/attention/wgmma_bwd_steps.cuh"
#include "kernels/attention/wgmma_common.cuh"
#include "kernels/common/device.cuh"
#include "kernels/common/stream_scratch.h"
#include "kernels/focus/focus_dense_params.h"
#include "kernels/focus/focus_wgmma.cuh"
#include "kernels/focus/focus_wgmma_det.h"
#include "kernels/focus/focus_wgmma_gate.cuh"
#include "kernels/focus/focus_wgmma_layout.h"

namespace attnlab {
namespace {

using namespace wgmma;

constexpr int kThreads = 256;      // 2 warpgroups
constexpr int kBlockN = kBwdKeys;  // keys per block (64 per warpgroup; wgmma_bwd_steps.cuh)
template <int D>
constexpr int kQTile = D == 64 ? 128 : 64;

constexpr uint32_t g_tile_bytes(int rows, int KP) { return uint32_t(rows) * (2 * KP + 8) * 2; }
constexpr uint32_t gq_tile_bytes(int rows, int KP) {
  return uint32_t(rows) * focus_wgmma::gq_ld(KP) * 2;
}
constexpr size_t kMaxSmem = 232448;  // 227 KiB of dynamic shared memory per block (sm_90)
// Per-query statistics of a buffer: lse and delta, and kHard's group sets.
template <bool kHard>
constexpr int kStats = kHard ? 3 : 2;
// K, V, 2 x Q, 2 x dO, dS^T, 2 x the statistics, the fp32 dQ tile, 2 mbarriers, the keys' g tile,
// gq_bufs x the queries' g tiles (kFusedDg: at KP 8 the dA^T tile and the keys' g planes, else
// the fp32 dg_query tile), alignment: 192-226 KiB.
template <int D, int KP, bool kFusedDg, bool kHard, int gq_bufs>
constexpr size_t bwd_smem_bytes_with() {
  constexpr int kQ = kQTile<D>;
  // kFusedDg: at KP 8 the dA^T tile and the keys' g planes (focus_wgmma::wgmma_dgq), else the
  // fp32 dg_query tile.
  constexpr size_t dgq =
      !kFusedDg ? 0
      : focus_wgmma::wgmma_dgq(KP)
          ? size_t(tile_bytes(kBlockN, kQ)) + 2 * focus_wgmma::gk_plane_bytes(kBlockN)
          : size_t(kQ) * focus_wgmma::dgq_ld(KP) * sizeof(float);
  return 2 * size_t(tile_bytes(kBlockN, D)) + 4 * size_t(tile_bytes(kQ, D)) +
         size_t(tile_bytes(kBlockN, kQ)) + 2 * kStats<kHard> * kQ * sizeof(float) +
         size_t(kQ) * D * sizeof(float) + 16 + g_tile_bytes(kBlockN, KP) +
         gq_bufs * size_t(gq_tile_bytes(kQ, KP)) + dgq + 1008;
}
// Buffers of the queries' g tile: 2, or 1 where kFusedDg's dg_query tile leaves no room for 2.
template <int D, int KP, bool kFusedDg, bool kHard>
constexpr int gq_buffers() {
  return bwd_smem_bytes_with<D, KP, kFusedDg, kHard, 2>() <= kMaxSmem ? 2 : 1;
}
template <int D, int KP, bool kFusedDg, bool kHard>
constexpr size_t bwd_smem_bytes() {
  return bwd_smem_bytes_with<D, KP, kFusedDg, kHard, gq_buffers<D, KP, kFusedDg, kHard>()>();
}
static_assert(gq_buffers<64, 32, false, true>() == 2 && gq_buffers<128, 32, false, true>() == 2);
static_assert(bwd_smem_bytes<64, 32, true, true>() <= kMaxSmem &&
              bwd_smem_bytes<128, 32, true, true>() <= kMaxSmem);
// KP 8's dA^T tile keeps the queries' g tile double-buffered.
static_assert(gq_buffers<64, 8, true, true>() == 2 && gq_buffers<128, 8, true, true>() == 2 &&
              bwd_smem_bytes<64, 8, true, true>() <= kMaxSmem);

#if ATTN_WGMMA_DEVICE
template <int D>
__device__ __forceinline__ void store_dk_dv(const float (&dk)[D / 2], const float (&dv)[D / 2],
                                            const FocusAttentionParams<bf16>& p, int b, int hk,
                                            int key0, int tig) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key0 + 8 * r;
    if (key >= p.seq_len) continue;
    const int64_t off = b * p.kv_batch_stride + int64_t(key) * p.kv_row_stride + hk * D;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      *reinterpret_cast<__nv_bfloat162*>(p.dk + off + 8 * j + 2 * tig) =
          __floats2bfloat162_rn(dk[4 * j + 2 * r] * p.scale, dk[4 * j + 2 * r + 1] * p.scale);
      *reinterpret_cast<__nv_bfloat162*>(p.dv + off + 8 * j + 2 * tig) =
          __floats2bfloat162_rn(dv[4 * j + 2 * r], dv[4 * j + 2 * r + 1]);
    }
  }
}
#endif  // ATTN_WGMMA_DEVICE

template <int D, int KP, bool kFusedDg, bool kHard>
__global__ void __launch_bounds__(kThreads, 1)
    focus_wgmma_bwd_kernel(const FocusAttentionParams<bf16> p, const float* __restrict__ delta,
                           float* __restrict__ dq_accum, const bf16* __restrict__ gs,
                           const unsigned* __restrict__ sets, const focus_det::Scratch det,
                           const __grid_constant__ CUtensorMap tm_q,
                           const __grid_constant__ CUtensorMap tm_do) {
#if ATTN_WGMMA_DEVICE
  constexpr int kQ = kQTile<D>;
  constexpr uint32_t kKVBytes = tile_bytes(kBlockN, D), kQBytes = tile_bytes(kQ, D);
  constexpr uint32_t kSBytes = tile_bytes(kBlockN, kQ), kDqBytes = kQ * D * 4;
  constexpr uint32_t kGqBytes = gq_tile_bytes(kQ, KP);
  constexpr int kGqLd = focus_wgmma::gq_ld(KP);
  constexpr bool kGqF16 = focus_wgmma::gq_has_f16(KP);
  constexpr int kGqBufs = gq_buffers<D, KP, kFusedDg, kHard>();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t sK = (raw + 1023u) & ~1023u;
  const uint32_t sV = sK + kKVBytes;
  const uint32_t sQ = sV + kKVBytes;       // [2][kQ] rows
  const uint32_t sdO = sQ + 2 * kQBytes;   // [2][kQ] rows
  const uint32_t sdS = sdO + 2 * kQBytes;  // [kBlockN] rows of kQ
  // kFusedDg at KP 8 (wgmma_dgq): the dA^T tile, [kBlockN] rows of kQ (1024-aligned as the tiles).
  constexpr uint32_t kDaBytes = kFusedDg && focus_wgmma::wgmma_dgq(KP) ? kSBytes : 0;
  const uint32_t sDa = sdS + kSBytes;
  const uint32_t sStats = sDa + kDaBytes;  // lse [2][kQ], delta [2][kQ] (kHard: sets [2][kQ])
  const uint32_t sdQ = sStats + 2 * kStats<kHard> * kQ * 4;  // fp32 [kQ][D]
  const uint32_t sFull = sdQ + kDqBytes;                     // mbarriers [2]
  const uint32_t sGk = sFull + 16;                           // g of the block's keys
  const uint32_t sGq = sGk + g_tile_bytes(kBlockN, KP);      // [kGqBufs] g of the tile's queries
  // kFusedDg: at KP 8 the keys' g planes (load_g_planes), else fp32 [kQ][dgq_ld(KP)].
  const uint32_t sDgq = sGq + kGqBufs * kGqBytes;
  auto generic = [&](uint32_t addr) {
    return reinterpret_cast<const bf16*>(smem_raw + (addr - raw));
  };
  float* dgq_tile = reinterpret_cast<float*>(smem_raw + (sDgq - raw));
  constexpr int kDgqLd = focus_wgmma::dgq_ld(KP);

  const int T = p.seq_len;
  const AttentionMask mask{};
  // The deterministic form (focus_wgmma_det.h): query tiles descending, each tile's dq and
  // dg_query added in key-tile order (turns), dg into per-head slices; the block from a ticket
  // (passed through the first word of the dQ tile, written much later).
  const bool ordered = det.turns != nullptr;
  focus_det::BlockCoord bc{int(blockIdx.x), int(blockIdx.y), int(blockIdx.z)};
  if (ordered) {
    unsigned* slot = reinterpret_cast<unsigned*>(smem_raw + (sdQ - raw));
    if (threadIdx.x == 0) *slot = atomicAdd(det.ticket, 1u);
    __syncthreads();
    bc = focus_det::block_of_ticket(*slot, gridDim.x, gridDim.y);
  }
  // Grid (kv heads, key tiles, batch): longest first, as the dense backward's.
  const int hk = bc.hk, b = bc.b, group = p.n_head / p.n_kv_head;
  const int wg = threadIdx.x / 128, warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, tig = lane & 3;
  const int k0 = bc.n * kBlockN;
  const int key0 = k0 + 64 * wg + 16 * warp + g;
  const bf16* gk = p.k + b * p.kv_batch_stride + hk * D;
  const bf16* gv = p.v + b * p.kv_batch_stride + hk * D;
  const bf16* gsb = gs + int64_t(b) * T * focus_wgmma::gs_width(KP);
  const int w = p.gate.local_window;

  const TileRange tiles = mask.query_tiles(k0, kBlockN, kQ, T);
  const int per_head = max(0, tiles.end - tiles.begin);
  const int iters = group * per_head;
  using Tile = focus_det::BwdTile;
  auto next_tile = [&](Tile t) { return focus_det::next_tile(t, tiles, ordered); };
  const int n_qtiles = (T + kQ - 1) / kQ;
  auto turn_counter = [&](Tile t) {
    return det.turns + focus_det::turn_index(b, t, p.n_head, n_qtiles);
  };
  // Where dg_query of head h (warpgroup wg's slice) and the block's dg_key are added.
  auto dgq_rows = [&](int h, int wg_slice) {
    return ordered ? det.dgq + ((int64_t(b) * p.n_head + h) * det.dgq_slices + wg_slice) * T * p.K
                   : p.dg + int64_t(b) * T * p.K;
  };
  auto dgk_rows = [&]() {
    return ordered ? det.dgk + (int64_t(b) * p.n_kv_head + hk) * T * p.K
                   : p.dg + int64_t(b) * T * p.K;
  };
  auto issue_loads = [&](Tile t, int buf) {
    const int q0 = t.m * kQ;
    if (threadIdx.x == 0) {
      const uint32_t bar = sFull + 8 * buf;
      mbar_arrive_expect_tx(bar, 2 * kQBytes);
#pragma unroll
      for (int c = 0; c < D / 64; ++c) {
        tma_load_3d(sQ + buf * kQBytes + c * kQ * 128, &tm_q, bar, t.h * D + 64 * c, q0, b);
        tma_load_3d(sdO + buf * kQBytes + c * kQ * 128, &tm_do, bar, t.h * D + 64 * c, q0, b);
      }
    }
    const int64_t row = (int64_t(b) * p.n_head + t.h) * T + q0;
    if (threadIdx.x < kQ) {
      const int i = threadIdx.x;
      const bool ok = q0 + i < T;
      cp_async4(sStats + (buf * kQ + i) * 4, p.lse + (ok ? row + i : 0), ok);
      cp_async4(sStats + (2 * kQ + buf * kQ + i) * 4, delta + (ok ? row + i : 0), ok);
      if constexpr (kHard) {  // 0 past T: no group (those queries see no key anyway)
        const int64_t t = int64_t(b) * T + q0 + i;
        cp_async4(sStats + (4 * kQ + buf * kQ + i) * 4, sets + (ok ? t : 0), ok);
      }
    }
    if constexpr (kGqBufs == 2) {
      focus_wgmma::load_g_tile<kQ, KP, kThreads, kGqLd, kGqF16>(sGq + buf * kGqBytes, gsb, q0, T);
    }
  };
  auto dq_rows = [&](Tile t, uint32_t* bytes) {
    const int q0 = t.m * kQ;
    *bytes = uint32_t(min(kQ, T - q0)) * D * 4;
    return dq_accum + ((int64_t(b) * p.n_head + t.h) * T + q0) * D;
  };

  if (threadIdx.x == 0) {
    mbar_init(sFull, 1);
    mbar_init(sFull + 8, 1);
    fence_mbar_init();
  }
  if constexpr (kFusedDg && !focus_wgmma::wgmma_dgq(KP)) {  // (KP 8: each tile writes its dA^T)
    for (int i = threadIdx.x; i < kQ * kDgqLd; i += kThreads) dgq_tile[i] = 0.f;
  }
  __syncthreads();
  load_tile<kBlockN, D, kThreads>(sK, gk, p.kv_row_stride, k0, T);
  load_tile<kBlockN, D, kThreads>(sV, gv, p.kv_row_stride, k0, T);
  focus_wgmma::load_g_tile<kBlockN, KP, kThreads>(sGk, gsb, k0, T);
  if constexpr (kFusedDg && focus_wgmma::wgmma_dgq(KP)) {
    focus_wgmma::load_g_planes<kBlockN, kThreads>(sDgq, gsb, k0, T);
  }
  Tile cur = focus_det::first_tile(hk * group, tiles, ordered), prev = cur;
  if (iters > 0) issue_loads(cur, 0);
  if constexpr (kGqBufs == 1) {
    if (iters > 0)
      focus_wgmma::load_g_tile<kQ, KP, kThreads, kGqLd, kGqF16>(sGq, gsb, cur.m * kQ, T);
  }
  cp_async_commit();

  float dk[D / 2], dv[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.f;
  // kFusedDg: dg of the warp's 16 keys (C fragments; KP = 8: hi and lo products, summed at the end)
  constexpr int kDgkTiles = kFusedDg ? focus_wgmma::dgk_tiles(KP) : 1;
  float dgk[kDgkTiles][4];
#pragma unroll
  for (int nt = 0; nt < kDgkTiles; ++nt) dgk[nt][0] = dgk[nt][1] = dgk[nt][2] = dgk[nt][3] = 0.f;
  const int wrow = 64 * wg + 16 * warp;  // the warp's first key in the block
  unsigned mk[2] = {0u, 0u};             // kHard: the group sets of keys key0, key0 + 8
  if constexpr (kHard) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (key0 + 8 * r < T) mk[r] = sets[int64_t(b) * T + key0 + 8 * r];
    }
  }
  const float sl2 = p.scale * kLog2e;
  const uint32_t k_rows = sK + wg * 64 * 128, v_rows = sV + wg * 64 * 128;

  for (int it = 0; it < iters; ++it, prev = cur, cur = next_tile(cur)) {
    const int buf = it & 1;
    const int q0 = cur.m * kQ;
    const uint32_t cQ = sQ + buf * kQBytes, cdO = sdO + buf * kQBytes;
    const uint32_t c_lse = sStats + buf * kQ * 4, c_delta = sStats + (2 + buf) * kQ * 4;
    tiles_ready();
    mbar_wait(sFull + 8 * buf, uint32_t(it >> 1) & 1u);
    float s[kQ / 2], dp[kQ / 2];
    issue_abt<D, kBlockN, kQ>(s, k_rows, cQ);
    issue_abt<D, kBlockN, kQ>(dp, v_rows, cdO);
    if (threadIdx.x == 0 && it > 0) {
      uint32_t bytes;
      float* dst = dq_rows(prev, &bytes);
      bulk_reduce_add_f32(dst, sdQ, bytes);
    }
    if (it + 1 < iters) {
      issue_loads(next_tile(cur), buf ^ 1);
      cp_async_commit();
    }
    wgmma_wait<1>();
    fence_regs(s);

    const bool need_mask = ATTN_MASK_NEEDS_MASK(mask, q0, kQ, k0, kBlockN, T);
    focus_wgmma::scores_to_p<kQ>(s, c_lse, need_mask, key0, q0, tig, sl2, T);
    if constexpr (kFusedDg) {
      wgmma_wait<0>();
      fence_regs(dp);
    }
    // The gate: P^T times (a + eps) on the distant pairs of this warpgroup's keys (kFusedDg: and
    // dA, the dg products).
    if (focus_wgmma::tile_has_distant_k_rows(k0 + 64 * wg, q0 + kQ - 1, w)) {
      uint32_t af[focus_wgmma::affinity_ksteps(KP)][4];
      if constexpr (!kHard) focus_wgmma::load_g_a<KP>(af, generic(sGk), 64 * wg + 16 * warp, lane);
      const bf16* cGq = generic(sGq + (kGqBufs == 2 ? buf * kGqBytes : 0));
      const uint32_t c_sets = sStats + (4 + buf) * kQ * 4;
#pragma unroll
      for (int chunk = 0; chunk < kQ / 16; ++chunk) {
        float a[2][4];
        unsigned mq[2][2];  // kHard: the group sets of the chunk's 4 query columns
        if constexpr (kHard) {
#pragma unroll
          for (int n = 0; n < 2; ++n) {
            const float2 m = lds_f2(c_sets + 4 * (16 * chunk + 8 * n + 2 * tig));
            mq[n][0] = __float_as_uint(m.x);
            mq[n][1] = __float_as_uint(m.y);
          }
        } else {
          focus_wgmma::affinity_chunk<KP, kGqLd, kGqF16>(a, af, cGq, 16 * chunk, lane);
        }
        if constexpr (kFusedDg) {
          float dl[2][2], da[2][4];
#pragma unroll
          for (int n = 0; n < 2; ++n) {
            const float2 d = lds_f2(c_delta + 4 * (16 * chunk + 8 * n + 2 * tig));
            dl[n][0] = d.x;
            dl[n][1] = d.y;
          }
          if constexpr (kHard) {
            focus_wgmma::gate_chunk_hard_da(s, da, dp, mk, mq, dl, chunk, key0, q0 + 2 * tig, w);
          } else {
            focus_wgmma::gate_chunk_da(s, da, dp, a, dl, chunk, key0, q0 + 2 * tig, w, p.gate.eps);
          }
          uint32_t daf[4];
          focus_wgmma::pack_da(daf, da);
          focus_wgmma::dg_key_products<KP, kGqLd>(dgk, daf, cGq, chunk, lane);
          if constexpr (focus_wgmma::wgmma_dgq(KP)) {  // dA^T into its tile (issue_dgq)
            store_ds_chunk<kQ>(sDa, daf, wrow + g, tig, chunk);
          } else {
            focus_wgmma::dg_query_products<KP>(dgq_tile, daf, generic(sGk), chunk, wrow, lane);
          }
        } else if constexpr (kHard) {
          focus_wgmma::gate_chunk_hard(s, mk, mq, chunk, key0, q0 + 2 * tig, w);
        } else {
          focus_wgmma::gate_chunk(s, a, chunk, key0, q0 + 2 * tig, w, p.gate.eps);
        }
      }
    } else if (kFusedDg && focus_wgmma::wgmma_dgq(KP) && kQ == 128 &&
               focus_wgmma::tile_has_distant_k_rows(k0, q0 + kQ - 1, w)) {
      // Warpgroup 0 ran the gate and 1 did not: warpgroup 0's dg_query wgmma reads all 128 keys'
      // rows of the dA^T tile (issue_dgq), so this warpgroup's are zero.
      const uint32_t zero[4] = {0u, 0u, 0u, 0u};
#pragma unroll
      for (int chunk = 0; chunk < kQ / 16; ++chunk)
        store_ds_chunk<kQ>(sDa, zero, wrow + g, tig, chunk);
    }
    uint32_t pa[kQ / 16][4], dsa[kQ / 16][4];
    acc_to_a<kQ>(pa, s);
    if constexpr (!kFusedDg) {
      wgmma_wait<0>();
      fence_regs(dp);
    }
    dp_to_ds<kQ>(dp, s, c_delta, tig);
    acc_to_a<kQ>(dsa, dp);

    store_ds<kQ>(sdS, dsa, 64 * wg + 16 * warp + g, tig);
    fence_proxy_async();
    issue_dv_dk<D, kQ>(dv, dk, pa, dsa, cdO, cQ);

    if (threadIdx.x == 0) {
      if (ordered) {  // prev's additions complete: its turn passes on; then cur's turn
        if (it > 0) {
          bulk_wait_all();
          focus_det::turn_pass(turn_counter(prev));
        }
        focus_det::turn_wait(turn_counter(cur), focus_det::turn_of(bc.n));
      } else {
        bulk_wait_read();
      }
    }
    __syncthreads();
    if constexpr (kGqBufs == 1) {  // no warp reads the queries' g tile any more
      if (it + 1 < iters) {
        focus_wgmma::load_g_tile<kQ, KP, kThreads, kGqLd, kGqF16>(sGq, gsb, next_tile(cur).m * kQ,
                                                                  T);
        cp_async_commit();
      }
    }
    {
      float dq[32];
      issue_dq<kQ>(dq, sdS, sK, wg);
      if constexpr (kFusedDg && focus_wgmma::wgmma_dgq(KP)) {
        // dg_query = dA G_k (issue_dgq; beside dQ's wgmma, waited with it below). Issued on every
        // tile (a wgmma under a condition makes ptxas serialise); reduced into dg where the
        // warpgroup's dA^T rows were written this tile (kQ 128: warpgroup 0's gate ran, and
        // warpgroup 1's rows were gated or zeroed; kQ 64: the warpgroup's own keys).
        float dgq[8];
        focus_wgmma::issue_dgq<kQ>(dgq, sDa, sDgq, wg);
        wgmma_wait<0>();
        fence_regs(dgq);
        const int rows_from = kQ == 128 ? k0 : k0 + 64 * wg;
        if (focus_wgmma::tile_has_distant_k_rows(rows_from, q0 + kQ - 1, w)) {
          focus_wgmma::reduce_dgq(dgq, dgq_rows(cur.h, kQ == 128 ? 0 : wg), p.K,
                                  q0 + (kQ == 128 ? 64 * wg : 0), T, warp, lane);
        }
      } else if constexpr (kFusedDg) {  // every warp's dg_query of the tile is in the shared tile
        if (focus_wgmma::tile_has_distant_k_rows(k0, q0 + kQ - 1, w)) {
          float* dgb = dgq_rows(cur.h, 0);
          for (int i = threadIdx.x; i < kQ * KP; i += kThreads) {
            const int q = i / KP, c = i - q * KP;
            const float v = dgq_tile[q * kDgqLd + c];
            if (c < p.K && q0 + q < T && v != 0.f) atomicAdd(dgb + int64_t(q0 + q) * p.K + c, v);
            dgq_tile[q * kDgqLd + c] = 0.f;
          }
        }
      }
      wgmma_wait<0>();
      fence_regs(dq);
      store_dq_tile<D, kQ>(sdQ, dq, wg, warp, g, tig);
    }
    fence_regs(dv);
    fence_regs(dk);
    fence_regs(pa);
    fence_regs(dsa);
    fence_proxy_async();
  }
  cp_async_wait_all();
  __syncthreads();
  if (threadIdx.x == 0 && iters > 0) {
    uint32_t bytes;
    float* dst = dq_rows(prev, &bytes);
    bulk_reduce_add_f32(dst, sdQ, bytes);
    bulk_wait_all();
    if (ordered) focus_det::turn_pass(turn_counter(prev));
  }
  store_dk_dv<D>(dk, dv, p, b, hk, key0, tig);
  if constexpr (kFusedDg) {
    float* dgb = dgk_rows();
    if constexpr (KP == 8) {
#pragma unroll
      for (int v = 0; v < 4; ++v) dgk[0][v] += dgk[1][v];
    }
#pragma unroll
    for (int nt = 0; nt < KP / 8; ++nt) {
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const focus_wgmma::Coord cc = focus_wgmma::mma_c_coord(v, lane);
        const int key = k0 + wrow + cc.row, col = 8 * nt + cc.col;
        if (key < T && col < p.K && dgk[nt][v] != 0.f)
          atomicAdd(dgb + int64_t(key) * p.K + col, dgk[nt][v]);
      }
    }
  }
#else
  (void)p, (void)delta, (void)dq_accum, (void)gs, (void)sets, (void)det, (void)tm_q, (void)tm_do;
#endif
}

// dq = scale * dq_accum -> bf16 (dq_accum in the kernel's dq_swizzle layout).
template <int D>
__global__ void dq_convert_kernel(const FocusAttentionParams<bf16> p,
                                  const float* __restrict__ dq_accum) {
  constexpr int kQuads = D / 4;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= p.seq_len * kQuads) return;
  const int t = i / kQuads, d = (i % kQuads) * 4, h = blockIdx.y, b = blockIdx.z;
  const int64_t row = (int64_t(b) * p.n_head + h) * p.seq_len + t;
  const int src = dq_swizzle(t, d);
  const float4 v = *reinterpret_cast<const float4*>(dq_accum + row * D + src);
  bf16* out = p.dq + b * p.q_batch_stride + int64_t(t) * p.q_row_stride + h * D + d;
  reinterpret_cast<__nv_bfloat162*>(out)[0] = __floats2bfloat162_rn(v.x * p.scale, v.y * p.scale);
  reinterpret_cast<__nv_bfloat162*>(out)[1] = __floats2bfloat162_rn(v.z * p.scale, v.w * p.scale);
}

template <int D, int KP, bool kFusedDg, bool kHard>
void launch_bwd(const FocusAttentionParams<bf16>& p, const float* delta, float* dq_accum,
                const bf16* gs, const unsigned* sets, const focus_det::Scratch& det,
                cudaStream_t st) {
  constexpr size_t smem = bwd_smem_bytes<D, KP, kFusedDg, kHard>();
  auto* kernel = focus_wgmma_bwd_kernel<D, KP, kFusedDg, kHard>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const dim3 grid = causal_grid(p.n_kv_head, p.seq_len, kBlockN, p.B);
  const CUtensorMap tm_q = tile_map(p.q, p.n_head * D, p.seq_len, p.B, p.q_row_stride,
                                    p.q_batch_stride, kQTile<D>),
                    tm_do = tile_map(p.dout, p.n_head * D, p.seq_len, p.B, p.o_row_stride,
                                     p.o_batch_stride, kQTile<D>);
  kernel<<<grid, kThreads, smem, st>>>(p, delta, dq_accum, gs, sets, det, tm_q, tm_do);
  CUDA_CHECK_LAUNCH();
  const dim3 convert_grid(div_up(int64_t(p.seq_len) * (D / 4), 256), p.n_head, p.B);
  dq_convert_kernel<D><<<convert_grid, 256, 0, st>>>(p, dq_accum);
  CUDA_CHECK_LAUNCH();
}

template <bool kFusedDg, bool kHard>
void launch_bwd_for(const FocusAttentionParams<bf16>& p, const float* delta, float* dq_accum,
                    const bf16* gs, const unsigned* sets, const focus_det::Scratch& det, int KP,
                    cudaStream_t st) {
  if (p.D == 64) {
    KP == 8    ? launch_bwd<64, 8, kFusedDg, kHard>(p, delta, dq_accum, gs, sets, det, st)
    : KP == 16 ? launch_bwd<64, 16, kFusedDg, kHard>(p, delta, dq_accum, gs, sets, det, st)
               : launch_bwd<64, 32, kFusedDg, kHard>(p, delta, dq_accum, gs, sets, det, st);
  } else {
    KP == 8    ? launch_bwd<128, 8, kFusedDg, kHard>(p, delta, dq_accum, gs, sets, det, st)
    : KP == 16 ? launch_bwd<128, 16, kFusedDg, kHard>(p, delta, dq_accum, gs, sets, det, st)
               : launch_bwd<128, 32, kFusedDg, kHard>(p, delta, dq_accum, gs, sets, det, st);
  }
}

}  // namespace

void launch_focus_wgmma_bwd(const FocusAttentionParams<bf16>& p, Stream s) {
  ATTN_REQUIRE(focus_wgmma_bwd_supported(p),
               "focus wgmma attention backward: needs a build with sm_90a code, a compute "
               "capability 9.0 device, the additive gate or the hard gate with groups, D 64 or 128 "
               "(got %d), packed qkv, pos 0 (got %d), 1 .. %d groups (got %d)",
               p.D, p.pos, focus_wgmma::kMaxGroups, p.K);
  ATTN_ASSERT(aligned16(p.dout) && p.o_row_stride % 8 == 0 && p.o_batch_stride % 8 == 0);
  const int64_t rows = int64_t(p.B) * p.n_head * p.seq_len;
  if (rows == 0) return;
  const auto st = reinterpret_cast<cudaStream_t>(s);
  const bool hard = p.gate.kind == FocusGateKind::hard;
  const int KP = focus_wgmma::padded_groups(p.K);
  const size_t gs_bytes = size_t(p.B) * p.seq_len * focus_wgmma::gs_width(KP) * sizeof(bf16);
  const size_t dq_bytes = (size_t(rows) * (p.D + 1) * sizeof(float) + 15) / 16 * 16;
  const size_t sets_bytes = (hard ? size_t(p.B) * p.seq_len * sizeof(unsigned) + 15 : 0) / 16 * 16;
  // The deterministic form (focus_wgmma_det.h; K <= 8 where dg is wanted, else the fast form):
  // the turn counters, the ticket and dg's slices, zeroed.
  const bool ordered = p.deterministic && focus_det::available(p.K, p.dg != nullptr);
  const int kQ = p.D == 64 ? kQTile<64> : kQTile<128>;
  const int slices = focus_det::dgq_slices(kQ);
  const size_t per_slice = size_t(p.seq_len) * p.K;
  const size_t n_turns = size_t(p.B) * p.n_head * div_up(p.seq_len, kQ);
  const size_t turn_bytes = ordered ? ((n_turns + 1) * 4 + 15) / 16 * 16 : 0;
  const size_t part_bytes =
      ordered && p.dg
          ? size_t(p.B) * (size_t(p.n_head) * slices + p.n_kv_head) * per_slice * sizeof(float)
          : 0;
  StreamScratch scratch(dq_bytes + gs_bytes + sets_bytes + turn_bytes + part_bytes, s);
  float* dq_accum = scratch.as<float>();  // [B, H, T, D] (dq_swizzle rows), 16-byte aligned
  float* delta = dq_accum + rows * p.D;   // [B, H, T]
  unsigned char* raw = scratch.as<unsigned char>();
  bf16* gs = reinterpret_cast<bf16*>(raw + dq_bytes);  // [B, T, 3 KP]
  unsigned* sets = hard ? reinterpret_cast<unsigned*>(raw + dq_bytes + gs_bytes) : nullptr;
  focus_det::Scratch det;
  if (ordered) {
    unsigned char* d = raw + dq_bytes + gs_bytes + sets_bytes;
    det.turns = reinterpret_cast<unsigned*>(d);
    det.ticket = det.turns + n_turns;
    if (p.dg) {
      det.dgq = reinterpret_cast<float*>(d + turn_bytes);
      det.dgk = det.dgq + size_t(p.B) * p.n_head * slices * per_slice;
      det.dgq_slices = slices;
    }
    CUDA_CHECK(cudaMemsetAsync(d, 0, turn_bytes + part_bytes, st));
  }
  launch_attention_bwd_delta(focus_dense_params(p), delta, dq_accum, s);
  // (split_g zeroes dg for the fast form's additions; the deterministic one writes it at the end)
  focus_wgmma_split_g(p, gs, KP, s, sets, ordered ? nullptr : p.dg);
  // dg in the main loop (kFusedDg)
  if (p.dg) {
    hard ? launch_bwd_for<true, true>(p, delta, dq_accum, gs, sets, det, KP, st)
         : launch_bwd_for<true, false>(p, delta, dq_accum, gs, sets, det, KP, st);
  } else {
    hard ? launch_bwd_for<false, true>(p, delta, dq_accum, gs, sets, det, KP, st)
         : launch_bwd_for<false, false>(p, delta, dq_accum, gs, sets, det, KP, st);
  }
  if (det.dgq)
    focus_det::launch_focus_dg_sum(p.dg, det, p.B, p.seq_len, p.K, p.n_head, p.n_kv_head, s);
}

}  // namespace attnlab
