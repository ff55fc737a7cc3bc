// CUDA kernels of kernels/sfa/sfa_flash.cuh (FlashSFA forward and backward, bf16 mma.sync).
// Tiles are 64 rows (kTile); blocks of 4 warps, each warp 16 rows of the tile it owns. The sparse
// form is expanded into zeroed shared-memory tiles (expand_rows); from there the loops are those of
// the dense mma.sync kernels (attention_fwd_mma.cu, and the deterministic backward of
// attention_bwd_mma.cu) in their simplest configuration: one buffer, one m-tile per warp.
#include <cuda_bf16.h>

#include "kernels/attention/attention.cuh"
#include "kernels/attention/mma_common.cuh"
#include "kernels/sfa/sfa_flash.cuh"

namespace attnlab {
namespace {

using namespace mma;
using Params = SfaFlashParams<bf16>;

constexpr int kMaskWords = 4;  // selection bitmask of a row, D <= 128

// Rows row0 .. row0 + kTile - 1 of one head's sparse form (entry e of row t at
// idx / val + t*row_stride + e) into the dense tile s [kTile][D + 8], zero elsewhere and past T.
// With `bits` ([kTile][kMaskWords]), also the rows' selection bitmasks. All threads call it; it
// synchronises between zeroing and scattering, the caller before (tile free) and after (tile
// ready).
template <int D>
__device__ void expand_rows(bf16* s, uint32_t* bits, const int32_t* idx, const bf16* val,
                            int64_t row_stride, int row0, int T, int k) {
  constexpr int LD = D + 8, kChunks = D / 8;
  for (int i = threadIdx.x; i < kTile * kChunks; i += kThreads)
    *reinterpret_cast<uint4*>(s + (i / kChunks) * LD + (i % kChunks) * 8) = make_uint4(0, 0, 0, 0);
  if (bits != nullptr)
    for (int i = threadIdx.x; i < kTile * kMaskWords; i += kThreads) bits[i] = 0u;
  __syncthreads();
  for (int i = threadIdx.x; i < kTile * k; i += kThreads) {
    const int r = i / k;
    if (row0 + r >= T) continue;
    const int64_t at = int64_t(row0 + r) * row_stride + (i - r * k);
    const int c = idx[at];
    s[r * LD + c] = val[at];
    if (bits != nullptr) atomicOr(bits + r * kMaskWords + c / 32, 1u << (c % 32));
  }
}

__device__ __forceinline__ bool selected(const uint32_t* bits, int row, int col) {
  return (bits[row * kMaskWords + col / 32] >> (col % 32)) & 1u;
}

// Writes a warp's 16 x D fp32 fragment rows (times mul) as bf16 to dst (+ t*row_stride), rows
// past T skipped; with bits, coordinates outside the row's selection are written as 0.
template <int D>
__device__ void store_rows(bf16* dst, int64_t row_stride, const float (&acc)[D / 8][4], float mul,
                           const uint32_t* bits, int tile_row0, int t0, int T, int lane) {
  const int g = lane >> 2, tig = lane & 3;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = tile_row0 + g + 8 * r, t = t0 + row;
    if (t >= T) continue;
    bf16* out = dst + int64_t(t) * row_stride;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      const int col = dt * 8 + 2 * tig;
      float a = acc[dt][2 * r] * mul, b = acc[dt][2 * r + 1] * mul;
      if (bits != nullptr) {
        if (!selected(bits, row, col)) a = 0.f;
        if (!selected(bits, row, col + 1)) b = 0.f;
      }
      *reinterpret_cast<__nv_bfloat162*>(out + col) = __floats2bfloat162_rn(a, b);
    }
  }
}

