// The tiled Focus attention backward (focus_tiled.cuh): dq, dk, dv written (=), dg [B, T, K] fp32
// written (=, summed over heads; null: skipped). Structure of the dense mma.sync backward
// (kernels/attention/attention_bwd_mma.cu, fused-dQ path): a block of 4 warps owns 64 keys of kv
// head hk (16 per warp) and loops over (query head of the group, 64-query tile); per tile the gate
// of each distant pair (i - j > local_window) with s = scale q.k, e = exp(s - lse),
// dd = dP - delta:
//   additive        P = e (a + eps)        dS = P dd       dA = e dd
//   multiplicative  P = exp(s sg - lse)    dS = P dd sg    dA = P dd s scale_g sg (1 - sg)
//                   (sg = sigmoid(scale_g a + bias_g))
//   hard            P = e m                dS = P dd       dA = min(e, 1) dd (straight through)
// local pairs: P = e, dS = P dd, dA = 0. dV += P^T dO, dK += dS^T Q, dQ += dS K (atomics),
// dg_i += sum_j dA_ij g_j, dg_j += sum_i dA_ij g_i (dA^T in shared memory as bf16 hi + lo parts,
// products hi.hi + hi.lo + lo.hi: about fp32 accuracy; fp32 atomics).
#include <cuda_bf16.h>

#include "kernels/attention/attention.cuh"
#include "kernels/attention/visibility.h"
#include "kernels/focus/focus_dense_params.h"
#include "kernels/focus/focus_tiled.cuh"
#include "kernels/focus/focus_tiled_gate.cuh"

