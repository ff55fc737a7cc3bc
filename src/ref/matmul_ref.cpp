#include "ref/matmul_ref.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ref/gelu_ref.h"
#include "ref/parallel.h"

namespace attnlab {

namespace {

// ---- a small cache-blocked GEMM ---------------------------------------------------------------
// C[m, n] (= or +=) sum_k A(m, k) B(k, n), with A and B given by (row, column) strides so that
// transposed operands need no copy. Structure (as in BLIS/GotoBLAS): the output is cut into
// MC x NC tiles, one OpenMP task each; per KC slice the task packs its A and B panels into
// contiguous micro-panels, and an MR x NR register-blocked micro-kernel computes each micro-tile.
//
// Determinism: the tiling depends only on the shapes (never on the thread count), each output
// element is owned by one task and summed in increasing k, one KC slice at a time
// (c = ((s0) + s1) + ...). With FMA the AVX2 and AVX-512 micro-kernels give identical bits
// (each element is the same chain of fused multiply-adds); the portable fallback without FMA
// rounds differently, but is just as deterministic.

struct GemmArgs {
  const float* a;
  int64_t a_rs, a_cs;  // A(m, k) = a[m * a_rs + k * a_cs]
  const float* b;
  int64_t b_rs, b_cs;  // B(k, n) = b[k * b_rs + n * b_cs]
  float* c;
  int64_t ldc;  // C(m, n) = c[m * ldc + n]
  int64_t M, N, K;
  bool accumulate;  // C += A B instead of C = A B
};

constexpr int64_t kKC = 256;
constexpr int64_t kNC = 256;

using MicroKernel = void (*)(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                             int m_valid, int n_valid, bool accumulate);

// MR x (NV * W) micro-tile; V is a GCC vector of W floats. a: [kc][MR], b: [kc][NR] (packed,
// 64-byte aligned). Compiled once per instruction set through the wrappers below.
template <int MR, int NV, typename V>
__attribute__((always_inline)) inline void micro_kernel_body(int64_t kc, const float* a,
                                                             const float* b, float* c, int64_t ldc,
                                                             int m_valid, int n_valid,
                                                             bool accumulate) {
  constexpr int W = int(sizeof(V) / sizeof(float));
  constexpr int NR = NV * W;
  V acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NV; ++j) acc[r][j] = V{};
  for (int64_t k = 0; k < kc; ++k) {
    V bv[NV];
    for (int j = 0; j < NV; ++j) bv[j] = *reinterpret_cast<const V*>(b + k * NR + j * W);
    for (int r = 0; r < MR; ++r) {
      const V av = V{} + a[k * MR + r];
      for (int j = 0; j < NV; ++j) acc[r][j] += av * bv[j];
    }
  }
  if (m_valid == MR && n_valid == NR) {
    for (int r = 0; r < MR; ++r)
      for (int j = 0; j < NV; ++j) {
        float* cp = c + r * ldc + j * W;
        V out = acc[r][j];
        if (accumulate) {
          V cur;
          std::memcpy(&cur, cp, sizeof(V));
          out = cur + out;
        }
        std::memcpy(cp, &out, sizeof(V));
      }
    return;
  }
  alignas(64) float tile[MR][NR];
  std::memcpy(tile, acc, sizeof(tile));
  for (int r = 0; r < m_valid; ++r)
    for (int j = 0; j < n_valid; ++j)
      c[r * ldc + j] = accumulate ? c[r * ldc + j] + tile[r][j] : tile[r][j];
}

typedef float V8 __attribute__((vector_size(32)));
typedef float V16 __attribute__((vector_size(64)));

__attribute__((target("avx512f,fma"))) void micro_kernel_avx512(int64_t kc, const float* a,
                                                                const float* b, float* c,
                                                                int64_t ldc, int mv, int nv,
                                                                bool acc) {
  micro_kernel_body<8, 2, V16>(kc, a, b, c, ldc, mv, nv, acc);
}
__attribute__((target("avx2,fma"))) void micro_kernel_avx2(int64_t kc, const float* a,
                                                           const float* b, float* c, int64_t ldc,
                                                           int mv, int nv, bool acc) {
  micro_kernel_body<6, 2, V8>(kc, a, b, c, ldc, mv, nv, acc);
}
void micro_kernel_portable(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                           int mv, int nv, bool acc) {
  micro_kernel_body<6, 2, V8>(kc, a, b, c, ldc, mv, nv, acc);
}

// Packs rows [m0, m0 + mc) x columns [k0, k0 + kc) of A into micro-panels of MR rows:
// dst[p][k][r] = A(m0 + p MR + r, k0 + k), zero beyond M.
template <int MR>
void pack_a(const GemmArgs& g, int64_t m0, int64_t mc, int64_t k0, int64_t kc, float* dst) {
  for (int64_t p0 = 0; p0 < mc; p0 += MR, dst += MR * kc) {
    const int rows = int(std::min<int64_t>(MR, mc - p0));
    if (rows < MR) std::fill(dst, dst + MR * kc, 0.f);
    const float* src = g.a + (m0 + p0) * g.a_rs + k0 * g.a_cs;
    if (g.a_cs == 1) {
      for (int r = 0; r < rows; ++r)
        for (int64_t k = 0; k < kc; ++k) dst[k * MR + r] = src[r * g.a_rs + k];
    } else {
      for (int64_t k = 0; k < kc; ++k)
        for (int r = 0; r < rows; ++r) dst[k * MR + r] = src[r * g.a_rs + k * g.a_cs];
    }
  }
}

// Packs rows [k0, k0 + kc) x columns [n0, n0 + nc) of B into micro-panels of NR columns:
// dst[q][k][j] = B(k0 + k, n0 + q NR + j), zero beyond N.
template <int NR>
void pack_b(const GemmArgs& g, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float* dst) {
  for (int64_t q0 = 0; q0 < nc; q0 += NR, dst += NR * kc) {
    const int cols = int(std::min<int64_t>(NR, nc - q0));
    if (cols < NR) std::fill(dst, dst + NR * kc, 0.f);
    const float* src = g.b + k0 * g.b_rs + (n0 + q0) * g.b_cs;
    if (g.b_cs == 1) {
      for (int64_t k = 0; k < kc; ++k)
        for (int j = 0; j < cols; ++j) dst[k * NR + j] = src[k * g.b_rs + j];
    } else {
      for (int j = 0; j < cols; ++j)
        for (int64_t k = 0; k < kc; ++k) dst[k * NR + j] = src[k * g.b_rs + j * g.b_cs];
    }
  }
}

struct AlignedFloats {
  explicit AlignedFloats(size_t n)
      : ptr(static_cast<float*>(std::aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64))) {}
  ~AlignedFloats() { std::free(ptr); }
  AlignedFloats(const AlignedFloats&) = delete;
  AlignedFloats& operator=(const AlignedFloats&) = delete;
  float* ptr;
};

