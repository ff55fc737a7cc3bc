// The dg pass of the wgmma Focus backward, additive gate (focus_wgmma.cuh): dg += dA G summed over
// heads, both sides of each pair, dA_ij = exp(s_ij - lse_i) (dP_ij - delta_i) on distant pairs
// (i - j > local_window; zero elsewhere: the gradient of a in weight exp(s) (a + eps)). No
// affinity is needed: dA does not depend on a.
// Grid and loop of the main backward (focus_wgmma_bwd.cu): one block per 128 keys of a kv head,
// over the heads of its group and only the query tiles with a distant pair (queries past
// k0 + local_window). Per tile S^T = K Q^T and dP^T = V dO^T on wgmma (as the dense backward),
// then per 16-query chunk of a thread's accumulators (focus_wgmma_layout.h):
//   dg_key (16 keys x KP of the warp) += dA^T G_q: A = dA^T (the chunk's C fragments packed, bf16
//     hi + lo), B = G_q (ldmatrix.trans of the query g tile), split products, in registers over
//     the whole loop, added to dg at the end;
//   dg_query^T (KP x 16 queries) = G_k^T dA^T: A = G_k^T (ldmatrix.trans of the key g tile),
//     B = dA^T with k = keys, which is the chunk's fragments transposed per 8 x 8 block
//     (movmatrix.trans); the warps' partial sums meet in a fp32 shared tile (red.shared), added
//     to dg by fp32 atomics after the tile's second barrier.
// Not bitwise reproducible (the order of the atomics).
#include <cuda.h>
#include <cuda_bf16.h>

#include "kernels/attention/visibility.h"
#include "kernels/attention/wgmma_common.cuh"
#include "kernels/common/device.cuh"
#include "kernels/focus/focus_wgmma.cuh"
#include "kernels/focus/focus_wgmma_gate.cuh"
#include "kernels/focus/focus_wgmma_layout.h"

