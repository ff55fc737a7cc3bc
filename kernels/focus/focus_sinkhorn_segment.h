// The CUDA Sinkhorn's column sums as (m, s) pairs and the affine maps of the causal backward's
// reverse recurrence (focus_sinkhorn_tile.cuh, focus_sinkhorn.cu's header), and the per-thread
// steps of the one-block backward (focus_sinkhorn_block.cu) on one column of a thread's segment
// of R tokens. Plain C++ (__host__ __device__ under nvcc), so
// tests/ops/test_focus_sinkhorn_block.cpp replays the block's threads on the CPU with these very
// functions.
#pragma once
#include <cmath>

#if defined(__CUDACC__)
#define ATTN_FSS_FN __host__ __device__ __forceinline__
#else
#define ATTN_FSS_FN inline
#endif

namespace attnlab::focus_sinkhorn {

// m + log(s) with m the largest term (s >= 1); empty: m = -inf.
struct Lse {
  float m, s;
};
// The map Q -> a Q + b.
struct Affine {
  float a, b;
};

struct LseOp {
  ATTN_FSS_FN static Lse identity() { return {-INFINITY, 0.f}; }
  ATTN_FSS_FN static Lse combine(Lse x, Lse y) {  // x = earlier tokens
    if (y.m == -INFINITY) return x;
    if (x.m == -INFINITY) return y;
    return x.m >= y.m ? Lse{x.m, fmaf(y.s, expf(y.m - x.m), x.s)}
                      : Lse{y.m, fmaf(x.s, expf(x.m - y.m), y.s)};
  }
};
struct AffineOp {
  ATTN_FSS_FN static Affine identity() { return {1.f, 0.f}; }
  ATTN_FSS_FN static Affine combine(Affine x, Affine y) {  // y after x: y o x
    return {y.a * x.a, fmaf(y.a, x.b, y.b)};
  }
};

ATTN_FSS_FN Lse add(Lse r, float x) { return LseOp::combine(r, Lse{x, 1.f}); }
// exp(a - b) for two sums given as (m, log s).
ATTN_FSS_FN float exp_diff(float am, float als, float bm, float bls) {
  return expf((am - bm) + (als - bls));
}

// ---- the one-block backward, one column of a thread's segment ----------------------------------
// x: the segment's X_n (its first n_valid entries are tokens), E: the column's exclusive prefix
// before the segment (LseOp over the tokens before it), dy: dY in, dX out.

// M_i = E + x_0 + .. + x_i (as m, log s) for the segment's tokens.
template <int R>
ATTN_FSS_FN void segment_prefixes(Lse E, const float (&x)[R], int n_valid, float (&m)[R],
                                  float (&ls)[R]) {
  Lse r = E;
  for (int i = 0; i < R; ++i) {
    if (i < n_valid) r = add(r, x[i]);
    m[i] = r.m;
    ls[i] = logf(r.s);
  }
}

// The segment's map of the reverse recurrence relative to E: A = exp(E - M_last), B = sum_i dY_i
// exp(E - M_i) (segment_map's; the identity without tokens).
template <int R>
ATTN_FSS_FN Affine segment_map_of(Lse E, const float (&x)[R], const float (&dy)[R], int n_valid) {
  if (n_valid == 0) return AffineOp::identity();
  float m[R], ls[R];
  segment_prefixes(E, x, n_valid, m, ls);
  const float em = E.m, els = logf(E.s);
  float B = 0.f;
  for (int i = 0; i < R; ++i)
    if (i < n_valid) B = fmaf(dy[i], exp_diff(em, els, m[i], ls[i]), B);
  return {exp_diff(em, els, m[n_valid - 1], ls[n_valid - 1]), B};
}

// Causal: dX_i = dY_i - w_i R_i, w_i = exp(X_i - M_i), R walked back from Q (the composed maps
// of the segments after this one applied to 0: exp(M_last - M_next) R_next); where w > 1/2 as
// dY_i exp(M_{i-1} - M_i) - w_i (R_i - dY_i), as causal_dx (no fp32 cancellation of dY).
template <int R>
ATTN_FSS_FN void segment_dx_causal(Lse E, const float (&x)[R], float (&d)[R], int n_valid,
                                   float Q) {
  float m[R], ls[R];
  segment_prefixes(E, x, n_valid, m, ls);
  const float em = E.m, els = logf(E.s);
  float Rt = Q;
  for (int i = R - 1; i >= 0; --i) {
    if (i >= n_valid) continue;
    const int nx = i + 1 < R ? i + 1 : R - 1, pv = i > 0 ? i - 1 : 0;
    const float carry = i == n_valid - 1 ? 1.f : exp_diff(m[i], ls[i], m[nx], ls[nx]);
    const float w = exp_diff(x[i], 0.f, m[i], ls[i]);
    const float later = carry * Rt;
    Rt = fmaf(carry, Rt, d[i]);
    if (w > 0.5f) {
      const float before =
          i == 0 ? exp_diff(em, els, m[0], ls[0]) : exp_diff(m[pv], ls[pv], m[i], ls[i]);
      d[i] = fmaf(d[i], before, -w * later);
    } else {
      d[i] = d[i] - w * Rt;
    }
  }
}

// Sequence: dX_i = dY_i - exp(X_i - L) D, L the column's log-sum-exp, D = sum of its dY.
template <int R>
ATTN_FSS_FN void segment_dx_sequence(Lse L, float D, const float (&x)[R], float (&d)[R],
                                     int n_valid) {
  const float lls = logf(L.s);
  for (int i = 0; i < R; ++i)
    if (i < n_valid) d[i] -= exp_diff(x[i], 0.f, L.m, lls) * D;
}

}  // namespace attnlab::focus_sinkhorn

#undef ATTN_FSS_FN