namespace attnlab {
namespace {

using namespace mma;
using namespace focus_tiled;

constexpr int kKeys = 64, kQ = 64;  // keys per block (16 per warp), queries per tile
constexpr int kNT = kQ / 8;         // n8 tiles of scores per warp
constexpr int kLdS = kQ + 8;

// Dynamic shared memory: K, V, 2 x (Q, dO) bf16; 2 x (lse, delta) fp32; dS^T, dA^T (hi, lo) bf16;
// the g hi/lo tiles of the keys and 2 x of the queries; the group masks of the keys and 2 x
// queries; 2 fp32 staging tiles of the queries' g.
size_t bwd_smem(int D, int K, int KP) {
  const size_t ldg = KP + 8;
  return size_t(2 * kKeys + 4 * kQ) * (D + 8) * sizeof(bf16) + 4 * kQ * sizeof(float) +
         3 * size_t(kKeys) * kLdS * sizeof(bf16) + 2 * size_t(kKeys + 2 * kQ) * ldg * sizeof(bf16) +
         size_t(kKeys + 2 * kQ) * sizeof(uint64_t) + 2 * size_t(kQ) * K * sizeof(float);
}

// dq = scale * dq_accum ([B, H, T, D] fp32) at the q layout.
__global__ void focus_tiled_dq_convert(const FocusAttentionParams<bf16> p,
                                       const float* __restrict__ dq_accum) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // index of 2 values
  const int pairs = p.D / 2;
  if (i >= int64_t(p.B) * p.n_head * p.seq_len * pairs) return;
  const int64_t row = i / pairs;
  const int d = int(i % pairs) * 2;
  const int t = int(row % p.seq_len), h = int((row / p.seq_len) % p.n_head),
            b = int(row / (int64_t(p.seq_len) * p.n_head));
  const float2 v = reinterpret_cast<const float2*>(dq_accum)[i];
  bf16* out = p.dq + b * p.q_batch_stride + int64_t(t) * p.q_row_stride + h * p.D + d;
  *reinterpret_cast<__nv_bfloat162*>(out) = __floats2bfloat162_rn(v.x * p.scale, v.y * p.scale);
}

template <int D>
__global__ void __launch_bounds__(kThreads)
    focus_tiled_bwd_kernel(const FocusAttentionParams<bf16> p, const float* __restrict__ delta,
                           float* __restrict__ dq_accum, int KP) {
  constexpr int LD = D + 8, kQT = kQ * LD;
  const FocusGateKind kind = p.gate.kind;
  const bool hard = kind == FocusGateKind::hard, want_dg = p.dg != nullptr;
  const int ldg = KP + 8, nkk = KP / 16, w = p.gate.local_window;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* sK = reinterpret_cast<bf16*>(smem_raw);           // [kKeys][LD]
  bf16* sV = sK + kKeys * LD;                             // [kKeys][LD]
  bf16* sQ = sV + kKeys * LD;                             // [2][kQ][LD]
  bf16* sdO = sQ + 2 * kQT;                               // [2][kQ][LD]
  float* sLse = reinterpret_cast<float*>(sdO + 2 * kQT);  // [2][kQ]
  float* sDelta = sLse + 2 * kQ;                          // [2][kQ]
  bf16* sdS = reinterpret_cast<bf16*>(sDelta + 2 * kQ);   // [kKeys][kLdS]
  bf16* sdAh = sdS + kKeys * kLdS;                        // [kKeys][kLdS], dA^T = hi + lo
  bf16* sdAl = sdAh + kKeys * kLdS;
  bf16* sGkh = sdAl + kKeys * kLdS;  // [kKeys][ldg]
  bf16* sGkl = sGkh + kKeys * ldg;
  bf16* sGqh = sGkl + kKeys * ldg;  // [2][kQ][ldg]
  bf16* sGql = sGqh + 2 * kQ * ldg;
  uint64_t* sMk = reinterpret_cast<uint64_t*>(sGql + 2 * kQ * ldg);  // [kKeys]
  uint64_t* sMq = sMk + kKeys;                                       // [2][kQ]
  float* sStage = reinterpret_cast<float*>(sMq + 2 * kQ);            // [2][kQ * K]
  const int T = p.seq_len;
  const AttentionMask mask{};  // causal, no window
  const int hk = blockIdx.y, b = blockIdx.z, group = p.n_head / p.n_kv_head;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, tig = lane & 3;
  const int k0 = blockIdx.x * kKeys;
  const int wkey = warp * 16;
  const int64_t rs = p.q_row_stride;
  const bf16* gk = p.k + b * p.kv_batch_stride + hk * D;
  const bf16* gv = p.v + b * p.kv_batch_stride + hk * D;
  const float* gg = p.g + b * p.g_batch_stride;
  const int32_t* ggr = hard ? p.groups + b * p.groups_batch_stride : nullptr;

  const TileRange tiles = mask.query_tiles(k0, kKeys, kQ, T);
  const int m_begin = tiles.begin, m_end = tiles.end;
  const int per_head = max(0, m_end - m_begin);
  const int iters = group * per_head;

  auto issue = [&](int it, int buf) {
    const int h = hk * group + it / per_head;
    const int q0 = (m_begin + it % per_head) * kQ;
    load_rows<kQ, D>(sQ + buf * kQT, p.q + b * p.q_batch_stride + h * D, rs, q0, T);
    load_rows<kQ, D>(sdO + buf * kQT, p.dout + b * p.o_batch_stride + h * D, p.o_row_stride, q0, T);
    const int64_t base = (int64_t(b) * p.n_head + h) * T + q0;
    for (int i = threadIdx.x; i < kQ; i += kThreads) {
      const bool ok = q0 + i < T;
      cp_async4(sLse + buf * kQ + i, p.lse + (ok ? base + i : 0), ok);
      cp_async4(sDelta + buf * kQ + i, delta + (ok ? base + i : 0), ok);
    }
    // (The query tile's g rows and masks depend on (b, q0) only; kept simple: loaded per head.)
    if (hard) load_group_masks<kQ, kThreads>(sMq + buf * kQ, ggr, p.top_k, q0, T);
  };

  load_rows<kKeys, D>(sK, gk, p.kv_row_stride, k0, T);
  load_rows<kKeys, D>(sV, gv, p.kv_row_stride, k0, T);
  load_g_rows<kKeys, kThreads>(sGkh, sGkl, ldg, gg, p.K, KP, k0, T);
  if (hard) load_group_masks<kKeys, kThreads>(sMk, ggr, p.top_k, k0, T);
  auto q0_of = [&](int it) { return (m_begin + it % per_head) * kQ; };
  if (iters > 0) {
    issue(0, 0);
    load_g_rows<kQ, kThreads>(sGqh, sGql, ldg, gg, p.K, KP, q0_of(0), T);
  }
  if (iters > 1) stage_g_rows<kQ, kThreads>(sStage + kQ * p.K, gg, p.K, q0_of(1), T);
  cp_async_commit();

  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) {
#pragma unroll
    for (int c = 0; c < 4; ++c) dk[i][c] = dv[i][c] = 0.f;
  }
  const float sl2 = p.scale * kLog2e;

