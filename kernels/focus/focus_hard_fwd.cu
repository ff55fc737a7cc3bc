// Hard-routed Focus attention forward on mma.sync tensor cores (m16n8k16, bf16 operands, fp32
// accumulation), head dim 64 or 128 (contract and counting rule: focus_hard.cuh).
//
// A block (4 warps x MT m-tiles of 16 rows; MT = tile_rows / 64) owns tile_rows consecutive
// entries of one group's sorted list: the queries are gathered by index (cp.async per 16-byte
// chunk of a row), key/value tiles of 64 rows are double-buffered in shared memory. The walk is the
// group's key tiles 0 .. (list prefix up to the block's last query), then the 64-aligned position
// tiles that meet the local band [i - w, i] of some query in its first pass, under one online
// softmax (log2 domain, scale folded into one FFMA per score). Per tile the element mask is skipped
// where it cannot hide anything (every row in its first pass, all keys before the warp's first
// query); a warp skips the arithmetic of tiles none of its rows can see.
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "kernels/attention/mma_common.cuh"
#include "kernels/attention/mma_softmax.cuh"
#include "kernels/focus/focus_hard.cuh"
#include "kernels/focus/focus_hard_walk.h"

namespace attnlab {
namespace {

using namespace mma;

constexpr int kBN = kFocusHardTile;  // keys per tile

// The key tile a block visits next: a tile of the group's list (list index kt * kBN ..) or a tile
// of positions (kt * kBN ..) for the local band; kind < 0 is the end of the walk.
struct KeyTile {
  int kind;  // 0 group, 1 local, -1 none
  int kt;
};

template <int kBM>
struct BlockMeta {
  int qpos[kBM];        // query position, -1 past the list's end
  int qslot[kBM];       // slot of the block's group in the query's top_k
  int qfirst[kBM];      // 1: the query's first pass (no valid group in a lower slot)
  uint64_t qmask[kBM];  // the query's group bit set
  uint64_t qlow[kBM];   // its groups of lower slots (keys holding one are taken elsewhere)
  int kpos[2][kBN];     // key positions of the two buffers, -1 = none
  uint64_t kmask[2][kBN];
};

template <int kBM>
__device__ __forceinline__ KeyTile next_tile(const BlockMeta<kBM>& m, KeyTile c, int n_group_tiles,
                                             int w) {
  if (c.kind == 0 && c.kt + 1 < n_group_tiles) return {0, c.kt + 1};
  const int lt = focus_hard::next_local_tile(m.qpos, m.qfirst, kBM, c.kind == 0 ? 0 : c.kt + 1, w);
  return lt < 0 ? KeyTile{-1, 0} : KeyTile{1, lt};
}

template <int D, int kBM>
__device__ __forceinline__ void load_key_tile(const FocusHardAttnParams& p, BlockMeta<kBM>& m,
                                              bf16* sK, bf16* sV, int buf, KeyTile c,
                                              const int32_t* glist, int count, const bf16* gk,
                                              const bf16* gv, const uint64_t* masks) {
  constexpr int kChunks = D / 8, LD = D + 8;
  auto key_pos = [&](int r) {
    if (c.kind == 0) {
      const int li = c.kt * kBN + r;
      return li < count ? glist[li] : -1;
    }
    const int j = c.kt * kBN + r;
    return j < p.T ? j : -1;
  };
  for (int i = threadIdx.x; i < kBN * kChunks; i += kThreads) {
    const int r = i / kChunks, ch = i % kChunks;
    const int j = key_pos(r);
    const int64_t off = int64_t(j < 0 ? 0 : j) * p.kv_row_stride + ch * 8;
    cp_async16(sK + buf * kBN * LD + r * LD + ch * 8, gk + off, j >= 0);
    cp_async16(sV + buf * kBN * LD + r * LD + ch * 8, gv + off, j >= 0);
  }
  if (threadIdx.x < kBN) {
    const int j = key_pos(threadIdx.x);
    m.kpos[buf][threadIdx.x] = j;
    m.kmask[buf][threadIdx.x] = j >= 0 ? masks[j] : 0;
  }
}

// MT m-tiles (16 rows) per warp: kBM = 64 MT queries per block; with MT = 2 every K/V fragment
// read from shared memory feeds two query m-tiles (the dense mma kernel's reason for it).
template <int D, int MT>
__global__ void __launch_bounds__(kThreads)
    focus_hard_fwd_bf16(const FocusHardAttnParams p, int max_tiles) {
  constexpr int kBM = 4 * 16 * MT;
  constexpr int LD = D + 8;
  constexpr bool kQInRegs = D <= 64;
  constexpr int kQF = kQInRegs ? D / 16 : 1;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw);  // [kBM][LD]
  bf16* sK = sQ + kBM * LD;                      // [2][kBN][LD]
  bf16* sV = sK + 2 * kBN * LD;                  // [2][kBN][LD]
  __shared__ BlockMeta<kBM> m;

