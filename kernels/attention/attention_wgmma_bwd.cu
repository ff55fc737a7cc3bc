// Dense attention backward for Hopper on warpgroup MMA (wgmma), bf16, head dim 64 or 128: dq, dk
// and dv written (=). Contract: attention_wgmma.cuh (launch_attention_bwd_wgmma);
// launch_attention_bwd<bf16> runs it after its delta kernel (delta = rowsum(dO * O), which also
// zeroes the fp32 dQ accumulator); the launcher runs the kernel, then the dQ conversion to bf16.
//
// Design (FlashAttention-3's backward without warp specialization):
//   A block owns kBlockN = 128 keys of one (batch, kv head) and runs 2 warpgroups (256 threads);
//   warpgroup w owns keys 64w..64w+63 (the M = 64 of one wgmma). K and V stay in shared memory;
//   the block loops over every query head of the GQA group and every tile of kQ queries that
//   sees its keys (kQ = 128 at D = 64, 64 at D = 128), with Q, dO, lse and delta double-buffered
//   and loaded during the previous tile (Q and dO by TMA, lse and delta by cp.async). dK and dV
//   accumulate in registers over the whole loop, so they are exact sums over the group's query
//   heads (no atomics). Per tile:
//     S^T  = K Q^T     wgmma m64nkQk16, A = K, B = Q, both K-major from shared memory;
//     dP^T = V dO^T    the same with V and dO (issued right after S^T, runs during the exp);
//     P^T  = exp2(S^T scale log2 e - lse log2 e), masked; dS^T = P^T (dP^T - delta);
//     dS^T to shared memory (bf16, [keys][queries], swizzled like every operand);
//     dV  += P^T dO    wgmma m64nDk16, A = P^T from registers (the accumulator layout of S^T is
//     dK  += dS^T Q    the register-A layout), B = dO / Q MN-major ([queries][D], D contiguous);
//     dQ   = dS K      once dS^T of both warpgroups is in shared memory (after a barrier at D =
//                      64; at D = 128 (kLagDq) in the next tile behind its S^T and dP^T):
//                      each warpgroup computes a 64 x 64 block of the kQ x D tile (D = 64: its 64
//                      queries; D = 128: its 64 columns), A = dS MN-major (the transposed dS^T
//                      tile), B = K MN-major, K = the block's 128 keys; staged in shared memory and
//                      added to the fp32 accumulator by one bulk reduction per tile.
//   Keys as the M dimension keep P^T and dS^T in registers for dV and dK and make the per-query
//   lse and delta column values (read from shared memory, broadcast).
//   Query tiles and element masks (only on tiles that touch the diagonal, the window edge or the
//   end of T) come from AttentionMask (visibility.h).
//   dQ is not bitwise reproducible (the order of the fp32 additions); dK and dV are.
// Shared-memory layout and synchronization follow the forward (attention_wgmma.cu). dS^T is
// written with st.shared (generic proxy): fence.proxy.async, then the barrier, before the dQ
// wgmma reads it. Every buffer that the next tile's cp.async or dS^T stores overwrite was last read
// by wgmmas that every thread waited for (wait_group 0) before the barrier at the top of the tile.
//
// Two versions of the loop, one per head dim, each measured the faster there on the H200
// (bench_attention, docs/performance_attention_history.md v6-v8): D = 64 synchronizes the two
// warpgroups with two block barriers per query tile and computes the tile's dQ after the second; D
// = 128 (kLagDq) issues each tile's dQ product in the next tile, behind its first products (one
// block barrier per tile). The two warpgroups run in lockstep, so the exp and dS work is not
// overlapped with the other warpgroup's MMAs as in FlashAttention-3's warp-specialized pipeline: a
// producer warpgroup does not fit (the register file is split per scheduler, so a 9th warp costs a
// whole warpgroup's registers; these kernels need 242-255 per thread). The versions tried and
// removed (mbarrier-only synchronization, dQ by atomics, cp.async loads, one warpgroup per block, a
// one-barrier loop that ptxas serialized) and their timings are in
// docs/performance_attention_history.md.
#include <cuda.h>  // CUtensorMap (types only: the encoder is reached through the runtime)
#include <cudaTypedefs.h>
#include <cuda_bf16.h>