  for (int it = 0; it < iters; ++it) {
    const int buf = it & 1;
    cp_async_wait_all();
    __syncthreads();
    if (it + 1 < iters) {
      issue(it + 1, buf ^ 1);
      // The g of query tile it + 1 landed in staging slot buf ^ 1; tile it + 2's goes to slot buf
      // (converted in the previous iteration): no global load stalls the loop.
      convert_g_rows<kQ, kThreads>(sGqh + (buf ^ 1) * kQ * ldg, sGql + (buf ^ 1) * kQ * ldg, ldg,
                                   sStage + (buf ^ 1) * kQ * p.K, p.K, KP);
      if (it + 2 < iters) {
        stage_g_rows<kQ, kThreads>(sStage + buf * kQ * p.K, gg, p.K, q0_of(it + 2), T);
      }
      cp_async_commit();
    }
    const int h = hk * group + it / per_head;
    const int q0 = (m_begin + it % per_head) * kQ;
    const bf16* cQ = sQ + buf * kQT;
    const bf16* cdO = sdO + buf * kQT;
    const float* cLse = sLse + buf * kQ;
    const float* cDelta = sDelta + buf * kQ;
    const bf16* cGqh = sGqh + buf * kQ * ldg;
    const bf16* cGql = sGql + buf * kQ * ldg;

    // S^T = K_w Q^T and dP^T = V_w dO^T (16 keys x kQ queries)
    float pt[kNT][4], dpt[kNT][4];
#pragma unroll
    for (int i = 0; i < kNT; ++i) {
#pragma unroll
      for (int c = 0; c < 4; ++c) pt[i][c] = dpt[i][c] = 0.f;
    }
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t ak[4], av[4];
      load_a<LD>(ak, sK, wkey, kk * 16, lane);
      load_a<LD>(av, sV, wkey, kk * 16, lane);
#pragma unroll
      for (int j = 0; j < kQ / 16; ++j) {
        uint32_t bq[4], bd[4];
        load_b_nk<LD>(bq, cQ, j * 16, kk * 16, lane);
        mma16816(pt[2 * j], ak, bq[0], bq[1]);
        mma16816(pt[2 * j + 1], ak, bq[2], bq[3]);
        load_b_nk<LD>(bd, cdO, j * 16, kk * 16, lane);
        mma16816(dpt[2 * j], av, bd[0], bd[1]);
        mma16816(dpt[2 * j + 1], av, bd[2], bd[3]);
      }
    }
    const bool need_mask = ATTN_MASK_NEEDS_MASK(mask, q0, kQ, k0, kKeys, T);
    // Some pair of the block's (warp's) keys and these queries is distant.
    const bool block_gated = q0 + kQ - 1 - k0 > w;
    const bool gated = q0 + kQ - 1 - (k0 + wkey) > w;
    // Per 16 queries: the affinity A^T (if gated), then P, dS, dA in place; dS^T and dA^T go to
    // shared memory for the products over the block's keys.
#pragma unroll
    for (int j = 0; j < kQ / 16; ++j) {
      float a[2][4];
      if (gated && !hard) {
        affinity_mma<2>(a, sGkh, sGkl, wkey, cGqh + j * 16 * ldg, cGql + j * 16 * ldg, ldg, nkk,
                        lane);
      }
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        const int nt = 2 * j + n;
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int qc = nt * 8 + 2 * tig + (c & 1), qi = q0 + qc;
          const int kr = wkey + g + (c >= 2 ? 8 : 0), key = k0 + kr;
          const float lse2 = cLse[qc] * kLog2e, dd = dpt[nt][c] - cDelta[qc];
          const float e = exp2_ftz(fmaf(pt[nt][c], sl2, -lse2));
          float P = e, ds = 0.f, da = 0.f;
          if (need_mask && !key_visible(qi, key, T, true, 0)) {
            P = 0.f;
          } else if (!(gated && qi - key > w)) {
            ds = P * dd;
          } else if (kind == FocusGateKind::additive) {
            P = e * (a[n][c] + p.gate.eps);
            ds = P * dd;
            da = e * dd;
          } else if (kind == FocusGateKind::multiplicative) {
            const float sn = pt[nt][c] * p.scale;
            const float sg = sigmoid(p.gate.scale * a[n][c] + p.gate.bias);
            P = exp2_ftz(fmaf(sn * sg, kLog2e, -lse2));
            ds = P * dd * sg;
            da = P * dd * sn * p.gate.scale * sg * (1.f - sg);
          } else {
            P = (sMk[kr] & sMq[buf * kQ + qc]) != 0 ? e : 0.f;
            ds = P * dd;
            da = hard_straight_through_weight(e) * dd;
          }
          pt[nt][c] = P;
          dpt[nt][c] = ds;
          a[n][c] = da;
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int row = (wkey + g + 8 * r) * kLdS + nt * 8 + 2 * tig;
          *reinterpret_cast<uint32_t*>(sdS + row) = pack_bf16(dpt[nt][2 * r], dpt[nt][2 * r + 1]);
          if (want_dg && block_gated) {
            const float x0 = a[n][2 * r], x1 = a[n][2 * r + 1];
            const __nv_bfloat162 hi = __floats2bfloat162_rn(x0, x1);
            const float2 hf = __bfloat1622float2(hi);
            *reinterpret_cast<__nv_bfloat162*>(sdAh + row) = hi;
            *reinterpret_cast<uint32_t*>(sdAl + row) = pack_bf16(x0 - hf.x, x1 - hf.y);
          }
        }
      }
    }
    // dV += P^T dO;  dK += dS^T Q   (k = the kQ queries)
