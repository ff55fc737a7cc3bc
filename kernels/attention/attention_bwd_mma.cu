// bf16 attention backward on mma.sync tensor cores, head dim 64 or 128, any sm_80+ device.
// Contract: launch_attention_bwd<bf16> (attention.cuh): dq, dk, dv written (=). The dispatcher
// (attention.cu) runs the delta step (attention_bwd_delta.cu), then the Hopper wgmma backward
// (attention_wgmma_bwd.cu) where it is used, else the kernels below.
//   fast (AttentionParams::deterministic = false): one kernel per block of 128 keys of one kv head
//     loops over every query head of its GQA group and every query tile that sees those keys
//     (AttentionMask::query_tiles): dV += P^T dO, dK += dS^T Q in registers, and dQ += dS K added
//     to an fp32 [B, H, T, D] scratch with atomics; a last kernel converts it to bf16. 5
//     matmul-sized products; dq is not bitwise reproducible (fp32 addition order).
//   deterministic: the same dK/dV kernel without dQ (64 keys per block) and a dQ kernel (64
//     queries per block) that recomputes S and dP: 7 products, no atomics, every output written by
//     one thread after a fixed-order loop: bitwise deterministic.
// Element masks only on tiles that need them (AttentionMask::needs_mask).
#include <cuda_bf16.h>

#include "kernels/attention/attention_impl.cuh"
#include "kernels/attention/mma_common.cuh"

namespace attnlab {
namespace {

using namespace mma;

// dq = scale * dq_accum, fp32 [B, H, T, D] -> bf16 at the q layout; 4 values per thread.
__global__ void attn_bwd_dq_convert(const AttentionParams<bf16> p,
                                    const float* __restrict__ dq_accum) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // index of 4 values
  const int quads = p.D / 4;
  if (i >= int64_t(p.B) * p.n_head * p.seq_len * quads) return;
  const int64_t row = i / quads;
  const int d = int(i % quads) * 4;
  const int t = int(row % p.seq_len), h = int((row / p.seq_len) % p.n_head),
            b = int(row / (int64_t(p.seq_len) * p.n_head));
  const float4 v = reinterpret_cast<const float4*>(dq_accum)[i];
  bf16* out = p.dq + b * p.qkv_batch_stride + int64_t(t) * p.qkv_row_stride + h * p.D + d;
  reinterpret_cast<__nv_bfloat162*>(out)[0] = __floats2bfloat162_rn(v.x * p.scale, v.y * p.scale);
  reinterpret_cast<__nv_bfloat162*>(out)[1] = __floats2bfloat162_rn(v.z * p.scale, v.w * p.scale);
}

// ---- backward dK/dV, optionally with dQ (bf16) ----------------------------------------------
// Block: kKeys = 16 * kMT * kWarps keys of kv head hk; warp w owns kMT 16-key m-tiles (keys
// w*16*kMT..). Loops over (query head in the group, kQ-query tile) in a fixed order; Q/dO/lse/
// delta tiles double-buffered. Each Q/dO fragment read from shared memory feeds 2 * kMT products.
// kFusedDq (the default, non-deterministic path): dS also goes to shared memory, and after a
// barrier each warp computes a 16-query x (D / column groups) slice of dS K over the block's keys
// and adds it to the fp32 accumulator with vector atomics (dq_accum, unscaled). The order of those
// fp32 additions varies from run to run, so dQ may differ in the last bits; dK and dV stay bitwise
// deterministic.
template <int D, bool kFusedDq, int kWarps, int kMT, int kQ>
__global__ void __launch_bounds__(32 * kWarps, kWarps == 8 ? 1 : (kMT == 2 || D == 128 ? 2 : 3))
    attn_bwd_dkdv_bf16(const AttentionParams<bf16> p, const float* __restrict__ delta,
                       float* __restrict__ dq_accum) {
  constexpr int LD = D + 8, kKeys = 16 * kMT * kWarps, kQT = kQ * LD, kLdS = kQ + 8;
  constexpr int kNT = kQ / 8;  // n8 tiles of scores per key m-tile
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* sK = reinterpret_cast<bf16*>(smem_raw);           // [kKeys][LD]
  bf16* sV = sK + kKeys * LD;                             // [kKeys][LD]
  bf16* sQ = sV + kKeys * LD;                             // [2][kQ][LD]
  bf16* sdO = sQ + 2 * kQT;                               // [2][kQ][LD]
  float* sLse = reinterpret_cast<float*>(sdO + 2 * kQT);  // [2][kQ], natural log
  float* sDelta = sLse + 2 * kQ;                          // [2][kQ]
  bf16* sdS = reinterpret_cast<bf16*>(sDelta + 2 * kQ);   // [kKeys][kLdS], fused only
  const int T = p.seq_len;
  const AttentionMask& mask = p.mask;
  const int hk = blockIdx.y, b = blockIdx.z, group = p.n_head / p.n_kv_head;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, tig = lane & 3;
  const int k0 = blockIdx.x * kKeys;
  const int wkey = warp * 16 * kMT;  // first key of this warp inside the block
  const bf16* gk = p.k + b * p.qkv_batch_stride + hk * D;
  const bf16* gv = p.v + b * p.qkv_batch_stride + hk * D;

  const TileRange tiles = mask.query_tiles(k0, kKeys, kQ, T);
  const int m_begin = tiles.begin, m_end = tiles.end;
  const int per_head = max(0, m_end - m_begin);
  const int iters = group * per_head;

  auto issue = [&](int it, int buf) {
    const int h = hk * group + it / per_head;
    const int q0 = (m_begin + it % per_head) * kQ;
    const bf16* gq = p.q + b * p.qkv_batch_stride + h * D;
    const bf16* gdo = p.dout + b * p.o_batch_stride + h * D;
    load_rows<kQ, D, 32 * kWarps>(sQ + buf * kQT, gq, p.qkv_row_stride, q0, T);
    load_rows<kQ, D, 32 * kWarps>(sdO + buf * kQT, gdo, p.o_row_stride, q0, T);
    // Asynchronous too: a plain load here would stall the warp for a global round trip at the
    // top of every iteration. Rows past T read as 0.
    const int64_t base = (int64_t(b) * p.n_head + h) * T + q0;
    for (int i = threadIdx.x; i < kQ; i += 32 * kWarps) {
      const bool ok = q0 + i < T;
      cp_async4(sLse + buf * kQ + i, p.lse + (ok ? base + i : 0), ok);
      cp_async4(sDelta + buf * kQ + i, delta + (ok ? base + i : 0), ok);
    }
  };

  load_rows<kKeys, D, 32 * kWarps>(sK, gk, p.qkv_row_stride, k0, T);
  load_rows<kKeys, D, 32 * kWarps>(sV, gv, p.qkv_row_stride, k0, T);
  if (iters > 0) issue(0, 0);
  cp_async_commit();

  float dk[kMT][D / 8][4], dv[kMT][D / 8][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
#pragma unroll
      for (int c = 0; c < 4; ++c) dk[mt][i][c] = dv[mt][i][c] = 0.f;
    }
  }
  const float sl2 = p.scale * kLog2e;

