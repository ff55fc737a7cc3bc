// Device helpers shared by the Hopper wgmma attention kernels (attention_wgmma.cu: forward,
// attention_wgmma_bwd.cu: backward): PTX wrappers for cp.async, proxy fences and wgmma, the
// shared-memory matrix descriptor, and the 128-byte-swizzled tile layout with its cp.async
// loader. The layout and the synchronization rules are described at the top of attention_wgmma.cu.
// Only for files compiled for sm_90a (CMake's attnlab_wgmma object library); the device code is
// compiled where ATTN_WGMMA_DEVICE is 1.
#pragma once
#include <cuda.h>  // CUtensorMap (types only: the encoder is reached through the runtime)
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/common/device.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define ATTN_WGMMA_DEVICE 1
#else
#define ATTN_WGMMA_DEVICE 0
#endif

namespace attnlab::wgmma {

// Bytes of one [rows][D] bf16 tile (D / 64 column blocks of rows x 128 B).
constexpr uint32_t tile_bytes(int rows, int D) { return uint32_t(rows) * D * 2; }

// Host: the TMA map of a bf16 [B][T][width] matrix at base (16-byte aligned) with row stride
// `row_stride` and batch stride `batch_stride` (elements, multiples of 8; any batch stride when B
// is 1): boxes of 64 columns x `rows` rows, written in the 128-byte swizzle of the tiles
// (swizzled_offset), so one box is one column block of a tile; rows past T read as zero. Defined
// in wgmma_tensor_map.cu; errors (no driver entry point, a rejected layout) throw attnlab::Error.
CUtensorMap tile_map(const void* base, int width, int T, int B, int64_t row_stride,
                     int64_t batch_stride, int rows);

#if ATTN_WGMMA_DEVICE
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// ---- PTX wrappers (sm_90a) --------------------------------------------------------------------
__device__ __forceinline__ void cp_async16(uint32_t smem, const void* gmem, bool valid) {
  const int n = valid ? 16 : 0;  // 0: zero-fill the 16 bytes (rows past T)
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "r"(n)
               : "memory");
}
// 4-byte variant (per-row floats such as lse, whose rows need not be 16-byte aligned).
__device__ __forceinline__ void cp_async4(uint32_t smem, const void* gmem, bool valid) {
  const int n = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem), "l"(gmem), "r"(n)
               : "memory");
}
// 8-byte variant (pairs of floats: the hard-routed forward's partial rows).
__device__ __forceinline__ void cp_async8(uint32_t smem, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(smem), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}
// Wait until at most N of this thread's newest cp.async groups are pending.
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// A global int loaded with acquire semantics at GPU scope (a count other blocks publish with a
// fence and an atomic).
__device__ __forceinline__ int ld_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// Generic-proxy writes (cp.async, st.shared) become visible to the async proxy (wgmma operand
// reads) only through this fence.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most N of this thread's committed wgmma groups are pending (groups complete in
// commit order).
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
  }
}

// Shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"), 64 bits:
//   bits  0-13  start address >> 4: shared-window address of the operand's first element. Moving
//               along K inside a 128-byte row (K-major) is done by adding the byte offset here:
//               the hardware swizzles the address it computes, so +32 B selects the next 16
//               elements of every row exactly as the XOR pattern stored them.
//   bits 16-29  leading-dimension byte offset >> 4 (LBO)
//   bits 32-45  stride-dimension byte offset >> 4 (SBO)
//   bits 49-51  base offset: the pattern phase, (start >> 7) & 7, for a start not on a pattern
//               boundary. 0 here: every start used has address bits [7:9] = 0 (tiles, warpgroup
//               row offsets and V k-steps are multiples of 1024 B; K-steps add 32..96 B)
//   bits 62-63  swizzle mode: 1 = 128-byte swizzle
// Canonical 128-byte-swizzle layouts (CUTLASS notation, T = 8 bf16 = 16 bytes):
//   K-major  ((8, m), (T, 2)) : ((8T, SBO), (1, T)): 8 rows at 128 B, groups of 8 rows at SBO;
//            the k16 of one instruction (32 B) stays inside one 128-byte row, so LBO is unused
//            (set to 1, i.e. 16 B, by convention).
//   MN-major ((T, 8, m), (8, k)) : ((1, T, LBO), (8T, SBO)): 64 contiguous elements along N in
//            a 128-byte row, the next 64 (next column block) at LBO; 8 K-rows at 128 B, the next
//            8 K-rows at SBO.
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t((lbo & 0x3FFFF) >> 4) << 16) |
         (uint64_t((sbo & 0x3FFFF) >> 4) << 32) | (uint64_t(1) << 62);
}

