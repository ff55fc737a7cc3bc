// Dense attention forward for Hopper on warpgroup MMA (wgmma), bf16, head dim 64 or 128.
// Contract: attention_wgmma.cuh (= launch_attention_fwd<bf16>'s: o and lse written, lse in natural
// log, packed strided q/k/v, GQA, causal or not, sliding window).
//
// Design (FlashAttention-3's forward):
//   A block owns kBlockM = 128 queries of one (batch, head) and runs 2 warpgroups (256 threads);
//   warpgroup w owns queries 64w..64w+63 of the block (the M = 64 of one wgmma). The block loops
//   over tiles of kBlockN = 128 keys, double-buffered in shared memory (loads of the next tile run
//   during the compute of this one, issued by TMA):
//     S = Q K^T      wgmma m64n128k16, A = Q and B = K both from shared memory (K-major),
//                    D / 16 instructions, fp32 accumulators in registers (64 per thread);
//     online softmax in registers: log2 domain, scale folded into one FFMA per score, ex2.approx;
//     O += P V       wgmma m64nDk16 with A = P from registers (bf16, converted from S in place:
//                    the accumulator layout of S is the register-A layout of P) and B = V from
//                    shared memory (MN-major: V is [keys][D] with D contiguous), kBlockN / 16
//                    instructions.
//   Key tiles, warpgroup skips and element masks (only on tiles that touch the diagonal, the window
//   edge or the end of T) come from AttentionMask (visibility.h).
//   Two schedules, the same arithmetic in the same order, one per head dim (each measured the
//   faster at its D on the H200, docs/performance_attention_history.md v6; the others were
//   removed):
//     D = 64, simple     per tile: S, wait, softmax, rescale O, O += P V, wait. A warpgroup skips
//                        tiles entirely past its causal diagonal or before its window. 128
//                        registers (two blocks per SM, so one block's softmax overlaps the other's
//                        MMAs).
//     D = 128, pingpong  FlashAttention-3's intra-warpgroup overlap (S of tile n and O += P V of
//                        tile n - 1 issued back to back, the softmax of tile n running while the
//                        tensor cores finish P V, then O rescaled), plus its warp specialization
//                        and inter-warpgroup overlap: a producer warpgroup loads through mbarrier
//                        stages and the two compute warpgroups take turns at the tensor cores (see
//                        the kernel).

// Shared-memory layout (all operands): 128-byte swizzle, the canonical wgmma layout. A [rows][D]
// bf16 tile is split into D / 64 column blocks of 64 elements (128 bytes); a column block is a
// [rows][128 B] array in which 16-byte chunk c of row r is stored at chunk position c ^ (r % 8).
// The hardware applies the same XOR to address bits [4:6] with bits [7:9] of the shared-memory
// address, so every tile starts on a 1024-byte boundary (the swizzle period: 8 rows x 128 B).
// The XOR spreads the 8 rows of a core matrix over all 32 banks: no bank conflicts for wgmma
// reads, and a warp's cp.async writes (whole 128-byte rows) take the minimum number of wavefronts.
//
// Synchronization, per K/V tile (the simple kernel; Q is loaded by cp.async, K and V by TMA):
//   cp.async.wait_group 0           this thread's copies (Q) have landed
//   fence.proxy.async.shared::cta   make them visible to the async proxy that wgmma reads through
//   __syncthreads                   everybody's copies landed and fenced; also, both warpgroups
//                                   finished (wgmma.wait_group 0) reading the other buffer, which
//                                   the next TMA copy overwrites
//   mbarrier wait                   the stage's TMA copies (K, V) have landed
//   wgmma.fence                     before the first wgmma of a batch: orders earlier register
//                                   writes/reads of the accumulators and of P before the async MMA
//   wgmma x n, commit_group, wait_group N: the accumulators of all but the N most recent
//                                   groups are valid after the wait.
// Accumulator and P registers are also passed through empty asm statements around each batch
// (fence_regs), so the compiler can neither move their uses above the wait nor reuse P's
// registers while the MMA still reads them.
//
// The kernel body exists only in the sm_90a compilation (wgmma is an sm_90a feature); CMake
// compiles this file for sm_90a alone when CMAKE_CUDA_ARCHITECTURES contains 90, and otherwise for
// the project's architectures with an empty body (ATTNLAB_WGMMA_SM90A undefined: the launcher
// reports unsupported).
#include <cuda_bf16.h>

