// The carried state of the causal Sinkhorn (decoding, focus_assign.cuh): per sequence, iteration
// and group the running log-sum-exp of the column over every token before the call, stored as
// two floats hi + lo (kSinkhornStateWords). A float alone was rounded once per call, so one-token
// decode calls drifted by its spacing near log(T / K) each: 2e-5 in g after 16K of them, 1e-4
// after 64K (docs/focus_sinkhorn.md). The pair keeps ~48 bits; the update is done in
// double (state_value, log_add_exp, state_store), on the CPU and in the CUDA kernels. Plain C++
// (__host__ __device__ under nvcc) so the CPU tests run the kernels' own arithmetic.
#pragma once
#include <cmath>

#if defined(__CUDACC__)
#define ATTN_SKS_FN __host__ __device__ __forceinline__
#else
#define ATTN_SKS_FN inline
#endif

namespace attnlab::focus_sinkhorn_state {

constexpr int kSinkhornStateWords = 2;  // floats per state entry: hi, lo

// Entry (b, n, k) of a [B, N, K, 2] state.
ATTN_SKS_FN float* state_entry(float* state, int b, int N, int n, int K, int k) {
  return state + ((static_cast<long long>(b) * N + n) * K + k) * kSinkhornStateWords;
}

// The entry's value hi + lo in double; -inf for an empty entry (hi = -inf).
ATTN_SKS_FN double state_value(const float* e) {
  return std::isinf(e[0]) && e[0] < 0 ? -INFINITY : double(e[0]) + double(e[1]);
}

// v into the entry: hi = v rounded to float, lo = the rest rounded (exact to ~2^-48 relative).
ATTN_SKS_FN void state_store(float* e, double v) {
  if (std::isinf(v) && v < 0) {
    e[0] = -INFINITY;
    e[1] = 0.f;
    return;
  }
  e[0] = float(v);
  e[1] = float(v - double(e[0]));
}

// log(exp(a) + exp(b)) in double without overflow; -inf is the identity.
ATTN_SKS_FN double log_add_exp(double a, double b) {
  if (std::isinf(a) && a < 0) return b;
  if (std::isinf(b) && b < 0) return a;
  const double m = a > b ? a : b;
  return m + std::log(std::exp(a - m) + std::exp(b - m));
}

}  // namespace attnlab::focus_sinkhorn_state

#undef ATTN_SKS_FN