// smem_desc with swizzle mode 0 (no swizzle): core matrices of 8 rows x 16 bytes, contiguous.
// MN-major (CUTLASS's canonical INTERLEAVE layout): lbo = the byte step between core matrices
// along K, sbo = along M or N (the Focus backward's g planes, focus_wgmma_gate.cuh).
__device__ __forceinline__ uint64_t smem_desc_interleave(uint32_t addr, uint32_t lbo,
                                                         uint32_t sbo) {
  return smem_desc(addr, lbo, sbo) & ~(uint64_t(3) << 62);
}

// The descriptor of the operand `bytes` further on (a K-step, a column block, a buffer): only the
// start-address field changes, and the 32-bit add cannot carry out of it (shared-window addresses
// are below 256 KiB: (addr >> 4) < 2^14). One integer add per wgmma instead of rebuilding the
// descriptor (mask, shift, widen, or: about 10 instructions per SS wgmma).
__device__ __forceinline__ uint64_t desc_add(uint64_t desc, uint32_t bytes) {
  const uint32_t lo = uint32_t(desc) + (bytes >> 4), hi = uint32_t(desc >> 32);
  return (uint64_t(hi) << 32) | lo;
}

// Accumulator operand lists: C is the constraint ("+f"), d the float array.
#define ATTN_WG_ACC8(C, d, i)                                                               \
  C(d[(i) + 0]), C(d[(i) + 1]), C(d[(i) + 2]), C(d[(i) + 3]), C(d[(i) + 4]), C(d[(i) + 5]), \
      C(d[(i) + 6]), C(d[(i) + 7])
#define ATTN_WG_ACC32(C, d) \
  ATTN_WG_ACC8(C, d, 0), ATTN_WG_ACC8(C, d, 8), ATTN_WG_ACC8(C, d, 16), ATTN_WG_ACC8(C, d, 24)
#define ATTN_WG_ACC64(C, d)                                                                    \
  ATTN_WG_ACC32(C, d), ATTN_WG_ACC8(C, d, 32), ATTN_WG_ACC8(C, d, 40), ATTN_WG_ACC8(C, d, 48), \
      ATTN_WG_ACC8(C, d, 56)
#define ATTN_WG_REGS8 "%0, %1, %2, %3, %4, %5, %6, %7"
#define ATTN_WG_REGS32                                                                         \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define ATTN_WG_REGS64                                                                           \
  ATTN_WG_REGS32                                                                                 \
  ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, " \
  "%50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"

// d (64 x N fp32, accumulator fragments) = (accumulate ? d : 0) + A B, A (64 x 16) and B (16 x N)
// from shared memory, scale-a = scale-b = 1. kTransA / kTransB = 0: K-major (the operand is stored
// [M or N][K], K contiguous); 1: MN-major ([K][M or N], M or N contiguous). With accumulate = 0 the
// previous contents of d are ignored (the first k-step of a product). Operands bf16, or fp16 with
// kF16 (the Focus affinity's g operands, focus_wgmma_gate.cuh).
#define ATTN_WG_SS_N16(TYPE)                                                         \
  asm volatile(                                                                      \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"                                   \
      "wgmma.mma_async.sync.aligned.m64n16k16.f32." TYPE "." TYPE " {" ATTN_WG_REGS8 \
      "}, %8, %9, p, 1, 1, %11, %12;\n}\n"                                           \
      : ATTN_WG_ACC8("+f", d, 0)                                                     \
      : "l"(a), "l"(b), "r"(accumulate), "n"(kTransA), "n"(kTransB))
#define ATTN_WG_SS_N64(TYPE)                                                          \
  asm volatile(                                                                       \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                    \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " {" ATTN_WG_REGS32 \
      "}, %32, %33, p, 1, 1, %35, %36;\n}\n"                                          \
      : ATTN_WG_ACC32("+f", d)                                                        \
      : "l"(a), "l"(b), "r"(accumulate), "n"(kTransA), "n"(kTransB))
#define ATTN_WG_SS_N128(TYPE)                                                          \
  asm volatile(                                                                        \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                     \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " {" ATTN_WG_REGS64 \
      "}, %64, %65, p, 1, 1, %67, %68;\n}\n"                                           \
      : ATTN_WG_ACC64("+f", d)                                                         \
      : "l"(a), "l"(b), "r"(accumulate), "n"(kTransA), "n"(kTransB))
