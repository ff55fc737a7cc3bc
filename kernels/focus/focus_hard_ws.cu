// The hard-routed Focus forward's fused launch, warp-specialised (top_k 1, the band first, head
// dim 64; contract: focus_hard.cuh, launch_focus_hard_fused_ws; design: docs/focus_hard_fused.md,
// "The warp-specialised fused launch"). sm_90a, bf16.
//
// The items are the fused launch's (focus_hard_fused.cu): the band's token tiles first, then the
// list group pass's blocks longest first, taken from counters[0]; a group item merges the band's
// partials of its rows once every band item is counted (counters[1]). What differs is the block:
// one per SM, three warpgroups.
//   - Warpgroup 0, the producer, takes the item numbers and loads ahead of the others, across
//     items: each item's 128 query rows into one of kQBuffers Q buffers (its rows' positions and
//     the item's scalars beside it), then its 128-key tiles into a ring of kStages K / V buffers
//     (the keys' positions beside each). Every load is a row gather by cp.async (a band tile's
//     rows are contiguous, a group tile's come from the list). Each producer thread arrives
//     twice on the buffer's full mbarrier: once at once (release: the positions and scalars it
//     wrote) and once when its copies have landed (cp.async.mbarrier.arrive.noinc), so the
//     producer never waits for its own copies; a consumer, once the phase completed, fences the
//     async proxy (the rows written by cp.async are read by wgmma) before its wgmma.
//   - Warpgroups 1 and 2, the consumers, take 64 rows of each item: per tile S = Q K^T, the mask,
//     the online softmax and O += P V on wgmma (the list pass's arithmetic, with 128-key tiles;
//     tile t's S issued before tile t - 1's P V, whose wgmma then runs beside tile t's softmax),
//     then an arrival on the buffer's empty mbarrier; after the item's epilogue an arrival on its
//     Q buffer's, which the producer waits for before it counts a band item.
// No deadlock: a consumer waits only for loads its producer issued in order (which arrive by
// themselves), the producer only for buffers the consumers release in that order; a group item's
// merge waits only for band items, which every block runs before its first group item and which
// wait for nothing but their own loads, and for their counts, which the producer makes when it
// next waits for the item's Q buffer: after it issued the loads of the item after it, which the
// consumers, waiting in a later item's merge, have already read; the producer waits for the index
// grid (griddepcontrol.wait) before its first group item.
#include <cuda.h>
#include <cuda_bf16.h>

#include <algorithm>

#include "core/cuda_check.h"
#include "kernels/attention/wgmma_common.cuh"
#include "kernels/attention/wgmma_softmax.cuh"
#include "kernels/common/device.cuh"
#include "kernels/common/pdl_launch.h"
#include "kernels/focus/focus_hard.cuh"
#include "kernels/focus/focus_hard_group_block.cuh"
#include "kernels/focus/focus_hard_partial.cuh"
#include "kernels/focus/focus_hard_walk.h"
#include "kernels/focus/focus_hard_ws_ring.h"