template <int MR, int NR>
void gemm_blocked(const GemmArgs& g, MicroKernel kernel) {
  constexpr int64_t MC = MR * 16;
  static_assert(kNC % NR == 0);
  const int64_t m_tiles = (g.M + MC - 1) / MC, n_tiles = (g.N + kNC - 1) / kNC;
  const int64_t tiles = m_tiles * n_tiles;
#pragma omp parallel if (tiles > 1 && worth_parallel(g.M * g.N * g.K))
  {
    AlignedFloats a_pack(size_t(MC * kKC)), b_pack(size_t(kKC * kNC));
#pragma omp for schedule(dynamic, 1)
    for (int64_t tile = 0; tile < tiles; ++tile) {
      const int64_t m0 = (tile / n_tiles) * MC, n0 = (tile % n_tiles) * kNC;
      const int64_t mc = std::min(MC, g.M - m0), nc = std::min(kNC, g.N - n0);
      for (int64_t k0 = 0; k0 < g.K; k0 += kKC) {
        const int64_t kc = std::min(kKC, g.K - k0);
        pack_a<MR>(g, m0, mc, k0, kc, a_pack.ptr);
        pack_b<NR>(g, k0, kc, n0, nc, b_pack.ptr);
        const bool accumulate = g.accumulate || k0 > 0;
        for (int64_t j0 = 0; j0 < nc; j0 += NR) {
          const int nv = int(std::min<int64_t>(NR, nc - j0));
          for (int64_t i0 = 0; i0 < mc; i0 += MR) {
            const int mv = int(std::min<int64_t>(MR, mc - i0));
            kernel(kc, a_pack.ptr + i0 * kc, b_pack.ptr + j0 * kc,
                   g.c + (m0 + i0) * g.ldc + n0 + j0, g.ldc, mv, nv, accumulate);
          }
        }
      }
    }
  }
}

void gemm(const GemmArgs& g) {
  if (g.M == 0 || g.N == 0) return;
  if (g.K == 0) {
    if (!g.accumulate)
      for (int64_t m = 0; m < g.M; ++m) std::fill(g.c + m * g.ldc, g.c + m * g.ldc + g.N, 0.f);
    return;
  }
  static const int isa = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma") ? 2
                         : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")  ? 1
                                                                                            : 0;
  if (isa == 2)
    gemm_blocked<8, 32>(g, micro_kernel_avx512);
  else if (isa == 1)
    gemm_blocked<6, 16>(g, micro_kernel_avx2);
  else
    gemm_blocked<6, 16>(g, micro_kernel_portable);
}

