// The tile arithmetic of the CUDA Sinkhorn (docs/focus_sinkhorn.md), shared by the
// chunked kernels (focus_sinkhorn.cu, one launch per step) and the cooperative ones
// (focus_sinkhorn_coop.cu, one launch per direction): the chunk geometry, the column sums as
// (m, s) pairs and the affine maps of the causal backward's reverse recurrence (defined in
// focus_sinkhorn_segment.h), and the per-chunk steps on a tile in shared memory. Device code only;
// each file that includes it gets its own copy.
#pragma once
#include "kernels/common/device.cuh"
#include "kernels/focus/focus_assign.cuh"
#include "kernels/focus/focus_sinkhorn_segment.h"

namespace attnlab {
namespace {

constexpr int kThreads = 256;
constexpr int kSeg = 8;  // tokens of one column per thread

struct Geometry {
  int B, T, K, KP, S, C, chunks;  // KP: padded row stride of a tile; S: segments; C: chunk tokens
};

Geometry geometry(const SinkhornParams& p) {
  Geometry g;
  g.B = p.B;
  g.T = p.T;
  g.K = p.K;
  g.KP = p.K | 1;
  g.S = kThreads / p.K;
  g.C = g.S * kSeg;
  g.chunks = div_up(p.T, g.C);
  return g;
}

using focus_sinkhorn::add;  // (m, s) pairs and affine maps: focus_sinkhorn_segment.h
using focus_sinkhorn::Affine;
using focus_sinkhorn::AffineOp;
using focus_sinkhorn::exp_diff;
using focus_sinkhorn::Lse;
using focus_sinkhorn::LseOp;

__device__ __forceinline__ Lse shfl_up(Lse v, int d) {
  return {__shfl_up_sync(~0u, v.m, d), __shfl_up_sync(~0u, v.s, d)};
}
__device__ __forceinline__ Affine shfl_up(Affine v, int d) {
  return {__shfl_up_sync(~0u, v.a, d), __shfl_up_sync(~0u, v.b, d)};
}
__device__ __forceinline__ Lse shfl_down(Lse v, int d) {
  return {__shfl_down_sync(~0u, v.m, d), __shfl_down_sync(~0u, v.s, d)};
}
__device__ __forceinline__ Affine shfl_down(Affine v, int d) {
  return {__shfl_down_sync(~0u, v.a, d), __shfl_down_sync(~0u, v.b, d)};
}

// ---- tiles -------------------------------------------------------------------------------------
struct Chunk {
  int b, c, t0, count;  // sequence, chunk, its first token, its tokens
  int64_t base;         // element offset of token t0 of sequence b
  int64_t slot;         // index of (b, c, k = 0) in the [B, chunks, K] scratch
};
__device__ Chunk chunk_of(const Geometry& g) {
  Chunk ch;
  ch.b = int(blockIdx.x / g.chunks);
  ch.c = int(blockIdx.x % g.chunks);
  ch.t0 = ch.c * g.C;
  ch.count = min(g.C, g.T - ch.t0);
  ch.base = (int64_t(ch.b) * g.T + ch.t0) * g.K;
  ch.slot = (int64_t(ch.b) * g.chunks + ch.c) * g.K;
  return ch;
}
// Thread (k, seg): tokens seg * kSeg .. + kSeg - 1 of column k (inactive where seg >= S).
struct Cell {
  int k, seg;
  bool active;
  __device__ int t(int i) const { return seg * kSeg + i; }
};
__device__ Cell cell_of(const Geometry& g) {
  const int j = threadIdx.x;
  return {j % g.K, j / g.K, j < g.S * g.K};
}

__device__ void load_tile(float* tile, const float* src, const Geometry& g, int count) {
  for (int e = threadIdx.x; e < count * g.K; e += blockDim.x)
    tile[(e / g.K) * g.KP + e % g.K] = src[e];
}
__device__ void store_tile(float* dst, const float* tile, const Geometry& g, int count) {
  for (int e = threadIdx.x; e < count * g.K; e += blockDim.x)
    dst[e] = tile[(e / g.K) * g.KP + e % g.K];
}

// seg_sums[seg * K + k] = log-sum-exp of the cell's tokens of the tile (inactive: nothing).
__device__ void segment_sums(Lse* seg_sums, const float* tile, const Geometry& g, const Cell& cl,
                             int count) {
  if (!cl.active) return;
  Lse r = LseOp::identity();
  for (int i = 0; i < kSeg && cl.t(i) < count; ++i) r = add(r, tile[cl.t(i) * g.KP + cl.k]);
  seg_sums[cl.seg * g.K + cl.k] = r;
}
// The prefix of column k before segment seg: from (the chunk's prefix), then segments < seg.
template <class Op, class V>
__device__ V combine_segments(V from, const V* seg_vals, const Geometry& g, int k, int seg) {
  for (int s = 0; s < seg; ++s) from = Op::combine(from, seg_vals[s * g.K + k]);
  return from;
}

// Row step in place for the tile's tokens: x[t, k] -= logsumexp_k x[t, k].
__device__ void row_step(float* tile, const Geometry& g, int count) {
  for (int t = threadIdx.x; t < count; t += blockDim.x) {
    float* y = tile + t * g.KP;
    float mx = -INFINITY;
    for (int k = 0; k < g.K; ++k) mx = fmaxf(mx, y[k]);
    float s = 0.f;
    for (int k = 0; k < g.K; ++k) s += expf(y[k] - mx);
    const float ls = logf(s);
    for (int k = 0; k < g.K; ++k) y[k] = (y[k] - mx) - ls;
  }
}

// Column step in place on the tile: causal, the running log-sum-exp from `from` (the column's
// sum before the chunk; seg holds the tile's segment sums) plus log((pos + t + 1) / K) (target);
// sequence, minus the column total `from`, plus log_mass = log(T / K).
__device__ void column_step(float* tile, const Lse* seg, const float* target, const Geometry& g,
                            const Cell& cl, int count, bool causal, Lse from, float log_mass) {
  if (!cl.active) return;
  if (causal) {
    Lse r = combine_segments<LseOp>(from, seg, g, cl.k, cl.seg);
    for (int i = 0; i < kSeg && cl.t(i) < count; ++i) {
      float& x = tile[cl.t(i) * g.KP + cl.k];
      r = add(r, x);
      x = (x - r.m) - logf(r.s) + target[cl.t(i)];
    }
  } else {
    const float shift = logf(from.s) - log_mass;
    for (int i = 0; i < kSeg && cl.t(i) < count; ++i) {
      float& x = tile[cl.t(i) * g.KP + cl.k];
      x = (x - from.m) - shift;
    }
  }
}

__device__ void causal_targets(float* target, const SinkhornParams& p, const Chunk& ch, int K) {
  if (!p.causal) return;
  for (int t = threadIdx.x; t < ch.count; t += blockDim.x)
    target[t] = float(log(double(int64_t(p.pos) + ch.t0 + t + 1) / K));
}

// The cell's prefix sums M_i (as m, log s) from the prefix E before it; returns the segment's
// affine map (A, B) relative to E (identity for a segment without tokens).
__device__ __forceinline__ Affine segment_map(Lse E, const float* x, const float* dy, float* m,
                                              float* ls, int valid) {
  const float em = E.m, els = logf(E.s);
  Lse r = E;
  float B = 0.f, last_m = 0.f, last_ls = 0.f;  // M of the last token (no dynamic index: registers)
#pragma unroll
  for (int i = 0; i < kSeg; ++i)
    if (i < valid) {
      r = add(r, x[i]);
      m[i] = last_m = r.m;
      ls[i] = last_ls = logf(r.s);
      B = fmaf(dy[i], exp_diff(em, els, m[i], ls[i]), B);
    }
  if (valid == 0) return AffineOp::identity();
  return {exp_diff(em, els, last_m, last_ls), B};
}

// The row step's backward in place: d[t, k] -= exp(xp[t, k]) sum_k d[t, k] (xp = X_{n+1}).
__device__ void row_backward(float* d, const float* xp, const Geometry& g, int count) {
  for (int t = threadIdx.x; t < count; t += blockDim.x) {
    float* dt = d + t * g.KP;
    const float* xt = xp + t * g.KP;
    float sum = 0.f;
    for (int k = 0; k < g.K; ++k) sum += dt[k];
    for (int k = 0; k < g.K; ++k) dt[k] -= expf(xt[k]) * sum;
  }
}

// The sequence backward's per-cell sums of dY over the cell's tokens, as maps (1, sum) in
// seg_maps[seg][k] (AffineOp then adds them); inactive cells write nothing.
__device__ void cell_dy_sums(Affine* seg_maps, const float* d, const Geometry& g, const Cell& cl,
                             int count) {
  if (!cl.active) return;
  float s = 0.f;
  for (int i = 0; i < kSeg && cl.t(i) < count; ++i) s += d[cl.t(i) * g.KP + cl.k];
  seg_maps[cl.seg * g.K + cl.k] = {1.f, s};
}

// The causal backward's affine map of each active cell (segment_map) in seg_maps[seg][k], from
// x = X_n's tile, d = dY and seg (x's segment sums); E0 the chunk's exclusive column prefix.
__device__ void cell_maps(Affine* seg_maps, const float* x, const float* d, const Lse* seg, Lse E0,
                          const Geometry& g, const Cell& cl, int count) {
  if (!cl.active) return;
  const int valid = max(0, min(kSeg, count - cl.seg * kSeg));
  float xv[kSeg], dy[kSeg], m[kSeg], ls[kSeg];
#pragma unroll
  for (int i = 0; i < kSeg; ++i) {
    xv[i] = i < valid ? x[cl.t(i) * g.KP + cl.k] : 0.f;
    dy[i] = i < valid ? d[cl.t(i) * g.KP + cl.k] : 0.f;
  }
  const Lse E = combine_segments<LseOp>(E0, seg, g, cl.k, cl.seg);
  seg_maps[cl.seg * g.K + cl.k] = segment_map(E, xv, dy, m, ls, valid);
}

// The causal backward of iteration n on one chunk's tiles (bwd_apply_causal_kernel and the
// cooperative backward): x = X_n, seg its segment sums, d = dY in and dX out; E0 the chunk's
// exclusive column prefix of X_n (column cl.k) and Q0 the carry of the reverse recurrence from the
// chunks after it; seg_maps: [S][K] scratch. Contains a block barrier (every thread calls it).
__device__ void causal_dx(float* d, const float* x, const Lse* seg, Affine* seg_maps, Lse E0,
                          float Q0, const Geometry& g, const Cell& cl, int count) {
  const int valid = max(0, min(kSeg, count - cl.seg * kSeg));
  float xv[kSeg], dy[kSeg], m[kSeg], ls[kSeg];
  float em = -INFINITY, els = -INFINITY;  // the prefix E before the segment, as (m, log s)
  if (cl.active) {
#pragma unroll
    for (int i = 0; i < kSeg; ++i) {
      xv[i] = i < valid ? x[cl.t(i) * g.KP + cl.k] : 0.f;
      dy[i] = i < valid ? d[cl.t(i) * g.KP + cl.k] : 0.f;
    }
    const Lse E = combine_segments<LseOp>(E0, seg, g, cl.k, cl.seg);
    em = E.m;
    els = logf(E.s);
    seg_maps[cl.seg * g.K + cl.k] = segment_map(E, xv, dy, m, ls, valid);
  }
  __syncthreads();
  if (cl.active) {
    float R = Q0;  // Q of this chunk, then of this segment
    for (int s = g.S - 1; s > cl.seg; --s) {
      const Affine f = seg_maps[s * g.K + cl.k];
      R = fmaf(f.a, R, f.b);
    }
    // dX_t = dY_t - w R_t, w = exp(X_t - M_t), R_t = dY_t + later, later = exp(M_t - M_{t+1})
    // R_{t+1}. Where X_t dominates its prefix (w > 1/2: the first token; scores of +-200) that form
    // cancels dY_t against itself in fp32 and loses a gradient far below |dY_t|; there it is
    // evaluated as dY_t exp(M_{t-1} - M_t) - w later (1 - w = exp(M_{t-1} - M_t), formed from the
    // sums, not as 1 - w). Elsewhere the first form is the more accurate (w's rounding is relative
    // to w).
#pragma unroll
    for (int i = kSeg - 1; i >= 0; --i)
      if (i < valid) {
        const int nx = min(i + 1, kSeg - 1);  // i + 1 < valid wherever it is read
        const int pv = max(i - 1, 0);
        const float carry = i == valid - 1 ? 1.f : exp_diff(m[i], ls[i], m[nx], ls[nx]);
        const float w = exp_diff(xv[i], 0.f, m[i], ls[i]);
        const float later = carry * R;
        R = fmaf(carry, R, dy[i]);
        if (w > 0.5f) {
          const float before = i == 0 ? exp_diff(em, els, m[0], ls[0])  // exp(M_{t-1} - M_t)
                                      : exp_diff(m[pv], ls[pv], m[i], ls[i]);
          d[cl.t(i) * g.KP + cl.k] = fmaf(dy[i], before, -w * later);
        } else {
          d[cl.t(i) * g.KP + cl.k] = dy[i] - w * R;
        }
      }
  }
}

}  // namespace
}  // namespace attnlab