#include "kernels/attention/attention_wgmma.cuh"
#include "kernels/attention/wgmma_common.cuh"
#include "kernels/attention/wgmma_pingpong.cuh"
#include "kernels/attention/wgmma_softmax.cuh"
#include "kernels/common/device.cuh"

namespace attnlab {
namespace {

using namespace wgmma;

constexpr int kWarpgroups = 2;
constexpr int kThreads = 128 * kWarpgroups;
constexpr int kBlockM = 64 * kWarpgroups;  // queries per block
constexpr int kBlockN = 128;               // keys per shared-memory tile

// Dynamic shared memory: Q, 2 K and 2 V tiles, plus 1 KiB to align the base to 1024 bytes.
constexpr size_t smem_bytes(int D) {
  return size_t(tile_bytes(kBlockM, D)) + 4 * size_t(tile_bytes(kBlockN, D)) + 1024;
}
// The simple kernel's: also 2 mbarriers (K and V of a stage loaded by TMA).
constexpr size_t simple_smem_bytes(int D) { return smem_bytes(D) + 2 * 8; }
// Blocks per SM the simple kernel's launch bounds ask registers for: at D = 64 (81 KiB of shared
// memory) two blocks (<= 128 registers per thread); at D = 128 (161 KiB) one.
template <int D>
constexpr int kMinBlocks = D == 64 ? 2 : 1;

#if ATTN_WGMMA_DEVICE

// ---- the steps of one key tile, for one warpgroup ----------------------------------------------
// (RowState, online_softmax, rescale, issue_pv, store_o_lse: wgmma_softmax.cuh.)

// Masks (where needed), then the online-softmax update of scores s of keys k0 .. k0 + kBlockN - 1:
// s becomes exp2(s * scale * log2 e - new max), the row state is updated and corr (the factor
// for O accumulated so far) returned. O itself is not touched (it may still be in flight).
__device__ __forceinline__ void softmax_tile(float (&s)[kBlockN / 2], RowState& st,
                                             float (&corr)[2], const AttentionParams<bf16>& p,
                                             int k0, int wq0, int row0, int tig, float sl2) {
  const int T = p.seq_len;
  if (ATTN_MASK_NEEDS_KEY_MASK(p.mask, wq0, 64, k0, kBlockN, T)) {
    // Row qi sees keys base + lo .. base + hi; in this thread's columns key = k0 + 2 tig + (8 j +
    // e), so one comparison of the compile-time column offset 8 j + e against each bound (few
    // registers).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int qi = row0 + 8 * r, base = k0 + 2 * tig;
      int lo, hi;
      p.mask.key_bounds(qi, T, base, &lo, &hi);
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (8 * j + e > hi || 8 * j + e < lo) s[4 * j + 2 * r + e] = -INFINITY;
        }
      }
    }
  }
  online_softmax<kBlockN>(s, st, corr, sl2);
}

#endif  // ATTN_WGMMA_DEVICE