// The sparse form of head h (q) or kv head hk (k) of sequence b.
struct SparseHead {
  const int32_t* idx;
  const bf16* val;
  int64_t row_stride;
};
__device__ __forceinline__ SparseHead q_head(const Params& p, int b, int h) {
  const int64_t row = int64_t(p.n_head) * p.k, at = int64_t(b) * p.T * row + int64_t(h) * p.k;
  return {p.q_idx + at, p.q_val + at, row};
}
__device__ __forceinline__ SparseHead k_head(const Params& p, int b, int hk) {
  const int64_t row = int64_t(p.n_kv_head) * p.k, at = int64_t(b) * p.T * row + int64_t(hk) * p.k;
  return {p.k_idx + at, p.k_val + at, row};
}

// acc (16 x 64 fp32 fragments) = A B^T over D: A rows a_row0.. of sa, B rows 0..63 of sb.
template <int D>
__device__ __forceinline__ void tile_abt(float (&acc)[8][4], const bf16* sa, int a_row0,
                                         const bf16* sb, int lane) {
  constexpr int LD = D + 8;
#pragma unroll
  for (int i = 0; i < 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t a[4];
    load_a<LD>(a, sa, a_row0, kk * 16, lane);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t bb[4];
      load_b_nk<LD>(bb, sb, j * 16, kk * 16, lane);
      mma16816(acc[2 * j], a, bb[0], bb[1]);
      mma16816(acc[2 * j + 1], a, bb[2], bb[3]);
    }
  }
}

// acc (16 x D) += X (16 x 64 fp32 fragments, as bf16) times rows 0..63 of sb (64 x D).
template <int D>
__device__ __forceinline__ void tile_xb(float (&acc)[D / 8][4], const float (&x)[8][4],
                                        const bf16* sb, int lane) {
  constexpr int LD = D + 8;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    uint32_t a[4];
    c_to_a(a, x[2 * kk], x[2 * kk + 1]);
#pragma unroll
    for (int dt = 0; dt < D / 16; ++dt) {
      uint32_t bb[4];
      load_b_kn<LD>(bb, sb, kk * 16, dt * 16, lane);
      mma16816(acc[2 * dt], a, bb[0], bb[1]);
      mma16816(acc[2 * dt + 1], a, bb[2], bb[3]);
    }
  }
}

