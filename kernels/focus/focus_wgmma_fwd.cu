// The wgmma Focus attention forward on the dense wgmma forward's simple schedule
// (focus_wgmma.cuh; kernels/attention/attention_wgmma.cu, whose comments describe the
// shared-memory layout and the synchronization), now the hard mask's
// (launch_focus_wgmma_hard_fwd); the additive gate runs on the producer and ping-pong schedule
// (focus_wgmma_fwd_pp.cu, docs/focus_soft.md) from the split g written here
// (launch_focus_wgmma_fwd, split_g). o and lse (natural log) written (=). Per key tile (64 keys
// at D 64, two blocks per SM; 128 at D 128), S = Q K^T and the affinity A = G_q G_k^T as one
// more fp16 wgmma in the same group (focus_wgmma_fwd_steps.cuh: the split g's fp16 columns,
// focus_wgmma_layout.h, in 128-byte-swizzled tiles as Q and K: its accumulator is S's layout);
// wait, mask, row max, exponentials, the gate on the distant pairs (i - j > local_window): the
// hard mask before the max, the additive gate's exp(s - m) (a + eps) after it (a + eps <= 1 +
// eps, so the running max of the raw scores stays a safe bound); row sums; rescale O; O += P V.
// Beside Q, K, V: the g tiles of the block's queries and, double-buffered with K and V, of the
// tile's keys (cp.async, landed with Q by the barrier at the top of each tile).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/attention/visibility.h"
#include "kernels/attention/wgmma_common.cuh"
#include "kernels/attention/wgmma_softmax.cuh"
#include "kernels/common/device.cuh"
#include "kernels/common/stream_scratch.h"
#include "kernels/focus/focus_hard_walk.h"
#include "kernels/focus/focus_wgmma.cuh"
#include "kernels/focus/focus_wgmma_fwd_steps.cuh"
#include "kernels/focus/focus_wgmma_gate.cuh"
#include "kernels/focus/focus_wgmma_layout.h"