#pragma unroll
    for (int kk = 0; kk < kQ / 16; ++kk) {
      uint32_t ap[4], ads[4];
      c_to_a(ap, pt[2 * kk], pt[2 * kk + 1]);
      c_to_a(ads, dpt[2 * kk], dpt[2 * kk + 1]);
#pragma unroll
      for (int dt = 0; dt < D / 16; ++dt) {
        uint32_t bd[4], bq[4];
        load_b_kn<LD>(bd, cdO, kk * 16, dt * 16, lane);
        mma16816(dv[2 * dt], ap, bd[0], bd[1]);
        mma16816(dv[2 * dt + 1], ap, bd[2], bd[3]);
        load_b_kn<LD>(bq, cQ, kk * 16, dt * 16, lane);
        mma16816(dk[2 * dt], ads, bq[0], bq[1]);
        mma16816(dk[2 * dt + 1], ads, bq[2], bq[3]);
      }
    }
    __syncthreads();
    // dQ += dS K and dg_query += dA G_k over the block's keys: warp w takes queries 16 w ..
    const int qrow = q0 + warp * 16 + g;
    {
      uint32_t adq[kKeys / 16][4];
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk)
        load_a_t<kLdS>(adq[kk], sdS, kk * 16, warp * 16, lane);
      float* acc_row = dq_accum + ((int64_t(b) * p.n_head + h) * T + qrow) * D;
#pragma unroll
      for (int dt = 0; dt < D / 16; ++dt) {
        float acc[2][4] = {};
#pragma unroll
        for (int kk = 0; kk < kKeys / 16; ++kk) {
          uint32_t bk[4];
          load_b_kn<LD>(bk, sK, kk * 16, dt * 16, lane);
          mma16816(acc[0], adq[kk], bk[0], bk[1]);
          mma16816(acc[1], adq[kk], bk[2], bk[3]);
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          if (qrow + 8 * r >= T) continue;
#pragma unroll
          for (int n = 0; n < 2; ++n) {
            red_add2(acc_row + 8 * r * D + dt * 16 + n * 8 + 2 * tig, acc[n][2 * r],
                     acc[n][2 * r + 1]);
          }
        }
      }
    }
    if (want_dg && block_gated) {
      // dg_query += dA G_k; dA and G as hi + lo (hi.hi + hi.lo + lo.hi): about fp32 accuracy.
      float* dg_row = p.dg + (int64_t(b) * T + qrow) * p.K;
#pragma unroll
      for (int dt = 0; dt < kMaxKP / 16; ++dt) {
        if (dt >= nkk) break;
        float acc[2][4] = {};
#pragma unroll
        for (int kk = 0; kk < kKeys / 16; ++kk) {
          uint32_t ah[4], al[4], bh[4], bl[4];
          load_a_t<kLdS>(ah, sdAh, kk * 16, warp * 16, lane);
          load_a_t<kLdS>(al, sdAl, kk * 16, warp * 16, lane);
          load_b_kn_ld(bh, sGkh, ldg, kk * 16, dt * 16, lane);
          load_b_kn_ld(bl, sGkl, ldg, kk * 16, dt * 16, lane);
          mma_split(acc, ah, al, bh, bl);
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          if (qrow + 8 * r >= T) continue;
#pragma unroll
          for (int n = 0; n < 2; ++n) {
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              const int col = dt * 16 + n * 8 + 2 * tig + c;
              if (col < p.K) atomicAdd(dg_row + 8 * r * p.K + col, acc[n][2 * r + c]);
            }
          }
        }
      }
      // dg_key += dA^T G_q: warp w takes its 16 keys.
      float* dgk_row = p.dg + (int64_t(b) * T + k0 + wkey + g) * p.K;
