// The Sinkhorn forward of one sequence in one block (SinkhornPath::block; docs/focus.md "Sinkhorn
// on CUDA"), for T <= kSinkhornBlockMaxT tokens and K <= kSinkhornBlockMaxK groups (the backward,
// for T <= kSinkhornBlockBwdMaxT, below the forward): batch-1 routing (eval, generate's prefill),
// where the chunked and cooperative kernels spend ~10 us per iteration on serial steps (a segment
// walk, then chunk prefixes combined one after another, a grid barrier). Thread th holds tokens
// th * R .. + R - 1 (R = kRows, or kBwdRows where T <= kSinkhornBlockBwdMaxT), all K columns, in
// registers for the N iterations; per iteration the causal column step is a block scan of the
// threads' column sums (warp shuffles, then the warps' totals; (m, s) pairs as in the tile
// kernels, every exponent <= 0), the row step is local. Same formulas as fwd_single_chunk_kernel,
// summed in another order (within the tests' tolerances of the reference); deterministic.
#include <cmath>
#include <cstdint>

#include "kernels/focus/focus_sinkhorn_state.h"
#include "kernels/focus/focus_sinkhorn_tile.cuh"

namespace attnlab {
namespace {

using namespace focus_sinkhorn_state;

constexpr int kBlockThreads = 512;
constexpr int kRows = kSinkhornBlockMaxT / kBlockThreads;  // tokens per thread
constexpr int kMaxK = kSinkhornBlockMaxK;
constexpr int kWarpsPerBlock = kBlockThreads / 32;
static_assert(kRows * kBlockThreads == kSinkhornBlockMaxT && kWarpsPerBlock <= 32 &&
                  kMaxK <= kWarpsPerBlock,
              "geometry");
// Tokens per thread of the backward, and of the forward where T <= kSinkhornBlockBwdMaxT.
constexpr int kBwdRows = kSinkhornBlockBwdMaxT / kBlockThreads;
static_assert(kBwdRows * kBlockThreads == kSinkhornBlockBwdMaxT && kBwdRows <= kRows, "geometry");

// Exclusive prefix (scan order = thread order) of each column's v[k] over the block; the block's
// totals end in warp_tot[kWarpsPerBlock - 1] (read from there: registers are at the cap).
// warp_tot: [kWarpsPerBlock][kMaxK] of this iteration's parity (the other parity is read by the
// previous iteration's stragglers, so no third barrier).
__device__ __forceinline__ void block_scan_columns(Lse (&v)[kMaxK], Lse (*warp_tot)[kMaxK], int K) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
#pragma unroll
  for (int k = 0; k < kMaxK; ++k) {
    if (k >= K) break;
    Lse inc = v[k];
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const Lse o = shfl_up(inc, d);
      if (lane >= d) inc = LseOp::combine(o, inc);
    }
    const Lse exc = shfl_up(inc, 1);
    v[k] = lane == 0 ? LseOp::identity() : exc;
    if (lane == 31) warp_tot[w][k] = inc;
  }
  __syncthreads();
  if (w < K) {  // column w's warp totals, one warp a column (K <= kMaxK <= kWarpsPerBlock)
    const int k = w;
    Lse t = lane < kWarpsPerBlock ? warp_tot[lane][k] : LseOp::identity();
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const Lse o = shfl_up(t, d);
      if (lane >= d) t = LseOp::combine(o, t);
    }
    if (lane < kWarpsPerBlock) warp_tot[lane][k] = t;
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kMaxK; ++k) {
    if (k >= K) break;
    if (w > 0) v[k] = LseOp::combine(warp_tot[w - 1][k], v[k]);
  }
}

// Thread th's rows x[r][0 .. K) to dst (its tokens' rows of a [T, K] slice, f applied): as float4
// stores where vec (K a multiple of 4, the default 8, and the outputs 16-byte aligned: the
// launcher checks), else one by one. Each thread's 8 K floats are contiguous, so a warp's store
// touches 32 rows of 8 K floats.
template <int R, class F>
__device__ __forceinline__ void store_rows(float* dst, const float (&x)[R][kMaxK], int K,
                                           int n_valid, bool vec, F f) {
  if (vec) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r >= n_valid) break;
#pragma unroll
      for (int q = 0; q < kMaxK / 4; ++q)
        if (4 * q < K)
          *reinterpret_cast<float4*>(dst + r * K + 4 * q) = make_float4(
              f(x[r][4 * q]), f(x[r][4 * q + 1]), f(x[r][4 * q + 2]), f(x[r][4 * q + 3]));
    }
  } else {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r >= n_valid) break;
#pragma unroll
      for (int k = 0; k < kMaxK; ++k)
        if (k < K) dst[r * K + k] = f(x[r][k]);
    }
  }
}