namespace attnlab {
namespace {

using namespace wgmma;
using focus_hard_ws::empty_parity;
using focus_hard_ws::full_parity;
using focus_hard_ws::kQBuffers;
using focus_hard_ws::ring_buffer;

constexpr int D = 64;
constexpr int kRows = kFocusHardWgmmaRows;  // queries per item (the index's tile_rows)
constexpr int kKeys = 128;                  // keys per tile
constexpr int kStages = 4;                  // K / V buffers
constexpr int kThreads = 384;
constexpr uint32_t kQBytes = tile_bytes(kRows, D), kKVBytes = tile_bytes(kKeys, D);
// Named barriers: 1 the producer warpgroup, 2 and 3 the consumers (0 is __syncthreads).
constexpr int kProducerBar = 1, kConsumerBar = 2;

// The band partials a consumer thread merges into its two rows of a group item, copied by the
// thread itself into its own slots (fp32: [row][8 column pairs][thread] float2, then [row][thread]
// lse; consecutive threads' slots adjacent, no bank conflict).
constexpr int kConsumerThreads = 256;
constexpr uint32_t kPartBytes = kConsumerThreads * (2 * (D / 8) * 8 + 2 * 4);
// Dynamic shared memory: the Q buffers, the K and V rings, the partials, 1 KiB of alignment
// (32 + 128 + 34 + 1 KiB).
constexpr size_t kSmemBytes =
    kQBuffers * size_t(kQBytes) + 2 * kStages * size_t(kKVBytes) + kPartBytes + 1024;

// An item as the producer hands it to the consumers (one per Q buffer).
struct Item {
  int kind;  // kBand, kGroup, or kEnd (no item left)
  int b, h;
  int q0;  // band: its first token; group: its first list entry
  int nq;  // valid rows
  int t_begin, t_end;
  int qpos[kRows];  // the rows' positions (-1: none)
};
constexpr int kBand = 0, kGroup = 1, kEnd = -1;

struct Shared {
  Item item[kQBuffers];
  int kpos[kStages][kKeys];  // the positions of the keys in buffer s (-1: none)
  uint64_t full[kStages], empty[kStages], qfull[kQBuffers], qempty[kQBuffers];
  int item_num;
};

#if ATTN_WGMMA_DEVICE
__device__ __forceinline__ uint32_t bar_addr(const uint64_t& b) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(&b));
}

// This thread's arrivals on a full mbarrier (count 256: two per producer thread): one now, with
// release semantics (its shared-memory stores before it), one when its cp.async copies issued so
// far have landed.
__device__ __forceinline__ void arrive_loaded(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
  mbar_arrive(bar);
}

