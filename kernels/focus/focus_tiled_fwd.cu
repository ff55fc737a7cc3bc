// The tiled Focus attention forward (focus_tiled.cuh): o and lse (natural log) written (=).
// Structure of the dense mma.sync forward (kernels/attention/attention_fwd_mma.cu): a block owns
// 128 queries (4 warps x 2 m-tiles of 16 rows), loops over the causal range of 64-key tiles with
// K/V double-buffered by cp.async; the g rows of the keys are staged (fp32, cp.async) two tiles
// ahead and converted to bf16 hi/lo one tile ahead; the hard gate's group masks of the next tile
// are stored with plain loads. Scores are kept in the scaled log2 domain (x = s * scale * log2 e).
#include <cuda_bf16.h>

#include "kernels/attention/mma_softmax.cuh"
#include "kernels/attention/visibility.h"
#include "kernels/focus/focus_tiled.cuh"
#include "kernels/focus/focus_tiled_gate.cuh"

namespace attnlab {
namespace {

using namespace mma;
using namespace focus_tiled;

constexpr int kMT = 2;               // m-tiles (16 rows) per warp
constexpr int kRows = 4 * 16 * kMT;  // queries per block
constexpr int kKT = kTile;           // keys per K/V tile

// Dynamic shared memory: Q, 2 x (K, V) bf16 tiles, then for the soft gates the g hi/lo tiles of
// the queries and 2 x of the keys and 2 fp32 staging tiles of the keys' g, or for hard the group
// masks of the queries and 2 x keys.
size_t fwd_smem(int D, int K, int KP, bool hard) {
  const size_t ldg = KP + 8;
  return size_t(kRows + 4 * kKT) * (D + 8) * sizeof(bf16) +
         (hard ? size_t(kRows + 2 * kKT) * sizeof(uint64_t)
               : 2 * size_t(kRows + 2 * kKT) * ldg * sizeof(bf16) + 2 * size_t(kKT) * K * 4);
}

template <int D>
__global__ void __launch_bounds__(kThreads)
    focus_tiled_fwd_kernel(const FocusAttentionParams<bf16> p, int KP) {
  constexpr int LD = D + 8;
  constexpr bool kQInRegs = D <= 64;
  constexpr int kQF = kQInRegs ? D / 16 : 1;
  const FocusGateKind kind = p.gate.kind;
  const bool hard = kind == FocusGateKind::hard;
  const int ldg = KP + 8, nkk = KP / 16, w = p.gate.local_window;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw);  // [kRows][LD]
  bf16* sK = sQ + kRows * LD;                    // [2][kKT][LD]
  bf16* sV = sK + 2 * kKT * LD;                  // [2][kKT][LD]
  bf16* sGqh = sV + 2 * kKT * LD;                // soft: [kRows][ldg]
  bf16* sGql = sGqh + kRows * ldg;
  bf16* sGkh = sGql + kRows * ldg;  // soft: [2][kKT][ldg]
  bf16* sGkl = sGkh + 2 * kKT * ldg;
  float* sStage = reinterpret_cast<float*>(sGkl + 2 * kKT * ldg);  // soft: [2][kKT * K]
  uint64_t* sMq = reinterpret_cast<uint64_t*>(sV + 2 * kKT * LD);  // hard: [kRows]
  uint64_t* sMk = sMq + kRows;                                     // hard: [2][kKT]
  const int T = p.seq_len;
  const AttentionMask mask{};                      // causal, no window
  const int m_block = gridDim.x - 1 - blockIdx.x;  // longest (causal) tiles first
  const int h = blockIdx.y, b = blockIdx.z, hk = h / (p.n_head / p.n_kv_head);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, tig = lane & 3;
  const int q0 = m_block * kRows;
  const int wrow = warp * 16 * kMT;
  const int64_t rs = p.q_row_stride;
  const bf16* gq = p.q + b * p.q_batch_stride + h * D;
  const bf16* gk = p.k + b * p.kv_batch_stride + hk * D;
  const bf16* gv = p.v + b * p.kv_batch_stride + hk * D;
  const float* gg = hard ? nullptr : p.g + b * p.g_batch_stride;
  const int32_t* ggr = hard ? p.groups + b * p.groups_batch_stride : nullptr;

  const TileRange tiles = mask.key_tiles(q0, kRows, kKT, T);
  const int n_begin = tiles.begin, n_end = tiles.end;

