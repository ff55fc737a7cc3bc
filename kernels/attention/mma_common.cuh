// Device helpers shared by the bf16 mma.sync attention kernels (attention_fwd_mma.cu,
// attention_bwd_mma.cu): PTX wrappers for ldmatrix and mma.sync m16n8k16 (bf16 operands, fp32
// accumulators), fragment loads from row-major shared-memory tiles (rows padded by 16 bytes, so
// ldmatrix is free of bank conflicts), and the cp.async row loader. Device code only.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/common/device.cuh"

namespace attnlab::mma {

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
// The same with fp16 operands (the Focus backward's affinity, focus_wgmma_gate.cuh).
__device__ __forceinline__ void mma16816_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
#if ATTN_HAVE_SM80
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
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
// g[0 .. 3] += v in global memory, g 16-byte aligned (one vector reduction on sm_90).
__device__ __forceinline__ void red_add4(float* g, float4 v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float4*>(g), v);
#else
  atomicAdd(g, v.x);
  atomicAdd(g + 1, v.y);
  atomicAdd(g + 2, v.z);
  atomicAdd(g + 3, v.w);
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

// Copies rows row0.. row0+ROWS-1 (zero past T) of a [T, D] strided matrix into smem via cp.async;
// kNThreads = the block size. (A compile-time stride lets the compiler unroll the loop: with
// blockDim.x here the forward measured slower.)
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

// Host: the dynamic shared memory a kernel launches with, and the largest carveout (two 112 KiB
// dK/dV blocks at D = 128 must share an SM).
template <typename K>
void set_smem(K kernel, size_t bytes) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                  int(cudaSharedmemCarveoutMaxShared)));
}

}  // namespace attnlab::mma
