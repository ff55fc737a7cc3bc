// Dense causal attention, flash-style (no T x T tensor), forward and backward.
//
// bf16: tensor-core kernels (mma.sync m16n8k16, bf16 operands, fp32 accumulation), head dim 64 or
// 128 (the host op rejects others; here it is only asserted). Tiles stream through double-buffered
// shared memory (cp.async), rows padded by 16 bytes so that ldmatrix is free of bank conflicts.
// Softmax in the log2 domain with ex2.approx.ftz and the scale folded into one FFMA per score;
// element masks only on tiles that touch the diagonal, the window edge or the end of T.
//   fwd:  a block owns 128 queries (4 warps x 2 m-tiles of 16 rows), loops over K/V tiles (128
//         keys for D = 64, 64 for D = 128): S = Q K^T, online softmax, O += P V; writes O and lse
//         (natural log). Warps skip key tiles entirely past their causal diagonal.
//   bwd:  delta = rowsum(dO * O) (this kernel also zeroes the fp32 dQ accumulator); then
//         default (AttentionParams::deterministic = false): one kernel per block of 128 keys of one
//                kv head loops over every query head of its GQA group and every query tile that
//                sees those keys: dV += P^T dO, dK += dS^T Q in registers, and dQ += dS K added
//                to an fp32 [B, H, T, D] scratch with atomics; a last kernel converts it to bf16.
//                On sm_90a with use_wgmma the Hopper wgmma kernel (attention_wgmma_bwd.cu) does
//                this instead of the mma.sync one below.
//                5 matmul-sized products; dq is not bitwise reproducible (fp32 addition order).
//         deterministic: the same dK/dV kernel without dQ (64 keys per block) and a dQ kernel
//                (64 queries per block) that recomputes S and dP: 7 products, no atomics, every
//                output written by one thread after a fixed-order loop: bitwise deterministic.
// fp32: simple one-warp-per-row kernels (no tensor cores), for tests and debugging; any D <= 128.
// Masking: key s is visible to query t iff s < T, (!causal || s <= t), (window == 0 || s > t -
// window).
#include <cuda_bf16.h>

#include "kernels/attention/attention.cuh"
#include "kernels/attention/attention_wgmma.cuh"
#include "kernels/common/device.cuh"

namespace attnlab {
namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kTile = 64;      // rows of the basic tile (queries or keys)
constexpr int kThreads = 128;  // 4 warps x 16 rows

// ---- PTX wrappers ---------------------------------------------------------------------------
// cp.async (dev::, kernels/common/device.cuh), ldmatrix and bf16 mma need sm_80+: a build for
// an older target still compiles, and these wrappers trap there (ATTN_SM80_OR_TRAP); the launcher
// refuses to run the kernels on such a device with a clear message first.
using dev::cp_async16;
using dev::cp_async4;
using dev::cp_async_commit;
using dev::cp_async_wait_all;
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const bf16* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
#if ATTN_HAVE_SM80
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
#else
  r[0] = r[1] = r[2] = r[3] = a;
  ATTN_SM80_OR_TRAP();
#endif
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const bf16* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
#if ATTN_HAVE_SM80
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
#else
  r[0] = r[1] = r[2] = r[3] = a;
  ATTN_SM80_OR_TRAP();
#endif
}
// c (16x8 fp32) += a (16x16 bf16, row) * b (16x8 bf16, col).
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
#if ATTN_HAVE_SM80
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  (void)c, (void)a, (void)b0, (void)b1;
  ATTN_SM80_OR_TRAP();
#endif
}
// 2^x without the denormal fix-up that exp2f adds around MUFU.EX2 (results below 2^-126 flush to
// 0, which changes nothing in a softmax).
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
// g[0] += a, g[1] += b in global memory (one vector reduction on sm_90; result unused, so RED).
__device__ __forceinline__ void red_add2(float* g, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(g), make_float2(a, b));
#else
  atomicAdd(g, a);
  atomicAdd(g + 1, b);