#include "kernels/attention/attention_wgmma.cuh"
#include "kernels/attention/dq_layout.h"
#include "kernels/attention/wgmma_bwd_steps.cuh"
#include "kernels/attention/wgmma_common.cuh"
#include "kernels/common/device.cuh"

namespace attnlab {
namespace {

using namespace wgmma;

constexpr int kThreads = 256;      // 2 warpgroups
constexpr int kBlockN = kBwdKeys;  // keys per block (64 per warpgroup; wgmma_bwd_steps.cuh)
// Queries per tile: the N of S^T and dP^T. D = 64 affords 128 (S^T and dP^T take 64 registers
// each beside 64 of dK, dV); D = 128 holds 128 registers of dK, dV and takes 64.
template <int D>
constexpr int kQTile = D == 64 ? 128 : 64;

// Dynamic shared memory: K, V (kBlockN rows), 2 x Q, 2 x dO (kQ rows), dS^T (kBlockN x kQ), 2 x
// lse and delta (kQ floats), the fp32 dQ tile (kQ x D), 2 mbarriers (TMA loads), plus up to 1008
// bytes to align the base (16-byte aligned) to 1024: 162 KiB at D = 64; kLagDq (D = 128) doubles
// the dS^T and dQ tiles: 226 KiB, the whole 227 KiB an H200 block may opt into. One block per SM.
template <int D, bool kLagDq>
constexpr size_t bwd_smem_bytes() {
  constexpr int kQ = kQTile<D>, kCopies = kLagDq ? 2 : 1;
  return 2 * size_t(tile_bytes(kBlockN, D)) + 4 * size_t(tile_bytes(kQ, D)) +
         kCopies * size_t(tile_bytes(kBlockN, kQ)) + 4 * kQ * sizeof(float) +
         kCopies * size_t(kQ) * D * sizeof(float) + 16 + 1008;
}
static_assert(bwd_smem_bytes<64, false>() <= 232448 && bwd_smem_bytes<128, true>() <= 232448);

// The dQ rows of the shared tile and of dq_accum are permuted by dq_swizzle (dq_layout.h).

#if ATTN_WGMMA_DEVICE
// The steps of one query tile, shared by the kernels below, beside those of wgmma_bwd_steps.cuh
// (one warpgroup's part: keys key0 and key0 + 8 of this thread, its 64 keys of the block starting
// at row kr0 = 64 wg + 16 warp + g of the block's tiles). Accumulator element 4 j + 2 r + e: key
// key0 + 8 r, query q0 + 8 j + 2 tig + e.

// S^T -> P^T = exp2(S^T scale log2 e - lse log2 e) in place, zero where the key does not see the
// query. The masks (only on tiles that need them: a uniform branch, so the common tile runs the
// exp loop alone) set the score to -inf first: key key0 + 8 r sees the queries q0 + 2 tig + col
// with lo <= col <= hi, col = 8 j + e a compile-time offset, so one comparison per element and
// bound.
template <int kQ>
__device__ __forceinline__ void scores_to_p(float (&s)[kQ / 2], uint32_t c_lse, bool need_mask,
                                            int key0, int q0, int tig, float sl2,
                                            const AttentionParams<bf16>& p) {
  if (need_mask) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int key = key0 + 8 * r, base = q0 + 2 * tig;
      int lo, hi;  // queries base + lo .. base + hi see the key (none past T)
      p.mask.query_bounds(key, p.seq_len, base, &lo, &hi);
#pragma unroll
      for (int j = 0; j < kQ / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (8 * j + e > hi || 8 * j + e < lo) s[4 * j + 2 * r + e] = -INFINITY;
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kQ / 8; ++j) {
    const float2 l = lds_f2(c_lse + 4 * (8 * j + 2 * tig));
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int i = 4 * j + 2 * r + e;
        s[i] = exp2_ftz(fmaf(s[i], sl2, -(e ? l.y : l.x) * kLog2e));  // exp2(-inf) = 0
      }
    }
  }
}