// out (=, or += with accumulate) scale * the product that `product` writes into a scratch of n
// floats: the product rounded to float once, then scaled and added in float, as cuBLASLt's
// epilogue (alpha * acc + beta * C) does up to the accumulator's rounding.
template <typename Product>
void scaled_product(float* out, int64_t n, float scale, bool accumulate, const Product& product) {
  std::vector<float> c(static_cast<size_t>(n));
  product(c.data());
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (int64_t i = 0; i < n; ++i) out[i] = accumulate ? out[i] + scale * c[i] : scale * c[i];
}

}  // namespace

// y = x @ w^T + bias (+ residual); with gelu_pre the product goes there and y = gelu(gelu_pre).
// Each step rounds to float exactly as the separate ops (matmul, residual, gelu) would, so the
// fused and unfused compositions give identical bits.
void matmul_fwd_ref(const MatmulParams<float>& p) {
  if (p.scale != 1.f || p.accumulate_y) {
    scaled_product(p.y, p.N * p.out, p.scale, p.accumulate_y, [&](float* c) {
      gemm({p.x, p.in, 1, p.w, 1, p.in, c, p.out, p.N, p.out, p.in, false});
    });
    return;
  }
  float* out = p.gelu_pre ? p.gelu_pre : p.y;
  gemm({p.x, p.in, 1, p.w, 1, p.in, out, p.out, p.N, p.out, p.in, false});
  if (p.bias) {
#pragma omp parallel for schedule(static) if (worth_parallel(p.N * p.out))
    for (int64_t n = 0; n < p.N; ++n) {
      float* y = out + n * p.out;
      for (int o = 0; o < p.out; ++o) y[o] += p.bias[o];
    }
  }
  const int64_t total = p.N * p.out;
  if (p.residual) {
#pragma omp parallel for schedule(static) if (worth_parallel(total))
    for (int64_t i = 0; i < total; ++i) out[i] = out[i] + p.residual[i];
  }
  if (p.gelu_pre) {
    GeluParams<float> g;
    g.x = p.gelu_pre;
    g.y = p.y;
    g.n = total;
    gelu_fwd_ref(g);
  }
}

// dx (=, or += with accumulate_dx) = dy @ w, times gelu'(gelu_pre) when given;  dw += dy^T @ x;
// dbias += sum over rows of dy.
void matmul_bwd_ref(const MatmulParams<float>& p) {
  if (p.scale != 1.f) {
    if (p.dx)
      scaled_product(p.dx, p.N * p.in, p.scale, p.accumulate_dx, [&](float* c) {
        gemm({p.dy, p.out, 1, p.w, p.in, 1, c, p.in, p.N, p.in, p.out, false});
      });
    if (p.dw)
      scaled_product(p.dw, int64_t(p.out) * p.in, p.scale, true, [&](float* c) {
        gemm({p.dy, 1, p.out, p.x, p.in, 1, c, p.in, p.out, p.in, p.N, false});
      });
    return;
  }
  if (p.dx) {
    gemm({p.dy, p.out, 1, p.w, p.in, 1, p.dx, p.in, p.N, p.in, p.out, p.accumulate_dx});
    if (p.gelu_pre) {
      GeluParams<float> g;
      g.x = p.gelu_pre;
      g.dy = p.dx;
      g.dx = p.dx;
      g.n = p.N * p.in;
      gelu_bwd_ref(g);
    }
  }
  if (p.dw) gemm({p.dy, 1, p.out, p.x, p.in, 1, p.dw, p.in, p.out, p.in, p.N, true});
  if (!p.dbias) return;
  constexpr int kBlock = 64;
  const int nblocks = (p.out + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (worth_parallel(p.N * p.out))
  for (int blk = 0; blk < nblocks; ++blk) {
    const int o0 = blk * kBlock, o1 = std::min(p.out, o0 + kBlock);
    double acc[kBlock] = {};
    for (int64_t n = 0; n < p.N; ++n) {
      const float* dy = p.dy + n * p.out;
      for (int o = o0; o < o1; ++o) acc[o - o0] += dy[o];
    }
    for (int o = o0; o < o1; ++o) p.dbias[o] = static_cast<float>(p.dbias[o] + acc[o - o0]);
  }
}

}  // namespace attnlab