  for (int it = 0; it < iters; ++it) {
    const int buf = it & 1;
    cp_async_wait_all();
    __syncthreads();
    if (it + 1 < iters) {
      issue(it + 1, buf ^ 1);
      cp_async_commit();
    }
    const int h = hk * group + it / per_head;
    const int q0 = (m_begin + it % per_head) * kQ;
    const bf16* cQ = sQ + buf * kQT;
    const bf16* cdO = sdO + buf * kQT;
    const float* cLse = sLse + buf * kQ;
    const float* cDelta = sDelta + buf * kQ;

    // S^T = K_w Q^T  and  dP^T = V_w dO^T  (16 * kMT keys x kQ queries each)
    float pt[kMT][kNT][4], dpt[kMT][kNT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int i = 0; i < kNT; ++i) {
#pragma unroll
        for (int c = 0; c < 4; ++c) pt[mt][i][c] = dpt[mt][i][c] = 0.f;
      }
    }
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t ak[kMT][4], av[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        load_a<LD>(ak[mt], sK, wkey + mt * 16, kk * 16, lane);
        load_a<LD>(av[mt], sV, wkey + mt * 16, kk * 16, lane);
      }
#pragma unroll
      for (int j = 0; j < kQ / 16; ++j) {
        uint32_t bq[4], bd[4];
        load_b_nk<LD>(bq, cQ, j * 16, kk * 16, lane);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma16816(pt[mt][2 * j], ak[mt], bq[0], bq[1]);
          mma16816(pt[mt][2 * j + 1], ak[mt], bq[2], bq[3]);
        }
        load_b_nk<LD>(bd, cdO, j * 16, kk * 16, lane);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma16816(dpt[mt][2 * j], av[mt], bd[0], bd[1]);
          mma16816(dpt[mt][2 * j + 1], av[mt], bd[2], bd[3]);
        }
      }
    }
    // P^T = exp(S^T scale - lse) masked; dS^T = P^T (dP^T - delta). Only tiles that touch the
    // diagonal, the window's edge or the end of the sequence test each element.
    const bool need_mask = ATTN_MASK_NEEDS_MASK(mask, q0, kQ, k0, kKeys, T);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int qc = nt * 8 + 2 * tig + (c & 1);
          const int key = k0 + wkey + mt * 16 + g + (c >= 2 ? 8 : 0);
          float pv = exp2_ftz(fmaf(pt[mt][nt][c], sl2, -cLse[qc] * kLog2e));
          if (need_mask && !key_visible(q0 + qc, key, T, mask.causal, mask.window)) pv = 0.f;
          pt[mt][nt][c] = pv;
          dpt[mt][nt][c] = pv * (dpt[mt][nt][c] - cDelta[qc]);
        }
      }
    }
    if constexpr (kFusedDq) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            *reinterpret_cast<uint32_t*>(sdS + (wkey + mt * 16 + g + 8 * r) * kLdS + nt * 8 +
                                         2 * tig) =
                pack_bf16(dpt[mt][nt][2 * r], dpt[mt][nt][2 * r + 1]);
          }
        }
      }
    }
    // dV += P^T dO;  dK += dS^T Q   (k = the kQ queries)