__device__ void producer(const FocusHardAttnParams& p, int max_tiles, int* counters, Shared& sh,
                         uint32_t sQ, uint32_t sK, uint32_t sV) {
  const int tid = threadIdx.x;  // 0 .. 127
  const int T = p.T, H = p.n_head, w = min(p.local_window, T);
  const int q_tiles = (T + kRows - 1) / kRows, n_band = q_tiles * H * p.B;
  const int per_row = max_tiles * H;
  bool index_ready = false;
  int seq = 0, iseq = 0;  // tiles and items handed out so far
  // The band items' count (counters[1]) is the producer's: once its consumers have released a
  // band item's Q buffer (every consumer thread arrives after its partial stores, a release the
  // producer's wait acquires), its thread 0 counts the item (a release fence, then a relaxed
  // add), so that no consumer warp waits on a fence for its stores to land.
  unsigned band_in = 0;  // bit q: the last item in Q buffer q was a band item, not counted yet
  auto count_band = [&](int q) {
    if ((band_in >> q & 1u) == 0) return;
    if (tid == 0) {
      asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
      atomicAdd(counters + 1, 1);
    }
    band_in &= ~(1u << q);
  };
  for (;;) {
    // A free Q buffer first, then the item: a block holds at most kQBuffers - 1 items beyond the
    // one its consumers run (taken before the wait, a third one waited in the producer, which
    // at the end of the list another block could have run).
    const int qs = ring_buffer(iseq, kQBuffers);
    mbar_wait(bar_addr(sh.qempty[qs]), empty_parity(iseq, kQBuffers));
    count_band(qs);
    if (tid == 0) sh.item_num = atomicAdd(counters, 1);
    named_bar_sync<128>(kProducerBar);
    const int item = sh.item_num;
    named_bar_sync<128>(kProducerBar);  // read by every producer thread before the next take
    int kind, b, h, q0, nq, t_begin, t_end;
    const int32_t* glist = nullptr;
    if (item < n_band) {
      kind = kBand;
      b = item / (q_tiles * H);
      const int r = item - b * q_tiles * H;
      h = r / q_tiles;
      q0 = (r - h * q_tiles) * kRows;
      nq = min(kRows, T - q0);
      focus_hard::band_tiles(q0, kRows, T, w, kKeys, true, &t_begin, &t_end);
    } else {
      const int u = item - n_band;
      b = u / per_row;
      if (b >= p.B) break;  // no item left
      if (!index_ready) {
        asm volatile("griddepcontrol.wait;\n" ::: "memory");
        index_ready = true;
      }
      focus_hard_group::GroupTile gt;
      if (!focus_hard_group::decode_group_tile(p, max_tiles, unsigned(u - b * per_row), b, gt))
        continue;  // (uniform: every warp decodes the same item)
      kind = kGroup;
      h = gt.h;
      q0 = gt.j * kRows;
      nq = min(kRows, gt.count - q0);
      glist = p.list + int64_t(b) * T * p.top_k + gt.list_off;
      t_begin = 0;
      t_end = (q0 + nq + kKeys - 1) / kKeys;
    }
    // This thread's row of tile t (band: consecutive tokens; group: list entries up to the item's
    // last query, the keys past it being masked anyway).
    auto key_pos = [&](int t) {
      const int e = t * kKeys + tid;
      if (kind == kBand) return e < T ? e : -1;
      return e < q0 + nq ? glist[e] : -1;
    };
    int next_pos = t_begin < t_end ? key_pos(t_begin) : -1;  // in flight during the Q rows

    Item& it = sh.item[qs];
    band_in = (band_in & ~(1u << qs)) | unsigned(kind == kBand) << qs;
    if (tid == 0) {
      it.kind = kind;
      it.b = b;
      it.h = h;
      it.q0 = q0;
      it.nq = nq;
      it.t_begin = t_begin;
      it.t_end = t_end;
    }
    it.qpos[tid] = tid < nq ? (kind == kBand ? q0 + tid : glist[q0 + tid]) : -1;
    named_bar_sync<128>(kProducerBar);  // the rows' positions
    focus_hard_group::gather_rows<kRows, D, 1, 128>(
        {sQ + qs * kQBytes}, {p.q + b * p.q_batch_stride + h * D}, p.q_row_stride,
        [&](int r) { return it.qpos[r]; });
    arrive_loaded(bar_addr(sh.qfull[qs]));
    const int hk = h / (p.n_head / p.n_kv_head);
    const int64_t kv_off = b * p.kv_batch_stride + hk * D;
    for (int t = t_begin; t < t_end; ++t, ++seq) {
      const int stage = ring_buffer(seq, kStages);
      mbar_wait(bar_addr(sh.empty[stage]), empty_parity(seq, kStages));
      sh.kpos[stage][tid] = next_pos;
      if (t + 1 < t_end) next_pos = key_pos(t + 1);
      named_bar_sync<128>(kProducerBar);  // the tile's positions
      const int* kp = sh.kpos[stage];
      focus_hard_group::gather_rows<kKeys, D, 2, 128>(
          {sK + stage * kKVBytes, sV + stage * kKVBytes}, {p.k + kv_off, p.v + kv_off},
          p.kv_row_stride, [&](int r) { return kp[r]; });
      arrive_loaded(bar_addr(sh.full[stage]));
    }
    ++iseq;
  }
  const int qs = ring_buffer(iseq, kQBuffers);
  mbar_wait(bar_addr(sh.qempty[qs]), empty_parity(iseq, kQBuffers));  // (waited for already)
  if (tid == 0) sh.item[qs].kind = kEnd;
  arrive_loaded(bar_addr(sh.qfull[qs]));
  // The items still running: each counted once its consumers release it (the wait of the
  // buffer's next use).
#pragma unroll
  for (int j = 1; j < kQBuffers; ++j) {
    const int n = iseq - j, q = ring_buffer(n + kQBuffers, kQBuffers);
    if (n < 0 || (band_in >> q & 1u) == 0) continue;
    mbar_wait(bar_addr(sh.qempty[q]), empty_parity(n + kQBuffers, kQBuffers));
    count_band(q);
  }
}

