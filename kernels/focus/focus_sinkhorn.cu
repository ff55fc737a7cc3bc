// CUDA Sinkhorn of kernels/focus/focus_assign.cuh, parallel over T (docs/focus.md "Sinkhorn on
// CUDA"). Each sequence is cut into chunks of C = S * kSeg tokens, S = 256 / K segments of kSeg
// tokens per column. One block per (sequence, chunk) holds the chunk's [C, K] tile in shared
// memory, rows padded to an odd stride (no bank conflicts along rows or along columns), and thread
// (k, segment) holds kSeg tokens of column k in registers.
//
// Column sums are (m, s) pairs: m + log(s), m the largest term, so every exponent is <= 0.
// Forward, iteration n: [scan] chunk column sums -> exclusive prefixes (causal, starting at the
//   carried state) and column totals (sequence; the new state); [apply] X_{n+1} = row step of the
//   column step of X_n, and the chunk column sums of X_{n+1} for the next scan (in place).
// Backward, iteration n (last first); dscores holds d = dX_{n+1}:
//   causal: [sums] chunk column sums of X_n; [scan] exclusive prefixes E_c; [local] dY = row
//     backward of d (stored in dscores) and the chunk's affine map Q_{c-1} = A_c Q_c + B_c of the
//     reverse recurrence R_t = dY_t + exp(M_t - M_{t+1}) R_{t+1}, where Q_c = exp(M_last(c) -
//     M_first(c+1)) R_first(c+1), A_c = exp(E_c - E_{c+1}), B_c = sum_{i in c} dY_i exp(E_c - M_i)
//     (segments compose the same way inside a chunk); [scan] the maps composed from the last chunk
//     back: Q_c; [apply] M_t recomputed, R_t walked back from Q_c, d = dY - exp(X - M) R
//     (where exp(X - M) > 1/2 as dY exp(M_{t-1} - M_t) - exp(X - M) (R - dY): no fp32
//     cancellation of dY).
//   sequence: [local] dY and the chunk sums of X_n (log-sum-exp) and of dY; [scan] totals L, D;
//     [apply] d = dY - exp(X - L) D.
// A sequence of one chunk (decoding) runs the whole forward in one block (fwd_single_chunk_kernel).
// Scratch: two [B, chunks, K] arrays of float pairs. The iterates are only read by the backward.
// Deterministic: fixed order everywhere, no atomics.
#include "kernels/focus/focus_sinkhorn_state.h"
#include "kernels/focus/focus_sinkhorn_tile.cuh"