#pragma unroll
    for (int kk = 0; kk < kQ / 16; ++kk) {
      uint32_t ap[kMT][4], ads[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        c_to_a(ap[mt], pt[mt][2 * kk], pt[mt][2 * kk + 1]);
        c_to_a(ads[mt], dpt[mt][2 * kk], dpt[mt][2 * kk + 1]);
      }
#pragma unroll
      for (int dt = 0; dt < D / 16; ++dt) {
        uint32_t bd[4], bq[4];
        load_b_kn<LD>(bd, cdO, kk * 16, dt * 16, lane);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma16816(dv[mt][2 * dt], ap[mt], bd[0], bd[1]);
          mma16816(dv[mt][2 * dt + 1], ap[mt], bd[2], bd[3]);
        }
        load_b_kn<LD>(bq, cQ, kk * 16, dt * 16, lane);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma16816(dk[mt][2 * dt], ads[mt], bq[0], bq[1]);
          mma16816(dk[mt][2 * dt + 1], ads[mt], bq[2], bq[3]);
        }
      }
    }
    if constexpr (kFusedDq) {
      // dQ += dS K over the block's keys (A = dS from dS^T in smem). The kQ queries are kQ / 16
      // m-tiles; the warps split into those m-tiles x column groups of D.
      __syncthreads();
      constexpr int kGroups = kWarps / (kQ / 16), kCols = D / kGroups;
      const int mq = warp % (kQ / 16), col0 = (warp / (kQ / 16)) * kCols;
      uint32_t adq[kKeys / 16][4];
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) load_a_t<kLdS>(adq[kk], sdS, kk * 16, mq * 16, lane);
      const int qrow = q0 + mq * 16 + g;
      float* acc_row = dq_accum + ((int64_t(b) * p.n_head + h) * T + qrow) * D + col0;
#pragma unroll
      for (int dt = 0; dt < kCols / 16; ++dt) {
        float acc[2][4] = {};
#pragma unroll
        for (int kk = 0; kk < kKeys / 16; ++kk) {
          uint32_t bk[4];
          load_b_kn<LD>(bk, sK, kk * 16, col0 + dt * 16, lane);
          mma16816(acc[0], adq[kk], bk[0], bk[1]);
          mma16816(acc[1], adq[kk], bk[2], bk[3]);
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float* dst = acc_row + 8 * r * D + dt * 16;
          if (qrow + 8 * r >= T) continue;
#pragma unroll
          for (int n = 0; n < 2; ++n) {
            red_add2(dst + n * 8 + 2 * tig, acc[n][2 * r], acc[n][2 * r + 1]);
          }
        }
      }
    }
  }