template <int N, int kTransA = 0, int kTransB = 0, bool kF16 = false>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t a, uint64_t b,
                                         int accumulate) {
  static_assert(N == 16 || N == 64 || N == 128, "N is 16, 64 or 128");
  if constexpr (N == 16) {  // (bf16: the Focus backward's dg products, focus_wgmma_gate.cuh)
    static_assert(!kF16, "N 16 takes bf16 operands");
    ATTN_WG_SS_N16("bf16");
  } else if constexpr (N == 64 && kF16) {
    ATTN_WG_SS_N64("f16");
  } else if constexpr (N == 64) {
    ATTN_WG_SS_N64("bf16");
  } else if constexpr (kF16) {
    ATTN_WG_SS_N128("f16");
  } else {
    ATTN_WG_SS_N128("bf16");
  }
}
#undef ATTN_WG_SS_N16
#undef ATTN_WG_SS_N64
#undef ATTN_WG_SS_N128

// Issues acc = A B^T for one warpgroup as one committed wgmma group (not waited), both operands
// K-major in shared memory in column blocks of 64 elements (128-byte rows, 128-byte swizzle): A =
// 64 rows at a_rows of a tile of kARows rows (column block c kARows x 128 bytes on), B = the N rows
// of the tile at b_tile (column block c N x 128 bytes on). kK / 16 k-steps; step kk reads column
// block kk / 4 at byte 32 (kk % 4) of each row (SBO = 1024: 8 rows). The forward's S = Q K^T and
// the backward's S^T = K Q^T and dP^T = V dO^T.
// The k-steps alone (no fence, no commit): for callers that put more wgmmas into the same group.
template <int kK, int kARows, int N>
__device__ __forceinline__ void issue_abt_steps(float (&acc)[N / 2], uint32_t a_rows,
                                                uint32_t b_tile) {
  const uint64_t a0 = smem_desc(a_rows, 16, 1024), b0 = smem_desc(b_tile, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < kK / 16; ++kk) {
    const uint32_t koff = (kk % 4) * 32u;
    const uint64_t a = desc_add(a0, (kk / 4) * kARows * 128 + koff);
    const uint64_t b = desc_add(b0, (kk / 4) * N * 128 + koff);
    wgmma_ss<N>(acc, a, b, kk > 0 ? 1 : 0);
  }
}
template <int kK, int kARows, int N>
__device__ __forceinline__ void issue_abt(float (&acc)[N / 2], uint32_t a_rows, uint32_t b_tile) {
  fence_regs(acc);
  wgmma_fence();
  issue_abt_steps<kK, kARows, N>(acc, a_rows, b_tile);
  wgmma_commit();
}

// d (64 x N fp32) += A B with A (64 x 16 bf16) from registers (4 x 32 bits per thread, the
// m16n8k16-style fragment of the thread's warp: rows 16 * warp + ...) and B (16 x N) from shared
// memory, MN-major (imm-trans-b = 1: B is stored [K][N] with N contiguous).
template <int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b) {
  static_assert(N == 64 || N == 128, "head dim 64 or 128");
  if constexpr (N == 64) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" ATTN_WG_REGS32
        "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
        : ATTN_WG_ACC32("+f", d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(1));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" ATTN_WG_REGS64
        "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : ATTN_WG_ACC64("+f", d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(1));
  }
}

__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// An accumulator tile (64 x N fp32, the wgmma D layout) as register A fragments (bf16) of a
// following wgmma with K = N: k-step kk covers columns 16 kk .. 16 kk + 15, i.e. accumulator n8
// blocks 2 kk and 2 kk + 1, so the D layout is already the A layout (a0/a1: rows g / g + 8,
// columns 2 tig..; a2/a3: columns 8 + 2 tig..). This is how P = softmax(S) feeds O += P V.
template <int N>
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[N / 16][4], const float (&acc)[N / 2]) {
#pragma unroll
  for (int kk = 0; kk < N / 16; ++kk) {
    a[kk][0] = pack_bf16(acc[8 * kk + 0], acc[8 * kk + 1]);
    a[kk][1] = pack_bf16(acc[8 * kk + 2], acc[8 * kk + 3]);
    a[kk][2] = pack_bf16(acc[8 * kk + 4], acc[8 * kk + 5]);
    a[kk][3] = pack_bf16(acc[8 * kk + 6], acc[8 * kk + 7]);
  }
}