namespace attnlab {
namespace {

using namespace focus_sinkhorn_state;

// Exclusive scan of one value per thread in thread order; total = all of them.
template <class Op, class V>
__device__ V block_exclusive_scan(V v, V& total, V* warp_sums /* [32] */) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  V inc = v;
  for (int d = 1; d < 32; d <<= 1) {
    const V o = shfl_up(inc, d);
    if (lane >= d) inc = Op::combine(o, inc);
  }
  V exc = shfl_up(inc, 1);
  if (lane == 0) exc = Op::identity();
  if (lane == 31) warp_sums[w] = inc;
  __syncthreads();
  if (w == 0) {
    V t = lane < nw ? warp_sums[lane] : Op::identity();
    for (int d = 1; d < 32; d <<= 1) {
      const V o = shfl_up(t, d);
      if (lane >= d) t = Op::combine(o, t);
    }
    warp_sums[lane] = t;
  }
  __syncthreads();
  const V before = w > 0 ? warp_sums[w - 1] : Op::identity();
  total = warp_sums[nw - 1];
  __syncthreads();
  return Op::combine(before, exc);
}

// One column of [chunks] values (stride K) replaced by its exclusive prefixes, from `carry`, in
// chunk order or from the last chunk back; returns carry combined with all of them. Each thread
// takes kScanItems consecutive values (one pass up to 256 * kScanItems chunks: T = 1M, K = 8 has
// 4096).
constexpr int kScanItems = 16;
template <class Op, class V>
__device__ V scan_column(V* col, int chunks, int K, bool reverse, V carry, V* warp_sums) {
  auto at = [&](int i) { return col + int64_t(reverse ? chunks - 1 - i : i) * K; };
  for (int base = 0; base < chunks; base += blockDim.x * kScanItems) {
    const int first = base + threadIdx.x * kScanItems;
    V vals[kScanItems];
    V local = Op::identity();
#pragma unroll
    for (int j = 0; j < kScanItems; ++j) {
      vals[j] = first + j < chunks ? *at(first + j) : Op::identity();
      local = Op::combine(local, vals[j]);
    }
    V tile_total;
    V run = Op::combine(carry, block_exclusive_scan<Op>(local, tile_total, warp_sums));
#pragma unroll
    for (int j = 0; j < kScanItems; ++j) {
      if (first + j < chunks) *at(first + j) = run;
      run = Op::combine(run, vals[j]);
    }
    carry = Op::combine(carry, tile_total);
  }
  return carry;
}

// Block (b, k): chunk sums -> exclusive prefixes; totals[b, k]; state[b, n, k] (if any) is the
// starting sum and receives the total.
// (The state's pair enters the scan rounded to float: once per call of this many-chunk path,
// prefill-sized; the one-token calls of decoding take fwd_single_chunk_kernel, which updates the
// pair in double.)
__global__ void lse_scan_kernel(Lse* sums, Lse* totals, Geometry g, float* state, int N, int n) {
  __shared__ Lse warp_sums[32];
  const int b = blockIdx.x / g.K, k = blockIdx.x % g.K;
  float* st = state ? state_entry(state, b, N, n, g.K, k) : nullptr;
  const Lse init = st ? Lse{float(state_value(st)), 1.f} : LseOp::identity();  // -inf: empty
  const Lse total = scan_column<LseOp>(sums + int64_t(b) * g.chunks * g.K + k, g.chunks, g.K, false,
                                       init, warp_sums);
  if (threadIdx.x != 0) return;
  totals[b * g.K + k] = total;
  if (st) state_store(st, double(total.m) + log(double(total.s)));
}

__global__ void affine_scan_kernel(Affine* maps, Affine* totals, Geometry g, bool reverse) {
  __shared__ Affine warp_sums[32];
  const int b = blockIdx.x / g.K, k = blockIdx.x % g.K;
  const Affine total = scan_column<AffineOp>(maps + int64_t(b) * g.chunks * g.K + k, g.chunks, g.K,
                                             reverse, AffineOp::identity(), warp_sums);
  if (threadIdx.x == 0 && totals) totals[b * g.K + k] = total;
}

// Chunk sums of src's columns into sums[slot]; copy (if any) receives the chunk of src.
__global__ void chunk_sums_kernel(const float* src, float* copy, Lse* sums, Geometry g) {
  extern __shared__ float smem[];
  Lse* seg = reinterpret_cast<Lse*>(smem);
  float* tile = smem + 2 * kThreads;
  const Chunk ch = chunk_of(g);
  const Cell cl = cell_of(g);
  load_tile(tile, src + ch.base, g, ch.count);
  __syncthreads();
  if (copy) store_tile(copy + ch.base, tile, g, ch.count);
  segment_sums(seg, tile, g, cl, ch.count);
  __syncthreads();
  if (threadIdx.x < g.K)
    sums[ch.slot + threadIdx.x] =
        combine_segments<LseOp>(LseOp::identity(), seg, g, threadIdx.x, g.S);
}

// Iteration n: X_{n+1} from X_n. sums[slot]: this chunk's exclusive column prefixes (causal), then
// (if next) the column sums of X_{n+1}'s chunk. totals [B, K]: column totals (sequence).
// log_mass: log(T / K) (sequence).
__global__ void fwd_apply_kernel(SinkhornParams p, Geometry g, int n, Lse* sums, const Lse* totals,
                                 float log_mass, bool next) {
  extern __shared__ float smem[];
  Lse* seg = reinterpret_cast<Lse*>(smem);
  float* target = smem + 2 * kThreads;
  float* tile = target + g.C;
  const Chunk ch = chunk_of(g);
  const Cell cl = cell_of(g);
  const int64_t all = int64_t(g.B) * g.T * g.K;
  load_tile(tile, p.iterates + n * all + ch.base, g, ch.count);
  causal_targets(target, p, ch, g.K);
  __syncthreads();
  if (p.causal) segment_sums(seg, tile, g, cl, ch.count);
  __syncthreads();
  column_step(tile, seg, target, g, cl, ch.count, p.causal,
              p.causal ? sums[ch.slot + cl.k] : totals[ch.b * g.K + cl.k], log_mass);
  __syncthreads();
  row_step(tile, g, ch.count);
  __syncthreads();
  store_tile(p.iterates + (n + 1) * all + ch.base, tile, g, ch.count);
  if (n + 1 == p.iterations)
    for (int e = threadIdx.x; e < ch.count * g.K; e += blockDim.x)
      p.g[ch.base + e] = expf(tile[(e / g.K) * g.KP + e % g.K]);
  if (!next) return;
  segment_sums(seg, tile, g, cl, ch.count);
  __syncthreads();
  if (threadIdx.x < g.K)
    sums[ch.slot + threadIdx.x] =
        combine_segments<LseOp>(LseOp::identity(), seg, g, threadIdx.x, g.S);
}

// One chunk per sequence (T <= C: decoding, short sequences): the whole forward in one block per
// sequence, the tile kept in shared memory across the iterations.
__global__ void fwd_single_chunk_kernel(SinkhornParams p, Geometry g, float log_mass) {
  extern __shared__ float smem[];
  Lse* seg = reinterpret_cast<Lse*>(smem);
  float* target = smem + 2 * kThreads;
  float* tile = target + g.C;
  const Chunk ch = chunk_of(g);
  const Cell cl = cell_of(g);
  const int64_t all = int64_t(g.B) * g.T * g.K;
  load_tile(tile, p.scores + ch.base, g, ch.count);
  causal_targets(target, p, ch, g.K);
  __syncthreads();
  store_tile(p.iterates + ch.base, tile, g, ch.count);
  for (int n = 0; n < p.iterations; ++n) {
    segment_sums(seg, tile, g, cl, ch.count);
    __syncthreads();
    float* st = p.state ? state_entry(p.state, ch.b, p.iterations, n, g.K, cl.k) : nullptr;
    // The carried sum in double (the pair); the column step takes it rounded to float.
    const double carried = st ? state_value(st) : -INFINITY;
    const Lse from = !p.causal ? combine_segments<LseOp>(LseOp::identity(), seg, g, cl.k, g.S)
                     : st      ? Lse{float(carried), 1.f}
                               : LseOp::identity();
    double updated = carried;  // carried + this call's tokens, in double (threads < K)
    if (st && threadIdx.x < g.K) {
      const Lse mine = combine_segments<LseOp>(LseOp::identity(), seg, g, cl.k, g.S);
      if (mine.m != -INFINITY) updated = log_add_exp(carried, double(mine.m) + log(double(mine.s)));
    }
    column_step(tile, seg, target, g, cl, ch.count, p.causal, from, log_mass);
    __syncthreads();  // every thread has read the state
    if (st && threadIdx.x < g.K) state_store(st, updated);
    row_step(tile, g, ch.count);
    __syncthreads();
    store_tile(p.iterates + (n + 1) * all + ch.base, tile, g, ch.count);
  }
  for (int e = threadIdx.x; e < ch.count * g.K; e += blockDim.x)
    p.g[ch.base + e] = expf(tile[(e / g.K) * g.KP + e % g.K]);
}

// Iteration n, first half: dscores = dY = row backward of d (d = dg * g for the last iteration).
// Causal: sums[slot] holds the chunk's exclusive prefixes E_c; maps[slot] receives its affine map.
// Sequence: sums[slot] receives the chunk's column log-sum-exp of X_n, maps[slot] (1, sum dY).
__global__ void bwd_local_kernel(SinkhornParams p, Geometry g, int n, Lse* sums, Affine* maps) {
  extern __shared__ float smem[];
  Lse* seg = reinterpret_cast<Lse*>(smem);
  Affine* seg_maps = reinterpret_cast<Affine*>(smem + 2 * kThreads);
  float* xp = smem + 4 * kThreads;
  float* d = xp + g.C * g.KP;
  float* x = d + g.C * g.KP;
  const Chunk ch = chunk_of(g);
  const Cell cl = cell_of(g);
  const int64_t all = int64_t(g.B) * g.T * g.K;
  load_tile(xp, p.iterates + (n + 1) * all + ch.base, g, ch.count);
  load_tile(x, p.iterates + n * all + ch.base, g, ch.count);
  if (n + 1 == p.iterations) {
    for (int e = threadIdx.x; e < ch.count * g.K; e += blockDim.x)
      d[(e / g.K) * g.KP + e % g.K] = p.dg[ch.base + e] * p.g[ch.base + e];
  } else {
    load_tile(d, p.dscores + ch.base, g, ch.count);
  }
  __syncthreads();
  row_backward(d, xp, g, ch.count);
  __syncthreads();
  store_tile(p.dscores + ch.base, d, g, ch.count);
  segment_sums(seg, x, g, cl, ch.count);
  if (!p.causal) cell_dy_sums(seg_maps, d, g, cl, ch.count);
  __syncthreads();
  if (!p.causal) {
    if (threadIdx.x < g.K) {
      const int k = threadIdx.x;
      sums[ch.slot + k] = combine_segments<LseOp>(LseOp::identity(), seg, g, k, g.S);
      maps[ch.slot + k] = combine_segments<AffineOp>(AffineOp::identity(), seg_maps, g, k, g.S);
    }
    return;
  }
  cell_maps(seg_maps, x, d, seg, sums[ch.slot + cl.k], g, cl, ch.count);
  __syncthreads();
  if (threadIdx.x < g.K) {  // the chunk's map: its segments composed from the last one back
    Affine acc = AffineOp::identity();
    for (int s = g.S - 1; s >= 0; --s)
      acc = AffineOp::combine(acc, seg_maps[s * g.K + threadIdx.x]);
    maps[ch.slot + threadIdx.x] = acc;
  }
}

// Causal iteration n, second half: sums[slot] = E_c, maps[slot].b = Q_c (carry from the chunks
// after this one); dscores: dY -> dX.
__global__ void bwd_apply_causal_kernel(SinkhornParams p, Geometry g, int n, const Lse* sums,
                                        const Affine* maps) {
  extern __shared__ float smem[];
  Lse* seg = reinterpret_cast<Lse*>(smem);
  Affine* seg_maps = reinterpret_cast<Affine*>(smem + 2 * kThreads);
  float* d = smem + 4 * kThreads;
  float* x = d + g.C * g.KP;
  const Chunk ch = chunk_of(g);
  const Cell cl = cell_of(g);
  const int64_t all = int64_t(g.B) * g.T * g.K;
  load_tile(x, p.iterates + n * all + ch.base, g, ch.count);
  load_tile(d, p.dscores + ch.base, g, ch.count);
  __syncthreads();
  segment_sums(seg, x, g, cl, ch.count);
  __syncthreads();
  causal_dx(d, x, seg, seg_maps, sums[ch.slot + cl.k], maps[ch.slot + cl.k].b, g, cl, ch.count);
  __syncthreads();
  store_tile(p.dscores + ch.base, d, g, ch.count);
}

// Sequence iteration n, second half: dscores = dY - exp(X_n - L) D per column.
__global__ void bwd_apply_sequence_kernel(SinkhornParams p, Geometry g, int n, const Lse* L,
                                          const Affine* D) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, per_seq = int64_t(g.T) * g.K;
  if (e >= g.B * per_seq) return;
  const int b = int(e / per_seq), k = int(e % g.K);
  const Lse l = L[b * g.K + k];
  const float x = p.iterates[n * g.B * per_seq + e];
  p.dscores[e] -= exp_diff(x, 0.f, l.m, logf(l.s)) * D[b * g.K + k].b;
}