#endif
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// ---- fragment helpers (one warp; smem tiles row-major with leading dimension LD) --------------
// A operand (16x16) from rows r0.., cols k0.. of a row-major tile.
// (load_a_t: the same operand when the tile stores A^T, i.e. A[m][k] = s[k][m]: k0.. are tile
// rows.)
template <int LD>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const bf16* s, int r0, int k0, int lane) {
  ldsm_x4(a, s + (r0 + (lane & 15)) * LD + k0 + (lane >> 4) * 8);
}
template <int LD>
__device__ __forceinline__ void load_a_t(uint32_t (&a)[4], const bf16* s, int k0, int m0,
                                         int lane) {
  ldsm_x4_t(a, s + (k0 + (lane & 7) + ((lane >> 4) << 3)) * LD + m0 + ((lane >> 3) & 1) * 8);
}
// B operands for two n8 tiles (n0.., n0+8..) x k16 when the tile stores B^T (rows = n, cols = k):
// b[0], b[1] for n-tile n0 and b[2], b[3] for n-tile n0 + 8.
template <int LD>
__device__ __forceinline__ void load_b_nk(uint32_t (&b)[4], const bf16* s, int n0, int k0,
                                          int lane) {
  ldsm_x4(b, s + (n0 + (lane & 7) + ((lane >> 4) << 3)) * LD + k0 + ((lane >> 3) & 1) * 8);
}
// Same, when the tile stores B itself (rows = k, cols = n).
template <int LD>
__device__ __forceinline__ void load_b_kn(uint32_t (&b)[4], const bf16* s, int k0, int n0,
                                          int lane) {
  ldsm_x4_t(b, s + (k0 + (lane & 15)) * LD + n0 + (lane >> 4) * 8);
}
// A operand (16 rows x 16 cols, cols kk*16..) from a warp's fp32 C fragments c[n-tile][4].
__device__ __forceinline__ void c_to_a(uint32_t (&a)[4], const float (&c0)[4],
                                       const float (&c1)[4]) {
  a[0] = pack_bf16(c0[0], c0[1]);
  a[1] = pack_bf16(c0[2], c0[3]);
  a[2] = pack_bf16(c1[0], c1[1]);
  a[3] = pack_bf16(c1[2], c1[3]);
}

__device__ __forceinline__ bool visible(int s, int t, int T, bool causal, int window) {
  return s < T && t < T && (!causal || s <= t) && (window <= 0 || s > t - window);
}

struct Heads {
  int b, h, hk;
};

// ---- forward (bf16, tensor cores) -----------------------------------------------------------
// A block owns kFwdRows = 128 queries: each warp two 16-row m-tiles, so that every K/V fragment
// read from shared memory feeds four tensor-core products (smem bandwidth is the limiter with
// one m-tile). Q fragments stay in registers for D = 64 and are re-read from smem for D = 128.
constexpr int kFwdMT = 2;                  // m-tiles (16 rows) per warp
constexpr int kFwdRows = 4 * 16 * kFwdMT;  // queries per block

// Copies rows row0.. row0+ROWS-1 (zero past T) of a [T, D] strided matrix into smem via cp.async;
// kNThreads = the block size. (A compile-time stride lets the compiler unroll the loop: with
// blockDim.x here the forward measured 8-18% slower.)
template <int ROWS, int D, int kNThreads = kThreads>
__device__ __forceinline__ void load_rows(bf16* s, const bf16* g, int64_t row_stride, int row0,
                                          int T) {
  constexpr int kChunks = D / 8, LD = D + 8;
  for (int i = threadIdx.x; i < ROWS * kChunks; i += kNThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const bool valid = row0 + r < T;
    const bf16* src = valid ? g + int64_t(row0 + r) * row_stride + c * 8 : g;
    cp_async16(s + r * LD + c * 8, src, valid);
  }
}

// kKT keys per shared-memory K/V tile (one barrier each), processed in softmax steps of kSub = 64
// keys (32-key steps were measured slower: more rescales). 128-key tiles for D = 64 (half the
// barriers; measured 2-4% faster); 64 for D = 128 (two 128-key tiles would not leave room for 2
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
  const int T = p.T_;
  const int m_block = gridDim.x - 1 - blockIdx.x;  // longest (causal) tiles first
  const int h = blockIdx.y, b = blockIdx.z, hk = h / (p.n_head / p.n_kv_head);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, tig = lane & 3;
  const int q0 = m_block * kFwdRows;
  const int wrow = warp * 16 * kFwdMT;  // first row of this warp inside the block tile
  const bf16* gq = p.q + b * p.qkv_batch_stride + h * D;
  const bf16* gk = p.k + b * p.qkv_batch_stride + hk * D;
  const bf16* gv = p.v + b * p.qkv_batch_stride + hk * D;

  int n_end = (T + kKT - 1) / kKT;
  if (p.causal) n_end = min(n_end, (q0 + kFwdRows - 1) / kKT + 1);
  const int n_begin = p.window > 0 ? max(0, q0 - p.window + 1) / kKT : 0;

  load_rows<kFwdRows, D>(sQ, gq, p.qkv_row_stride, q0, T);
  load_rows<kKT, D>(sK, gk, p.qkv_row_stride, n_begin * kKT, T);
  load_rows<kKT, D>(sV, gv, p.qkv_row_stride, n_begin * kKT, T);
  cp_async_commit();

  float o[kFwdMT][D / 8][4];
#pragma unroll
  for (int mt = 0; mt < kFwdMT; ++mt) {
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.f;
  }
  float row_max[kFwdMT][2], row_sum[kFwdMT][2];