template <int D>
__device__ __forceinline__ void zero_acc(float (&acc)[D / 8][4]) {
#pragma unroll
  for (int i = 0; i < D / 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
}

// ---- forward: one block per 64 queries of head h --------------------------------------------
template <int D>
__global__ void __launch_bounds__(kThreads) sfa_flash_fwd_kernel(const Params p) {
  constexpr int LD = D + 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw);  // [kTile][LD] each
  bf16* sK = sQ + kTile * LD;
  bf16* sV = sK + kTile * LD;
  const int T = p.T;
  const AttentionMask mask;                        // causal, no window
  const int m_block = gridDim.x - 1 - blockIdx.x;  // longest (causal) tiles first
  const int h = blockIdx.y, b = blockIdx.z, hk = h / (p.n_head / p.n_kv_head);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, tig = lane & 3;
  const int q0 = m_block * kTile, wrow = warp * 16;
  const SparseHead sq = q_head(p, b, h), sk = k_head(p, b, hk);
  const bf16* gv = p.qkv + b * p.qkv_batch_stride + int64_t(p.n_head + p.n_kv_head + hk) * D;
  expand_rows<D>(sQ, nullptr, sq.idx, sq.val, sq.row_stride, q0, T, p.k);

  float o[D / 8][4];
  zero_acc<D>(o);
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
  const float sl2 = p.scale * kLog2e;
  const TileRange tiles = mask.key_tiles_of_tile(m_block, kTile, T);
  for (int nb = tiles.begin; nb < tiles.end; ++nb) {
    const int k0 = nb * kTile;
    __syncthreads();  // the previous tile's K, V are consumed
    load_rows<kTile, D>(sV, gv, p.qkv_row_stride, k0, T);
    cp_async_commit();
    expand_rows<D>(sK, nullptr, sk.idx, sk.val, sk.row_stride, k0, T, p.k);
    cp_async_wait_all();
    __syncthreads();
    if (ATTN_MASK_TILE_INVISIBLE(mask, q0 + wrow, q0 + wrow + 15, k0, k0 + kTile - 1)) continue;
    float s[8][4];
    tile_abt<D>(s, sQ, wrow, sK, lane);
    if (ATTN_MASK_NEEDS_KEY_MASK(mask, q0, kTile, k0, kTile, T)) {
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int key = k0 + nt * 8 + 2 * tig + (c & 1);
          const int qi = q0 + wrow + g + (c >= 2 ? 8 : 0);
          if (ATTN_MASK_HIDDEN(mask, qi, key, T)) s[nt][c] = -INFINITY;
        }
      }
    }
    // Online softmax as in attention_fwd_mma.cu: raw scores, the scale folded into the exponent.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(row_max[r], mx * sl2);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      const float corr = exp2_ftz(row_max[r] - m_use);
      row_max[r] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        s[nt][2 * r] = exp2_ftz(fmaf(s[nt][2 * r], sl2, -m_use));
        s[nt][2 * r + 1] = exp2_ftz(fmaf(s[nt][2 * r + 1], sl2, -m_use));
        sum += s[nt][2 * r] + s[nt][2 * r + 1];
      }
      row_sum[r] = row_sum[r] * corr + sum;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        o[dt][2 * r] *= corr;
        o[dt][2 * r + 1] *= corr;
      }
    }
    tile_xb<D>(o, s, sV, lane);
  }

  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = row_sum[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    inv[r] = l > 0.f ? 1.f / l : 0.f;
    const int qi = q0 + wrow + g + 8 * r;
    if (qi < T && tig == 0)
      p.lse[(int64_t(b) * p.n_head + h) * T + qi] = (row_max[r] + log2f(l)) * kLn2;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      o[dt][2 * r] *= inv[r];
      o[dt][2 * r + 1] *= inv[r];
    }
  }
  store_rows<D>(p.o + b * p.o_batch_stride + h * D, p.o_row_stride, o, 1.f, nullptr, wrow, q0, T,
                lane);
}

// P (probabilities, masked) and dS = P (dP - delta) of a warp's 16 x 64 tile, in place:
// s holds raw scores (rows = queries at qrow0.., cols = keys k0..) on entry and P on exit; dp holds
// dO V^T on entry and dS on exit. lse2 / dl: per fragment row r (natural lse times log2 e; delta).
__device__ __forceinline__ void probs_and_ds(float (&s)[8][4], float (&dp)[8][4], float sl2,
                                             const float (&lse2)[2], const float (&dl)[2],
                                             int qrow0, int k0, int T, bool need_mask, int lane) {
  const int g = lane >> 2, tig = lane & 3;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int r = c >> 1;
      const int key = k0 + nt * 8 + 2 * tig + (c & 1), qi = qrow0 + g + 8 * r;
      float pv = exp2_ftz(fmaf(s[nt][c], sl2, -lse2[r]));
      if (need_mask && !key_visible(qi, key, T, true, 0)) pv = 0.f;
      s[nt][c] = pv;
      dp[nt][c] = pv * (dp[nt][c] - dl[r]);
    }
  }
}

// Transposes a warp's 16 x 64 fragment tile into rows of dst ([64][kLdX] bf16, column = the
// warp's 16 rows at row0): the operand layout for products over the other dimension.
constexpr int kLdX = kTile + 8;
__device__ __forceinline__ void store_transposed(bf16* dst, const float (&x)[8][4], int row0,
                                                 int lane) {
  const int g = lane >> 2, tig = lane & 3;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int col = nt * 8 + 2 * tig + (c & 1), row = row0 + g + (c >= 2 ? 8 : 0);
      dst[col * kLdX + row] = __float2bfloat16(x[nt][c]);
    }
  }
}

