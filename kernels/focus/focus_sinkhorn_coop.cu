// The cooperative Sinkhorn (docs/focus_sinkhorn.md): the chunked kernels' arithmetic
// (focus_sinkhorn_tile.cuh) in one launch per direction, for sequences of at most
// kSinkhornCoopMaxChunks chunks whose blocks are all resident at once (cudaLaunchCooperativeKernel;
// a one-chunk forward keeps its own kernel, focus_sinkhorn.cu).
// The chunked path launches 2N + 1 kernels forward and 4N / 5N backward, and below 64K tokens its
// time is their serial scan steps and launches (~0.2 ms forward whatever T). Here each block keeps
// its chunk's tiles in shared memory across the iterations and a grid barrier replaces each
// kernel boundary: after it, each block combines the chunk sums (or maps) it needs, of the
// chunks before it (causal prefix), after it (the backward's reverse recurrence) or all of them
// (sequence totals), itself: one warp per column, lanes over consecutive chunks, then an
// order-preserving tree (focus_sinkhorn_order.h). That is O(chunks) reads per block and step,
// hence the chunk limit. The combination order differs from the chunked scans' (the same sums,
// rounded in another order); both are deterministic.
//   forward, iteration n: grid barrier (every chunk's sums of X_n written), the block's column
//     prefix (causal, from the carried state) or totals (sequence), column step, row step, X_{n+1}
//     stored and its chunk sums written (double-buffered by n's parity: one barrier per
//     iteration). The last chunk of a sequence writes iteration n's new state total after the
//     next barrier (every block has read that entry by then), the last one after a final barrier.
//   backward, iteration n (last first): the row step's backward of d, the chunk sums of X_n (and,
//     sequence, of dY) written; barrier; causal: the exclusive prefix E_c, the chunk's affine map
//     written; barrier; Q_c (the maps of the chunks after it, composed from the last back) and
//     dX (causal_dx); sequence: the totals L, D and dX = dY - exp(X - L) D. d stays in shared
//     memory; X_n becomes the next iteration's X_{n+1} (two tiles swapped).
#include <cooperative_groups.h>

#include <cmath>

#include "kernels/focus/focus_sinkhorn_order.h"
#include "kernels/focus/focus_sinkhorn_state.h"
#include "kernels/focus/focus_sinkhorn_tile.cuh"