namespace attnlab {
namespace {

using namespace wgmma;

constexpr int kThreads = 256;
constexpr int kBlockN = 128;
template <int D>
constexpr int kQTile = D == 64 ? 128 : 64;

constexpr uint32_t g_tile_bytes(int rows, int KP) { return uint32_t(rows) * (2 * KP + 8) * 2; }
// K, V, 2 x Q, 2 x dO, 2 x lse and delta, 2 mbarriers, the keys' g tile, 2 x the queries' g
// tiles, the fp32 dg_query tile [kQ][KP], alignment.
template <int D, int KP>
constexpr size_t dg_smem_bytes() {
  constexpr int kQ = kQTile<D>;
  return 2 * size_t(tile_bytes(kBlockN, D)) + 4 * size_t(tile_bytes(kQ, D)) +
         4 * kQ * sizeof(float) + 16 + g_tile_bytes(kBlockN, KP) + 2 * g_tile_bytes(kQ, KP) +
         size_t(kQ) * KP * sizeof(float) + 1008;
}
static_assert(dg_smem_bytes<64, 32>() <= 232448 && dg_smem_bytes<128, 32>() <= 232448);

#if ATTN_WGMMA_DEVICE
// bf16 hi and lo parts of a pair (low half first).
__device__ __forceinline__ void split_pair(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
  const __nv_bfloat162 l = __floats2bfloat162_rn(x0 - __low2float(h), x1 - __high2float(h));
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = *reinterpret_cast<const uint32_t*>(&l);
}
#endif  // ATTN_WGMMA_DEVICE

template <int D, int KP>
__global__ void __launch_bounds__(kThreads, 1)
    focus_wgmma_dg_kernel(const FocusAttentionParams<bf16> p, const float* __restrict__ delta,
                          const bf16* __restrict__ gs, const __grid_constant__ CUtensorMap tm_q,
                          const __grid_constant__ CUtensorMap tm_do) {
#if ATTN_WGMMA_DEVICE
  constexpr int kQ = kQTile<D>;
  constexpr int kLd = 2 * KP + 8;
  constexpr uint32_t kKVBytes = tile_bytes(kBlockN, D), kQBytes = tile_bytes(kQ, D);
  constexpr uint32_t kGqBytes = g_tile_bytes(kQ, KP);
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t sK = (raw + 1023u) & ~1023u;
  const uint32_t sV = sK + kKVBytes;
  const uint32_t sQ = sV + kKVBytes;                     // [2][kQ] rows
  const uint32_t sdO = sQ + 2 * kQBytes;                 // [2][kQ] rows
  const uint32_t sStats = sdO + 2 * kQBytes;             // lse [2][kQ], delta [2][kQ]
  const uint32_t sFull = sStats + 4 * kQ * 4;            // mbarriers [2]
  const uint32_t sGk = sFull + 16;                       // g of the block's keys
  const uint32_t sGq = sGk + g_tile_bytes(kBlockN, KP);  // [2] g of the tile's queries
  const uint32_t sDgq = sGq + 2 * kGqBytes;              // fp32 [kQ][KP]
  auto generic = [&](uint32_t addr) { return reinterpret_cast<bf16*>(smem_raw + (addr - raw)); };
  float* dgq_tile = reinterpret_cast<float*>(smem_raw + (sDgq - raw));

  const int T = p.seq_len, K = p.K;
  const AttentionMask mask{};
  const int hk = blockIdx.y, b = blockIdx.z, group = p.n_head / p.n_kv_head;
  const int wg = threadIdx.x / 128, warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, tig = lane & 3;
  const int k0 = blockIdx.x * kBlockN;
  const int key0 = k0 + 64 * wg + 16 * warp + g;
  const int wrow = 64 * wg + 16 * warp;  // the warp's first key in the block
  const bf16* gk = p.k + b * p.kv_batch_stride + hk * D;
  const bf16* gv = p.v + b * p.kv_batch_stride + hk * D;
  const bf16* gsb = gs + int64_t(b) * T * 2 * KP;
  float* dgb = p.dg + int64_t(b) * T * K;
  const int w = p.gate.local_window;

  // Query tiles that see the keys (causal) and hold a query farther than w from key k0.
  const TileRange tiles = mask.query_tiles(k0, kBlockN, kQ, T);
  const int m_begin = max(tiles.begin, int((int64_t(k0) + w + 1) / kQ)), m_end = tiles.end;
  const int per_head = max(0, m_end - m_begin);
  const int iters = group * per_head;
  if (iters == 0) return;  // uniform: no barrier below is reached by anyone

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
    }
    focus_wgmma::load_g_tile<kQ, KP, kThreads>(sGq + buf * kGqBytes, gsb, q0, T);
  };

  if (threadIdx.x == 0) {
    mbar_init(sFull, 1);
    mbar_init(sFull + 8, 1);
    fence_mbar_init();
  }
  for (int i = threadIdx.x; i < kQ * KP; i += kThreads) dgq_tile[i] = 0.f;
  __syncthreads();
  load_tile<kBlockN, D, kThreads>(sK, gk, p.kv_row_stride, k0, T);
  load_tile<kBlockN, D, kThreads>(sV, gv, p.kv_row_stride, k0, T);
  focus_wgmma::load_g_tile<kBlockN, KP, kThreads>(sGk, gsb, k0, T);
  Tile cur{hk * group, m_begin};
  issue_loads(cur, 0);
  cp_async_commit();

  float dgk[KP / 8][4];  // dg of the warp's 16 keys: C fragments, groups 8 nt ..
#pragma unroll
  for (int nt = 0; nt < KP / 8; ++nt) dgk[nt][0] = dgk[nt][1] = dgk[nt][2] = dgk[nt][3] = 0.f;
  const float sl2 = p.scale * kLog2e;
  const uint32_t k_rows = sK + wg * 64 * 128, v_rows = sV + wg * 64 * 128;
  const bf16* cGk = generic(sGk);