#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int key = k0 + wkey + mt * 16 + g + 8 * r;
      if (key >= T) continue;
      const int64_t off = b * p.qkv_batch_stride + int64_t(key) * p.qkv_row_stride + hk * D;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        *reinterpret_cast<__nv_bfloat162*>(p.dk + off + dt * 8 + 2 * tig) =
            __floats2bfloat162_rn(dk[mt][dt][2 * r] * p.scale, dk[mt][dt][2 * r + 1] * p.scale);
        *reinterpret_cast<__nv_bfloat162*>(p.dv + off + dt * 8 + 2 * tig) =
            __floats2bfloat162_rn(dv[mt][dt][2 * r], dv[mt][dt][2 * r + 1]);
      }
    }
  }
}

// ---- backward dQ (bf16) ---------------------------------------------------------------------
template <int D>
__global__ void __launch_bounds__(kThreads)
    attn_bwd_dq_bf16(const AttentionParams<bf16> p, const float* __restrict__ delta) {
  constexpr int LD = D + 8, kT = kTile * LD;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw);
  bf16* sdO = sQ + kT;
  bf16* sK = sdO + kT;     // [2][kTile][LD]
  bf16* sV = sK + 2 * kT;  // [2][kTile][LD]
  const int T = p.seq_len;
  const AttentionMask& mask = p.mask;
  const int m_block = gridDim.x - 1 - blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z, hk = h / (p.n_head / p.n_kv_head);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, tig = lane & 3;
  const int q0 = m_block * kTile;
  const bf16* gk = p.k + b * p.qkv_batch_stride + hk * D;
  const bf16* gv = p.v + b * p.qkv_batch_stride + hk * D;

  const TileRange tiles = mask.key_tiles_of_tile(m_block, kTile, T);
  const int n_begin = tiles.begin, n_end = tiles.end;

  load_rows<kTile, D>(sQ, p.q + b * p.qkv_batch_stride + h * D, p.qkv_row_stride, q0, T);
  load_rows<kTile, D>(sdO, p.dout + b * p.o_batch_stride + h * D, p.o_row_stride, q0, T);
  load_rows<kTile, D>(sK, gk, p.qkv_row_stride, n_begin * kTile, T);
  load_rows<kTile, D>(sV, gv, p.qkv_row_stride, n_begin * kTile, T);
  cp_async_commit();

  float lse2[2], dl[2];
  const int64_t base = (int64_t(b) * p.n_head + h) * T;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int qi = q0 + warp * 16 + g + 8 * r;
    lse2[r] = qi < T ? p.lse[base + qi] * kLog2e : 0.f;
    dl[r] = qi < T ? delta[base + qi] : 0.f;
  }
  float dq[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.f;
  const float sl2 = p.scale * kLog2e;

  for (int nb = n_begin; nb < n_end; ++nb) {
    const int buf = (nb - n_begin) & 1;
    cp_async_wait_all();
    __syncthreads();
    if (nb + 1 < n_end) {
      load_rows<kTile, D>(sK + (buf ^ 1) * kT, gk, p.qkv_row_stride, (nb + 1) * kTile, T);
      load_rows<kTile, D>(sV + (buf ^ 1) * kT, gv, p.qkv_row_stride, (nb + 1) * kTile, T);
      cp_async_commit();
    }
    const bf16* cK = sK + buf * kT;
    const bf16* cV = sV + buf * kT;
    float s[8][4], dp[8][4];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
#pragma unroll
      for (int c = 0; c < 4; ++c) s[i][c] = dp[i][c] = 0.f;
    }
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t aq[4], ado[4];
      load_a<LD>(aq, sQ, warp * 16, kk * 16, lane);
      load_a<LD>(ado, sdO, warp * 16, kk * 16, lane);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint32_t bk[4], bv[4];
        load_b_nk<LD>(bk, cK, j * 16, kk * 16, lane);
        mma16816(s[2 * j], aq, bk[0], bk[1]);
        mma16816(s[2 * j + 1], aq, bk[2], bk[3]);
        load_b_nk<LD>(bv, cV, j * 16, kk * 16, lane);
        mma16816(dp[2 * j], ado, bv[0], bv[1]);
        mma16816(dp[2 * j + 1], ado, bv[2], bv[3]);
      }
    }
    const int k0 = nb * kTile;
    const bool need_mask = ATTN_MASK_NEEDS_MASK(mask, q0, kTile, k0, kTile, T);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int r = c >> 1;
        const int key = k0 + nt * 8 + 2 * tig + (c & 1);
        const int qi = q0 + warp * 16 + g + 8 * r;
        float pv = exp2_ftz(fmaf(s[nt][c], sl2, -lse2[r]));
        if (need_mask && !key_visible(qi, key, T, mask.causal, mask.window)) pv = 0.f;
        dp[nt][c] = pv * (dp[nt][c] - dl[r]);
      }
    }
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t ads[4];
      c_to_a(ads, dp[2 * kk], dp[2 * kk + 1]);