namespace attnlab {
namespace {

using namespace wgmma;

constexpr int kThreads = 256;                     // 2 warpgroups
constexpr int kBlockM = focus_wgmma::kFwdBlockM;  // queries per block
// Keys per tile and blocks per SM. D 64: 64-key tiles, two blocks per SM (S, the affinity and O
// are 32 registers each, within the 128 of two blocks); with 128-key tiles the affinity's
// 64-register accumulator beside S's 64 and O's 32 took 196 registers, one block of 8 warps per
// SM against dense's two (docs/focus_soft.md, "The forward"). D 128: 128-key tiles, one block per
// SM (O alone is 64 registers).
template <int D>
constexpr int kBlockN = D == 64 ? 64 : 128;
template <int D>
constexpr int kMinBlocks = D == 64 ? 2 : 1;

// Dynamic shared memory: Q, 2 K and 2 V tiles, the g tile of the queries ([128] x 128 bytes) and
// 2 of the keys ([kBlockN] x 128 bytes; 128-byte swizzle, all 1024-aligned), 2 mbarriers, plus 1
// KiB to align the base. D 64: 81 KiB (two blocks per SM), D 128: 177 KiB.
constexpr uint32_t kGqBytes = kBlockM * 128;
template <int D>
constexpr uint32_t kGkBytes = kBlockN<D> * 128;
template <int D>
constexpr size_t fwd_smem_bytes() {
  return size_t(tile_bytes(kBlockM, D)) + 4 * size_t(tile_bytes(kBlockN<D>, D)) + kGqBytes +
         2 * kGkBytes<D> + 16 + 1024;
}

template <int D, int KP>
__global__ void __launch_bounds__(kThreads, kMinBlocks<D>)
    focus_wgmma_fwd_kernel(const FocusAttentionParams<bf16> p, const bf16* __restrict__ gs,
                           const __grid_constant__ CUtensorMap tm_k,
                           const __grid_constant__ CUtensorMap tm_v) {
#if ATTN_WGMMA_DEVICE
  constexpr int BN = kBlockN<D>;
  constexpr uint32_t kQBytes = tile_bytes(kBlockM, D), kKVBytes = tile_bytes(BN, D);
  constexpr uint32_t kGBytes = kGkBytes<D>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t smem_base = (raw + 1023u) & ~1023u;
  const uint32_t sQ = smem_base;           // [kBlockM] rows
  const uint32_t sK = sQ + kQBytes;        // [2][BN] rows
  const uint32_t sV = sK + 2 * kKVBytes;   // [2][BN] rows
  const uint32_t sGq = sV + 2 * kKVBytes;  // g tiles: queries, then [2] keys
  const uint32_t sGk = sGq + kGqBytes;
  const uint32_t full = sGk + 2 * kGBytes;  // mbarriers [2]

  const int T = p.seq_len;
  const AttentionMask mask{};
  // Grid (heads, query tiles, batch): the heads vary fastest, so every head's longest (last,
  // causal) query tile is handed out before any head's second longest (longest first, docs/
  // performance.md, "Block order").
  const int m_block = gridDim.y - 1 - blockIdx.y;
  const int h = blockIdx.x, b = blockIdx.z, hk = h / (p.n_head / p.n_kv_head);
  const int wg = threadIdx.x / 128, warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, tig = lane & 3;
  const int q0 = m_block * kBlockM;
  const int wq0 = q0 + 64 * wg;
  const int row0 = wq0 + 16 * warp + g;
  const bf16* gq = p.q + b * p.q_batch_stride + h * D;
  const bf16* gsb = gs + int64_t(b) * T * focus_wgmma::gs_width(KP);
  const int w = p.gate.local_window;

  const TileRange tiles = mask.key_tiles(q0, kBlockM, BN, T);
  const int n_begin = tiles.begin, n_end = tiles.end;

  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  fence_regs(o);
  RowState st = {{-INFINITY, -INFINITY}, {0.f, 0.f}};
  const float sl2 = p.scale * kLog2e;
  const uint32_t q_rows = sQ + wg * 64 * 128;
  const uint32_t gq_rows = sGq + wg * 64 * 128;
  float s[BN / 2], a[BN / 2], corr[2];
  uint32_t pa[BN / 16][4];

  auto load_kv = [&](int nb, int stage) {
    const uint32_t bar = full + 8 * stage;
    mbar_arrive_expect_tx(bar, 2 * kKVBytes);
#pragma unroll
    for (int c = 0; c < D / 64; ++c) {
      tma_load_3d(sK + stage * kKVBytes + c * BN * 128, &tm_k, bar, hk * D + 64 * c, nb * BN, b);
      tma_load_3d(sV + stage * kKVBytes + c * BN * 128, &tm_v, bar, hk * D + 64 * c, nb * BN, b);
    }
  };
  if (threadIdx.x == 0) {
    mbar_init(full, 1);
    mbar_init(full + 8, 1);
    fence_mbar_init();
  }
  // KP 8: the affinity tiles' upper half, once (zero).
  if constexpr (KP == 8) {
    focus_wgmma::fill_g_upper_half<kBlockM, kThreads>(sGq, 0.f);
    focus_wgmma::fill_g_upper_half<2 * BN, kThreads>(sGk, 0.f);
  }
  __syncthreads();
  load_tile<kBlockM, D, kThreads>(sQ, gq, p.q_row_stride, q0, T);
  focus_wgmma::load_g_affinity_tile<kBlockM, KP, kThreads>(sGq, gsb, q0, T);
  focus_wgmma::load_g_affinity_tile<BN, KP, kThreads>(sGk, gsb, n_begin * BN, T);
  cp_async_commit();
  if (threadIdx.x == 0) load_kv(n_begin, 0);
  for (int nb = n_begin; nb < n_end; ++nb) {
    const int buf = (nb - n_begin) & 1;
    tiles_ready();  // Q, the g tiles of this tile; the other stage free
    if (nb + 1 < n_end) {
      if (threadIdx.x == 0) load_kv(nb + 1, buf ^ 1);
      focus_wgmma::load_g_affinity_tile<BN, KP, kThreads>(sGk + (buf ^ 1) * kGBytes, gsb,
                                                          (nb + 1) * BN, T);
      cp_async_commit();
    }
    mbar_wait(full + 8 * buf, uint32_t((nb - n_begin) >> 1) & 1u);
    const int k0 = nb * BN;
    if (ATTN_MASK_TILE_INVISIBLE(mask, wq0, wq0 + 63, k0, k0 + BN - 1)) continue;
    const bool gated = focus_wgmma::tile_has_distant_q_rows(wq0 + 63, k0, w);
    focus_wgmma::issue_s_affinity<D, KP, BN>(s, a, q_rows, sK + buf * kKVBytes, gq_rows,
                                             sGk + buf * kGBytes);
    wgmma_wait<0>();
    fence_regs(s);
    fence_regs(a);
    // Where every pair of the warpgroup's tile is distant (all tiles but the diagonal's few) the
    // gate needs no per-element distance test.
    const bool all_distant = focus_wgmma::tile_all_distant(wq0, k0 + BN - 1, w);
    focus_wgmma::softmax_gate_tile<BN, true>(s, a, st, corr, p, k0, wq0, row0, lane, sl2, gated,
                                             all_distant, false);
    rescale<D>(o, corr);
    acc_to_a<BN>(pa, s);
    issue_pv<D, BN>(o, pa, sV + buf * kKVBytes);
    wgmma_wait<0>();
    fence_regs(o);
    fence_regs(pa);
  }
  cp_async_wait_all();  // nothing in flight at exit (a warpgroup may skip every tile)
  store_o_lse<D>(o, st, p, b, h, row0, tig);
#else
  (void)p, (void)gs, (void)tm_k, (void)tm_v;
#endif
}

// gs[b, t, :] = the fp16 affinity operand of g[b, t, 0 .. KP), its bf16 hi parts, its bf16 lo
// parts (focus_wgmma_layout.h).
__global__ void split_g_kernel(const float* __restrict__ g, bf16* __restrict__ gs, int64_t rows,
                               int K, int KP, const int32_t* __restrict__ groups, int top_k,
                               unsigned* __restrict__ sets, float* __restrict__ dg_zero) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * KP) return;
  const int64_t row = i / KP;
  const int c = int(i - row * KP);
  if (dg_zero != nullptr && c < K) dg_zero[row * K + c] = 0.f;
  if (sets != nullptr && c == 0) {  // K <= 32: the set fits 32 bits
    sets[row] = unsigned(focus_hard::group_set(groups + row * top_k, top_k, K));
  }
  const float x = c < K ? g[row * K + c] : 0.f;
  const bf16 hi = __float2bfloat16_rn(x);
  const bf16 lo = __float2bfloat16_rn(x - __bfloat162float(hi));
  // The same fp32 expression as affinity_f16x2 (focus_wgmma_gate.cuh), so the backward's
  // affinity is bitwise the forward's.
  const __half a =
      __float2half_rn((__bfloat162float(hi) + __bfloat162float(lo)) * focus_wgmma::kAffinityScale);
  bf16* out = gs + row * focus_wgmma::gs_width(KP);
  out[c] = *reinterpret_cast<const bf16*>(&a);  // 16-bit storage; the kernels read fp16 bits
  out[KP + c] = hi;
  out[2 * KP + c] = lo;
}