// Epilogue of a warpgroup: dk = scale * dS^T Q summed (the scale of S = scale Q K^T) and dv as
// summed, bf16, for this thread's keys key0 and key0 + 8 (keys < T only).
template <int D>
__device__ __forceinline__ void store_dk_dv(const float (&dk)[D / 2], const float (&dv)[D / 2],
                                            const AttentionParams<bf16>& p, int b, int hk, int key0,
                                            int tig) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key0 + 8 * r;
    if (key >= p.seq_len) continue;
    const int64_t off = b * p.qkv_batch_stride + int64_t(key) * p.qkv_row_stride + hk * D;
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

// dQ: the fragments go to a shared-memory fp32 tile (kQ x D, rows swizzled like dq_accum's layout,
// see dq_swizzle) and one thread adds the whole tile to dq_accum with one bulk reduction
// (cp.reduce.async.bulk .add.f32), issued after the next barrier; it runs in the background, and
// the issuing thread waits for its reads of the tile before the tile is rewritten. Q and dO are
// loaded by TMA (one thread issues D / 32 box copies per tile from the tensor maps tm_q and tm_do,
// see tile_map; they complete on the buffer's mbarrier); K, V, lse and delta by cp.async.
// kLagDq = false (D = 64): two block barriers per tile, dQ = dS K after the second.
// kLagDq (D = 128): dQ of tile i is issued in tile i + 1, behind its
//   S^T and dP^T, so that the tensor cores run it during the exp and dS work; dS^T and the dQ tile
//   are double-buffered. One block barrier per tile instead of two: the one at the top also says
//   that the previous tile's dS^T is stored (every warpgroup reads both halves for dQ). Every
//   wgmma group is waited for inside its iteration (nothing in flight across the loop's back edge,
//   which made ptxas serialize the wgmmas of the removed one-barrier version, C7514). Per tile:
//   S^T, dP^T, dQ of the previous tile; exp; wait dP^T; dS^T stored; dV, dK; wait dQ, store it;
//   wait.
template <int D, bool kLagDq>
__global__ void __launch_bounds__(kThreads, 1)
    attn_bwd_wgmma_kernel(const AttentionParams<bf16> p, const float* __restrict__ delta,
                          float* __restrict__ dq_accum, const __grid_constant__ CUtensorMap tm_q,
                          const __grid_constant__ CUtensorMap tm_do) {
#if ATTN_WGMMA_DEVICE
  constexpr int kQ = kQTile<D>;
  constexpr int kCopies = kLagDq ? 2 : 1;  // of the dS^T and dQ tiles
  constexpr uint32_t kKVBytes = tile_bytes(kBlockN, D), kQBytes = tile_bytes(kQ, D);
  constexpr uint32_t kSBytes = tile_bytes(kBlockN, kQ), kDqBytes = kQ * D * 4;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t sK = (raw + 1023u) & ~1023u;       // [kBlockN] rows
  const uint32_t sV = sK + kKVBytes;                // [kBlockN] rows
  const uint32_t sQ = sV + kKVBytes;                // [2][kQ] rows
  const uint32_t sdO = sQ + 2 * kQBytes;            // [2][kQ] rows
  const uint32_t sdS = sdO + 2 * kQBytes;           // [kCopies][kBlockN] rows of kQ
  const uint32_t sStats = sdS + kCopies * kSBytes;  // lse [2][kQ], delta [2][kQ]
  const uint32_t sdQ = sStats + 4 * kQ * 4;         // fp32 [kCopies][kQ][D]
  const uint32_t sFull = sdQ + kCopies * kDqBytes;  // mbarriers [2]: Q, dO of a stage loaded

  const int T = p.seq_len;
  // Grid (kv heads, key tiles, batch): the heads vary fastest, so every head's first key tile
  // (the most query tiles, causal) is handed out before any head's second (longest first).
  const int hk = blockIdx.x, b = blockIdx.z, group = p.n_head / p.n_kv_head;
  const int wg = threadIdx.x / 128, warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, tig = lane & 3;
  const int k0 = blockIdx.y * kBlockN;
  const int key0 = k0 + 64 * wg + 16 * warp + g;  // this thread's keys: key0 and key0 + 8
  const bf16* gk = p.k + b * p.qkv_batch_stride + hk * D;
  const bf16* gv = p.v + b * p.qkv_batch_stride + hk * D;
  const int64_t ld = p.qkv_row_stride;

  // Query tiles that see keys k0 .. k0 + kBlockN - 1, for each query head of the group.
  const TileRange tiles = p.mask.query_tiles(k0, kBlockN, kQ, T);
  const int m_begin = tiles.begin, m_end = tiles.end;
  const int per_head = max(0, m_end - m_begin);
  const int iters = group * per_head;

  // Step `it` of the loop is query head h = hk group + it / per_head, query tile m = m_begin +
  // it % per_head; the cursors below advance (h, m) without integer divisions.
  struct Tile {
    int h, m;
  };
  auto next_tile = [&](Tile t) { return ++t.m == m_end ? Tile{t.h + 1, m_begin} : t; };
  auto issue_loads = [&](Tile t, int buf) {
    const int q0 = t.m * kQ;
    if (threadIdx.x == 0) {
      const uint32_t bar = sFull + 8 * buf;
      mbar_arrive_expect_tx(bar, 2 * kQBytes);
#pragma unroll
      for (int c = 0; c < D / 64; ++c) {  // column blocks of 64 (kQ x 128 bytes apart)
        tma_load_3d(sQ + buf * kQBytes + c * kQ * 128, &tm_q, bar, t.h * D + 64 * c, q0, b);
        tma_load_3d(sdO + buf * kQBytes + c * kQ * 128, &tm_do, bar, t.h * D + 64 * c, q0, b);
      }
    }
    const int64_t row = (int64_t(b) * p.n_head + t.h) * T + q0;
    if (threadIdx.x < kQ) {
      const int i = threadIdx.x;
      const bool ok = q0 + i < T;  // rows past T read as 0 (masked)
      cp_async4(sStats + (buf * kQ + i) * 4, p.lse + (ok ? row + i : 0), ok);
      cp_async4(sStats + (2 * kQ + buf * kQ + i) * 4, delta + (ok ? row + i : 0), ok);
    }
  };
  // The dq_accum rows of a tile (contiguous: kQ rows of one (b, h), clipped at T).
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
  __syncthreads();
  load_tile<kBlockN, D, kThreads>(sK, gk, ld, k0, T);
  load_tile<kBlockN, D, kThreads>(sV, gv, ld, k0, T);
  Tile cur{hk * group, m_begin}, prev = cur;
  if (iters > 0) issue_loads(cur, 0);
  cp_async_commit();

  float dk[D / 2], dv[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.f;
  const float sl2 = p.scale * kLog2e;
  const uint32_t k_rows = sK + wg * 64 * 128, v_rows = sV + wg * 64 * 128;

  if constexpr (kLagDq) {
    // Tile `it` stores the dQ of tile it - 1 into dQ buffer (it - 1) & 1; thread 0 adds it to
    // dq_accum after the barrier of tile it + 1 and waits for that reduction's reads of the buffer
    // before the barrier of tile it + 2, after which the buffer is rewritten.
    Tile prev2 = cur;  // tile it - 2
    for (int it = 0; it < iters; ++it, prev2 = prev, prev = cur, cur = next_tile(cur)) {
      const int buf = it & 1;
      const int q0 = cur.m * kQ;
      const uint32_t cQ = sQ + buf * kQBytes, cdO = sdO + buf * kQBytes;
      const uint32_t c_lse = sStats + buf * kQ * 4, c_delta = sStats + (2 + buf) * kQ * 4;
      if (threadIdx.x == 0) bulk_wait_read();
      // lse and delta (cp.async) landed; the barrier also says that dS^T of tile it - 1 and the dQ
      // tile of it - 2 are stored and fenced (at the end of the previous iteration). Only K and V
      // (cp.async, generic proxy) need a proxy fence before the wgmmas read them: tile 0.
      cp_async_wait_all();
      if (it == 0) fence_proxy_async();
      __syncthreads();
      mbar_wait(sFull + 8 * buf, uint32_t(it >> 1) & 1u);  // use it / 2 of buf
      float s[kQ / 2], dp[kQ / 2], dq[32];
      issue_abt<D, kBlockN, kQ>(s, k_rows, cQ);
      issue_abt<D, kBlockN, kQ>(dp, v_rows, cdO);
      if (it > 0) {
        issue_dq<kQ>(dq, sdS + (buf ^ 1) * kSBytes, sK, wg);
      } else {
        wgmma_commit();  // an empty group: the same wait counts in every iteration
      }
      if (threadIdx.x == 0 && it > 1) {
        uint32_t bytes;
        float* dst = dq_rows(prev2, &bytes);
        bulk_reduce_add_f32(dst, sdQ + buf * kDqBytes, bytes);
      }
      if (it + 1 < iters) {
        issue_loads(next_tile(cur), buf ^ 1);
        cp_async_commit();
      }
      wgmma_wait<2>();  // S^T done; dP^T and dQ may still run
      fence_regs(s);
      const bool need_mask = ATTN_MASK_NEEDS_MASK(p.mask, q0, kQ, k0, kBlockN, T);
      scores_to_p<kQ>(s, c_lse, need_mask, key0, q0, tig, sl2, p);
      wgmma_wait<1>();  // dP^T done; dQ may still run
      fence_regs(dp);
      dp_to_ds<kQ>(dp, s, c_delta, tig);
      uint32_t pa[kQ / 16][4], dsa[kQ / 16][4];
      acc_to_a<kQ>(dsa, dp);
      acc_to_a<kQ>(pa, s);
      store_ds<kQ>(sdS + buf * kSBytes, dsa, 64 * wg + 16 * warp + g, tig);
      issue_dv_dk<D, kQ>(dv, dk, pa, dsa, cdO, cQ);
      wgmma_wait<1>();  // dQ of tile it - 1 done; dV and dK may still run
      if (it > 0) {
        fence_regs(dq);
        store_dq_tile<D, kQ>(sdQ + (buf ^ 1) * kDqBytes, dq, wg, warp, g, tig);
      }
      // One proxy fence for both stores: dS^T (read by the next tile's dQ wgmma) and the dQ tile
      // (read by the bulk reduction), both after the next barrier. A fence after each store, and
      // one in the barrier at the top of every tile, measured slower
      // (docs/performance_attention_history.md v8).
      fence_proxy_async();
      wgmma_wait<0>();
      fence_regs(dv);
      fence_regs(dk);
      fence_regs(pa);
      fence_regs(dsa);
    }
    cp_async_wait_all();  // nothing may be in flight at exit
    if (iters > 0) {
      // The last tile's dQ (prev; its dS^T in buffer (iters - 1) & 1) and the reduction of the one
      // before it (prev2, stored in the last iteration).
      const int last = (iters - 1) & 1;
      if (threadIdx.x == 0) bulk_wait_read();
      __syncthreads();
      if (threadIdx.x == 0 && iters > 1) {
        uint32_t bytes;
        float* dst = dq_rows(prev2, &bytes);
        bulk_reduce_add_f32(dst, sdQ + (last ^ 1) * kDqBytes, bytes);
      }
      float dq[32];
      issue_dq<kQ>(dq, sdS + last * kSBytes, sK, wg);
      wgmma_wait<0>();
      fence_regs(dq);
      store_dq_tile<D, kQ>(sdQ + last * kDqBytes, dq, wg, warp, g, tig);
      fence_proxy_async();
      __syncthreads();
      if (threadIdx.x == 0) {
        uint32_t bytes;
        float* dst = dq_rows(prev, &bytes);
        bulk_reduce_add_f32(dst, sdQ + last * kDqBytes, bytes);
        bulk_wait_all();
      }
    }
  } else {
    for (int it = 0; it < iters; ++it, prev = cur, cur = next_tile(cur)) {
      const int buf = it & 1;
      const int q0 = cur.m * kQ;
      const uint32_t cQ = sQ + buf * kQBytes, cdO = sdO + buf * kQBytes;
      const uint32_t c_lse = sStats + buf * kQ * 4, c_delta = sStats + (2 + buf) * kQ * 4;
      tiles_ready();
      mbar_wait(sFull + 8 * buf, uint32_t(it >> 1) & 1u);  // use it / 2 of buf
      // S^T and dP^T first, so that the tensor cores start while the loads of the next tile are
      // issued (their buffers were last read by the previous tile's wgmmas, all waited for).
      float s[kQ / 2], dp[kQ / 2];
      issue_abt<D, kBlockN, kQ>(s, k_rows, cQ);
      issue_abt<D, kBlockN, kQ>(dp, v_rows, cdO);
      // The previous tile's dQ (stored and fenced before the barrier) to dq_accum.
      if (threadIdx.x == 0 && it > 0) {
        uint32_t bytes;
        float* dst = dq_rows(prev, &bytes);
        bulk_reduce_add_f32(dst, sdQ, bytes);
      }
      if (it + 1 < iters) {
        issue_loads(next_tile(cur), buf ^ 1);
        cp_async_commit();
      }
      wgmma_wait<1>();  // S^T done; dP^T may still run
      fence_regs(s);

      // Element 4 j + 2 r + e: key key0 + 8 r, query q0 + 8 j + 2 tig + e.
      const bool need_mask = ATTN_MASK_NEEDS_MASK(p.mask, q0, kQ, k0, kBlockN, T);
      scores_to_p<kQ>(s, c_lse, need_mask, key0, q0, tig, sl2, p);
      uint32_t pa[kQ / 16][4], dsa[kQ / 16][4];
      acc_to_a<kQ>(pa, s);
      wgmma_wait<0>();
      fence_regs(dp);
      dp_to_ds<kQ>(dp, s, c_delta, tig);
      acc_to_a<kQ>(dsa, dp);

      // dS^T to shared memory before the wgmmas that read dsa are issued (registers of an A
      // fragment must not be accessed while its wgmma is in flight).
      store_ds<kQ>(sdS, dsa, 64 * wg + 16 * warp + g, tig);
      fence_proxy_async();

      // dV += P^T dO, dK += dS^T Q: one group, runs during the barrier and the dQ issue.
      issue_dv_dk<D, kQ>(dv, dk, pa, dsa, cdO, cQ);

      // The bulk reduction of the previous tile has read the dQ tile before anyone rewrites it.
      if (threadIdx.x == 0) bulk_wait_read();
      __syncthreads();  // dS^T of both warpgroups stored and fenced
      // dQ = dS K in two 64 x 64 blocks (queries 64 qw.., columns 64 dw.. of the kQ x D tile):
      // warpgroup w computes block w.
      {
        float dq[32];
        issue_dq<kQ>(dq, sdS, sK, wg);
        wgmma_wait<0>();
        fence_regs(dq);
        store_dq_tile<D, kQ>(sdQ, dq, wg, warp, g, tig);
      }
      fence_regs(dv);
      fence_regs(dk);
      fence_regs(pa);
      fence_regs(dsa);
      fence_proxy_async();  // for the bulk reduction after the next barrier
    }
    cp_async_wait_all();  // nothing may be in flight at exit (no query tile: only K and V loaded)
    __syncthreads();      // the last tile's dQ stored and fenced
    if (threadIdx.x == 0 && iters > 0) {
      uint32_t bytes;
      float* dst = dq_rows(prev, &bytes);  // the loop's last tile
      bulk_reduce_add_f32(dst, sdQ, bytes);
      bulk_wait_all();
    }
  }
  store_dk_dv<D>(dk, dv, p, b, hk, key0, tig);
#else
  (void)p, (void)delta, (void)dq_accum, (void)tm_q, (void)tm_do;
#endif
}

// dq = scale * dq_accum -> bf16 at the q layout; 4 values per thread, dq_accum in the kernel's
// layout (dq_swizzle). Grid (T D / 4 / 256, n_head, B): the head and batch come from the block
// index, the row and column from shifts (no 64-bit division).
template <int D>
__global__ void dq_convert_kernel(const AttentionParams<bf16> p,
                                  const float* __restrict__ dq_accum) {
  constexpr int kQuads = D / 4;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;  // index of 4 values in the (b, h) plane
  if (i >= p.seq_len * kQuads) return;
  const int t = i / kQuads, d = (i % kQuads) * 4, h = blockIdx.y, b = blockIdx.z;
  const int64_t row = (int64_t(b) * p.n_head + h) * p.seq_len + t;
  const int src = dq_swizzle(t, d);  // t % 8 is the row's phase in its tile
  const float4 v = *reinterpret_cast<const float4*>(dq_accum + row * D + src);
  bf16* out = p.dq + b * p.qkv_batch_stride + int64_t(t) * p.qkv_row_stride + h * D + d;
  reinterpret_cast<__nv_bfloat162*>(out)[0] = __floats2bfloat162_rn(v.x * p.scale, v.y * p.scale);
  reinterpret_cast<__nv_bfloat162*>(out)[1] = __floats2bfloat162_rn(v.z * p.scale, v.w * p.scale);
}

template <int D, bool kLagDq>
void launch(const AttentionParams<bf16>& p, const float* delta, float* dq_accum, cudaStream_t st) {
  constexpr size_t smem = bwd_smem_bytes<D, kLagDq>();
  auto* kernel = attn_bwd_wgmma_kernel<D, kLagDq>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const dim3 grid = causal_grid(p.n_kv_head, p.seq_len, kBlockN, p.B);
  const CUtensorMap tm_q = tile_map(p.q, p.n_head * D, p.seq_len, p.B, p.qkv_row_stride,
                                    p.qkv_batch_stride, kQTile<D>),
                    tm_do = tile_map(p.dout, p.n_head * D, p.seq_len, p.B, p.o_row_stride,
                                     p.o_batch_stride, kQTile<D>);
  kernel<<<grid, kThreads, smem, st>>>(p, delta, dq_accum, tm_q, tm_do);
  CUDA_CHECK_LAUNCH();
  const dim3 convert_grid(div_up(int64_t(p.seq_len) * (D / 4), 256), p.n_head, p.B);
  dq_convert_kernel<D><<<convert_grid, 256, 0, st>>>(p, dq_accum);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

bool attention_bwd_wgmma_supported(const AttentionParams<bf16>& p) {
  return attention_fwd_wgmma_supported(p);
}

void launch_attention_bwd_wgmma(const AttentionParams<bf16>& p, const float* delta, float* dq_accum,
                                Stream s) {
  ATTN_REQUIRE(attention_bwd_wgmma_supported(p),
               "wgmma attention backward: needs a build with sm_90a code "
               "(CMAKE_CUDA_ARCHITECTURES containing 90), a compute capability 9.0 device and "
               "head dim 64 or 128 (got %d)",
               p.D);
  ATTN_ASSERT(p.n_kv_head > 0 && p.n_head % p.n_kv_head == 0 && p.seq_len > 0 && p.B > 0);
  ATTN_ASSERT(p.mask.window >= 0 && p.scale > 0.f && delta != nullptr && dq_accum != nullptr);
  ATTN_ASSERT(p.qkv_row_stride % 8 == 0 && p.qkv_batch_stride % 8 == 0 && p.o_row_stride % 8 == 0 &&
              p.o_batch_stride % 8 == 0);
  ATTN_ASSERT(aligned16(p.q) && aligned16(p.k) && aligned16(p.v) && aligned16(p.dout));
  ATTN_ASSERT(aligned16(dq_accum));
  auto st = reinterpret_cast<cudaStream_t>(s);
  // The loop version per head dim (see the top of this file): kLagDq at D = 128 only.
  if (p.D == 64) {
    launch<64, false>(p, delta, dq_accum, st);
  } else {
    launch<128, true>(p, delta, dq_accum, st);
  }
}

}  // namespace attnlab