  const int b = blockIdx.z, h = blockIdx.y, T = p.T, K = p.K, w = p.local_window;
  const int tile = max_tiles - 1 - int(blockIdx.x);  // the longest (latest) tiles first
  const int32_t* toff = p.tile_offsets + int64_t(b) * (K + 1);
  if (tile >= toff[K]) return;
  int grp = 0;
  while (toff[grp + 1] <= tile) ++grp;
  const int32_t* offs = p.offsets + int64_t(b) * (K + 1);
  const int count = offs[grp + 1] - offs[grp];
  const int32_t* glist = p.list + int64_t(b) * T * p.top_k + offs[grp];
  const int q_first = (tile - toff[grp]) * kBM;  // list index of the block's first query
  const int nq = min(kBM, count - q_first);
  const int hk = h / (p.n_head / p.n_kv_head);
  const uint64_t* masks = p.masks + int64_t(b) * T;
  const bf16* gq = p.q + b * p.q_batch_stride + h * D;
  const bf16* gk = p.k + b * p.kv_batch_stride + hk * D;
  const bf16* gv = p.v + b * p.kv_batch_stride + hk * D;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, tig = lane & 3;

  for (int r = threadIdx.x; r < kBM; r += kThreads) {
    int pos = -1, slot = 0;
    uint64_t mask = 0, low = 0;
    if (r < nq) {
      pos = glist[q_first + r];
      mask = masks[pos];
      slot =
          focus_hard::slot_of(p.groups + (int64_t(b) * T + pos) * p.top_k, p.top_k, grp, K, &low);
    }
    m.qpos[r] = pos;
    m.qslot[r] = slot;
    m.qfirst[r] = low == 0;
    m.qmask[r] = mask;
    m.qlow[r] = low;
  }
  {
    constexpr int kChunks = D / 8;
    for (int i = threadIdx.x; i < kBM * kChunks; i += kThreads) {
      const int r = i / kChunks, ch = i % kChunks;
      const bool valid = r < nq;
      const int pos = valid ? glist[q_first + r] : 0;
      cp_async16(sQ + r * LD + ch * 8, gq + int64_t(pos) * p.q_row_stride + ch * 8, valid);
    }
  }
  __syncthreads();  // BlockMeta's query rows, read by next_tile
  const int n_group_tiles = (q_first + nq + kBN - 1) / kBN;
  KeyTile cur{0, 0};
  load_key_tile<D, kBM>(p, m, sK, sV, 0, cur, glist, count, gk, gv, masks);
  cp_async_commit();