// gs[b, t, :] for the hard mask (kHard): the fp16 affinity columns of the token's group
// indicator (kAffinityScale in each group of its top_k ids, 0 elsewhere; a token naming a group
// twice counts it once; an id outside [0, K) names none, as in every hard kernel), the hi and lo
// columns zero (the forward reads the affinity columns only).
__global__ void split_groups_kernel(const int32_t* __restrict__ groups, int top_k, int K,
                                    bf16* __restrict__ gs, int64_t rows, int KP) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * KP) return;
  const int64_t row = i / KP;
  const int c = int(i - row * KP);
  bool in = false;
  for (int z = 0; z < top_k; ++z) in = in || (c < K && groups[row * top_k + z] == c);
  const __half a = __float2half_rn(in ? focus_wgmma::kAffinityScale : 0.f);
  bf16* out = gs + row * focus_wgmma::gs_width(KP);
  out[c] = *reinterpret_cast<const bf16*>(&a);
  out[KP + c] = out[2 * KP + c] = __float2bfloat16_rn(0.f);
}

// The eps operand of the additive gate's fold (K <= 8; 0: unfolded).
float fold_operand(const FocusAttentionParams<bf16>& p, int KP) {
  return KP == 8 && focus_wgmma::eps_foldable(p.gate.eps)
             ? focus_wgmma::eps_fold_operand(p.gate.eps)
             : 0.f;
}