  load_rows<kRows, D>(sQ, gq, rs, q0, T);
  load_rows<kKT, D>(sK, gk, p.kv_row_stride, n_begin * kKT, T);
  load_rows<kKT, D>(sV, gv, p.kv_row_stride, n_begin * kKT, T);
  if (!hard && n_begin + 1 < n_end) {
    stage_g_rows<kKT, kThreads>(sStage + kKT * p.K, gg, p.K, (n_begin + 1) * kKT, T);
  }
  cp_async_commit();
  if (hard) {
    load_group_masks<kRows, kThreads>(sMq, ggr, p.top_k, q0, T);
    load_group_masks<kKT, kThreads>(sMk, ggr, p.top_k, n_begin * kKT, T);
  } else {
    load_g_rows<kRows, kThreads>(sGqh, sGql, ldg, gg, p.K, KP, q0, T);
    load_g_rows<kKT, kThreads>(sGkh, sGkl, ldg, gg, p.K, KP, n_begin * kKT, T);
  }

  float o[kMT][D / 8][4], row_max[kMT][2], row_sum[kMT][2];
  init_rows<kMT, D>(o, row_max, row_sum);
  uint32_t qf[kMT][kQF][4];
  const float sl2 = p.scale * kLog2e;

  for (int nb = n_begin; nb < n_end; ++nb) {
    const int buf = (nb - n_begin) & 1;
    cp_async_wait_all();
    __syncthreads();
    if constexpr (kQInRegs) {
      if (nb == n_begin) load_q_frags<kMT, kQF, LD>(qf, sQ, wrow, lane);
    }
    if (nb + 1 < n_end) {
      const int next = (nb + 1) * kKT;
      load_rows<kKT, D>(sK + (buf ^ 1) * kKT * LD, gk, p.kv_row_stride, next, T);
      load_rows<kKT, D>(sV + (buf ^ 1) * kKT * LD, gv, p.kv_row_stride, next, T);
      if (hard) {
        load_group_masks<kKT, kThreads>(sMk + (buf ^ 1) * kKT, ggr, p.top_k, next, T);
      } else {
        // Tile nb + 1's g landed in staging slot buf ^ 1 (the wait above); tile nb + 2's goes to
        // slot buf, whose tile (nb) was converted in the previous iteration.
        convert_g_rows<kKT, kThreads>(sGkh + (buf ^ 1) * kKT * ldg, sGkl + (buf ^ 1) * kKT * ldg,
                                      ldg, sStage + (buf ^ 1) * kKT * p.K, p.K, KP);
        if (nb + 2 < n_end) {
          stage_g_rows<kKT, kThreads>(sStage + buf * kKT * p.K, gg, p.K, next + kKT, T);
        }
      }
      cp_async_commit();
    }
    const bf16* cK = sK + buf * kKT * LD;
    const bf16* cV = sV + buf * kKT * LD;
    const int k0 = nb * kKT;
    const int wq0 = q0 + wrow, wq_last = wq0 + 16 * kMT - 1;
    if (ATTN_MASK_TILE_INVISIBLE(mask, wq0, wq_last, k0, k0 + kKT - 1)) continue;

    float s[kMT][kKT / 8][4];
    qk_scores<kMT, kKT, D, LD, kQInRegs>(s, qf, sQ, wrow, cK, 0, lane);
    const bool need_mask = ATTN_MASK_NEEDS_KEY_MASK(mask, q0, kRows, k0, kKT, T);
    // Some pair of this warp's rows and these keys is distant (gated); else the dense math.
    const bool gated = wq_last - k0 > w;
    // The affinity is computed 16 keys at a time (registers: o and s already fill most).
    const bf16* cGkh = sGkh + buf * kKT * ldg;
    const bf16* cGkl = sGkl + buf * kKT * ldg;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      const int r0 = wrow + mt * 16;
      // 1. scale to the log2 domain, causal mask; multiplicative and hard gates on the logit.
#pragma unroll
      for (int j = 0; j < kKT / 16; ++j) {
        float a[2][4];
        if (gated && kind == FocusGateKind::multiplicative) {
          affinity_mma<2>(a, sGqh, sGql, r0, cGkh + j * 16 * ldg, cGkl + j * 16 * ldg, ldg, nkk,
                          lane);
        }
#pragma unroll
        for (int n = 0; n < 2; ++n) {
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const int nt = 2 * j + n, kc = nt * 8 + 2 * tig + (c & 1), key = k0 + kc;
            const int qr = r0 + g + (c >= 2 ? 8 : 0), qi = q0 + qr;
            float x = s[mt][nt][c] * sl2;
            if (need_mask && ATTN_MASK_HIDDEN(mask, qi, key, T)) {
              x = -INFINITY;
            } else if (gated && qi - key > w) {
              if (kind == FocusGateKind::multiplicative) {
                x *= sigmoid(p.gate.scale * a[n][c] + p.gate.bias);
              } else if (hard && (sMq[qr] & sMk[buf * kKT + kc]) == 0) {
                x = -INFINITY;
              }
            }
            s[mt][nt][c] = x;
          }
        }
      }
      // 2. online softmax: running max, rescale, exponentials (s holds log2-domain logits).
      float corr[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) corr[r] = softmax_exp_row<kKT>(s[mt], r, 1.f, row_max[mt][r]);
      // 3. additive: the weight (a + eps) after the exponential (masked elements are 0 already).
      if (gated && kind == FocusGateKind::additive) {
#pragma unroll
        for (int j = 0; j < kKT / 16; ++j) {
          float a[2][4];
          affinity_mma<2>(a, sGqh, sGql, r0, cGkh + j * 16 * ldg, cGkl + j * 16 * ldg, ldg, nkk,
                          lane);
#pragma unroll
          for (int n = 0; n < 2; ++n) {
#pragma unroll
            for (int c = 0; c < 4; ++c) {
              const int key = k0 + (2 * j + n) * 8 + 2 * tig + (c & 1);
              const int qi = q0 + r0 + g + (c >= 2 ? 8 : 0);
              if (qi - key > w) s[mt][2 * j + n][c] *= a[n][c] + p.gate.eps;
            }
          }
        }
      }
      // 4. row sums and the rescale of o.
#pragma unroll
      for (int r = 0; r < 2; ++r)
        softmax_rescale_row<kKT, D>(s[mt], r, corr[r], row_sum[mt][r], o[mt]);
    }
    pv_accumulate<kMT, kKT, D, LD>(o, s, cV, 0, lane);
  }

  write_rows<kMT, D>(o, row_max, row_sum, p.o + b * p.o_batch_stride + h * D, p.o_row_stride,
                     p.lse ? p.lse + (int64_t(b) * p.n_head + h) * T : nullptr, q0 + wrow, T, lane);
}