// The simple schedule (the default at D = 64): per tile S = Q K^T, wait, softmax, O += P V, wait;
// a warpgroup skips tiles it does not see; K and V of tile n + 1 load (TMA) during tile n.
template <int D>
__global__ void __launch_bounds__(kThreads, kMinBlocks<D>)
    attn_fwd_wgmma_simple_kernel(const AttentionParams<bf16> p,
                                 const __grid_constant__ CUtensorMap tm_k,
                                 const __grid_constant__ CUtensorMap tm_v) {
#if ATTN_WGMMA_DEVICE
  constexpr uint32_t kQBytes = tile_bytes(kBlockM, D), kKVBytes = tile_bytes(kBlockN, D);
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t smem_base =
      (static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) + 1023u) & ~1023u;
  const uint32_t sQ = smem_base;          // [kBlockM] rows
  const uint32_t sK = sQ + kQBytes;       // [2][kBlockN] rows
  const uint32_t sV = sK + 2 * kKVBytes;  // [2][kBlockN] rows

  const int T = p.seq_len;
  // Grid (heads, query tiles, batch): the heads vary fastest, so every head's longest (last,
  // causal) query tile is handed out before any head's second longest (longest first, docs/
  // performance.md, "Block order").
  const int m_block = gridDim.y - 1 - blockIdx.y;
  const int h = blockIdx.x, b = blockIdx.z, hk = h / (p.n_head / p.n_kv_head);
  const int wg = threadIdx.x / 128, warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, tig = lane & 3;
  const int q0 = m_block * kBlockM;
  const int wq0 = q0 + 64 * wg;          // first query of this warpgroup
  const int row0 = wq0 + 16 * warp + g;  // this thread's rows: row0 and row0 + 8
  const bf16* gq = p.q + b * p.qkv_batch_stride + h * D;
  const int64_t ld = p.qkv_row_stride;

  const TileRange tiles = p.mask.key_tiles(q0, kBlockM, kBlockN, T);
  const int n_begin = tiles.begin, n_end = tiles.end;

  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  fence_regs(o);
  RowState st = {{-INFINITY, -INFINITY}, {0.f, 0.f}};
  const float sl2 = p.scale * kLog2e;
  const uint32_t q_rows = sQ + wg * 64 * 128;  // this warpgroup's 64 rows in each column block
  float s[kBlockN / 2], corr[2];
  uint32_t pa[kBlockN / 16][4];

  // K and V by TMA: thread 0 issues tile nb + 1 into stage (nb - n_begin + 1) % 2 once the
  // barrier at the top of tile nb has seen both warpgroups done with that stage (tile nb - 1);
  // the copies complete on the stage's mbarrier (its k-th phase: the stage's k-th tile).
  const uint32_t full = sV + 2 * kKVBytes;  // [2]
  auto load_kv = [&](int nb, int stage) {
    const uint32_t bar = full + 8 * stage;
    mbar_arrive_expect_tx(bar, 2 * kKVBytes);
#pragma unroll
    for (int c = 0; c < D / 64; ++c) {  // column blocks (kBlockN x 128 bytes apart)
      tma_load_3d(sK + stage * kKVBytes + c * kBlockN * 128, &tm_k, bar, hk * D + 64 * c,
                  nb * kBlockN, b);
      tma_load_3d(sV + stage * kKVBytes + c * kBlockN * 128, &tm_v, bar, hk * D + 64 * c,
                  nb * kBlockN, b);
    }
  };
  if (threadIdx.x == 0) {
    mbar_init(full, 1);
    mbar_init(full + 8, 1);
    fence_mbar_init();
  }
  __syncthreads();
  load_tile<kBlockM, D, kThreads>(sQ, gq, ld, q0, T);
  cp_async_commit();
  if (threadIdx.x == 0) load_kv(n_begin, 0);
  for (int nb = n_begin; nb < n_end; ++nb) {
    const int buf = (nb - n_begin) & 1;
    tiles_ready();  // Q (first tile); the other stage free
    if (threadIdx.x == 0 && nb + 1 < n_end) load_kv(nb + 1, buf ^ 1);
    mbar_wait(full + 8 * buf, uint32_t((nb - n_begin) >> 1) & 1u);
    const int k0 = nb * kBlockN;
    // Uniform per warpgroup (wgmma needs all 128 threads): keys all past the diagonal of its
    // last row, or all before the window of its first row.
    if (ATTN_MASK_TILE_INVISIBLE(p.mask, wq0, wq0 + 63, k0, k0 + kBlockN - 1)) continue;
    issue_abt<D, kBlockM, kBlockN>(s, q_rows, sK + buf * kKVBytes);
    wgmma_wait<0>();
    fence_regs(s);
    softmax_tile(s, st, corr, p, k0, wq0, row0, tig, sl2);
    rescale<D>(o, corr);
    acc_to_a<kBlockN>(pa, s);
    issue_pv<D, kBlockN>(o, pa, sV + buf * kKVBytes);
    wgmma_wait<0>();
    fence_regs(o);
    fence_regs(pa);
  }

  store_o_lse<D>(o, st, p, b, h, row0, tig);