  // This thread's rows: g and g + 8 of each of the warp's m-tiles (their metadata is read from
  // BlockMeta where needed, not held in registers: the two-m-tile variant is near 255 registers).
  const int wrow = warp * 16 * MT;
  bool all_first = true, any_first = false;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = wrow + mt * 16 + g + 8 * r;
      all_first = all_first && m.qfirst[row];
      any_first = any_first || (m.qfirst[row] && m.qpos[row] >= 0);
    }
  }
  const bool warp_active = wrow < nq;
  const int warp_pos_lo = m.qpos[wrow];
  const int warp_pos_hi = warp_active ? m.qpos[min(wrow + 16 * MT - 1, nq - 1)] : -1;
  const bool warp_all_first = __all_sync(0xffffffffu, all_first);
  const bool warp_any_first = __any_sync(0xffffffffu, any_first);

  float o[MT][D / 8][4], row_max[MT][2], row_sum[MT][2];
  init_rows<MT, D>(o, row_max, row_sum);
  uint32_t qf[MT][kQF][4];
  const float sl2 = p.scale * kLog2e;

  for (int it = 0; cur.kind >= 0; ++it) {
    const int buf = it & 1;
    cp_async_wait_all();
    __syncthreads();
    if constexpr (kQInRegs) {
      if (it == 0) load_q_frags<MT, kQF, LD>(qf, sQ, wrow, lane);
    }
    const KeyTile nxt = next_tile(m, cur, n_group_tiles, w);
    if (nxt.kind >= 0) {
      load_key_tile<D, kBM>(p, m, sK, sV, buf ^ 1, nxt, glist, count, gk, gv, masks);
      cp_async_commit();
    }
    const bf16* cK = sK + buf * kBN * LD;
    const bf16* cV = sV + buf * kBN * LD;
    const bool local = cur.kind == 1;
    bool visible, need_mask = true;
    if (local) {
      visible = warp_active && focus_hard::local_tile_visible(cur.kt * kBN, warp_pos_lo,
                                                              warp_pos_hi, w, warp_any_first);
    } else {
      visible = warp_active && focus_hard::group_tile_visible(m.kpos[buf][0], warp_pos_hi);
      need_mask =
          !focus_hard::group_tile_unmasked(m.kpos[buf][kBN - 1], warp_pos_lo, warp_all_first);
    }
    cur = nxt;
    if (!visible) continue;

    float s[MT][kBN / 8][4];
    qk_scores<MT, kBN, D, LD, kQInRegs>(s, qf, sQ, wrow, cK, 0, lane);
    if (need_mask) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int nt = 0; nt < kBN / 8; ++nt) {
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const int col = nt * 8 + 2 * tig + (c & 1), row = wrow + mt * 16 + g + 8 * (c >> 1);
            const int j = m.kpos[buf][col], i = m.qpos[row];
            const uint64_t km = m.kmask[buf][col];
            const bool take =
                local ? focus_hard::take_local_key(i, j, w, m.qfirst[row], km, m.qmask[row])
                      : focus_hard::take_group_key(i, j, km, m.qlow[row]);
            if (!take) s[mt][nt][c] = -INFINITY;
          }
        }
      }
    }
    online_softmax_rows<MT, kBN, D>(s, sl2, row_max, row_sum, o);
    pv_accumulate<MT, kBN, D, LD>(o, s, cV, 0, lane);
  }

#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = row_sum[mt][r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const int i = m.qpos[wrow + mt * 16 + g + 8 * r];
      if (i < 0) continue;
      const float inv = l > 0.f ? 1.f / l : 0.f;
      const float lse = l > 0.f ? (row_max[mt][r] + log2f(l)) * kLn2 : -INFINITY;
      if (p.top_k == 1) {
        bf16* out = p.o + b * p.o_batch_stride + int64_t(i) * p.o_row_stride + h * D;
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
          *reinterpret_cast<__nv_bfloat162*>(out + dt * 8 + 2 * tig) =
              __floats2bfloat162_rn(o[mt][dt][2 * r] * inv, o[mt][dt][2 * r + 1] * inv);
        }
        if (tig == 0) p.lse[(int64_t(b) * p.n_head + h) * T + i] = lse;
      } else {
        const int slot = m.qslot[wrow + mt * 16 + g + 8 * r];
        const int64_t part = ((int64_t(b) * T + i) * p.top_k + slot) * p.n_head + h;
        float* out = p.part_o + part * D;
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
          *reinterpret_cast<float2*>(out + dt * 8 + 2 * tig) =
              make_float2(o[mt][dt][2 * r] * inv, o[mt][dt][2 * r + 1] * inv);
        }
        if (tig == 0) p.part_lse[part] = lse;
      }
    }
  }
}

