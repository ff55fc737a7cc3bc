// bf16 attention forward on mma.sync tensor cores (m16n8k16, bf16 operands, fp32 accumulation),
// head dim 64 or 128, any sm_80+ device. Contract: launch_attention_fwd<bf16> (attention.cuh): o
// and lse (natural log) written (=), packed strided q/k/v, GQA, the mask of AttentionMask. The
// dispatcher (attention.cu) runs it where the Hopper wgmma forward is not used.
//
// A block owns 128 queries (4 warps x 2 m-tiles of 16 rows) and loops over K/V tiles (128 keys for
// D = 64, 64 for D = 128) double-buffered in shared memory (cp.async): S = Q K^T, online softmax
// in the log2 domain (ex2.approx.ftz, the scale folded into one FFMA per score), O += P V. Warps
// skip key tiles their rows do not see; element masks only on tiles that need them
// (AttentionMask::needs_key_mask: the diagonal, the window edge, the end of T).
#include <cuda_bf16.h>

#include "kernels/attention/attention_impl.cuh"
#include "kernels/attention/mma_common.cuh"
#include "kernels/attention/mma_softmax.cuh"

namespace attnlab {
namespace {

using namespace mma;

// A block owns kFwdRows = 128 queries: each warp two 16-row m-tiles, so that every K/V fragment
// read from shared memory feeds four tensor-core products (smem bandwidth is the limiter with
// one m-tile). Q fragments stay in registers for D = 64 and are re-read from smem for D = 128.
constexpr int kFwdMT = 2;                  // m-tiles (16 rows) per warp
constexpr int kFwdRows = 4 * 16 * kFwdMT;  // queries per block

// kKT keys per shared-memory K/V tile (one barrier each), processed in softmax steps of kSub = 64
// keys (32-key steps were measured slower: more rescales). 128-key tiles for D = 64 (half the
// barriers; measured faster); 64 for D = 128 (two 128-key tiles would not leave room for 2
// blocks/SM).
template <int D>
constexpr int kFwdKeyTile = D == 64 ? 128 : kTile;
template <int D, int kKT = kFwdKeyTile<D>>
__global__ void __launch_bounds__(kThreads) attn_fwd_bf16(const AttentionParams<bf16> p) {
  constexpr int LD = D + 8;
  constexpr bool kQInRegs = D <= 64;
  constexpr int kQF = kQInRegs ? D / 16 : 1;
  constexpr int kSub = kTile;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw);  // [kFwdRows][LD]
  bf16* sK = sQ + kFwdRows * LD;                 // [2][kKT][LD]
  bf16* sV = sK + 2 * kKT * LD;                  // [2][kKT][LD]
  const int T = p.seq_len;
  const AttentionMask& mask = p.mask;
  const int m_block = gridDim.x - 1 - blockIdx.x;  // longest (causal) tiles first
  const int h = blockIdx.y, b = blockIdx.z, hk = h / (p.n_head / p.n_kv_head);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, tig = lane & 3;
  const int q0 = m_block * kFwdRows;
  const int wrow = warp * 16 * kFwdMT;  // first row of this warp inside the block tile
  const bf16* gq = p.q + b * p.qkv_batch_stride + h * D;
  const bf16* gk = p.k + b * p.qkv_batch_stride + hk * D;
  const bf16* gv = p.v + b * p.qkv_batch_stride + hk * D;

  const TileRange tiles = mask.key_tiles(q0, kFwdRows, kKT, T);
  const int n_begin = tiles.begin, n_end = tiles.end;

  load_rows<kFwdRows, D>(sQ, gq, p.qkv_row_stride, q0, T);
  load_rows<kKT, D>(sK, gk, p.qkv_row_stride, n_begin * kKT, T);
  load_rows<kKT, D>(sV, gv, p.qkv_row_stride, n_begin * kKT, T);
  cp_async_commit();

  float o[kFwdMT][D / 8][4], row_max[kFwdMT][2], row_sum[kFwdMT][2];
  init_rows<kFwdMT, D>(o, row_max, row_sum);
  uint32_t qf[kFwdMT][kQF][4];
  const float sl2 = p.scale * kLog2e;