#else
  (void)p, (void)tm_k, (void)tm_v;
#endif
}

// The pingpong schedule (the default at D = 128). Per warpgroup, FlashAttention-3's
// intra-warpgroup overlap: S of tile n is issued together with O += P V of tile n - 1, and the
// softmax of tile n runs while the tensor cores do that P V; only then is O rescaled. The loads are
// in a producer warpgroup and the two compute warpgroups are decoupled, so that one's softmax runs
// while the other's MMAs do (FlashAttention-3's inter-warpgroup "pingpong"):
//   - warpgroup 2 (threads 256..383) is the producer: its first thread copies Q, then K and V of
//     each tile into two stages each with TMA (cp.async.bulk.tensor, the maps of tile_map), which
//     completes on the stage's "full" mbarrier (expect_tx); a consumer waits for the phase. (With
//     cp.async by all 128 producer threads it measured slower at D = 128: docs/performance.md.)
//   - a consumer warp releases a stage on its "empty" mbarrier (8 arrivals: lane 0 of each consumer
//     warp) after the wgmmas that read it completed (wait_group); the producer waits for that
//     release before it overwrites the stage. K of tile n is released after S of tile n, V after
//     the P V issued during tile n + 1.
//   - no block-wide barrier in the loop. Named barriers 1 and 2 take turns: warpgroup w issues its
//     MMAs of a step only after bar.sync on 1 + w, and then bar.arrive's on the other's barrier, so
//     the tensor cores alternate between the warpgroups and each softmax hides behind the other
//     warpgroup's MMAs. Warpgroup 1 arrives once first (warpgroup 0 starts); both take the same
//     number of turns (no per-warpgroup skipping), and warpgroup 0 consumes warpgroup 1's last
//     arrival at the end.
// The barriers, the producer's copies and the compute loop are in wgmma_pingpong.cuh (shared with
// the Focus soft forward, kernels/focus/focus_wgmma_fwd_pp.cu).
// One block per SM, 384 threads: the register file is split between the SM's 4 schedulers, so a
// 9th warp costs as much as a whole warpgroup (168 registers each at launch); the producer gives
// registers back (setmaxnreg) to the consumers, which hold S, P and
// O (about 195 at D = 128).
constexpr int kProducerThreads = 128;
constexpr int kProducerRegs = 40, kConsumerRegs = 232;  // 128 x 40 + 256 x 232 <= 64K
constexpr int kPingpongThreads = kThreads + kProducerThreads;
// Barriers after the tiles: Q full, K full [2], V full [2], K empty [2], V empty [2].
constexpr size_t pingpong_smem_bytes(int D) { return smem_bytes(D) + 9 * 8; }