// ---- backward dK, dV: one block per 64 keys of kv head hk ------------------------------------
// Warp w computes S and dP for all 64 keys x its 16 queries of each query tile (the forward's
// orientation), stores P^T and dS^T to shared memory, and after a barrier accumulates dV and dK
// for keys 16w .. 16w + 15 from them: dV += P^T dO, dK += dS^T Q~.
template <int D>
__global__ void __launch_bounds__(kThreads)
    sfa_flash_dkdv_kernel(const SfaFlashParams<bf16> p, const float* __restrict__ delta) {
  constexpr int LD = D + 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* sK = reinterpret_cast<bf16*>(smem_raw);  // [kTile][LD]
  bf16* sV = sK + kTile * LD;
  bf16* sQ = sV + kTile * LD;
  bf16* sdO = sQ + kTile * LD;
  bf16* sPt = sdO + kTile * LD;                                        // [kTile keys][kLdX]
  bf16* sdSt = sPt + kTile * kLdX;                                     // [kTile keys][kLdX]
  uint32_t* sBits = reinterpret_cast<uint32_t*>(sdSt + kTile * kLdX);  // [kTile][kMaskWords]
  const int T = p.T;
  const AttentionMask mask;
  const int hk = blockIdx.y, b = blockIdx.z, group = p.n_head / p.n_kv_head;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2;
  const int k0 = blockIdx.x * kTile, wrow = warp * 16;
  const SparseHead sk = k_head(p, b, hk);
  const int64_t vcol = int64_t(p.n_head + p.n_kv_head + hk) * D;
  const bf16* gv = p.qkv + b * p.qkv_batch_stride + vcol;
  load_rows<kTile, D>(sV, gv, p.qkv_row_stride, k0, T);
  cp_async_commit();
  expand_rows<D>(sK, sBits, sk.idx, sk.val, sk.row_stride, k0, T, p.k);

  float dk[D / 8][4], dv[D / 8][4];
  zero_acc<D>(dk);
  zero_acc<D>(dv);
  const float sl2 = p.scale * kLog2e;
  const TileRange tiles = mask.query_tiles(k0, kTile, kTile, T);
  for (int hq = hk * group; hq < (hk + 1) * group; ++hq) {
    const SparseHead sq = q_head(p, b, hq);
    const bf16* gdo = p.dout + b * p.o_batch_stride + hq * D;
    const int64_t base = (int64_t(b) * p.n_head + hq) * T;
    for (int m = tiles.begin; m < tiles.end; ++m) {
      const int q0 = m * kTile;
      __syncthreads();  // the previous tile's Q, dO, P^T, dS^T are consumed
      load_rows<kTile, D>(sdO, gdo, p.o_row_stride, q0, T);
      cp_async_commit();
      expand_rows<D>(sQ, nullptr, sq.idx, sq.val, sq.row_stride, q0, T, p.k);
      float lse2[2], dl[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int qi = q0 + wrow + g + 8 * r;
        lse2[r] = qi < T ? p.lse[base + qi] * kLog2e : 0.f;
        dl[r] = qi < T ? delta[base + qi] : 0.f;
      }
      cp_async_wait_all();
      __syncthreads();
      float s[8][4], dp[8][4];
      tile_abt<D>(s, sQ, wrow, sK, lane);
      tile_abt<D>(dp, sdO, wrow, sV, lane);
      probs_and_ds(s, dp, sl2, lse2, dl, q0 + wrow, k0, T,
                   ATTN_MASK_NEEDS_MASK(mask, q0, kTile, k0, kTile, T), lane);
      store_transposed(sPt, s, wrow, lane);
      store_transposed(sdSt, dp, wrow, lane);
      __syncthreads();
      // dV (keys wrow..) += P^T dO and dK += dS^T Q~, k = the 64 queries.
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        uint32_t ap[4], ads[4];
        load_a<kLdX>(ap, sPt, wrow, kk * 16, lane);
        load_a<kLdX>(ads, sdSt, wrow, kk * 16, lane);
#pragma unroll
        for (int dt = 0; dt < D / 16; ++dt) {
          uint32_t bd[4], bq[4];
          load_b_kn<LD>(bd, sdO, kk * 16, dt * 16, lane);
          mma16816(dv[2 * dt], ap, bd[0], bd[1]);
          mma16816(dv[2 * dt + 1], ap, bd[2], bd[3]);
          load_b_kn<LD>(bq, sQ, kk * 16, dt * 16, lane);
          mma16816(dk[2 * dt], ads, bq[0], bq[1]);
          mma16816(dk[2 * dt + 1], ads, bq[2], bq[3]);
        }
      }
    }
  }
  bf16* gd = p.dqkv + b * p.qkv_batch_stride;
  store_rows<D>(gd + int64_t(p.n_head + hk) * D, p.qkv_row_stride, dk, p.scale, sBits, wrow, k0, T,
                lane);
  store_rows<D>(gd + vcol, p.qkv_row_stride, dv, 1.f, nullptr, wrow, k0, T, lane);
}