cudaStream_t st(Stream s) { return reinterpret_cast<cudaStream_t>(s); }

size_t tile_bytes(const Geometry& g, int tiles, int tables) {
  return sizeof(float) * (size_t(2 * kThreads) * tables + size_t(g.C) * g.KP * tiles);
}

int tile_blocks(const Geometry& g) {
  const int64_t blocks = int64_t(g.B) * g.chunks;
  ATTN_REQUIRE(blocks < (int64_t(1) << 31), "sinkhorn: B * chunks = %lld blocks is too many",
               (long long)blocks);
  return int(blocks);
}

// The cooperative kernels for this call where p.path allows them and they fit (launched: true);
// forced and not launched is an error.
bool cooperative(const SinkhornParams& p, const Geometry& g, bool backward, Stream s) {
  if (p.path == SinkhornPath::chunked) return false;  // (block: a backward past its T as automatic)
  const bool launched =
      backward ? launch_sinkhorn_bwd_cooperative(p, s) : launch_sinkhorn_fwd_cooperative(p, s);
  ATTN_REQUIRE(launched || p.path != SinkhornPath::cooperative,
               "sinkhorn: the cooperative kernels need at most %d chunks of %d tokens (got %d) and "
               "all B x chunks = %lld blocks resident at once on this device",
               kSinkhornCoopMaxChunks, g.C, g.chunks, (long long)(int64_t(g.B) * g.chunks));
  return launched;
}