  for (int nb = n_begin; nb < n_end; ++nb) {
    const int buf = (nb - n_begin) & 1;
    cp_async_wait_all();
    __syncthreads();
    if constexpr (kQInRegs) {
      if (nb == n_begin) load_q_frags<kFwdMT, kQF, LD>(qf, sQ, wrow, lane);
    }
    if (nb + 1 < n_end) {
      load_rows<kKT, D>(sK + (buf ^ 1) * kKT * LD, gk, p.qkv_row_stride, (nb + 1) * kKT, T);
      load_rows<kKT, D>(sV + (buf ^ 1) * kKT * LD, gv, p.qkv_row_stride, (nb + 1) * kKT, T);
      cp_async_commit();
    }
    const bf16* cK = sK + buf * kKT * LD;
    const bf16* cV = sV + buf * kKT * LD;

#pragma unroll
    for (int sub = 0; sub < kKT / kSub; ++sub) {
      // A warp whose rows see none of these keys (past its causal diagonal or before its window)
      // skips them; its block-mates still need the tile, so only the arithmetic is skipped.
      const int k_first = nb * kKT + sub * kSub;
      if (ATTN_MASK_TILE_INVISIBLE(mask, q0 + wrow, q0 + wrow + 16 * kFwdMT - 1, k_first,
                                   k_first + kSub - 1)) {
        continue;
      }
      float s[kFwdMT][kSub / 8][4];
      qk_scores<kFwdMT, kSub, D, LD, kQInRegs>(s, qf, sQ, wrow, cK, sub * kSub, lane);
      const int k0 = nb * kKT + sub * kSub;
      const bool need_mask = ATTN_MASK_NEEDS_KEY_MASK(mask, q0, kFwdRows, k0, kSub, T);
      if (need_mask) {
#pragma unroll
        for (int mt = 0; mt < kFwdMT; ++mt) {
#pragma unroll
          for (int nt = 0; nt < kSub / 8; ++nt) {
#pragma unroll
            for (int c = 0; c < 4; ++c) {
              const int key = k0 + nt * 8 + 2 * tig + (c & 1);
              const int qi = q0 + wrow + mt * 16 + g + (c >= 2 ? 8 : 0);
              if (ATTN_MASK_HIDDEN(mask, qi, key, T)) s[mt][nt][c] = -INFINITY;
            }
          }
        }
      }
      // Raw scores here; the scale is folded into the exponent (one FFMA per score), which is
      // exact for the max because scale > 0. row_max is kept in the scaled log2 domain.
      online_softmax_rows<kFwdMT, kSub, D>(s, sl2, row_max, row_sum, o);
      pv_accumulate<kFwdMT, kSub, D, LD>(o, s, cV, sub * kSub, lane);
    }  // sub
  }

  write_rows<kFwdMT, D>(o, row_max, row_sum, p.o + b * p.o_batch_stride + h * D, p.o_row_stride,
                        p.lse + (int64_t(b) * p.n_head + h) * T, q0 + wrow, T, lane);
}

template <int D>
void fwd_bf16(const AttentionParams<bf16>& p, cudaStream_t st) {
  const dim3 grid(div_up(p.seq_len, kFwdRows), p.n_head, p.B);
  constexpr int kKT = kFwdKeyTile<D>;
  const size_t smem = size_t(kFwdRows + 4 * kKT) * (D + 8) * sizeof(bf16);
  set_smem(attn_fwd_bf16<D, kKT>, smem);
  attn_fwd_bf16<D, kKT><<<grid, kThreads, smem, st>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

namespace attention_impl {

void fwd_bf16_mma(const AttentionParams<bf16>& p, cudaStream_t st) {
  if (p.D == 64) {
    fwd_bf16<64>(p, st);
  } else {
    fwd_bf16<128>(p, st);
  }
}

int mma_binary_version() {
  static const int version = [] {
    cudaFuncAttributes attr{};
    CUDA_CHECK(cudaFuncGetAttributes(&attr, attn_fwd_bf16<64>));
    return attr.binaryVersion;
  }();
  return version;
}

}  // namespace attention_impl
}  // namespace attnlab