__device__ void consumer(const FocusHardAttnParams& p, int* counters, Shared& sh, uint32_t sQ,
                         uint32_t sK, uint32_t sV, uint32_t sP) {
  const int cw = threadIdx.x / 128 - 1;  // 0 or 1: rows 64 cw .. of each item
  const int ctid = threadIdx.x % 128, warp = ctid / 32, lane = ctid % 32;
  const int g = lane >> 2, tig = lane & 3;
  const int T = p.T, H = p.n_head, w = min(p.local_window, T);
  const int n_band = (T + kRows - 1) / kRows * H * p.B;
  const int wrow = 64 * cw, rrow = wrow + 16 * warp + g;  // this thread's rows: rrow, rrow + 8
  const float sl2 = p.scale * kLog2e;
  float o[D / 2], s[kKeys / 2], corr[2];
  uint32_t pa[kKeys / 16][4];
  // This thread's partial slots (kPartBytes): column pair jj of row r, and row r's lse.
  const int pc = threadIdx.x - 128;
  auto part_v = [&](int r, int jj) {
    return sP + uint32_t(((r * (D / 8) + jj) * kConsumerThreads + pc) * 8);
  };
  auto part_lse = [&](int r) {
    return sP + uint32_t(2 * (D / 8) * kConsumerThreads * 8 + (r * kConsumerThreads + pc) * 4);
  };
  // The band's partials of this thread's rows of a group item (positions pos[r], -1: none) into
  // its slots, by cp.async (waited for by the merge).
  auto prefetch_partials = [&](int b, int h, const int(&pos)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (pos[r] < 0) continue;
      const int64_t part = (int64_t(b) * p.T + pos[r]) * p.n_head + h;
      const float* src = p.part_o + part * D;
#pragma unroll
      for (int jj = 0; jj < D / 8; ++jj) cp_async8(part_v(r, jj), src + 8 * jj + 2 * tig);
      cp_async4(part_lse(r), p.part_lse + part, true);
    }
    cp_async_commit();  // (cp.async.wait_group waits for committed groups only)
  };
  // Every band item is counted (observed by this warpgroup's thread 0 and ordered before the
  // warpgroup's later reads by a barrier); checked once, then known.
  bool band_done = false;
  auto wait_band = [&] {
    if (band_done) return;
    if (ctid == 0) {
      while (ld_acquire(counters + 1) < n_band) __nanosleep(256);
    }
    named_bar_sync<128>(kConsumerBar + cw);
    band_done = true;
  };
  int seq = 0;
  for (int iseq = 0;; ++iseq) {
    const int qs = ring_buffer(iseq, kQBuffers);
    mbar_wait(bar_addr(sh.qfull[qs]), full_parity(iseq, kQBuffers));
    fence_proxy_async();  // the Q rows (cp.async) before this thread's wgmma reads them
    const Item& it = sh.item[qs];
    const int kind = it.kind;
    if (kind == kEnd) break;
    const int b = it.b, h = it.h, q0 = it.q0, nq = it.nq, t_end = it.t_end;
    const int rpos[2] = {kind == kGroup ? it.qpos[rrow] : -1,
                         kind == kGroup ? it.qpos[rrow + 8] : -1};
    // Once the band is known complete, a group item's partials are copied during its tiles.
    const bool prefetched = kind == kGroup && band_done;
    if (prefetched) prefetch_partials(b, h, rpos);
    // Rows and bounds. Band: token positions (this warpgroup's wq0 .. wq_hi; rows past T compute
    // and are not written). Group: group_bound of the positions (lo .. hi of the warpgroup's
    // sorted rows, hi < 0: none; -1 for a row with no position takes nothing).
    int i0, i1, lo, hi;
    if (kind == kBand) {
      lo = q0 + wrow;
      hi = min(lo + 63, T - 1);
      i0 = q0 + rrow;
      i1 = i0 + 8;
    } else {
      lo = wrow < nq ? focus_hard::group_bound(it.qpos[wrow], w, true) : 0;
      hi = wrow < nq ? focus_hard::group_bound(it.qpos[min(wrow + 63, nq - 1)], w, true) : -1;
      i0 = focus_hard::group_bound(it.qpos[rrow], w, true);
      i1 = focus_hard::group_bound(it.qpos[rrow + 8], w, true);
    }
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
    fence_regs(o);
    RowState st = {{-INFINITY, -INFINITY}, {0.f, 0.f}};
    // Tile t's S = Q K^T is issued before tile t - 1's O += P V, so tile t's mask and softmax run
    // while that P V does (FlashAttention-3's intra-warpgroup overlap); O is rescaled once the P V
    // has landed, and tile t - 1's buffer released then. Every tile of the item is computed (its
    // mask removes what this warpgroup's rows do not take: at most a tile at an item's edge), so
    // that no wgmma sits in a branch (ptxas then serialises them, C7518); a warpgroup with no
    // valid row only releases the buffers.
    auto mask_tile = [&](int t, const int* kp) {
      const int k0 = t * kKeys;
      if (kind == kBand) {
        // take_window_key, as the band pass (focus_hard_band_block.cuh).
        focus_hard::mask_band_tile<kKeys, false>(s, i0, i1, k0, tig, w, nullptr, 0, 0);
      } else if (!focus_hard::group_tile_unmasked(kp[kKeys - 1], lo, true)) {
#pragma unroll
        for (int jj = 0; jj < kKeys / 8; ++jj) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int j = kp[8 * jj + 2 * tig + e];
            if (!focus_hard::take_group_key(i0, j, 0, 0)) s[4 * jj + e] = -INFINITY;
            if (!focus_hard::take_group_key(i1, j, 0, 0)) s[4 * jj + 2 + e] = -INFINITY;
          }
        }
      }
    };
    const uint32_t q_rows = sQ + qs * kQBytes + wrow * 128;
    const int t_begin = it.t_begin;
    if (hi < lo || t_begin == t_end) {  // no row of this warpgroup (uniform per warpgroup)
      // Each buffer released only once it holds this tile: an earlier arrival would count
      // towards the buffer's previous use, which the other consumer may still be reading.
      for (int t = t_begin; t < t_end; ++t, ++seq) {
        mbar_wait(bar_addr(sh.full[ring_buffer(seq, kStages)]), full_parity(seq, kStages));
        mbar_arrive(bar_addr(sh.empty[ring_buffer(seq, kStages)]));
      }
    } else {
      int stage = ring_buffer(seq, kStages);
      mbar_wait(bar_addr(sh.full[stage]), full_parity(seq, kStages));
      fence_proxy_async();
      issue_abt<D, kRows, kKeys>(s, q_rows, sK + stage * kKVBytes);
      wgmma_wait<0>();
      fence_regs(s);
      mask_tile(t_begin, sh.kpos[stage]);
      online_softmax<kKeys>(s, st, corr, sl2);
      acc_to_a<kKeys>(pa, s);  // (o is 0: no rescale)
      for (int t = t_begin + 1; t < t_end; ++t) {
        const int prev = stage;
        ++seq;
        stage = ring_buffer(seq, kStages);
        mbar_wait(bar_addr(sh.full[stage]), full_parity(seq, kStages));
        fence_proxy_async();
        issue_abt<D, kRows, kKeys>(s, q_rows, sK + stage * kKVBytes);
        issue_pv<D, kKeys>(o, pa, sV + prev * kKVBytes);
        wgmma_wait<1>();  // S (the older group)
        fence_regs(s);
        mask_tile(t, sh.kpos[stage]);
        online_softmax<kKeys>(s, st, corr, sl2);
        wgmma_wait<0>();  // tile t - 1's P V
        fence_regs(o);
        fence_regs(pa);
        mbar_arrive(bar_addr(sh.empty[prev]));  // this thread is done with the buffer
        rescale<D>(o, corr);
        acc_to_a<kKeys>(pa, s);
      }
      issue_pv<D, kKeys>(o, pa, sV + stage * kKVBytes);
      wgmma_wait<0>();
      fence_regs(o);
      fence_regs(pa);
      mbar_arrive(bar_addr(sh.empty[stage]));
      ++seq;
    }

    // Epilogue. Band: the partial (o normalised, lse) of each row < T at slot 0 (the producer
    // counts the item once both consumers have released its Q buffer). Group: once every band
    // item is counted, each row's band partial (from this thread's slots) merged in, o and lse
    // written.
    float l[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) l[r] = focus_hard::row_sum(st.sum[r]);  // (every lane)
    if (kind == kBand) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int i = r == 0 ? i0 : i1;
        if (i < T)
          focus_hard::write_partial<D>(p, o, r, tig, l[r], st.max[r], (int64_t(b) * T + i) * H + h);
      }
    } else {
      if (!prefetched) {
        wait_band();
        prefetch_partials(b, h, rpos);
      }
      cp_async_wait_all();
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        if (rpos[r] < 0) continue;
        focus_hard::RowPartial<D> pr;
#pragma unroll
        for (int jj = 0; jj < D / 8; ++jj) pr.v[jj] = lds_f2(part_v(r, jj));
        asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(pr.lse) : "r"(part_lse(r)) : "memory");
        focus_hard::write_merged<D>(p, o, r, tig, l[r], st.max[r], pr, b, h, rpos[r]);
      }
    }
    mbar_arrive(bar_addr(sh.qempty[qs]));  // done with the item's Q buffer and scalars
  }
}
#endif  // ATTN_WGMMA_DEVICE