template <int D, int KP>
void launch_fwd(const FocusAttentionParams<bf16>& p, const bf16* gs, cudaStream_t st) {
  constexpr size_t smem = fwd_smem_bytes<D>();
  auto* kernel = focus_wgmma_fwd_kernel<D, KP>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                  int(cudaSharedmemCarveoutMaxShared)));
  const dim3 grid = causal_grid(p.n_head, p.seq_len, kBlockM, p.B);
  const int kv_width = p.n_kv_head * D;
  const CUtensorMap tm_k = tile_map(p.k, kv_width, p.seq_len, p.B, p.kv_row_stride,
                                    p.kv_batch_stride, kBlockN<D>),
                    tm_v = tile_map(p.v, kv_width, p.seq_len, p.B, p.kv_row_stride,
                                    p.kv_batch_stride, kBlockN<D>);
  kernel<<<grid, kThreads, smem, st>>>(p, gs, tm_k, tm_v);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

bool focus_wgmma_device_supported() {
#if defined(ATTNLAB_WGMMA_SM90A)
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    (void)cudaGetLastError();  // leave no sticky error for the caller's next check
    return false;
  }
  return major == 9 && minor == 0;
#else
  return false;
#endif
}

namespace {
// Everything focus_wgmma_supported asks but the gate and its operand.
bool shape_supported(const FocusAttentionParams<bf16>& p) {
  if (!(p.D == 64 || p.D == 128) || p.pos != 0 || p.kv_head_stride != p.D ||
      p.q_row_stride != p.kv_row_stride || p.q_batch_stride != p.kv_batch_stride ||
      p.q_row_stride % 8 != 0 || p.q_batch_stride % 8 != 0 || p.o_row_stride % 8 != 0 ||
      p.o_batch_stride % 8 != 0 || !aligned16(p.q) || !aligned16(p.k) || !aligned16(p.v) ||
      p.K < 1 || p.K > focus_wgmma::kMaxGroups || p.n_kv_head <= 0 || p.n_head % p.n_kv_head != 0 ||
      p.scale <= 0.f || p.gate.local_window < 0 ||
      !causal_grid_fits(p.seq_len, 128, p.B)) {  // fwd and bwd: 128-row tiles
    return false;
  }
  return focus_wgmma_device_supported();
}
}  // namespace

bool focus_wgmma_supported(const FocusAttentionParams<bf16>& p) {
  return p.gate.kind == FocusGateKind::additive && p.g != nullptr && shape_supported(p);
}