  for (int it = 0; it < iters; ++it, cur = next_tile(cur)) {
    const int buf = it & 1;
    const int q0 = cur.m * kQ;
    const uint32_t cQ = sQ + buf * kQBytes, cdO = sdO + buf * kQBytes;
    const uint32_t c_lse = sStats + buf * kQ * 4, c_delta = sStats + (2 + buf) * kQ * 4;
    tiles_ready();  // also: the previous tile's dg_query tile flushed and zeroed
    mbar_wait(sFull + 8 * buf, uint32_t(it >> 1) & 1u);
    float s[kQ / 2], dp[kQ / 2];
    issue_abt<D, kBlockN, kQ>(s, k_rows, cQ);
    issue_abt<D, kBlockN, kQ>(dp, v_rows, cdO);
    if (it + 1 < iters) {
      issue_loads(next_tile(cur), buf ^ 1);
      cp_async_commit();
    }
    wgmma_wait<1>();
    fence_regs(s);
    const bool need_mask = ATTN_MASK_NEEDS_MASK(mask, q0, kQ, k0, kBlockN, T);
    focus_wgmma::scores_to_p<kQ>(s, c_lse, need_mask, key0, q0, tig, sl2, T);
    wgmma_wait<0>();
    fence_regs(dp);
    if (focus_wgmma::tile_has_distant_k_rows(k0 + 64 * wg, q0 + kQ - 1, w)) {
      const bf16* cGq = generic(sGq + buf * kGqBytes);
      // A = G_k^T (m = groups 16 mt.., k = the warp's 16 keys), hi and lo.
      uint32_t gth[KP / 16][4], gtl[KP / 16][4];
#pragma unroll
      for (int mt = 0; mt < KP / 16; ++mt) {
        const bf16* a = cGk + focus_wgmma::ldsm_t_a_offset(wrow, 16 * mt, lane, kLd);
        mma::ldsm_x4_t(gth[mt], a);
        mma::ldsm_x4_t(gtl[mt], a + KP);
      }
#pragma unroll
      for (int chunk = 0; chunk < kQ / 16; ++chunk) {
        float da[2][4];
#pragma unroll
        for (int n = 0; n < 2; ++n) {
          const float2 dl = lds_f2(c_delta + 4 * (16 * chunk + 8 * n + 2 * tig));
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const int i = focus_wgmma::chunk_acc_index(chunk, n, c);
            const bool far = focus_wgmma::chunk_distant<false>(chunk, n, c, key0, q0 + 2 * tig, w);
            da[n][c] = far ? s[i] * (dp[i] - ((c & 1) ? dl.y : dl.x)) : 0.f;
          }
        }
        // dg_key += dA^T G_q: A = dA^T (k = the chunk's 16 queries).
        uint32_t ah[4], al[4];
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          const int n = focus_wgmma::a_pack_tile(x);
          split_pair(da[n][focus_wgmma::a_pack_value(x, 0)], da[n][focus_wgmma::a_pack_value(x, 1)],
                     ah[x], al[x]);
        }
#pragma unroll
        for (int nb = 0; nb < KP / 16; ++nb) {
          uint32_t bh[4], bl[4];
          const bf16* bp = cGq + focus_wgmma::ldsm_t_b_offset(16 * chunk, 16 * nb, lane, kLd);
          mma::ldsm_x4_t(bh, bp);
          mma::ldsm_x4_t(bl, bp + KP);
#pragma unroll
          for (int t = 0; t < 2; ++t) {
            mma::mma16816(dgk[2 * nb + t], ah, bh[2 * t], bh[2 * t + 1]);
            mma::mma16816(dgk[2 * nb + t], ah, bl[2 * t], bl[2 * t + 1]);
            mma::mma16816(dgk[2 * nb + t], al, bh[2 * t], bh[2 * t + 1]);
          }
        }
        // dg_query^T = G_k^T dA^T: B of query tile n = the 8 x 8 blocks (keys 8 x, queries 8 n)
        // transposed.
#pragma unroll
        for (int n = 0; n < 2; ++n) {
          uint32_t bh[2], bl[2];
#pragma unroll
          for (int x = 0; x < 2; ++x) {
            uint32_t h, l;
            split_pair(da[n][2 * x], da[n][2 * x + 1], h, l);
            bh[x] = focus_wgmma::movmatrix_trans(h);
            bl[x] = focus_wgmma::movmatrix_trans(l);
          }
#pragma unroll
          for (int mt = 0; mt < KP / 16; ++mt) {
            float c[4] = {0.f, 0.f, 0.f, 0.f};
            mma::mma16816(c, gth[mt], bh[0], bh[1]);
            mma::mma16816(c, gth[mt], bl[0], bl[1]);
            mma::mma16816(c, gtl[mt], bh[0], bh[1]);
#pragma unroll
            for (int v = 0; v < 4; ++v) {
              const focus_wgmma::Coord cc = focus_wgmma::mma_c_coord(v, lane);
              // row = group (16 mt + cc.row), col = query (16 chunk + 8 n + cc.col)
              atomicAdd(dgq_tile + (16 * chunk + 8 * n + cc.col) * KP + 16 * mt + cc.row, c[v]);
            }
          }
        }
      }
    }
    __syncthreads();  // every warp's dg_query of the tile is in the shared tile
    for (int i = threadIdx.x; i < kQ * KP; i += kThreads) {
      const int q = i / KP, c = i - q * KP;
      const float v = dgq_tile[i];
      if (c < K && q0 + q < T && v != 0.f) atomicAdd(dgb + int64_t(q0 + q) * K + c, v);
      dgq_tile[i] = 0.f;
    }
  }
  cp_async_wait_all();