// R tokens per thread: kRows, or kBwdRows where T <= kSinkhornBlockBwdMaxT (fewer serial steps and
// registers per thread).
template <int R>
__global__ void __launch_bounds__(kBlockThreads)
    fwd_block_kernel(SinkhornParams p, float log_mass, bool vec) {
  __shared__ Lse warp_tot[2][kWarpsPerBlock][kMaxK];
  __shared__ float target[R * kBlockThreads];                    // causal: log((pos + t + 1) / K)
  __shared__ Lse call_sums[kSinkhornBlockMaxIterations][kMaxK];  // the state's update
  const int b = blockIdx.x, K = p.K, T = p.T;
  const int t0 = threadIdx.x * R;
  const int64_t base = int64_t(b) * T * K, all = int64_t(p.B) * T * K;
  float x[R][kMaxK];
  auto valid = [&](int r) { return t0 + r < T; };
  const int n_valid = max(0, min(R, T - t0));   // this thread's tokens
  const int64_t mine = base + int64_t(t0) * K;  // its first token's row
#pragma unroll
  for (int r = 0; r < R; ++r) {
    // (each thread's own tokens: read back by the same thread, no barrier)
    if (p.causal && valid(r)) target[t0 + r] = float(log(double(int64_t(p.pos) + t0 + r + 1) / K));
#pragma unroll
    for (int k = 0; k < kMaxK; ++k) x[r][k] = valid(r) && k < K ? p.scores[mine + r * K + k] : 0.f;
  }
  store_rows(p.iterates + mine, x, K, n_valid, vec, [](float v) { return v; });  // X_0
  for (int n = 0; n < p.iterations; ++n) {
    // Column step: each column's sums of this thread's tokens, then the block's scan.
    Lse pre[kMaxK];
#pragma unroll
    for (int k = 0; k < kMaxK; ++k) {
      pre[k] = LseOp::identity();
#pragma unroll
      for (int r = 0; r < R; ++r)
        if (valid(r) && k < K) pre[k] = add(pre[k], x[r][k]);
    }
    block_scan_columns(pre, warp_tot[n & 1], K);
    const Lse* total = warp_tot[n & 1][kWarpsPerBlock - 1];  // the columns' sums (shared)
    // Entry (b, n, 0) of the carried state; column k's pair at st + 2 k (focus_sinkhorn_state.h).
    float* st = p.causal && p.state ? state_entry(p.state, b, p.iterations, n, K, 0) : nullptr;
#pragma unroll
    for (int k = 0; k < kMaxK; ++k) {
      if (k >= K) break;
      if (p.causal) {
        // from the carried state (an earlier chunk's column sum, -inf: none), then the tokens
        // before this thread's, then its own one by one (column_step's walk)
        Lse run = LseOp::combine(
            st ? Lse{float(state_value(st + kSinkhornStateWords * k)), 1.f} : LseOp::identity(),
            pre[k]);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          if (!valid(r)) continue;
          run = add(run, x[r][k]);
          x[r][k] = (x[r][k] - run.m) - logf(run.s) + target[t0 + r];
        }
      } else {
        const float shift = logf(total[k].s) - log_mass;
#pragma unroll
        for (int r = 0; r < R; ++r)
          if (valid(r)) x[r][k] = (x[r][k] - total[k].m) - shift;
      }
    }
    // The call's column sums, for the state's update after the loop (in double there: here it
    // spilled the loop at 128 registers). Thread k keeps column k's; entry (n, k) of the state is
    // read in iteration n only, so writing every entry at the end is the same.
    if (st && int(threadIdx.x) < K) call_sums[n][threadIdx.x] = total[threadIdx.x];
      // Row step and X_{n+1}.
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (!valid(r)) continue;
      float mx = -INFINITY;
#pragma unroll
      for (int k = 0; k < kMaxK; ++k)
        if (k < K) mx = fmaxf(mx, x[r][k]);
      float s = 0.f;
#pragma unroll
      for (int k = 0; k < kMaxK; ++k)
        if (k < K) s += expf(x[r][k] - mx);
      const float ls = logf(s);
#pragma unroll
      for (int k = 0; k < kMaxK; ++k)
        if (k < K) x[r][k] = (x[r][k] - mx) - ls;
    }
    store_rows(p.iterates + (n + 1) * all + mine, x, K, n_valid, vec, [](float v) { return v; });
  }
  store_rows(p.g + mine, x, K, n_valid, vec, [](float v) { return expf(v); });
  if (p.causal && p.state != nullptr) {  // (uniform) the carried sums plus this call's, in double
    __syncthreads();                     // every thread has read every iteration's entries
    const int k = int(threadIdx.x);
    if (k < K) {
      for (int n = 0; n < p.iterations; ++n) {
        float* e = state_entry(p.state, b, p.iterations, n, K, k);
        const Lse t = call_sums[n][k];
        if (t.m != -INFINITY)
          state_store(e, log_add_exp(state_value(e), double(t.m) + log(double(t.s))));
      }
    }
  }
}