__global__ void __launch_bounds__(kThreads, 1)
    focus_hard_ws_kernel(const FocusHardAttnParams p, int max_tiles, int* __restrict__ counters) {
#if ATTN_WGMMA_DEVICE
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ Shared sh;
  const uint32_t sQ = (static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) + 1023u) & ~1023u;
  const uint32_t sK = sQ + kQBuffers * kQBytes, sV = sK + kStages * kKVBytes;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(bar_addr(sh.full[s]), 256);   // the producer's threads, twice (arrive_loaded)
      mbar_init(bar_addr(sh.empty[s]), 256);  // the consumers' threads
    }
    for (int q = 0; q < kQBuffers; ++q) {
      mbar_init(bar_addr(sh.qfull[q]), 256);
      mbar_init(bar_addr(sh.qempty[q]), 256);
    }
    fence_mbar_init();
  }
  __syncthreads();
  if (threadIdx.x < 128)
    producer(p, max_tiles, counters, sh, sQ, sK, sV);
  else
    consumer(p, counters, sh, sQ, sK, sV, sV + kStages * kKVBytes);
#else
  (void)p, (void)max_tiles, (void)counters;
#endif
}

}  // namespace

void launch_focus_hard_fused_ws(const FocusHardAttnParams& p, int* counters, Stream s) {
  ATTN_REQUIRE(focus_hard_wgmma_supported(p.D) && p.D == D,
               "focus_hard fused (warp-specialised): needs a build with sm_90a code "
               "(CMAKE_CUDA_ARCHITECTURES containing 90), a compute capability 9.0 device and head "
               "dim 64 (got %d)",
               p.D);
  int64_t max_tiles = 0;
  const int64_t n_items = focus_hard_fused_items(p, counters, &max_tiles);
  auto st = reinterpret_cast<cudaStream_t>(s);
  auto* kernel = focus_hard_ws_kernel;
  static std::atomic<uint64_t> attributes_set{0};
  set_max_shared_once(attributes_set, reinterpret_cast<const void*>(kernel), kSmemBytes);
  launch_programmatic_dependent(kernel, unsigned(std::min<int64_t>(n_items, current_sm_count())),
                                kThreads, kSmemBytes, st, p, int(max_tiles), counters);
}

}  // namespace attnlab