#pragma unroll
  for (int mt = 0; mt < kFwdMT; ++mt) {
    row_max[mt][0] = row_max[mt][1] = -INFINITY;
    row_sum[mt][0] = row_sum[mt][1] = 0.f;
  }
  uint32_t qf[kFwdMT][kQF][4];
  const float sl2 = p.scale * kLog2e;

  for (int nb = n_begin; nb < n_end; ++nb) {
    const int buf = (nb - n_begin) & 1;
    cp_async_wait_all();
    __syncthreads();
    if constexpr (kQInRegs) {
      if (nb == n_begin) {
#pragma unroll
        for (int mt = 0; mt < kFwdMT; ++mt) {
#pragma unroll
          for (int kk = 0; kk < kQF; ++kk)
            load_a<LD>(qf[mt][kk], sQ, wrow + mt * 16, kk * 16, lane);
        }
      }
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
      if ((p.causal && k_first > q0 + wrow + 16 * kFwdMT - 1) ||
          (p.window > 0 && k_first + kSub - 1 <= q0 + wrow - p.window)) {
        continue;
      }
      float s[kFwdMT][kSub / 8][4];
#pragma unroll
      for (int mt = 0; mt < kFwdMT; ++mt) {
#pragma unroll
        for (int i = 0; i < kSub / 8; ++i)
          s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.f;
      }
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t aq[kFwdMT][4];
#pragma unroll
        for (int mt = 0; mt < kFwdMT; ++mt) {
          if constexpr (kQInRegs) {
#pragma unroll
            for (int i = 0; i < 4; ++i) aq[mt][i] = qf[mt][kk][i];
          } else {
            load_a<LD>(aq[mt], sQ, wrow + mt * 16, kk * 16, lane);
          }
        }
#pragma unroll
        for (int j = 0; j < kSub / 16; ++j) {
          uint32_t bk[4];
          load_b_nk<LD>(bk, cK, sub * kSub + j * 16, kk * 16, lane);
#pragma unroll
          for (int mt = 0; mt < kFwdMT; ++mt) {
            mma16816(s[mt][2 * j], aq[mt], bk[0], bk[1]);
            mma16816(s[mt][2 * j + 1], aq[mt], bk[2], bk[3]);
          }
        }
      }
      const int k0 = nb * kKT + sub * kSub;
      const bool need_mask = k0 + kSub > T || (p.causal && k0 + kSub - 1 > q0) ||
                             (p.window > 0 && k0 <= q0 + kFwdRows - 1 - p.window);
#pragma unroll
      for (int mt = 0; mt < kFwdMT; ++mt) {
        if (need_mask) {
#pragma unroll
          for (int nt = 0; nt < kSub / 8; ++nt) {
#pragma unroll
            for (int c = 0; c < 4; ++c) {
              const int key = k0 + nt * 8 + 2 * tig + (c & 1);
              const int qi = q0 + wrow + mt * 16 + g + (c >= 2 ? 8 : 0);
              if (key >= T || (p.causal && key > qi) || (p.window > 0 && key <= qi - p.window)) {
                s[mt][nt][c] = -INFINITY;
              }
            }
          }
        }
        // Raw scores here; the scale is folded into the exponent (one FFMA per score), which is
        // exact for the max because scale > 0. row_max is kept in the scaled log2 domain.
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float mx = -INFINITY;
#pragma unroll
          for (int nt = 0; nt < kSub / 8; ++nt) {
            mx = fmaxf(mx, fmaxf(s[mt][nt][2 * r], s[mt][nt][2 * r + 1]));
          }
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float m_new = fmaxf(row_max[mt][r], mx * sl2);
          const float m_use = m_new == -INFINITY ? 0.f : m_new;
          const float corr = exp2_ftz(row_max[mt][r] - m_use);
          row_max[mt][r] = m_new;
          float sum = 0.f;
#pragma unroll
          for (int nt = 0; nt < kSub / 8; ++nt) {
            s[mt][nt][2 * r] = exp2_ftz(fmaf(s[mt][nt][2 * r], sl2, -m_use));
            s[mt][nt][2 * r + 1] = exp2_ftz(fmaf(s[mt][nt][2 * r + 1], sl2, -m_use));
            sum += s[mt][nt][2 * r] + s[mt][nt][2 * r + 1];
          }
          row_sum[mt][r] = row_sum[mt][r] * corr + sum;
#pragma unroll
          for (int dt = 0; dt < D / 8; ++dt) {
            o[mt][dt][2 * r] *= corr;
            o[mt][dt][2 * r + 1] *= corr;
          }
        }
      }
#pragma unroll
      for (int kk = 0; kk < kSub / 16; ++kk) {
        uint32_t a[kFwdMT][4];
#pragma unroll
        for (int mt = 0; mt < kFwdMT; ++mt) c_to_a(a[mt], s[mt][2 * kk], s[mt][2 * kk + 1]);
#pragma unroll
        for (int dt = 0; dt < D / 16; ++dt) {
          uint32_t bv[4];
          load_b_kn<LD>(bv, cV, sub * kSub + kk * 16, dt * 16, lane);
#pragma unroll
          for (int mt = 0; mt < kFwdMT; ++mt) {
            mma16816(o[mt][2 * dt], a[mt], bv[0], bv[1]);
            mma16816(o[mt][2 * dt + 1], a[mt], bv[2], bv[3]);
          }
        }
      }
    }  // sub
  }