// top_k > 1: one warp per (token, head) combines the partials of the token's distinct valid
// slots (the ones a pass wrote) by log-sum-exp.
__global__ void focus_hard_merge(const FocusHardAttnParams p) {
  const int64_t wid = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const int64_t rows = int64_t(p.B) * p.T * p.n_head;
  if (wid >= rows) return;
  const int h = int(wid % p.n_head);
  const int64_t bt = wid / p.n_head;
  const int b = int(bt / p.T), t = int(bt % p.T);
  const int32_t* gr = p.groups + bt * p.top_k;
  uint64_t seen = 0, used = 0;  // used: bit s = slot s holds a partial
  for (int s = 0; s < p.top_k; ++s) {
    const int x = gr[s];
    if (x < 0 || x >= p.K || ((seen >> x) & 1)) continue;
    seen |= uint64_t(1) << x;
    used |= uint64_t(1) << s;
  }
  float mx = -INFINITY;
  for (int s = 0; s < p.top_k; ++s)
    if ((used >> s) & 1) mx = fmaxf(mx, p.part_lse[(bt * p.top_k + s) * p.n_head + h]);
  float sum = 0.f;
  for (int s = 0; s < p.top_k; ++s)
    if ((used >> s) & 1) sum += __expf(p.part_lse[(bt * p.top_k + s) * p.n_head + h] - mx);
  const float lse = mx == -INFINITY ? -INFINITY : mx + __logf(sum);
  bf16* out = p.o + b * p.o_batch_stride + int64_t(t) * p.o_row_stride + h * p.D;
  for (int d = 2 * lane; d < p.D; d += 64) {
    float a0 = 0.f, a1 = 0.f;
    for (int s = 0; s < p.top_k; ++s) {
      if (!((used >> s) & 1)) continue;
      const int64_t part = (bt * p.top_k + s) * p.n_head + h;
      const float l = p.part_lse[part];
      if (l == -INFINITY) continue;
      const float wgt = __expf(l - lse);
      const float2 v = *reinterpret_cast<const float2*>(p.part_o + part * p.D + d);
      a0 += wgt * v.x;
      a1 += wgt * v.y;
    }
    *reinterpret_cast<__nv_bfloat162*>(out + d) = __floats2bfloat162_rn(a0, a1);
  }
  if (lane == 0) p.lse[(int64_t(b) * p.n_head + h) * p.T + t] = lse;
}

template <int D, int MT>
void fwd(const FocusHardAttnParams& p, cudaStream_t st) {
  constexpr int kBM = 4 * 16 * MT;
  const int64_t max_tiles = focus_hard_max_tiles(p.T, p.K, p.top_k, kBM);
  ATTN_REQUIRE(max_tiles <= INT32_MAX, "focus_hard: %lld query tiles exceed the grid",
               (long long)max_tiles);
  const dim3 grid(unsigned(max_tiles), p.n_head, p.B);
  const size_t smem = size_t(kBM + 4 * kBN) * (D + 8) * sizeof(bf16);
  set_smem(focus_hard_fwd_bf16<D, MT>, smem);
  focus_hard_fwd_bf16<D, MT><<<grid, kThreads, smem, st>>>(p, int(max_tiles));
  CUDA_CHECK_LAUNCH();
}

int binary_version() {
  static const int version = [] {
    cudaFuncAttributes attr{};
    CUDA_CHECK(cudaFuncGetAttributes(&attr, focus_hard_fwd_bf16<64, 1>));
    return attr.binaryVersion;
  }();
  return version;
}

}  // namespace

void launch_focus_hard_fwd(const FocusHardAttnParams& p, Stream s) {
  ATTN_REQUIRE(binary_version() >= 80,
               "focus_hard: the bf16 tensor-core kernels were built for sm_%d; they need sm_80 or "
               "newer (configure with -DCMAKE_CUDA_ARCHITECTURES=90 for H100/H200)",
               binary_version());
  ATTN_ASSERT(p.D == 64 || p.D == 128);
  ATTN_ASSERT(p.tile_rows == 64 || (p.tile_rows == 128 && p.D == 64));
  ATTN_ASSERT(p.K >= 1 && p.K <= kFocusHardMaxGroups && p.top_k >= 1 && p.top_k <= 64);
  ATTN_ASSERT(p.top_k == 1 || (p.part_o != nullptr && p.part_lse != nullptr));
  ATTN_ASSERT(p.q_row_stride % 8 == 0 && p.kv_row_stride % 8 == 0 && p.o_row_stride % 2 == 0);
  auto st = reinterpret_cast<cudaStream_t>(s);
  if (p.D == 128)
    fwd<128, 1>(p, st);
  else if (p.tile_rows == 64)
    fwd<64, 1>(p, st);
  else
    fwd<64, 2>(p, st);
  if (p.top_k > 1) {
    const int64_t threads = int64_t(p.B) * p.T * p.n_head * 32;
    focus_hard_merge<<<unsigned((threads + 255) / 256), 256, 0, st>>>(p);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace attnlab