// Automatic's choice of the one-block kernels for both directions (focus_assign.cuh).
bool block_first(const SinkhornParams& p, const Geometry& g) {
  return p.path == SinkhornPath::automatic && p.K <= kSinkhornBlockFirstMaxK && g.chunks > 1 &&
         p.T <= kSinkhornBlockBwdMaxT;
}

}  // namespace

void launch_sinkhorn_fwd(const SinkhornParams& p, Stream s) {
  if (p.B == 0 || p.T == 0) return;
  if (p.path == SinkhornPath::block) {
    ATTN_REQUIRE(launch_sinkhorn_fwd_block(p, s),
                 "sinkhorn: the one-block forward takes T <= %d, K <= %d and at most %d "
                 "iterations, got T %d, K %d, %d iterations",
                 kSinkhornBlockMaxT, kSinkhornBlockMaxK, kSinkhornBlockMaxIterations, p.T, p.K,
                 p.iterations);
    return;
  }
  const Geometry g = geometry(p);
  const int blocks = tile_blocks(g);
  const float log_mass = float(std::log(double(p.T) / p.K));
  if (g.chunks == 1) {
    fwd_single_chunk_kernel<<<blocks, kThreads, tile_bytes(g, 1, 1) + sizeof(float) * g.C, st(s)>>>(
        p, g, log_mass);
    CUDA_CHECK_LAUNCH();
    return;
  }
  if (block_first(p, g) && launch_sinkhorn_fwd_block(p, s)) return;
  if (cooperative(p, g, false, s)) return;
  // Where the cooperative kernel does not fit (B x chunks past one wave), the one-block forward
  // beats the chunked one (bench_focus_assign, H200 2026-12-05: B 64, T 4096, 10-30%).
  if (p.path == SinkhornPath::automatic && launch_sinkhorn_fwd_block(p, s)) return;
  StreamScratch sums(sizeof(Lse) * size_t(blocks) * g.K, s), totals(sizeof(Lse) * g.B * g.K, s);
  chunk_sums_kernel<<<blocks, kThreads, tile_bytes(g, 1, 1), st(s)>>>(p.scores, p.iterates,
                                                                      sums.as<Lse>(), g);
  CUDA_CHECK_LAUNCH();
  for (int n = 0; n < p.iterations; ++n) {
    lse_scan_kernel<<<g.B * g.K, kThreads, 0, st(s)>>>(
        sums.as<Lse>(), totals.as<Lse>(), g, p.causal ? p.state : nullptr, p.iterations, n);
    CUDA_CHECK_LAUNCH();
    fwd_apply_kernel<<<blocks, kThreads, tile_bytes(g, 1, 1) + sizeof(float) * g.C, st(s)>>>(
        p, g, n, sums.as<Lse>(), totals.as<Lse>(), log_mass, n + 1 < p.iterations);
    CUDA_CHECK_LAUNCH();
  }
}