// ---- backward dQ: one block per 64 queries of head h -----------------------------------------
template <int D>
__global__ void __launch_bounds__(kThreads)
    sfa_flash_dq_kernel(const SfaFlashParams<bf16> p, const float* __restrict__ delta) {
  constexpr int LD = D + 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw);
  bf16* sdO = sQ + kTile * LD;
  bf16* sK = sdO + kTile * LD;
  bf16* sV = sK + kTile * LD;
  uint32_t* sBits = reinterpret_cast<uint32_t*>(sV + kTile * LD);
  const int T = p.T;
  const AttentionMask mask;
  const int m_block = gridDim.x - 1 - blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z, hk = h / (p.n_head / p.n_kv_head);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2;
  const int q0 = m_block * kTile, wrow = warp * 16;
  const SparseHead sq = q_head(p, b, h), sk = k_head(p, b, hk);
  const bf16* gv = p.qkv + b * p.qkv_batch_stride + int64_t(p.n_head + p.n_kv_head + hk) * D;
  load_rows<kTile, D>(sdO, p.dout + b * p.o_batch_stride + h * D, p.o_row_stride, q0, T);
  cp_async_commit();
  expand_rows<D>(sQ, sBits, sq.idx, sq.val, sq.row_stride, q0, T, p.k);
  float lse2[2], dl[2];
  const int64_t base = (int64_t(b) * p.n_head + h) * T;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int qi = q0 + wrow + g + 8 * r;
    lse2[r] = qi < T ? p.lse[base + qi] * kLog2e : 0.f;
    dl[r] = qi < T ? delta[base + qi] : 0.f;
  }
  float dq[D / 8][4];
  zero_acc<D>(dq);
  const float sl2 = p.scale * kLog2e;
  const TileRange tiles = mask.key_tiles_of_tile(m_block, kTile, T);
  for (int nb = tiles.begin; nb < tiles.end; ++nb) {
    const int k0 = nb * kTile;
    __syncthreads();
    load_rows<kTile, D>(sV, gv, p.qkv_row_stride, k0, T);
    cp_async_commit();
    expand_rows<D>(sK, nullptr, sk.idx, sk.val, sk.row_stride, k0, T, p.k);
    cp_async_wait_all();
    __syncthreads();
    if (ATTN_MASK_TILE_INVISIBLE(mask, q0 + wrow, q0 + wrow + 15, k0, k0 + kTile - 1)) continue;
    float s[8][4], dp[8][4];
    tile_abt<D>(s, sQ, wrow, sK, lane);
    tile_abt<D>(dp, sdO, wrow, sV, lane);
    probs_and_ds(s, dp, sl2, lse2, dl, q0 + wrow, k0, T,
                 ATTN_MASK_NEEDS_MASK(mask, q0, kTile, k0, kTile, T), lane);
    tile_xb<D>(dq, dp, sK, lane);
  }
  store_rows<D>(p.dqkv + b * p.qkv_batch_stride + h * D, p.qkv_row_stride, dq, p.scale, sBits, wrow,
                q0, T, lane);
}