template <int D>
void fwd(const FocusAttentionParams<bf16>& p, int KP, cudaStream_t st) {
  const dim3 grid(div_up(p.seq_len, kRows), p.n_head, p.B);
  const size_t smem = fwd_smem(D, p.K, KP, p.gate.kind == FocusGateKind::hard);
  set_smem(focus_tiled_fwd_kernel<D>, smem);
  focus_tiled_fwd_kernel<D><<<grid, kThreads, smem, st>>>(p, KP);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

bool focus_tiled_supported(const FocusAttentionParams<bf16>& p) {
  const bool hard = p.gate.kind == FocusGateKind::hard;
  // g is needed for the group bound (hard: ids < K <= 64 fit the 64-bit masks) and for dg.
  return (p.D == 64 || p.D == 128) && p.pos == 0 && p.kv_head_stride == p.D &&
         p.q_row_stride == p.kv_row_stride && p.q_row_stride % 8 == 0 &&
         p.q_batch_stride % 8 == 0 && p.o_row_stride % 8 == 0 && p.o_batch_stride % 8 == 0 &&
         aligned16(p.q) && aligned16(p.k) && aligned16(p.v) && p.g != nullptr && p.K >= 1 &&
         p.K <= focus_tiled::kMaxKP && (!hard || (p.groups != nullptr && p.top_k >= 1));
}

void launch_focus_tiled_fwd(const FocusAttentionParams<bf16>& p, Stream s) {
  ATTN_REQUIRE(focus_tiled_supported(p),
               "focus tiled attention: needs D 64 or 128 (got %d), packed qkv, pos 0 (got %d), "
               "1 .. %d groups (got %d)",
               p.D, p.pos, focus_tiled::kMaxKP, p.K);
  if (int64_t(p.B) * p.n_head * p.seq_len == 0) return;
  const int KP = p.gate.kind == FocusGateKind::hard ? 0 : div_up(p.K, 16) * 16;
  const auto st = reinterpret_cast<cudaStream_t>(s);
  if (p.D == 64) {
    fwd<64>(p, KP, st);
  } else {
    fwd<128>(p, KP, st);
  }
}

}  // namespace attnlab