// ---- backward (T <= kSinkhornBlockBwdMaxT)
// ------------------------------------------------------- The chunked kernels' arithmetic
// (focus_sinkhorn.cu's header) with the whole sequence in one block: thread th holds tokens th *
// kBwdRows .. + kBwdRows - 1 (its segment), all K columns, and d = dX_{n+1} in registers across the
// iterations (X_{n+1} too: it is the previous iteration's X_n). Per iteration (last first): the row
// step's backward (dY); causal: the exclusive column prefix E of the segment (block_scan_columns),
// the segment's affine map (segment_map_of), the composition of the maps of the segments after it
// (block_suffix_compose), then dX walked back through the segment (segment_dx_causal, causal_dx's
// form); sequence: the column totals L (block_scan_columns) and D = sum dY (block_suffix_compose of
// (1, dY) maps), dX = dY - exp(X - L) D (segment_dx_sequence). The per-column steps are
// focus_sinkhorn_segment.h's, which tests/ops/test_focus_sinkhorn_block.cpp replays on the CPU.
// Deterministic. Each column's map v[k] becomes the composition of the maps of the threads after
// this one (the last applied first: f_{th+1}(f_{th+2}(..))); the whole block's composition ends in
// aff_tot[0][k]. aff_tot: [kWarpsPerBlock][kMaxK] of this iteration's parity.
__device__ __forceinline__ void block_suffix_compose(Affine (&v)[kMaxK], Affine (*aff_tot)[kMaxK],
                                                     int K) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
#pragma unroll
  for (int k = 0; k < kMaxK; ++k) {
    if (k >= K) break;
    Affine inc = v[k];  // f_lane o .. o f_31 of the warp
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const Affine o = shfl_down(inc, d);
      if (lane + d < 32) inc = AffineOp::combine(o, inc);
    }
    const Affine exc = shfl_down(inc, 1);
    v[k] = lane == 31 ? AffineOp::identity() : exc;
    if (lane == 0) aff_tot[w][k] = inc;
  }
  __syncthreads();
  if (w < K) {  // column w's warp maps, one warp a column
    const int k = w;
    Affine t = lane < kWarpsPerBlock ? aff_tot[lane][k] : AffineOp::identity();
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const Affine o = shfl_down(t, d);
      if (lane + d < 32) t = AffineOp::combine(o, t);
    }
    if (lane < kWarpsPerBlock) aff_tot[lane][k] = t;  // warps lane .. last composed
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kMaxK; ++k) {
    if (k >= K) break;
    if (w + 1 < kWarpsPerBlock) v[k] = AffineOp::combine(aff_tot[w + 1][k], v[k]);
  }
}

// Column k of a thread's rows (kBwdRows tokens).
__device__ __forceinline__ void column_of(const float (&v)[kBwdRows][kMaxK], int k,
                                          float (&c)[kBwdRows]) {
#pragma unroll
  for (int i = 0; i < kBwdRows; ++i) c[i] = v[i][k];
}