#pragma unroll
      for (int dt = 0; dt < kMaxKP / 16; ++dt) {
        if (dt >= nkk) break;
        float acc[2][4] = {};
#pragma unroll
        for (int kk = 0; kk < kQ / 16; ++kk) {
          uint32_t ah[4], al[4], bh[4], bl[4];
          load_a<kLdS>(ah, sdAh, wkey, kk * 16, lane);
          load_a<kLdS>(al, sdAl, wkey, kk * 16, lane);
          load_b_kn_ld(bh, cGqh, ldg, kk * 16, dt * 16, lane);
          load_b_kn_ld(bl, cGql, ldg, kk * 16, dt * 16, lane);
          mma_split(acc, ah, al, bh, bl);
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          if (k0 + wkey + g + 8 * r >= T) continue;
#pragma unroll
          for (int n = 0; n < 2; ++n) {
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              const int col = dt * 16 + n * 8 + 2 * tig + c;
              if (col < p.K) atomicAdd(dgk_row + 8 * r * p.K + col, acc[n][2 * r + c]);
            }
          }
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = k0 + wkey + g + 8 * r;
    if (key >= T) continue;
    const int64_t off = b * p.kv_batch_stride + int64_t(key) * p.kv_row_stride + hk * D;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      *reinterpret_cast<__nv_bfloat162*>(p.dk + off + dt * 8 + 2 * tig) =
          __floats2bfloat162_rn(dk[dt][2 * r] * p.scale, dk[dt][2 * r + 1] * p.scale);
      *reinterpret_cast<__nv_bfloat162*>(p.dv + off + dt * 8 + 2 * tig) =
          __floats2bfloat162_rn(dv[dt][2 * r], dv[dt][2 * r + 1]);
    }
  }
}

template <int D>
void bwd(const FocusAttentionParams<bf16>& p, const float* delta, float* dq_accum, int KP,
         cudaStream_t st) {
  const size_t smem = bwd_smem(D, p.K, KP);
  set_smem(focus_tiled_bwd_kernel<D>, smem);
  focus_tiled_bwd_kernel<D>
      <<<dim3(div_up(p.seq_len, kKeys), p.n_kv_head, p.B), kThreads, smem, st>>>(p, delta, dq_accum,
                                                                                 KP);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_focus_tiled_bwd(const FocusAttentionParams<bf16>& p, Stream s) {
  ATTN_REQUIRE(focus_tiled_supported(p),
               "focus tiled attention: needs D 64 or 128 (got %d), packed qkv, pos 0 (got %d), "
               "1 .. %d groups (got %d)",
               p.D, p.pos, kMaxKP, p.K);
  const int64_t rows = int64_t(p.B) * p.n_head * p.seq_len;
  if (rows == 0) return;
  const auto st = reinterpret_cast<cudaStream_t>(s);
  const int KP = div_up(p.K, 16) * 16;
  StreamScratch scratch(size_t(rows) * (p.D + 1) * sizeof(float), s);
  float* dq_accum = scratch.as<float>();  // [B, H, T, D], 16-byte aligned
  float* delta = dq_accum + rows * p.D;   // [B, H, T]
  launch_attention_bwd_delta(focus_dense_params(p), delta, dq_accum, s);
  if (p.dg) {
    CUDA_CHECK(cudaMemsetAsync(p.dg, 0, size_t(p.B) * p.seq_len * p.K * sizeof(float), st));
  }
  if (p.D == 64) {
    bwd<64>(p, delta, dq_accum, KP, st);
  } else {
    bwd<128>(p, delta, dq_accum, KP, st);
  }
  const int64_t pairs = rows * (p.D / 2);
  focus_tiled_dq_convert<<<div_up(pairs, 256), 256, 0, st>>>(p, dq_accum);
  CUDA_CHECK_LAUNCH();
}

}  // namespace attnlab