template <int D>
__global__ void __launch_bounds__(kPingpongThreads, 1)
    attn_fwd_wgmma_pingpong_kernel(const AttentionParams<bf16> p,
                                   const __grid_constant__ CUtensorMap tm_q,
                                   const __grid_constant__ CUtensorMap tm_k,
                                   const __grid_constant__ CUtensorMap tm_v) {
#if ATTN_WGMMA_DEVICE
  constexpr uint32_t kQBytes = tile_bytes(kBlockM, D), kKVBytes = tile_bytes(kBlockN, D);
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t smem_base =
      (static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) + 1023u) & ~1023u;
  const uint32_t sQ = smem_base;          // [kBlockM] rows
  const uint32_t sK = sQ + kQBytes;       // [2][kBlockN] rows
  const uint32_t sV = sK + 2 * kKVBytes;  // [2][kBlockN] rows
  const uint32_t full_q = sV + 2 * kKVBytes;
  const uint32_t full_k = full_q + 8, full_v = full_k + 16;      // + 8 stage
  const uint32_t empty_k = full_v + 16, empty_v = empty_k + 16;  // + 8 stage

  const int T = p.seq_len;
  // Grid (heads, query tiles, batch): the heads vary fastest, so every head's longest (last,
  // causal) query tile is handed out before any head's second longest (longest first, docs/
  // performance.md, "Block order").
  const int m_block = gridDim.y - 1 - blockIdx.y;
  const int h = blockIdx.x, b = blockIdx.z, hk = h / (p.n_head / p.n_kv_head);
  const int q0 = m_block * kBlockM;
  const TileRange tiles = p.mask.key_tiles(q0, kBlockM, kBlockN, T);
  const int n_begin = tiles.begin, n_end = tiles.end;

  const int wg = threadIdx.x / 128, lane = threadIdx.x % 32;
  const PingpongBarriers<kThreads> bars{full_q, full_k, full_v, empty_k, empty_v, wg, lane};
  if (threadIdx.x == 0) init_pingpong_barriers(bars, 0);
  __syncthreads();  // the only block-wide barrier: the producer warpgroup leaves early

  if (threadIdx.x >= kThreads) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    if (threadIdx.x != kThreads) return;
    // Producer (one thread, TMA): tile i = nb - n_begin goes to stage i % 2 after the release of
    // tile i - 2; the copies complete on the stage's "full" mbarrier (wgmma_pingpong.cuh).
    tma_tile<D, kBlockM>(sQ, &tm_q, full_q, h * D, q0, b);
    for (int nb = n_begin; nb < n_end; ++nb) {
      const int i = nb - n_begin, st = i & 1;
      wait_empty(empty_k, i);
      tma_tile<D, kBlockN>(sK + st * kKVBytes, &tm_k, full_k + 8 * st, hk * D, nb * kBlockN, b);
      wait_empty(empty_v, i);
      tma_tile<D, kBlockN>(sV + st * kKVBytes, &tm_v, full_v + 8 * st, hk * D, nb * kBlockN, b);
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
  const int warp = (threadIdx.x % 128) / 32;
  const int g = lane >> 2, tig = lane & 3;
  const int wq0 = q0 + 64 * wg;          // first query of this warpgroup
  const int row0 = wq0 + 16 * warp + g;  // this thread's rows: row0 and row0 + 8

  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  fence_regs(o);
  RowState rs = {{-INFINITY, -INFINITY}, {0.f, 0.f}};
  const float sl2 = p.scale * kLog2e;
  const uint32_t q_rows = sQ + wg * 64 * 128;
  float s[kBlockN / 2], corr[2];
  uint32_t pa[kBlockN / 16][4];

  // (wgmma_pingpong.cuh: the turns and the order of the tiles.)
  pingpong_tiles(
      bars, n_end - n_begin, o, pa, s, corr,
      [&](int i) { issue_abt<D, kBlockM, kBlockN>(s, q_rows, sK + (i & 1) * kKVBytes); },
      [&](int i) {
        fence_regs(s);
        bars.release(empty_k, i);
        softmax_tile(s, rs, corr, p, (n_begin + i) * kBlockN, wq0, row0, tig, sl2);
      },
      [&](int i) { issue_pv<D, kBlockN>(o, pa, sV + (i & 1) * kKVBytes); });

  store_o_lse<D>(o, rs, p, b, h, row0, tig);
#else
  (void)p, (void)tm_q, (void)tm_k, (void)tm_v;
#endif
}