namespace attnlab {
namespace {

namespace cg = cooperative_groups;
using namespace focus_sinkhorn_state;
using focus_sinkhorn::lane_share;
using focus_sinkhorn::tree_step;

__device__ __forceinline__ Lse shfl_first(Lse v) {
  return {__shfl_sync(~0u, v.m, 0), __shfl_sync(~0u, v.s, 0)};
}
__device__ __forceinline__ Affine shfl_first(Affine v) {
  return {__shfl_sync(~0u, v.a, 0), __shfl_sync(~0u, v.b, 0)};
}

// The fold, in scan order, of col[c * K] for the chunks c in [first, last) (reverse: from last - 1
// down to first), by one whole warp; every lane gets it.
template <class Op, class V>
__device__ V warp_fold(const V* col, int K, int first, int last, bool reverse) {
  const int lane = threadIdx.x & 31;
  int b, e;
  lane_share(max(0, last - first), lane, &b, &e);
  V acc = Op::identity();
  for (int i = b; i < e; ++i)
    acc = Op::combine(acc, col[int64_t(reverse ? last - 1 - i : first + i) * K]);
  for (int d = 1; d < 32; d <<= 1) acc = tree_step<Op>(acc, shfl_down(acc, d), lane, d);
  return shfl_first(acc);
}

__global__ void __launch_bounds__(kThreads)
    fwd_coop_kernel(SinkhornParams p, Geometry g, Lse* sums, float log_mass) {
  cg::grid_group grid = cg::this_grid();
  extern __shared__ float smem[];
  Lse* seg = reinterpret_cast<Lse*>(smem);
  float* target = smem + 2 * kThreads;
  float* tile = target + g.C;
  Lse* from = reinterpret_cast<Lse*>(tile + g.C * g.KP);  // [K] per column: prefix or total
  float* totals = reinterpret_cast<float*>(from + g.K);   // [K][2]: the state's new pairs
  const Chunk ch = chunk_of(g);
  const Cell cl = cell_of(g);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int64_t all = int64_t(g.B) * g.T * g.K, slots = int64_t(g.B) * g.chunks * g.K;
  const bool keep_state = p.causal && p.state != nullptr;
  const bool last_chunk = ch.c == g.chunks - 1;
  load_tile(tile, p.scores + ch.base, g, ch.count);
  causal_targets(target, p, ch, g.K);
  __syncthreads();
  store_tile(p.iterates + ch.base, tile, g, ch.count);
  segment_sums(seg, tile, g, cl, ch.count);
  __syncthreads();
  if (threadIdx.x < g.K)
    sums[ch.slot + threadIdx.x] =
        combine_segments<LseOp>(LseOp::identity(), seg, g, threadIdx.x, g.S);
  for (int n = 0; n < p.iterations; ++n) {
    grid.sync();  // every chunk's sums of X_n are written
    const Lse* cur = sums + (n & 1) * slots;
    const Lse* seq = cur + int64_t(ch.b) * g.chunks * g.K;  // this sequence's [chunks][K]
    for (int k = warp; k < g.K; k += warps) {
      Lse r;
      if (p.causal) {
        float* st = keep_state ? state_entry(p.state, ch.b, p.iterations, n, g.K, k) : nullptr;
        // (The pair enters rounded to float: once per call of this prefill-sized path.)
        r = LseOp::combine(st ? Lse{float(state_value(st)), 1.f} : LseOp::identity(),
                           warp_fold<LseOp>(seq + k, g.K, 0, ch.c, false));
        if (keep_state && last_chunk && lane == 0) {
          // Iteration n - 1's total: every block read that state entry before this barrier. The
          // same thread wrote totals[k] then, so no block barrier is needed here.
          if (n > 0) {
            float* prev = state_entry(p.state, ch.b, p.iterations, n - 1, g.K, k);
            prev[0] = totals[2 * k];
            prev[1] = totals[2 * k + 1];
          }
          const Lse total = LseOp::combine(r, cur[ch.slot + k]);
          state_store(totals + 2 * k, double(total.m) + log(double(total.s)));
        }
      } else {
        r = warp_fold<LseOp>(seq + k, g.K, 0, g.chunks, false);
      }
      if (lane == 0) from[k] = r;
    }
    __syncthreads();
    column_step(tile, seg, target, g, cl, ch.count, p.causal, from[cl.k], log_mass);
    __syncthreads();
    row_step(tile, g, ch.count);
    __syncthreads();
    store_tile(p.iterates + (n + 1) * all + ch.base, tile, g, ch.count);
    if (n + 1 == p.iterations) {
      for (int e = threadIdx.x; e < ch.count * g.K; e += blockDim.x)
        p.g[ch.base + e] = expf(tile[(e / g.K) * g.KP + e % g.K]);
    } else {
      segment_sums(seg, tile, g, cl, ch.count);
      __syncthreads();
      if (threadIdx.x < g.K)
        sums[((n + 1) & 1) * slots + ch.slot + threadIdx.x] =
            combine_segments<LseOp>(LseOp::identity(), seg, g, threadIdx.x, g.S);
    }
  }
  if (keep_state) {  // uniform over the grid
    grid.sync();     // every block has read the last iteration's state
    if (last_chunk && lane == 0) {
      for (int k = warp; k < g.K; k += warps) {  // the threads that wrote them
        float* st = state_entry(p.state, ch.b, p.iterations, p.iterations - 1, g.K, k);
        st[0] = totals[2 * k];
        st[1] = totals[2 * k + 1];
      }
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    bwd_coop_kernel(SinkhornParams p, Geometry g, Lse* sums, Affine* maps) {
  cg::grid_group grid = cg::this_grid();
  extern __shared__ float smem[];
  Lse* seg = reinterpret_cast<Lse*>(smem);
  Affine* seg_maps = reinterpret_cast<Affine*>(smem + 2 * kThreads);
  float* xp = smem + 4 * kThreads;                         // X_{n+1}
  float* x = xp + g.C * g.KP;                              // X_n
  float* d = x + g.C * g.KP;                               // dX_{n+1} in, dX_n out
  Lse* col_lse = reinterpret_cast<Lse*>(d + g.C * g.KP);   // [K]: E_c (causal) or L (sequence)
  float* col_b = reinterpret_cast<float*>(col_lse + g.K);  // [K]: Q_c (causal) or D (sequence)
  const Chunk ch = chunk_of(g);
  const Cell cl = cell_of(g);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int64_t all = int64_t(g.B) * g.T * g.K, slots = int64_t(g.B) * g.chunks * g.K;
  const int64_t seq0 = int64_t(ch.b) * g.chunks * g.K;  // this sequence's [chunks][K]
  load_tile(xp, p.iterates + p.iterations * all + ch.base, g, ch.count);
  for (int e = threadIdx.x; e < ch.count * g.K; e += blockDim.x)
    d[(e / g.K) * g.KP + e % g.K] = p.dg[ch.base + e] * p.g[ch.base + e];
  for (int n = p.iterations - 1; n >= 0; --n) {
    Lse* cur_sums = sums + (n & 1) * slots;
    Affine* cur_maps = maps + (n & 1) * slots;
    load_tile(x, p.iterates + n * all + ch.base, g, ch.count);
    __syncthreads();
    row_backward(d, xp, g, ch.count);  // d = dY
    __syncthreads();
    segment_sums(seg, x, g, cl, ch.count);
    if (!p.causal) cell_dy_sums(seg_maps, d, g, cl, ch.count);
    __syncthreads();
    if (threadIdx.x < g.K) {
      const int k = threadIdx.x;
      cur_sums[ch.slot + k] = combine_segments<LseOp>(LseOp::identity(), seg, g, k, g.S);
      if (!p.causal)
        cur_maps[ch.slot + k] =
            combine_segments<AffineOp>(AffineOp::identity(), seg_maps, g, k, g.S);
    }
    grid.sync();  // every chunk's sums of X_n (sequence: and of dY) are written
    if (p.causal) {
      for (int k = warp; k < g.K; k += warps) {
        const Lse E = warp_fold<LseOp>(cur_sums + seq0 + k, g.K, 0, ch.c, false);
        if (lane == 0) col_lse[k] = E;
      }
      __syncthreads();
      cell_maps(seg_maps, x, d, seg, col_lse[cl.k], g, cl, ch.count);  // as bwd_local_kernel
      __syncthreads();
      if (threadIdx.x < g.K) {  // its segments composed from the last one back
        Affine acc = AffineOp::identity();
        for (int s = g.S - 1; s >= 0; --s)
          acc = AffineOp::combine(acc, seg_maps[s * g.K + threadIdx.x]);
        cur_maps[ch.slot + threadIdx.x] = acc;
      }
      grid.sync();  // every chunk's map is written
      for (int k = warp; k < g.K; k += warps) {
        const Affine Q = warp_fold<AffineOp>(cur_maps + seq0 + k, g.K, ch.c + 1, g.chunks, true);
        if (lane == 0) col_b[k] = Q.b;
      }
      __syncthreads();
      causal_dx(d, x, seg, seg_maps, col_lse[cl.k], col_b[cl.k], g, cl, ch.count);
    } else {
      for (int k = warp; k < g.K; k += warps) {
        const Lse L = warp_fold<LseOp>(cur_sums + seq0 + k, g.K, 0, g.chunks, false);
        const Affine D = warp_fold<AffineOp>(cur_maps + seq0 + k, g.K, 0, g.chunks, false);
        if (lane == 0) col_lse[k] = L, col_b[k] = D.b;
      }
      __syncthreads();
      for (int e = threadIdx.x; e < ch.count * g.K; e += blockDim.x) {
        const int t = e / g.K, k = e % g.K;
        const Lse l = col_lse[k];
        d[t * g.KP + k] -= exp_diff(x[t * g.KP + k], 0.f, l.m, logf(l.s)) * col_b[k];
      }
    }
    __syncthreads();
    float* t = xp;  // X_n is the next iteration's X_{n+1}
    xp = x;
    x = t;
  }
  store_tile(p.dscores + ch.base, d, g, ch.count);
}

size_t fwd_smem(const Geometry& g) {  // seg, target, tile, from [K] Lse, totals [K][2]
  return sizeof(float) * (size_t(2 * kThreads) + g.C + size_t(g.C) * g.KP + 4 * g.K);
}
size_t bwd_smem(const Geometry& g) {
  return sizeof(float) * (size_t(4 * kThreads) + 3 * size_t(g.C) * g.KP + 3 * g.K);
}

// Blocks of `kernel` (kThreads each, smem bytes) the current device holds at once; 0 where it
// has no cooperative launch or less shared memory per block. Cached per host thread for the last
// (device, kernel, smem): every launch asks. (Under MPS with a thread percentage, or in a green
// context, fewer SMs may be there: the launch then fails as too large and the chunked kernels
// take the call, see launch().)
int resident_blocks(const void* kernel, size_t smem) {
  struct Last {
    int dev = -1;
    const void* kernel = nullptr;
    size_t smem = 0;
    int blocks = 0;
  };
  thread_local Last last;
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  if (dev == last.dev && kernel == last.kernel && smem == last.smem) return last.blocks;
  int sms = 0, coop = 0, optin = 0, per_sm = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (coop && smem <= size_t(optin)) {
    if (smem > 48 * 1024)
      CUDA_CHECK(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
  }
  last = {dev, kernel, smem, per_sm * sms};
  return last.blocks;
}

const void* kernel_of(bool backward) {
  return backward ? reinterpret_cast<const void*>(bwd_coop_kernel)
                  : reinterpret_cast<const void*>(fwd_coop_kernel);
}

// The geometry and shared memory of p's cooperative launch, and whether it fits (at most
// kSinkhornCoopMaxChunks chunks, every block resident).
bool plan(const SinkhornParams& p, bool backward, Geometry* g, size_t* smem) {
  if (p.B <= 0 || p.T <= 0 || p.K <= 0) return false;
  *g = geometry(p);
  *smem = backward ? bwd_smem(*g) : fwd_smem(*g);
  return g->chunks <= kSinkhornCoopMaxChunks &&
         int64_t(g->B) * g->chunks <= resident_blocks(kernel_of(backward), *smem);
}

// The cooperative launch; false (and no error left behind) where the device refuses it as too
// large (fewer SMs than the occupancy query counted), so that the caller takes the chunked path.
bool launch(bool backward, const Geometry& g, size_t smem, void** args, Stream s) {
  const cudaError_t e =
      cudaLaunchCooperativeKernel(kernel_of(backward), dim3(unsigned(g.B * g.chunks)),
                                  dim3(kThreads), args, smem, reinterpret_cast<cudaStream_t>(s));
  if (e == cudaErrorCooperativeLaunchTooLarge) {
    (void)cudaGetLastError();
    return false;
  }
  CUDA_CHECK(e);
  return true;
}

}  // namespace

bool sinkhorn_cooperative_fits(const SinkhornParams& p, bool backward) {
  Geometry g;
  size_t smem = 0;
  return plan(p, backward, &g, &smem);
}

bool launch_sinkhorn_fwd_cooperative(const SinkhornParams& p, Stream s) {
  Geometry g;
  size_t smem = 0;
  if (!plan(p, false, &g, &smem)) return false;
  StreamScratch sums(sizeof(Lse) * 2 * size_t(g.B) * g.chunks * g.K, s);
  SinkhornParams pp = p;
  Lse* sp = sums.as<Lse>();
  float log_mass = float(std::log(double(p.T) / p.K));
  void* args[] = {&pp, &g, &sp, &log_mass};
  return launch(false, g, smem, args, s);
}

bool launch_sinkhorn_bwd_cooperative(const SinkhornParams& p, Stream s) {
  Geometry g;
  size_t smem = 0;
  if (!plan(p, true, &g, &smem)) return false;
  const size_t slots = 2 * size_t(g.B) * g.chunks * g.K;
  StreamScratch sums(sizeof(Lse) * slots, s), maps(sizeof(Affine) * slots, s);
  SinkhornParams pp = p;
  Lse* sp = sums.as<Lse>();
  Affine* mp = maps.as<Affine>();
  void* args[] = {&pp, &g, &sp, &mp};
  return launch(true, g, smem, args, s);
}

}  // namespace attnlab