#pragma unroll
      for (int dt = 0; dt < D / 16; ++dt) {
        uint32_t bk[4];
        load_b_kn<LD>(bk, cK, kk * 16, dt * 16, lane);
        mma16816(dq[2 * dt], ads, bk[0], bk[1]);
        mma16816(dq[2 * dt + 1], ads, bk[2], bk[3]);
      }
    }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int qi = q0 + warp * 16 + g + 8 * r;
    if (qi >= T) continue;
    bf16* out = p.dq + b * p.qkv_batch_stride + int64_t(qi) * p.qkv_row_stride + h * D;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      *reinterpret_cast<__nv_bfloat162*>(out + dt * 8 + 2 * tig) =
          __floats2bfloat162_rn(dq[dt][2 * r] * p.scale, dq[dt][2 * r + 1] * p.scale);
    }
  }
}

// Dynamic shared memory of attn_bwd_dkdv_bf16: K, V (kKeys rows), double-buffered Q, dO (kQ
// rows), lse and delta, and dS^T for the fused dQ.
constexpr size_t bwd_smem(int D, int keys, int q, bool fused) {
  return size_t(2 * keys + 4 * q) * (D + 8) * sizeof(bf16) + 4 * q * sizeof(float) +
         (fused ? size_t(keys) * (q + 8) * sizeof(bf16) : 0);
}

template <int D, bool kFused, int kWarps, int kMT, int kQ>
void launch_dkdv(const AttentionParams<bf16>& p, const float* delta, float* dq_accum,
                 cudaStream_t st) {
  constexpr int kKeys = 16 * kMT * kWarps;
  constexpr size_t smem = bwd_smem(D, kKeys, kQ, kFused);
  auto* kernel = attn_bwd_dkdv_bf16<D, kFused, kWarps, kMT, kQ>;
  set_smem(kernel, smem);
  kernel<<<dim3(div_up(p.seq_len, kKeys), p.n_kv_head, p.B), 32 * kWarps, smem, st>>>(p, delta,
                                                                                      dq_accum);
  CUDA_CHECK_LAUNCH();
}

template <int D>
void bwd_bf16(const AttentionParams<bf16>& p, const float* delta, float* dq_accum,
              cudaStream_t st) {
  if (!p.deterministic) {
    // 128 keys per block halve the dQ atomics of 64 (faster on the H200 at every T measured;
    // docs/performance.md). D = 64 fits 32 keys per warp in registers (2 blocks/SM); D = 128
    // needs 8 warps of 16 keys (1 block/SM).
    if constexpr (D == 64) {
      launch_dkdv<D, true, 4, 2, 32>(p, delta, dq_accum, st);
    } else {
      launch_dkdv<D, true, 8, 1, 64>(p, delta, dq_accum, st);
    }
    const int64_t quads = int64_t(p.B) * p.n_head * p.seq_len * (D / 4);
    attn_bwd_dq_convert<<<div_up(quads, 256), 256, 0, st>>>(p, dq_accum);
    CUDA_CHECK_LAUNCH();
    return;
  }
  launch_dkdv<D, false, 4, 1, 64>(p, delta, nullptr, st);
  const size_t smem_q = 6 * size_t(kTile) * (D + 8) * sizeof(bf16);
  set_smem(attn_bwd_dq_bf16<D>, smem_q);
  attn_bwd_dq_bf16<D>
      <<<dim3(div_up(p.seq_len, kTile), p.n_head, p.B), kThreads, smem_q, st>>>(p, delta);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

namespace attention_impl {

void bwd_bf16_mma(const AttentionParams<bf16>& p, const float* delta, float* dq_accum,
                  cudaStream_t st) {
  if (p.D == 64) {
    bwd_bf16<64>(p, delta, dq_accum, st);
  } else {
    bwd_bf16<128>(p, delta, dq_accum, st);
  }
}

}  // namespace attention_impl
}  // namespace attnlab