bool focus_wgmma_bwd_supported(const FocusAttentionParams<bf16>& p) {
  const bool hard = p.gate.kind == FocusGateKind::hard && p.groups != nullptr && p.top_k >= 1 &&
                    p.groups_batch_stride == int64_t(p.seq_len) * p.top_k;  // split_g's rows
  return (p.gate.kind == FocusGateKind::additive || hard) && p.g != nullptr && shape_supported(p);
}

bool focus_wgmma_hard_fwd_supported(const FocusAttentionParams<bf16>& p) {
  return p.gate.kind == FocusGateKind::hard && p.groups != nullptr && p.top_k >= 1 &&
         p.groups_batch_stride == int64_t(p.seq_len) * p.top_k &&
         p.K <= focus_wgmma::kHardFwdMaxGroups && shape_supported(p);
}

void focus_wgmma_split_g(const FocusAttentionParams<bf16>& p, bf16* gs, int KP, Stream s,
                         unsigned* sets, float* dg_zero) {
  const int64_t rows = int64_t(p.B) * p.seq_len;
  ATTN_ASSERT(p.g_batch_stride == int64_t(p.seq_len) * p.K);  // contiguous [B, T, K]
  ATTN_ASSERT(sets == nullptr || p.groups_batch_stride == int64_t(p.seq_len) * p.top_k);
  split_g_kernel<<<div_up(rows * KP, 256), 256, 0, reinterpret_cast<cudaStream_t>(s)>>>(
      p.g, gs, rows, p.K, KP, p.groups, p.top_k, sets, dg_zero);
  CUDA_CHECK_LAUNCH();
}

void launch_focus_wgmma_fwd(const FocusAttentionParams<bf16>& p, Stream s) {
  ATTN_REQUIRE(focus_wgmma_supported(p),
               "focus wgmma attention: needs a build with sm_90a code, a compute capability 9.0 "
               "device, the additive gate, D 64 or 128 (got %d), packed qkv, pos 0 (got %d), 1 .. "
               "%d groups (got %d)",
               p.D, p.pos, focus_wgmma::kMaxGroups, p.K);
  if (int64_t(p.B) * p.n_head * p.seq_len == 0) return;
  const int KP = focus_wgmma::padded_groups(p.K);
  StreamScratch scratch(size_t(p.B) * p.seq_len * focus_wgmma::gs_width(KP) * sizeof(bf16), s);
  bf16* gs = scratch.as<bf16>();
  focus_wgmma_split_g(p, gs, KP, s);
  // The producer and ping-pong schedule (focus_wgmma_fwd_pp.cu).
  launch_focus_wgmma_fwd_pp(p, gs, KP, fold_operand(p, KP), s);
}

void launch_focus_wgmma_hard_fwd(const FocusAttentionParams<bf16>& p, Stream s) {
  ATTN_REQUIRE(focus_wgmma_hard_fwd_supported(p),
               "focus wgmma hard-masked attention: needs a build with sm_90a code, a compute "
               "capability 9.0 device, the hard gate with group ids, D 64 or 128 (got %d), packed "
               "qkv, pos 0 (got %d), 1 .. %d groups (got %d)",
               p.D, p.pos, focus_wgmma::kHardFwdMaxGroups, p.K);
  if (int64_t(p.B) * p.n_head * p.seq_len == 0) return;
  constexpr int KP = focus_wgmma::kHardFwdMaxGroups;
  const int64_t rows = int64_t(p.B) * p.seq_len;
  StreamScratch scratch(size_t(rows) * focus_wgmma::gs_width(KP) * sizeof(bf16), s);
  bf16* gs = scratch.as<bf16>();
  const auto st = reinterpret_cast<cudaStream_t>(s);
  split_groups_kernel<<<div_up(rows * KP, 256), 256, 0, st>>>(p.groups, p.top_k, p.K, gs, rows, KP);
  CUDA_CHECK_LAUNCH();
  if (p.D == 64)
    launch_fwd<64, KP>(p, gs, st);
  else
    launch_fwd<128, KP>(p, gs, st);
}

}  // namespace attnlab