__global__ void __launch_bounds__(kBlockThreads) bwd_block_kernel(SinkhornParams p) {
  __shared__ Lse warp_tot[2][kWarpsPerBlock][kMaxK];
  __shared__ Affine aff_tot[2][kWarpsPerBlock][kMaxK];
  const int b = blockIdx.x, K = p.K, T = p.T;
  const int t0 = threadIdx.x * kBwdRows;
  const int64_t all = int64_t(p.B) * T * K;
  const int64_t mine = (int64_t(b) * T + t0) * K;  // this thread's first token's row
  const int n_valid = max(0, min(kBwdRows, T - t0));
  auto ok = [&](int i, int k) { return i < n_valid && k < K; };
  float d[kBwdRows][kMaxK], xp[kBwdRows][kMaxK];  // dX_{n+1}, X_{n+1}
#pragma unroll
  for (int i = 0; i < kBwdRows; ++i)
#pragma unroll
    for (int k = 0; k < kMaxK; ++k) {
      const int64_t e = mine + i * K + k;
      d[i][k] = ok(i, k) ? p.dg[e] * p.g[e] : 0.f;  // g = exp(X_N)
      xp[i][k] = ok(i, k) ? p.iterates[p.iterations * all + e] : 0.f;
    }
  for (int n = p.iterations - 1; n >= 0; --n) {
    // The row step's backward: dY = d - exp(X_{n+1}) sum_k d (row_backward).
#pragma unroll
    for (int i = 0; i < kBwdRows; ++i) {
      float sum = 0.f;
#pragma unroll
      for (int k = 0; k < kMaxK; ++k)
        if (ok(i, k)) sum += d[i][k];
#pragma unroll
      for (int k = 0; k < kMaxK; ++k)
        if (ok(i, k)) d[i][k] -= expf(xp[i][k]) * sum;
    }
    float x[kBwdRows][kMaxK];  // X_n
#pragma unroll
    for (int i = 0; i < kBwdRows; ++i)
#pragma unroll
      for (int k = 0; k < kMaxK; ++k)
        x[i][k] = ok(i, k) ? p.iterates[n * all + mine + i * K + k] : 0.f;
    Lse pre[kMaxK];
#pragma unroll
    for (int k = 0; k < kMaxK; ++k) {
      pre[k] = LseOp::identity();
#pragma unroll
      for (int i = 0; i < kBwdRows; ++i)
        if (ok(i, k)) pre[k] = add(pre[k], x[i][k]);
    }
    block_scan_columns(pre, warp_tot[n & 1], K);  // pre: E; the totals in warp_tot[..][last]
    Affine f[kMaxK];
#pragma unroll
    for (int k = 0; k < kMaxK; ++k) {
      float xc[kBwdRows], dc[kBwdRows];
      column_of(x, k, xc);
      column_of(d, k, dc);
      if (p.causal) {
        f[k] =
            k < K ? focus_sinkhorn::segment_map_of(pre[k], xc, dc, n_valid) : AffineOp::identity();
      } else {
        float sum = 0.f;
#pragma unroll
        for (int i = 0; i < kBwdRows; ++i)
          if (ok(i, k)) sum += dc[i];
        f[k] = {1.f, sum};
      }
    }
    block_suffix_compose(f, aff_tot[n & 1], K);
#pragma unroll
    for (int k = 0; k < kMaxK; ++k) {
      if (k >= K) break;
      float xc[kBwdRows], dc[kBwdRows];
      column_of(x, k, xc);
      column_of(d, k, dc);
      if (p.causal) {  // f[k].b: the maps of the segments after this one, applied to 0
        focus_sinkhorn::segment_dx_causal(pre[k], xc, dc, n_valid, f[k].b);
      } else {
        focus_sinkhorn::segment_dx_sequence(warp_tot[n & 1][kWarpsPerBlock - 1][k],
                                            aff_tot[n & 1][0][k].b, xc, dc, n_valid);
      }
#pragma unroll
      for (int i = 0; i < kBwdRows; ++i) d[i][k] = dc[i];
    }
#pragma unroll
    for (int i = 0; i < kBwdRows; ++i)
#pragma unroll
      for (int k = 0; k < kMaxK; ++k) xp[i][k] = x[i][k];
  }
#pragma unroll
  for (int i = 0; i < kBwdRows; ++i)
#pragma unroll
    for (int k = 0; k < kMaxK; ++k)
      if (ok(i, k)) p.dscores[mine + i * K + k] = d[i][k];
}

}  // namespace

bool sinkhorn_block_fits(const SinkhornParams& p) {
  return p.B >= 1 && p.T >= 1 && p.T <= kSinkhornBlockMaxT && p.K >= 1 &&
         p.K <= kSinkhornBlockMaxK && p.iterations <= kSinkhornBlockMaxIterations;
}

bool launch_sinkhorn_fwd_block(const SinkhornParams& p, Stream s) {
  if (!sinkhorn_block_fits(p)) return false;
  const float log_mass = float(std::log(double(p.T) / p.K));
  const bool vec = p.K % 4 == 0 && reinterpret_cast<uintptr_t>(p.iterates) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(p.g) % 16 == 0;
  const auto st = reinterpret_cast<cudaStream_t>(s);
  if (p.T <= kSinkhornBlockBwdMaxT)
    fwd_block_kernel<kBwdRows><<<p.B, kBlockThreads, 0, st>>>(p, log_mass, vec);
  else
    fwd_block_kernel<kRows><<<p.B, kBlockThreads, 0, st>>>(p, log_mass, vec);
  CUDA_CHECK_LAUNCH();
  return true;
}

bool sinkhorn_block_bwd_fits(const SinkhornParams& p) {
  return p.B >= 1 && p.T >= 1 && p.T <= kSinkhornBlockBwdMaxT && p.K >= 1 &&
         p.K <= kSinkhornBlockMaxK;
}

bool launch_sinkhorn_bwd_block(const SinkhornParams& p, Stream s) {
  if (!sinkhorn_block_bwd_fits(p)) return false;
  bwd_block_kernel<<<p.B, kBlockThreads, 0, reinterpret_cast<cudaStream_t>(s)>>>(p);
  CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace attnlab