// Byte offset of 16-byte chunk `chunk` (elements 8 chunk .. 8 chunk + 7 of D) of row `row` in a
// [ROWS][D] tile in the 128-byte swizzled layout (attention_wgmma.cu).
template <int ROWS>
__device__ __forceinline__ uint32_t swizzled_offset(int row, int chunk) {
  return uint32_t((chunk >> 3) * ROWS * 128 + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}

// Rows row0 .. row0 + ROWS - 1 (zero past T) of a [T, D] strided matrix into a swizzled tile at
// shared address s by the block's kThreads threads; consecutive threads read consecutive 16 bytes
// of a row.
template <int ROWS, int D, int kThreads>
__device__ __forceinline__ void load_tile(uint32_t s, const bf16* g, int64_t row_stride, int row0,
                                          int T) {
  constexpr int kChunks = D / 8, kRowsPerRound = kThreads / kChunks;
  static_assert(ROWS % kRowsPerRound == 0, "whole rounds of 16-byte copies");
  // Round `it` copies rows it * kRowsPerRound + r; the chunk c and the row's phase in the swizzle
  // (r % 8, as kRowsPerRound is a multiple of 8) are the same in every round, so the shared
  // offset advances by a constant and the global pointer by kRowsPerRound rows.
  const int r = threadIdx.x / kChunks, c = threadIdx.x % kChunks;
  const uint32_t dst = s + swizzled_offset<ROWS>(r, c);
  const bf16* src = g + int64_t(row0 + r) * row_stride + c * 8;
  const int64_t step = int64_t(kRowsPerRound) * row_stride;
#pragma unroll
  for (int it = 0; it < ROWS / kRowsPerRound; ++it) {
    const bool valid = row0 + r + it * kRowsPerRound < T;
    cp_async16(dst + it * kRowsPerRound * 128, valid ? src + it * step : g, valid);
  }
}

// ---- mbarriers (shared-memory transaction barriers) and named barriers ------------------------
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Arrival with release semantics (this thread's earlier accesses happen before the phase
// completes for the waiters).
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Waits (acquire) until the phase of parity `parity` of bar has completed: phase k (k = 0, 1, ..)
// is the barrier's k-th completion, so a barrier completed once per use waits with (use & 1).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
// The mbarrier initialisations above are visible to the async proxy (TMA completions); then a
// block barrier before any use.
__device__ __forceinline__ void fence_mbar_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival that also expects `bytes` more transaction bytes (TMA copies completing on bar)
// before the phase can complete.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
// TMA: the box at coordinates (c0, c1, c2) of the 3-d tensor map at generic address tmap (a
// __grid_constant__ kernel parameter) to shared memory at dst, in the map's swizzle; the bytes
// complete on mbarrier bar. Elements outside the tensor read as zero (and still count).
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const void* tmap, uint32_t bar, int c0,
                                            int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(dst),
      "l"(tmap), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
// Named hardware barriers (id 1..15; 0 is __syncthreads) over kCount threads: sync waits, arrive
// only counts.
template <int kCount>
__device__ __forceinline__ void named_bar_sync(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(kCount) : "memory");
}
template <int kCount>
__device__ __forceinline__ void named_bar_arrive(int id) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "n"(kCount) : "memory");
}

// Bulk reduction dst[0 .. bytes) += src (fp32, shared -> global, asynchronous; bytes a multiple of
// 16, both addresses 16-byte aligned), committed as one bulk group of the issuing thread.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, uint32_t src, uint32_t bytes) {
  asm volatile(
      "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
      "cp.async.bulk.commit_group;\n" ::"l"(dst),
      "r"(src), "r"(bytes)
      : "memory");
}
// The issuing thread's bulk groups have finished reading shared memory / have completed.
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
__device__ __forceinline__ void bulk_wait_all() {
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

// Two floats at a shared-memory address (8-byte aligned).
__device__ __forceinline__ float2 lds_f2(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
  return v;
}

// Shared-memory tile is ready for wgmma: this thread's copies landed and are made visible to the
// async proxy, then everybody's (the barrier also orders the previous readers of the buffer the
// next cp.async overwrites: they waited for their wgmma groups before arriving).
__device__ __forceinline__ void tiles_ready() {
  cp_async_wait_all();
  fence_proxy_async();
  __syncthreads();
}
#endif  // ATTN_WGMMA_DEVICE

}  // namespace attnlab::wgmma
