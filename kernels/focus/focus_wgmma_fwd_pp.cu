// The wgmma Focus soft forward on the producer and ping-pong schedule (FlashAttention-3's, as
// the dense forward's at D = 128; the barriers, the producer's copies and the compute loop are
// shared with it: kernels/attention/wgmma_pingpong.cuh), additive gate, head dim 64 and 128: o
// and lse (natural log) written (=). One block of three warpgroups per SM, 128-key tiles:
//   - warpgroup 2, the producer (40 registers by setmaxnreg): its first thread copies Q, K and V
//     by TMA; all 128 threads copy the g tiles (the fp16 affinity columns of the block's queries,
//     once, and of each key tile, double-buffered with K) by cp.async, wait for their own copies,
//     fence them to the async proxy and arrive on the stage's "full" mbarrier (so a stage
//     completes when its TMA bytes and the 128 arrivals are in). At KP 8 it first writes the
//     affinity tiles' upper half (the folded eps's column, focus_wgmma_layout.h), ordered before
//     its first arrivals the same way.
//   - warpgroups 0 and 1 (232 registers) compute: per key tile S = Q K^T with the affinity
//     A = G_q G_k^T (one wgmma group, focus_wgmma_fwd_steps.cuh) issued together with O += P V of
//     the previous tile; the mask, softmax and gate of this tile run while the tensor cores finish
//     that P V; then O is rescaled. The two warpgroups take turns at the tensor cores, so one's
//     softmax and gate hide behind the other's MMAs. A consumer warp releases a stage's K and key
//     g tile after its S (and, at D 128, the second half's affinity), V after its P V.
// Registers: S (64), the affinity (64 at D 64; 32 at D 128, issued in two 64-key halves since O
// is 64 registers there), O and the previous tile's P (32) live at once.
#include <cuda_bf16.h>

#include "kernels/attention/visibility.h"
#include "kernels/attention/wgmma_common.cuh"
#include "kernels/attention/wgmma_pingpong.cuh"
#include "kernels/attention/wgmma_softmax.cuh"
#include "kernels/common/device.cuh"
#include "kernels/focus/focus_wgmma.cuh"
#include "kernels/focus/focus_wgmma_fwd_steps.cuh"
#include "kernels/focus/focus_wgmma_gate.cuh"
#include "kernels/focus/focus_wgmma_layout.h"

namespace attnlab {
namespace {

using namespace wgmma;

constexpr int kConsumers = 256;  // 2 compute warpgroups
constexpr int kProducers = 128;  // 1 load warpgroup
constexpr int kThreads = kConsumers + kProducers;
constexpr int kProducerRegs = 40, kConsumerRegs = 232;  // 128 x 40 + 256 x 232 <= 64K
constexpr int kBlockM = focus_wgmma::kFwdBlockM;
constexpr int kBlockN = 128;
constexpr uint32_t kGqBytes = kBlockM * 128, kGkBytes = kBlockN * 128;

// Dynamic shared memory: Q, 2 K, 2 V, the queries' g tile and 2 of the keys' (128-byte swizzle,
// 1024-aligned), 9 mbarriers (Q full, K full [2], V full [2], K empty [2], V empty [2]), plus 1
// KiB to align the base: 129 KiB at D 64.
template <int D>
constexpr size_t pp_smem_bytes() {
  return size_t(tile_bytes(kBlockM, D)) + 4 * size_t(tile_bytes(kBlockN, D)) + kGqBytes +
         2 * kGkBytes + 9 * 8 + 1024;
}

template <int D, int KP>
__global__ void __launch_bounds__(kThreads, 1)
    focus_wgmma_fwd_pp_kernel(const FocusAttentionParams<bf16> p, const bf16* __restrict__ gs,
                              const __grid_constant__ CUtensorMap tm_q,
                              const __grid_constant__ CUtensorMap tm_k,
                              const __grid_constant__ CUtensorMap tm_v, float fold_e) {
#if ATTN_WGMMA_DEVICE
  constexpr int BN = kBlockN;
  // Keys of the affinity issued with S: all at D 64; at D 128 (O is 64 registers) the first half,
  // the second after the first's gate, into the same 32 registers.
  constexpr int AN = D == 64 ? BN : BN / 2;
  constexpr uint32_t kQBytes = tile_bytes(kBlockM, D), kKVBytes = tile_bytes(BN, D);
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t smem_base =
      (static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) + 1023u) & ~1023u;
  const uint32_t sQ = smem_base;           // [kBlockM] rows
  const uint32_t sK = sQ + kQBytes;        // [2][BN] rows
  const uint32_t sV = sK + 2 * kKVBytes;   // [2][BN] rows
  const uint32_t sGq = sV + 2 * kKVBytes;  // g tiles: queries, then [2] keys
  const uint32_t sGk = sGq + kGqBytes;
  const uint32_t full_q = sGk + 2 * kGkBytes;
  const uint32_t full_k = full_q + 8, full_v = full_k + 16;      // + 8 stage
  const uint32_t empty_k = full_v + 16, empty_v = empty_k + 16;  // + 8 stage