constexpr size_t tile_bytes(int D) { return size_t(kTile) * (D + 8) * sizeof(bf16); }
constexpr size_t bits_bytes() { return size_t(kTile) * kMaskWords * sizeof(uint32_t); }

template <int D>
void fwd(const Params& p, cudaStream_t st) {
  const size_t smem = 3 * tile_bytes(D);
  set_smem(sfa_flash_fwd_kernel<D>, smem);
  sfa_flash_fwd_kernel<D><<<dim3(div_up(p.T, kTile), p.n_head, p.B), kThreads, smem, st>>>(p);
  CUDA_CHECK_LAUNCH();
}

template <int D>
void bwd(const Params& p, const float* delta, cudaStream_t st) {
  const size_t smem_kv = 4 * tile_bytes(D) + 2 * size_t(kTile) * kLdX * sizeof(bf16) + bits_bytes();
  set_smem(sfa_flash_dkdv_kernel<D>, smem_kv);
  sfa_flash_dkdv_kernel<D>
      <<<dim3(div_up(p.T, kTile), p.n_kv_head, p.B), kThreads, smem_kv, st>>>(p, delta);
  CUDA_CHECK_LAUNCH();
  const size_t smem_q = 4 * tile_bytes(D) + bits_bytes();
  set_smem(sfa_flash_dq_kernel<D>, smem_q);
  sfa_flash_dq_kernel<D>
      <<<dim3(div_up(p.T, kTile), p.n_head, p.B), kThreads, smem_q, st>>>(p, delta);
  CUDA_CHECK_LAUNCH();
}

void check(const Params& p) {
  ATTN_ASSERT(p.D == 64 || p.D == 128);
  ATTN_ASSERT(p.k >= 1 && p.k <= p.D && p.scale > 0.f && p.T > 0 && p.B > 0);
  ATTN_ASSERT(p.n_kv_head > 0 && p.n_head % p.n_kv_head == 0);
  ATTN_ASSERT(p.qkv_row_stride % 8 == 0 && p.qkv_batch_stride % 8 == 0 && p.o_row_stride % 8 == 0 &&
              p.o_batch_stride % 8 == 0 && aligned16(p.qkv));
}

}  // namespace

void launch_sfa_flash_fwd(const SfaFlashParams<bf16>& p, Stream s) {
  check(p);
  auto st = reinterpret_cast<cudaStream_t>(s);
  if (p.D == 64) {
    fwd<64>(p, st);
  } else {
    fwd<128>(p, st);
  }
}

void launch_sfa_flash_bwd(const SfaFlashParams<bf16>& p, Stream s) {
  check(p);
  ATTN_ASSERT(aligned16(p.dout) && aligned16(p.o) && aligned16(p.dqkv));
  // delta = rowsum(dO * O) by the dense backward's first kernel (it reads only o and dout).
  AttentionParams<bf16> a;
  a.q = a.k = a.v = p.qkv;
  a.o = const_cast<bf16*>(p.o);
  a.dout = p.dout;
  a.qkv_batch_stride = p.qkv_batch_stride;
  a.qkv_row_stride = p.qkv_row_stride;
  a.o_batch_stride = p.o_batch_stride;
  a.o_row_stride = p.o_row_stride;
  a.B = p.B;
  a.seq_len = p.T;
  a.n_head = p.n_head;
  a.n_kv_head = p.n_kv_head;
  a.D = p.D;
  a.scale = p.scale;
  StreamScratch delta(sizeof(float) * size_t(p.B) * p.n_head * p.T, s);
  launch_attention_bwd_delta(a, delta.as<float>(), nullptr, s);
  auto st = reinterpret_cast<cudaStream_t>(s);
  if (p.D == 64) {
    bwd<64>(p, delta.as<float>(), st);
  } else {
    bwd<128>(p, delta.as<float>(), st);
  }
}

}  // namespace attnlab