#pragma unroll
  for (int mt = 0; mt < kFwdMT; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = row_sum[mt][r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const int qi = q0 + wrow + mt * 16 + g + 8 * r;
      if (qi >= T) continue;
      const float inv = l > 0.f ? 1.f / l : 0.f;
      bf16* out = p.o + b * p.o_batch_stride + int64_t(qi) * p.o_row_stride + h * D;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        *reinterpret_cast<__nv_bfloat162*>(out + dt * 8 + 2 * tig) =
            __floats2bfloat162_rn(o[mt][dt][2 * r] * inv, o[mt][dt][2 * r + 1] * inv);
      }
      if (tig == 0) {
        p.lse[(int64_t(b) * p.n_head + h) * T + qi] = (row_max[mt][r] + log2f(l)) * kLn2;
      }
    }
  }
}

// ---- backward: delta = rowsum(dO * O) (any T; one warp per row) ------------------------------
// Also zeroes the fp32 dQ accumulator rows ([B, H, T, D], same row order) when one is given.
template <typename T>
__global__ void attn_bwd_delta(const AttentionParams<T> p, float* __restrict__ delta,
                               float* __restrict__ dq_accum) {
  const int64_t row = int64_t(blockIdx.x) * 4 + threadIdx.x / 32;  // (b, h, t)
  const int lane = threadIdx.x % 32;
  const int64_t rows = int64_t(p.B) * p.n_head * p.T_;
  if (row >= rows) return;
  const int t = int(row % p.T_), h = int((row / p.T_) % p.n_head),
            b = int(row / (int64_t(p.T_) * p.n_head));
  const int64_t off = b * p.o_batch_stride + int64_t(t) * p.o_row_stride + int64_t(h) * p.D;
  float acc = 0.f;
  for (int d = lane; d < p.D; d += 32) acc += dev::to_f(p.dout[off + d]) * dev::to_f(p.o[off + d]);
  acc = dev::warp_sum(acc);
  if (lane == 0) delta[row] = acc;
  if (dq_accum != nullptr) {  // D is 64 or 128 here: a multiple of 4 floats per row
    float4* z = reinterpret_cast<float4*>(dq_accum + row * p.D);
    for (int i = lane; i < p.D / 4; i += 32) z[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

// The same for bf16 with 16-byte accesses (o and dout 16-byte aligned). Thread i takes 16-byte
// chunk i of the rows of o and dout in (b, t) order, all heads of a row after each other, so that
// consecutive threads read consecutive memory when the heads of a row are packed (a head's D / 8
// lanes sit in one warp); it zeroes floats 8 i .. 8 i + 7 of dq_accum (flat: its layout does not
// matter here). Mapping a block to one head's rows instead (256-byte pieces 4 KiB apart at
// D = 128, H = 16) took 0.23-0.24 ms at B T = 32K, T = 4K on the H200, ~2x the bandwidth floor.
// Needs B T H D / 8 < 2^31 (32-bit indices; the caller falls back to attn_bwd_delta otherwise).
template <int D>
__global__ void attn_bwd_delta_bf16(const AttentionParams<bf16> p, float* __restrict__ delta,
                                    float* __restrict__ dq_accum, uint32_t total) {
  constexpr int kLanes = D / 8;  // 8 or 16
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  const uint32_t chunks = uint32_t(p.n_head) * kLanes;  // per (b, t) row
  const bool in = i < total;
  float acc = 0.f;
  int64_t row = 0;  // of delta: (b, h, t)
  if (in) {
    const uint32_t bt = i / chunks, c = i - bt * chunks;
    const uint32_t b = bt / uint32_t(p.T_), t = bt - b * uint32_t(p.T_), h = c / kLanes;
    const int64_t off = b * p.o_batch_stride + int64_t(t) * p.o_row_stride + c * 8;
    const uint4 u = *reinterpret_cast<const uint4*>(p.dout + off);
    const uint4 w = *reinterpret_cast<const uint4*>(p.o + off);
    const auto* du = reinterpret_cast<const __nv_bfloat162*>(&u);
    const auto* ow = reinterpret_cast<const __nv_bfloat162*>(&w);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 a = __bfloat1622float2(du[k]), x = __bfloat1622float2(ow[k]);
      acc += a.x * x.x + a.y * x.y;
    }
    row = (int64_t(b) * p.n_head + h) * p.T_ + t;
    if (dq_accum != nullptr) {
      float4* z = reinterpret_cast<float4*>(dq_accum + 8 * int64_t(i));
      z[0] = z[1] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
#pragma unroll
  for (int m = kLanes / 2; m > 0; m >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, m);
  if (in && threadIdx.x % kLanes == 0) delta[row] = acc;
}

// dq = scale * dq_accum, fp32 [B, H, T, D] -> bf16 at the q layout; 4 values per thread.
__global__ void attn_bwd_dq_convert(const AttentionParams<bf16> p,
                                    const float* __restrict__ dq_accum) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // index of 4 values
  const int quads = p.D / 4;
  if (i >= int64_t(p.B) * p.n_head * p.T_ * quads) return;
  const int64_t row = i / quads;
  const int d = int(i % quads) * 4;
  const int t = int(row % p.T_), h = int((row / p.T_) % p.n_head),
            b = int(row / (int64_t(p.T_) * p.n_head));
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
  const int T = p.T_;
  const int hk = blockIdx.y, b = blockIdx.z, group = p.n_head / p.n_kv_head;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, tig = lane & 3;
  const int k0 = blockIdx.x * kKeys;
  const int wkey = warp * 16 * kMT;  // first key of this warp inside the block
  const bf16* gk = p.k + b * p.qkv_batch_stride + hk * D;
  const bf16* gv = p.v + b * p.qkv_batch_stride + hk * D;

  const int m_begin = p.causal ? k0 / kQ : 0;
  int m_end = (T + kQ - 1) / kQ;
  if (p.window > 0) m_end = min(m_end, (k0 + kKeys - 1 + p.window - 1) / kQ + 1);
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
    const bool need_mask = q0 + kQ > T || k0 + kKeys > T || (p.causal && k0 + kKeys - 1 > q0) ||
                           (p.window > 0 && k0 <= q0 + kQ - 1 - p.window);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int qc = nt * 8 + 2 * tig + (c & 1);
          const int key = k0 + wkey + mt * 16 + g + (c >= 2 ? 8 : 0);
          float pv = exp2_ftz(fmaf(pt[mt][nt][c], sl2, -cLse[qc] * kLog2e));
          if (need_mask && !visible(key, q0 + qc, T, p.causal, p.window)) pv = 0.f;
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
  const int T = p.T_;
  const int m_block = gridDim.x - 1 - blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z, hk = h / (p.n_head / p.n_kv_head);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, tig = lane & 3;
  const int q0 = m_block * kTile;
  const bf16* gk = p.k + b * p.qkv_batch_stride + hk * D;
  const bf16* gv = p.v + b * p.qkv_batch_stride + hk * D;

  int n_end = (T + kTile - 1) / kTile;
  if (p.causal) n_end = min(n_end, m_block + 1);
  const int n_begin = p.window > 0 ? max(0, q0 - p.window + 1) / kTile : 0;

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
    const bool need_mask = q0 + kTile > T || k0 + kTile > T || (p.causal && k0 + kTile - 1 > q0) ||
                           (p.window > 0 && k0 <= q0 + kTile - 1 - p.window);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int r = c >> 1;
        const int key = k0 + nt * 8 + 2 * tig + (c & 1);
        const int qi = q0 + warp * 16 + g + 8 * r;
        float pv = exp2_ftz(fmaf(s[nt][c], sl2, -lse2[r]));
        if (need_mask && !visible(key, qi, T, p.causal, p.window)) pv = 0.f;
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

// ---- fp32 reference-style kernels (one warp per row, lanes split D, D <= 128) ----------------
constexpr int kMaxDPerLane = 4;

__device__ __forceinline__ void key_range(const AttentionParams<float>& p, int t, int& lo,
                                          int& hi) {
  lo = p.window > 0 ? max(0, t - p.window + 1) : 0;
  hi = p.causal ? t + 1 : p.T_;
}

__device__ __forceinline__ Heads row_heads(const AttentionParams<float>& p, int64_t row, int& t) {
  t = int(row % p.T_);
  const int h = int((row / p.T_) % p.n_head);
  return {int(row / (int64_t(p.T_) * p.n_head)), h, h / (p.n_head / p.n_kv_head)};
}

__global__ void attn_fwd_f32(const AttentionParams<float> p) {
  const int64_t row = int64_t(blockIdx.x) * 4 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32, D = p.D;
  if (row >= int64_t(p.B) * p.n_head * p.T_) return;
  int t;
  const Heads hd = row_heads(p, row, t);
  const float* q = p.q + hd.b * p.qkv_batch_stride + int64_t(t) * p.qkv_row_stride + hd.h * D;
  const float* kb = p.k + hd.b * p.qkv_batch_stride + hd.hk * D;
  const float* vb = p.v + hd.b * p.qkv_batch_stride + hd.hk * D;
  float qr[kMaxDPerLane], o[kMaxDPerLane];
#pragma unroll
  for (int j = 0; j < kMaxDPerLane; ++j) {
    const int d = lane + 32 * j;
    qr[j] = d < D ? q[d] : 0.f;
    o[j] = 0.f;
  }
  int lo, hi;
  key_range(p, t, lo, hi);
  float m = -INFINITY, l = 0.f;
  for (int s = lo; s < hi; ++s) {
    const float* k = kb + int64_t(s) * p.qkv_row_stride;
    const float* v = vb + int64_t(s) * p.qkv_row_stride;
    float dot = 0.f;
#pragma unroll
    for (int j = 0; j < kMaxDPerLane; ++j) {
      const int d = lane + 32 * j;
      if (d < D) dot += qr[j] * k[d];
    }
    const float sc = dev::warp_sum(dot) * p.scale;
    const float m_new = fmaxf(m, sc);
    const float corr = expf(m - m_new), e = expf(sc - m_new);
    l = l * corr + e;
#pragma unroll
    for (int j = 0; j < kMaxDPerLane; ++j) {
      const int d = lane + 32 * j;
      o[j] = o[j] * corr + (d < D ? e * v[d] : 0.f);
    }
    m = m_new;
  }
  float* out = p.o + hd.b * p.o_batch_stride + int64_t(t) * p.o_row_stride + hd.h * D;
#pragma unroll
  for (int j = 0; j < kMaxDPerLane; ++j) {
    const int d = lane + 32 * j;
    if (d < D) out[d] = o[j] / l;
  }
  if (lane == 0) p.lse[row] = m + logf(l);
}

__global__ void attn_bwd_dq_f32(const AttentionParams<float> p, const float* __restrict__ delta) {
  const int64_t row = int64_t(blockIdx.x) * 4 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32, D = p.D;
  if (row >= int64_t(p.B) * p.n_head * p.T_) return;
  int t;
  const Heads hd = row_heads(p, row, t);
  const int64_t qoff = hd.b * p.qkv_batch_stride + int64_t(t) * p.qkv_row_stride + hd.h * D;
  const float* q = p.q + qoff;
  const float* dout = p.dout + hd.b * p.o_batch_stride + int64_t(t) * p.o_row_stride + hd.h * D;
  const float* kb = p.k + hd.b * p.qkv_batch_stride + hd.hk * D;
  const float* vb = p.v + hd.b * p.qkv_batch_stride + hd.hk * D;
  float qr[kMaxDPerLane], dor[kMaxDPerLane], dq[kMaxDPerLane];
#pragma unroll
  for (int j = 0; j < kMaxDPerLane; ++j) {
    const int d = lane + 32 * j;
    qr[j] = d < D ? q[d] : 0.f;
    dor[j] = d < D ? dout[d] : 0.f;
    dq[j] = 0.f;
  }
  const float lse = p.lse[row], dl = delta[row];
  int lo, hi;
  key_range(p, t, lo, hi);
  for (int s = lo; s < hi; ++s) {
    const float* k = kb + int64_t(s) * p.qkv_row_stride;
    const float* v = vb + int64_t(s) * p.qkv_row_stride;
    float dot = 0.f, dpv = 0.f;
#pragma unroll
    for (int j = 0; j < kMaxDPerLane; ++j) {
      const int d = lane + 32 * j;
      if (d < D) {
        dot += qr[j] * k[d];
        dpv += dor[j] * v[d];
      }
    }
    const float pr = expf(dev::warp_sum(dot) * p.scale - lse);
    const float ds = pr * (dev::warp_sum(dpv) - dl);
#pragma unroll
    for (int j = 0; j < kMaxDPerLane; ++j) {
      const int d = lane + 32 * j;
      if (d < D) dq[j] += ds * k[d];
    }
  }
#pragma unroll
  for (int j = 0; j < kMaxDPerLane; ++j) {
    const int d = lane + 32 * j;
    if (d < D) p.dq[qoff + d] = dq[j] * p.scale;
  }
}

// One warp per (b, kv head, key s); loops over the group's query heads and the queries seeing s.
__global__ void attn_bwd_dkdv_f32(const AttentionParams<float> p, const float* __restrict__ delta) {
  const int64_t row = int64_t(blockIdx.x) * 4 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32, D = p.D, T = p.T_;
  if (row >= int64_t(p.B) * p.n_kv_head * T) return;
  const int s = int(row % T), hk = int((row / T) % p.n_kv_head);
  const int b = int(row / (int64_t(T) * p.n_kv_head));
  const int group = p.n_head / p.n_kv_head;
  const int64_t koff = b * p.qkv_batch_stride + int64_t(s) * p.qkv_row_stride + hk * D;
  float kr[kMaxDPerLane], vr[kMaxDPerLane], dk[kMaxDPerLane], dv[kMaxDPerLane];
#pragma unroll
  for (int j = 0; j < kMaxDPerLane; ++j) {
    const int d = lane + 32 * j;
    kr[j] = d < D ? p.k[koff + d] : 0.f;
    vr[j] = d < D ? p.v[koff + d] : 0.f;
    dk[j] = dv[j] = 0.f;
  }
  const int t_lo = p.causal ? s : 0;
  const int t_hi = p.window > 0 ? min(T, s + p.window) : T;
  for (int h = hk * group; h < (hk + 1) * group; ++h) {
    const int64_t lrow = (int64_t(b) * p.n_head + h) * T;
    for (int t = t_lo; t < t_hi; ++t) {
      const float* q = p.q + b * p.qkv_batch_stride + int64_t(t) * p.qkv_row_stride + h * D;
      const float* dout = p.dout + b * p.o_batch_stride + int64_t(t) * p.o_row_stride + h * D;
      float dot = 0.f, dpv = 0.f;
#pragma unroll
      for (int j = 0; j < kMaxDPerLane; ++j) {
        const int d = lane + 32 * j;
        if (d < D) {
          dot += q[d] * kr[j];
          dpv += dout[d] * vr[j];
        }
      }
      const float pr = expf(dev::warp_sum(dot) * p.scale - p.lse[lrow + t]);
      const float ds = pr * (dev::warp_sum(dpv) - delta[lrow + t]);
#pragma unroll
      for (int j = 0; j < kMaxDPerLane; ++j) {
        const int d = lane + 32 * j;
        if (d < D) {
          dv[j] += pr * dout[d];
          dk[j] += ds * q[d];
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kMaxDPerLane; ++j) {
    const int d = lane + 32 * j;
    if (d < D) {
      p.dk[koff + d] = dk[j] * p.scale;
      p.dv[koff + d] = dv[j];
    }
  }
}

// ---- launchers -------------------------------------------------------------------------------
template <typename T>
void check_params(const AttentionParams<T>& p) {
  ATTN_ASSERT(p.n_kv_head > 0 && p.n_head % p.n_kv_head == 0 && p.T_ > 0 && p.B > 0);
  ATTN_ASSERT(p.window >= 0 && p.variant == nullptr);
}

template <typename K>
void set_smem(K kernel, size_t bytes) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  // Largest shared-memory carveout: two 112 KiB dK/dV blocks (D = 128) must share an SM.
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                  int(cudaSharedmemCarveoutMaxShared)));
}

// The tensor-core kernels need machine code for sm_80 or newer in this build.
void check_bf16_build() {
  static const int version = [] {
    cudaFuncAttributes attr{};
    CUDA_CHECK(cudaFuncGetAttributes(&attr, attn_fwd_bf16<64>));
    return attr.binaryVersion;
  }();
  ATTN_REQUIRE(version >= 80,
               "bf16 attention kernels were built for sm_%d; they need sm_80 or newer (configure "
               "with -DCMAKE_CUDA_ARCHITECTURES=90 for H100/H200)",
               version);
}

void check_bf16_layout(const AttentionParams<bf16>& p) {
  check_bf16_build();
  ATTN_ASSERT(p.D == 64 || p.D == 128);
  ATTN_ASSERT(p.scale > 0.f);  // the forward folds the scale into exp2 after the row max
  ATTN_ASSERT(p.qkv_row_stride % 8 == 0 && p.qkv_batch_stride % 8 == 0 && p.o_row_stride % 8 == 0 &&
              p.o_batch_stride % 8 == 0);
  ATTN_ASSERT(aligned16(p.q) && aligned16(p.k) && aligned16(p.v));
}

template <int D>
void fwd_bf16(const AttentionParams<bf16>& p, cudaStream_t st) {
  const dim3 grid(div_up(p.T_, kFwdRows), p.n_head, p.B);
  constexpr int kKT = kFwdKeyTile<D>;
  const size_t smem = size_t(kFwdRows + 4 * kKT) * (D + 8) * sizeof(bf16);
  set_smem(attn_fwd_bf16<D, kKT>, smem);
  attn_fwd_bf16<D, kKT><<<grid, kThreads, smem, st>>>(p);
  CUDA_CHECK_LAUNCH();
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
  kernel<<<dim3(div_up(p.T_, kKeys), p.n_kv_head, p.B), 32 * kWarps, smem, st>>>(p, delta,
                                                                                 dq_accum);
  CUDA_CHECK_LAUNCH();
}

template <int D>
void bwd_bf16(const AttentionParams<bf16>& p, const float* delta, float* dq_accum,
              cudaStream_t st) {
  if (!p.deterministic) {
    // 128 keys per block halves the dQ atomics of 64 (measured on an H200, bwd time: D = 64
    // 2.18 / 6.54 / 23.9 ms at T = 1K / 4K / 16K vs 2.19 / 7.11 / 26.7 with 4 warps x 16 keys;
    // D = 128 2.16 / 6.50 / 23.2 vs 2.21 / 7.16 / 26.7). D = 64 fits 32 keys per warp in
    // registers (2 blocks/SM); D = 128 needs 8 warps of 16 keys (1 block/SM).
    if constexpr (D == 64) {
      launch_dkdv<D, true, 4, 2, 32>(p, delta, dq_accum, st);
    } else {
      launch_dkdv<D, true, 8, 1, 64>(p, delta, dq_accum, st);
    }
    const int64_t quads = int64_t(p.B) * p.n_head * p.T_ * (D / 4);
    attn_bwd_dq_convert<<<div_up(quads, 256), 256, 0, st>>>(p, dq_accum);
    CUDA_CHECK_LAUNCH();
    return;
  }
  launch_dkdv<D, false, 4, 1, 64>(p, delta, nullptr, st);
  const size_t smem_q = 6 * size_t(kTile) * (D + 8) * sizeof(bf16);
  set_smem(attn_bwd_dq_bf16<D>, smem_q);
  attn_bwd_dq_bf16<D><<<dim3(div_up(p.T_, kTile), p.n_head, p.B), kThreads, smem_q, st>>>(p, delta);
  CUDA_CHECK_LAUNCH();
}

void launch_fwd_f32(const AttentionParams<float>& p, Stream s) {
  ATTN_ASSERT(p.D > 0 && p.D <= 32 * kMaxDPerLane);
  const int64_t rows = int64_t(p.B) * p.n_head * p.T_;
  attn_fwd_f32<<<div_up(rows, 4), 128, 0, reinterpret_cast<cudaStream_t>(s)>>>(p);
  CUDA_CHECK_LAUNCH();
}

void launch_bwd_f32(const AttentionParams<float>& p, Stream s) {
  ATTN_ASSERT(p.D > 0 && p.D <= 32 * kMaxDPerLane);
  auto st = reinterpret_cast<cudaStream_t>(s);
  const int64_t rows = int64_t(p.B) * p.n_head * p.T_;
  StreamScratch delta(sizeof(float) * rows, s);
  attn_bwd_delta<float><<<div_up(rows, 4), 128, 0, st>>>(p, delta.as<float>(), nullptr);
  CUDA_CHECK_LAUNCH();
  attn_bwd_dq_f32<<<div_up(rows, 4), 128, 0, st>>>(p, delta.as<float>());
  CUDA_CHECK_LAUNCH();
  const int64_t krows = int64_t(p.B) * p.n_kv_head * p.T_;
  attn_bwd_dkdv_f32<<<div_up(krows, 4), 128, 0, st>>>(p, delta.as<float>());
  CUDA_CHECK_LAUNCH();
}

}  // namespace

template <typename T>
void launch_attention_fwd(const AttentionParams<T>& p, Stream s) {
  check_params(p);
  if constexpr (std::is_same_v<T, float>) {
    launch_fwd_f32(p, s);
  } else {
    check_bf16_layout(p);
    if (p.use_wgmma && attention_fwd_wgmma_supported(p)) {
      launch_attention_fwd_wgmma(p, s);
      return;
    }
    auto st = reinterpret_cast<cudaStream_t>(s);
    if (p.D == 64) {
      fwd_bf16<64>(p, st);
    } else {
      fwd_bf16<128>(p, st);
    }
  }
}

namespace {
// launch_attention_bwd_delta without its checks (launch_attention_bwd has made them).
void bwd_delta(const AttentionParams<bf16>& p, float* delta, float* dq_accum, cudaStream_t st) {
  const int64_t rows = int64_t(p.B) * p.n_head * p.T_;
  const int64_t chunks = rows * (p.D / 8);  // 16-byte chunks of o (and dout)
  if (aligned16(p.o) && aligned16(p.dout) && chunks < (int64_t(1) << 31)) {
    const auto total = uint32_t(chunks);
    const int grid = int(div_up(chunks, 256));
    if (p.D == 64) {
      attn_bwd_delta_bf16<64><<<grid, 256, 0, st>>>(p, delta, dq_accum, total);
    } else {
      attn_bwd_delta_bf16<128><<<grid, 256, 0, st>>>(p, delta, dq_accum, total);
    }
  } else {
    attn_bwd_delta<bf16><<<div_up(rows, 4), 128, 0, st>>>(p, delta, dq_accum);
  }
  CUDA_CHECK_LAUNCH();
}
}  // namespace

void launch_attention_bwd_delta(const AttentionParams<bf16>& p, float* delta, float* dq_accum,
                                Stream s) {
  check_params(p);
  check_bf16_layout(p);
  ATTN_ASSERT(delta != nullptr && (dq_accum == nullptr || aligned16(dq_accum)));
  bwd_delta(p, delta, dq_accum, reinterpret_cast<cudaStream_t>(s));
}

template <typename T>
void launch_attention_bwd(const AttentionParams<T>& p, Stream s) {
  check_params(p);
  if constexpr (std::is_same_v<T, float>) {
    launch_bwd_f32(p, s);
  } else {
    check_bf16_layout(p);
    auto st = reinterpret_cast<cudaStream_t>(s);
    const int64_t rows = int64_t(p.B) * p.n_head * p.T_;
    StreamScratch delta(sizeof(float) * rows, s);
    // Fast path: dQ accumulates in fp32 [B, H, T, D], zeroed by the delta kernel in the same pass
    // (cudaMemsetAsync plus a read-only delta kernel measured 2-3% slower on the H200: 3.49 vs
    // 3.41 ms for the D = 128, T = 4K backward of bench_attention).
    StreamScratch dq_accum(p.deterministic ? 0 : sizeof(float) * rows * p.D, s);
    bwd_delta(p, delta.as<float>(), dq_accum.as<float>(), st);
    if (!p.deterministic && p.use_wgmma && aligned16(p.dout) && attention_bwd_wgmma_supported(p)) {
      launch_attention_bwd_wgmma(p, delta.as<float>(), dq_accum.as<float>(), s);
    } else if (p.D == 64) {
      bwd_bf16<64>(p, delta.as<float>(), dq_accum.as<float>(), st);
    } else {
      bwd_bf16<128>(p, delta.as<float>(), dq_accum.as<float>(), st);
    }
  }
}

template void launch_attention_fwd<float>(const AttentionParams<float>&, Stream);
template void launch_attention_fwd<bf16>(const AttentionParams<bf16>&, Stream);
template void launch_attention_bwd<float>(const AttentionParams<float>&, Stream);
template void launch_attention_bwd<bf16>(const AttentionParams<bf16>&, Stream);

}  // namespace attnlab