  const int T = p.seq_len;
  const AttentionMask mask{};  // causal
  // Grid (heads, query tiles, batch), longest first (as every forward here).
  const int m_block = gridDim.y - 1 - blockIdx.y;
  const int h = blockIdx.x, b = blockIdx.z, hk = h / (p.n_head / p.n_kv_head);
  const int q0 = m_block * kBlockM;
  const TileRange tiles = mask.key_tiles(q0, kBlockM, BN, T);
  const int n_begin = tiles.begin, n_end = tiles.end;
  const bf16* gsb = gs + int64_t(b) * T * focus_wgmma::gs_width(KP);

  const int wg = threadIdx.x / 128, lane = threadIdx.x % 32;
  const PingpongBarriers<kConsumers> bars{full_q, full_k, full_v, empty_k, empty_v, wg, lane};
  // Q's and each K stage's full barrier: the TMA thread's arrival and the producers' after their
  // g copies.
  if (threadIdx.x == 0) init_pingpong_barriers(bars, kProducers);
  __syncthreads();  // the only block-wide barrier

  if (threadIdx.x >= kConsumers) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    const int tid = threadIdx.x - kConsumers;
    // This thread's g copies (and, at KP 8, its upper-half stores) landed and are visible to
    // wgmma (the async proxy) before its arrival on bar.
    auto g_landed = [&](uint32_t bar) {
      cp_async_commit();
      cp_async_wait_all();
      fence_proxy_async();
      mbar_arrive(bar);
    };
    if constexpr (KP == 8) {
      focus_wgmma::fill_g_upper_half<kBlockM, kProducers>(sGq, fold_e, tid);
      focus_wgmma::fill_g_upper_half<2 * BN, kProducers>(sGk, fold_e, tid);
    }
    if (tid == 0) tma_tile<D, kBlockM>(sQ, &tm_q, full_q, h * D, q0, b);
    focus_wgmma::load_g_affinity_tile<kBlockM, KP, kProducers>(sGq, gsb, q0, T, tid);
    g_landed(full_q);
    // Tile i = nb - n_begin into stage i % 2 after the consumers released tile i - 2 there.
    for (int nb = n_begin; nb < n_end; ++nb) {
      const int i = nb - n_begin, st = i & 1;
      wait_empty(empty_k, i);
      if (tid == 0) tma_tile<D, BN>(sK + st * kKVBytes, &tm_k, full_k + 8 * st, hk * D, nb * BN, b);
      focus_wgmma::load_g_affinity_tile<BN, KP, kProducers>(sGk + st * kGkBytes, gsb, nb * BN, T,
                                                            tid);
      g_landed(full_k + 8 * st);
      if (tid == 0) {
        wait_empty(empty_v, i);
        tma_tile<D, BN>(sV + st * kKVBytes, &tm_v, full_v + 8 * st, hk * D, nb * BN, b);
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
  const int warp = (threadIdx.x % 128) / 32;
  const int g = lane >> 2, tig = lane & 3;
  const int wq0 = q0 + 64 * wg;
  const int row0 = wq0 + 16 * warp + g;
  const int w = p.gate.local_window;
  const bool fold = fold_e != 0.f;

  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  fence_regs(o);
  RowState rs = {{-INFINITY, -INFINITY}, {0.f, 0.f}};
  const float sl2 = p.scale * kLog2e;
  const uint32_t q_rows = sQ + wg * 64 * 128;
  const uint32_t gq_rows = sGq + wg * 64 * 128;
  float s[BN / 2], a[AN / 2], corr[2];
  uint32_t pa[BN / 16][4];
  auto issue_s = [&](int i) {
    focus_wgmma::issue_s_affinity<D, KP, BN, AN>(s, a, q_rows, sK + (i & 1) * kKVBytes, gq_rows,
                                                 sGk + (i & 1) * kGkBytes);
  };
  // The mask, softmax and gate of tile i's scores (S and the first AN keys' affinity waited
  // for), then the release of its K stage (at D 128 after the second half's affinity, which
  // reads the stage's g tile).
  auto softmax_gate = [&](int i) {
    const int k0 = (n_begin + i) * BN;
    const bool gated = focus_wgmma::tile_has_distant_q_rows(wq0 + 63, k0, w);
    const bool all_distant = focus_wgmma::tile_all_distant(wq0, k0 + BN - 1, w);
    if constexpr (AN == BN) {
      bars.release(empty_k, i);
      focus_wgmma::softmax_gate_tile<BN, false>(s, a, rs, corr, p, k0, wq0, row0, lane, sl2, gated,
                                                all_distant, fold);
    } else {
      const int col0 = k0 + 2 * tig;
      const bool folded_tile = fold && all_distant;
      focus_wgmma::mask_keys<BN>(s, k0, wq0, row0, tig, T);
      focus_wgmma::exp_update<BN>(s, rs, corr, sl2, folded_tile);
      focus_wgmma::gate_cols<AN>(focus_wgmma::acc_half<BN>(s, 0), a, row0, col0, p, gated,
                                 all_distant, fold, folded_tile);
      focus_wgmma::issue_affinity<KP, AN>(a, gq_rows, sGk + (i & 1) * kGkBytes + AN * 128);
      wgmma_wait<0>();  // (the previous tile's P V too)
      fence_regs(a);
      bars.release(empty_k, i);
      focus_wgmma::gate_cols<AN>(focus_wgmma::acc_half<BN>(s, 1), a, row0, col0 + AN, p, gated,
                                 all_distant, fold, folded_tile);
      focus_wgmma::add_row_sums<BN>(s, rs, corr);
    }
  };

  // (wgmma_pingpong.cuh: the turns and the order of the tiles.)
  pingpong_tiles(
      bars, n_end - n_begin, o, pa, s, corr, issue_s,
      [&](int i) {
        fence_regs(s);
        fence_regs(a);
        softmax_gate(i);
      },
      [&](int i) { issue_pv<D, BN>(o, pa, sV + (i & 1) * kKVBytes); });

  store_o_lse<D>(o, rs, p, b, h, row0, tig);
#else
  (void)p, (void)gs, (void)tm_q, (void)tm_k, (void)tm_v, (void)fold_e;
#endif
}

template <int D, int KP>
void launch_pp(const FocusAttentionParams<bf16>& p, const bf16* gs, float fold_e, cudaStream_t st) {
  constexpr size_t smem = pp_smem_bytes<D>();
  auto* kernel = focus_wgmma_fwd_pp_kernel<D, KP>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const dim3 grid = causal_grid(p.n_head, p.seq_len, kBlockM, p.B);
  const int kv_width = p.n_kv_head * D;
  const CUtensorMap tm_q = tile_map(p.q, p.n_head * D, p.seq_len, p.B, p.q_row_stride,
                                    p.q_batch_stride, kBlockM),
                    tm_k = tile_map(p.k, kv_width, p.seq_len, p.B, p.kv_row_stride,
                                    p.kv_batch_stride, kBlockN),
                    tm_v = tile_map(p.v, kv_width, p.seq_len, p.B, p.kv_row_stride,
                                    p.kv_batch_stride, kBlockN);
  kernel<<<grid, kThreads, smem, st>>>(p, gs, tm_q, tm_k, tm_v, fold_e);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_focus_wgmma_fwd_pp(const FocusAttentionParams<bf16>& p, const bf16* gs, int KP,
                               float fold_e, Stream s) {
  ATTN_ASSERT((p.D == 64 || p.D == 128) && p.gate.kind == FocusGateKind::additive);
  const auto st = reinterpret_cast<cudaStream_t>(s);
  if (p.D == 64) {
    KP == 8    ? launch_pp<64, 8>(p, gs, fold_e, st)
    : KP == 16 ? launch_pp<64, 16>(p, gs, fold_e, st)
               : launch_pp<64, 32>(p, gs, fold_e, st);
  } else {
    KP == 8    ? launch_pp<128, 8>(p, gs, fold_e, st)
    : KP == 16 ? launch_pp<128, 16>(p, gs, fold_e, st)
               : launch_pp<128, 32>(p, gs, fold_e, st);
  }
}

}  // namespace attnlab