#pragma unroll
  for (int nt = 0; nt < KP / 8; ++nt) {
#pragma unroll
    for (int v = 0; v < 4; ++v) {
      const focus_wgmma::Coord cc = focus_wgmma::mma_c_coord(v, lane);
      const int key = k0 + wrow + cc.row, col = 8 * nt + cc.col;
      if (key < T && col < K && dgk[nt][v] != 0.f)
        atomicAdd(dgb + int64_t(key) * K + col, dgk[nt][v]);
    }
  }
#else
  (void)p, (void)delta, (void)gs, (void)tm_q, (void)tm_do;
#endif
}

template <int D, int KP>
void launch_dg(const FocusAttentionParams<bf16>& p, const float* delta, const bf16* gs,
               cudaStream_t st) {
  constexpr size_t smem = dg_smem_bytes<D, KP>();
  auto* kernel = focus_wgmma_dg_kernel<D, KP>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const dim3 grid(div_up(p.seq_len, kBlockN), p.n_kv_head, p.B);
  const CUtensorMap tm_q = tile_map(p.q, p.n_head * D, p.seq_len, p.B, p.q_row_stride,
                                    p.q_batch_stride, kQTile<D>),
                    tm_do = tile_map(p.dout, p.n_head * D, p.seq_len, p.B, p.o_row_stride,
                                     p.o_batch_stride, kQTile<D>);
  kernel<<<grid, kThreads, smem, st>>>(p, delta, gs, tm_q, tm_do);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_focus_wgmma_dg(const FocusAttentionParams<bf16>& p, const float* delta, const bf16* gs,
                           Stream s) {
  ATTN_ASSERT(p.dg != nullptr && delta != nullptr && gs != nullptr);
  if (int64_t(p.B) * p.n_head * p.seq_len == 0) return;
  const auto st = reinterpret_cast<cudaStream_t>(s);
  const int KP = focus_wgmma::padded_groups(p.K);
  if (p.D == 64) {
    KP == 16 ? launch_dg<64, 16>(p, delta, gs, st) : launch_dg<64, 32>(p, delta, gs, st);
  } else {
    KP == 16 ? launch_dg<128, 16>(p, delta, gs, st) : launch_dg<128, 32>(p, delta, gs, st);
  }
}

}  // namespace attnlab