void launch_sinkhorn_bwd(const SinkhornParams& p, Stream s) {
  if (p.B == 0 || p.T == 0) return;
  const Geometry g = geometry(p);
  if ((p.path == SinkhornPath::block || block_first(p, g)) && launch_sinkhorn_bwd_block(p, s))
    return;
  const int blocks = tile_blocks(g);
  if (cooperative(p, g, true, s)) return;
  const size_t slots = size_t(blocks) * g.K;
  StreamScratch sums(sizeof(Lse) * slots, s), maps(sizeof(Affine) * slots, s);
  StreamScratch L(sizeof(Lse) * g.B * g.K, s), D(sizeof(Affine) * g.B * g.K, s);
  const int64_t all = int64_t(g.B) * g.T * g.K;
  for (int n = p.iterations - 1; n >= 0; --n) {
    if (p.causal) {
      chunk_sums_kernel<<<blocks, kThreads, tile_bytes(g, 1, 1), st(s)>>>(
          p.iterates + n * all, nullptr, sums.as<Lse>(), g);
      CUDA_CHECK_LAUNCH();
      lse_scan_kernel<<<g.B * g.K, kThreads, 0, st(s)>>>(sums.as<Lse>(), L.as<Lse>(), g, nullptr,
                                                         p.iterations, n);
      CUDA_CHECK_LAUNCH();
    }
    bwd_local_kernel<<<blocks, kThreads, tile_bytes(g, 3, 2), st(s)>>>(p, g, n, sums.as<Lse>(),
                                                                       maps.as<Affine>());
    CUDA_CHECK_LAUNCH();
    if (p.causal) {
      affine_scan_kernel<<<g.B * g.K, kThreads, 0, st(s)>>>(maps.as<Affine>(), nullptr, g, true);
      CUDA_CHECK_LAUNCH();
      bwd_apply_causal_kernel<<<blocks, kThreads, tile_bytes(g, 2, 2), st(s)>>>(
          p, g, n, sums.as<Lse>(), maps.as<Affine>());
      CUDA_CHECK_LAUNCH();
    } else {
      lse_scan_kernel<<<g.B * g.K, kThreads, 0, st(s)>>>(sums.as<Lse>(), L.as<Lse>(), g, nullptr,
                                                         p.iterations, n);
      CUDA_CHECK_LAUNCH();
      affine_scan_kernel<<<g.B * g.K, kThreads, 0, st(s)>>>(maps.as<Affine>(), D.as<Affine>(), g,
                                                            false);
      CUDA_CHECK_LAUNCH();
      bwd_apply_sequence_kernel<<<div_up(all, kThreads), kThreads, 0, st(s)>>>(p, g, n, L.as<Lse>(),
                                                                               D.as<Affine>());
      CUDA_CHECK_LAUNCH();
    }
  }
}

}  // namespace attnlab