template <int D>
void launch_pingpong(const AttentionParams<bf16>& p, cudaStream_t st) {
  constexpr size_t smem = pingpong_smem_bytes(D);
  auto* kernel = attn_fwd_wgmma_pingpong_kernel<D>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const dim3 grid = causal_grid(p.n_head, p.seq_len, kBlockM, p.B);
  static_assert(kBlockM == kBlockN, "one box height for the Q, K and V maps");
  const int kv_width = p.n_kv_head * D;
  const CUtensorMap tm_q = tile_map(p.q, p.n_head * D, p.seq_len, p.B, p.qkv_row_stride,
                                    p.qkv_batch_stride, kBlockM),
                    tm_k = tile_map(p.k, kv_width, p.seq_len, p.B, p.qkv_row_stride,
                                    p.qkv_batch_stride, kBlockN),
                    tm_v = tile_map(p.v, kv_width, p.seq_len, p.B, p.qkv_row_stride,
                                    p.qkv_batch_stride, kBlockN);
  kernel<<<grid, kPingpongThreads, smem, st>>>(p, tm_q, tm_k, tm_v);
  CUDA_CHECK_LAUNCH();
}

template <int D>
void launch_simple(const AttentionParams<bf16>& p, cudaStream_t st) {
  constexpr size_t smem = simple_smem_bytes(D);
  auto* kernel = attn_fwd_wgmma_simple_kernel<D>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  // Largest shared-memory carveout: two 81 KiB blocks (D = 64) must share an SM.
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                  int(cudaSharedmemCarveoutMaxShared)));
  const dim3 grid = causal_grid(p.n_head, p.seq_len, kBlockM, p.B);
  const int kv_width = p.n_kv_head * D;
  const CUtensorMap tm_k = tile_map(p.k, kv_width, p.seq_len, p.B, p.qkv_row_stride,
                                    p.qkv_batch_stride, kBlockN),
                    tm_v = tile_map(p.v, kv_width, p.seq_len, p.B, p.qkv_row_stride,
                                    p.qkv_batch_stride, kBlockN);
  kernel<<<grid, kThreads, smem, st>>>(p, tm_k, tm_v);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

bool attention_fwd_wgmma_supported(const AttentionParams<bf16>& p) {
#if defined(ATTNLAB_WGMMA_SM90A)
  if (p.D != 64 && p.D != 128) return false;
  if (!causal_grid_fits(p.seq_len, 128, p.B)) return false;  // fwd and bwd: 128-row tiles
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    (void)cudaGetLastError();  // leave no sticky error for the caller's next check
    return false;
  }
  return major == 9 && minor == 0;
#else
  (void)p;
  return false;
#endif
}

void launch_attention_fwd_wgmma(const AttentionParams<bf16>& p, Stream s) {
  ATTN_REQUIRE(attention_fwd_wgmma_supported(p),
               "wgmma attention forward: needs a build with sm_90a code "
               "(CMAKE_CUDA_ARCHITECTURES containing 90), a compute capability 9.0 device and "
               "head dim 64 or 128 (got %d)",
               p.D);
  ATTN_ASSERT(p.n_kv_head > 0 && p.n_head % p.n_kv_head == 0 && p.seq_len > 0 && p.B > 0);
  ATTN_ASSERT(p.mask.window >= 0 && p.scale > 0.f);
  ATTN_ASSERT(p.qkv_row_stride % 8 == 0 && p.qkv_batch_stride % 8 == 0 && p.o_row_stride % 2 == 0 &&
              p.o_batch_stride % 2 == 0);
  ATTN_ASSERT(aligned16(p.q) && aligned16(p.k) && aligned16(p.v));
  auto st = reinterpret_cast<cudaStream_t>(s);
  // The schedule per head dim (see the top of this file).
  if (p.D == 64) {
    launch_simple<64>(p, st);
  } else {
    launch_pingpong<128>(p, st);
  }
}

}  // namespace attnlab
