// CPU references of kernels/focus/focus_assign.cuh and kernels/focus/focus_scores.cuh.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "kernels/focus/focus_sinkhorn_state.h"
#include "ref/focus_ref.h"
#include "ref/parallel.h"

namespace attnlab {
namespace {

using namespace focus_sinkhorn_state;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Row step in place: x[k] -= logsumexp_k x[k].
void normalize_row(float* x, int K) {
  double m = kNegInf;
  for (int k = 0; k < K; ++k) m = std::max(m, double(x[k]));
  double sum = 0.0;
  for (int k = 0; k < K; ++k) sum += std::exp(double(x[k]) - m);
  const double lse = m + std::log(sum);
  for (int k = 0; k < K; ++k) x[k] = float(double(x[k]) - lse);
}

void check(const SinkhornParams& p) {
  ATTN_REQUIRE(p.B >= 0 && p.T >= 0 && p.K >= 1 && p.iterations >= 1,
               "sinkhorn: need B, T >= 0, K >= 1 and iterations >= 1, got %d, %d, %d, %d", p.B, p.T,
               p.K, p.iterations);
  ATTN_REQUIRE(p.causal || (p.state == nullptr && p.pos == 0),
               "sinkhorn: a carried state (decoding) needs the causal scope");
}

}  // namespace

// N iterations of a column step (one task per sequence and column: a column's scan over its T
// tokens is serial) and a row step (one task per token). Every output is written by one task in a
// fixed order, so the result does not depend on the thread count; the tasks are (b, k) and rows,
// not sequences, so one long sequence (B = 1, T = 1M) runs on every core too.
void sinkhorn_fwd_ref(const SinkhornParams& p) {
  check(p);
  const int B = p.B, T = p.T, K = p.K, N = p.iterations;
  const int64_t seq = int64_t(T) * K, all = int64_t(B) * seq, rows = int64_t(B) * T;
  const bool par = worth_parallel(all * 8);
  std::copy(p.scores, p.scores + all, p.iterates);
  for (int n = 0; n < N; ++n) {
    const float* xs = p.iterates + n * all;
    float* ys = p.iterates + (n + 1) * all;
#pragma omp parallel for schedule(dynamic, 1) if (par && B * K > 1)
    for (int bk = 0; bk < B * K; ++bk) {
      const int b = bk / K, k = bk % K;
      const float* x = xs + b * seq;
      float* y = ys + b * seq;
      if (p.causal) {
        float* st = p.state ? state_entry(p.state, b, N, n, K, k) : nullptr;
        double m = st ? state_value(st) : kNegInf;
        for (int t = 0; t < T; ++t) {
          // Kept in double: a running sum rounded to float every token drifts (its increments,
          // about 1/t, fall below float's spacing: 1e-4 at T = 64K, 1e-2 at 1M), and so is the
          // carried state, as a float pair (focus_sinkhorn_state.h).
          m = log_add_exp(m, x[int64_t(t) * K + k]);
          const double target = std::log(double(p.pos + t + 1) / K);
          y[int64_t(t) * K + k] = float(x[int64_t(t) * K + k] - m + target);
        }
        if (st) state_store(st, m);
      } else {
        double m = kNegInf;
        for (int t = 0; t < T; ++t) m = std::max(m, double(x[int64_t(t) * K + k]));
        double sum = 0.0;
        for (int t = 0; t < T; ++t) sum += std::exp(double(x[int64_t(t) * K + k]) - m);
        const double shift = std::log(double(T) / K) - (m + std::log(sum));
        for (int t = 0; t < T; ++t)
          y[int64_t(t) * K + k] = float(double(x[int64_t(t) * K + k]) + shift);
      }
    }
#pragma omp parallel for schedule(static) if (par)
    for (int64_t r = 0; r < rows; ++r) normalize_row(ys + r * K, K);
  }
  const float* xn = p.iterates + N * all;
#pragma omp parallel for schedule(static) if (par)
  for (int64_t i = 0; i < all; ++i) p.g[i] = std::exp(xn[i]);
}

// Backward through the unrolled iterations, last to first, from the saved iterates:
//   row step   (Y -> X' = Y - lse_k Y):  dY = dX' - exp(X') sum_k dX'
//   column step sequence: dX = dY - softmax_t(X)[t] sum_t dY
//               causal:   dX_t = dY_t - exp(X_t - M_t) R_t with M_t = logcumsumexp_{t'<=t} X and
//                         R_t = sum_{i>=t} dY_i exp(M_t - M_i) = dY_t + exp(M_t - M_{t+1}) R_{t+1}
//                         (M is nondecreasing, so every exponent is <= 0: no overflow).
// The tasks as in the forward: rows for the row step, (b, k) for the column step.
void sinkhorn_bwd_ref(const SinkhornParams& p) {
  check(p);
  ATTN_REQUIRE(p.state == nullptr && p.pos == 0, "sinkhorn: the backward runs from position 0");
  const int B = p.B, T = p.T, K = p.K, N = p.iterations;
  const int64_t seq = int64_t(T) * K, all = int64_t(B) * seq, rows = int64_t(B) * T;
  const bool par = worth_parallel(all * 8);
  std::vector<double> d(static_cast<size_t>(all));
#pragma omp parallel for schedule(static) if (par)
  for (int64_t i = 0; i < all; ++i) d[size_t(i)] = double(p.dg[i]) * p.g[i];
  for (int n = N - 1; n >= 0; --n) {
    const float* xs = p.iterates + n * all;
    const float* xns = p.iterates + (n + 1) * all;
#pragma omp parallel for schedule(static) if (par)
    for (int64_t r = 0; r < rows; ++r) {
      double* dr = d.data() + r * K;
      const float* xn = xns + r * K;
      double sum = 0.0;
      for (int k = 0; k < K; ++k) sum += dr[k];
      for (int k = 0; k < K; ++k) dr[k] -= std::exp(double(xn[k])) * sum;
    }
#pragma omp parallel if (par && B * K > 1)
    {
      std::vector<double> prefix(p.causal ? static_cast<size_t>(T) : 0);
#pragma omp for schedule(dynamic, 1)
      for (int bk = 0; bk < B * K; ++bk) {
        const int b = bk / K, k = bk % K;
        const float* x = xs + b * seq;
        double* db = d.data() + b * seq;
        if (p.causal) {
          double m = kNegInf;
          for (int t = 0; t < T; ++t) prefix[size_t(t)] = m = log_add_exp(m, x[int64_t(t) * K + k]);
          double r = 0.0;
          for (int t = T - 1; t >= 0; --t) {
            double& dt = db[size_t(t) * K + k];
            r = dt + (t + 1 < T ? std::exp(prefix[size_t(t)] - prefix[size_t(t) + 1]) * r : 0.0);
            dt -= std::exp(double(x[int64_t(t) * K + k]) - prefix[size_t(t)]) * r;
          }
        } else {
          double m = kNegInf, sum = 0.0, dsum = 0.0;
          for (int t = 0; t < T; ++t) m = std::max(m, double(x[int64_t(t) * K + k]));
          for (int t = 0; t < T; ++t) {
            sum += std::exp(double(x[int64_t(t) * K + k]) - m);
            dsum += db[size_t(t) * K + k];
          }
          const double lse = m + std::log(sum);
          for (int t = 0; t < T; ++t)
            db[size_t(t) * K + k] -= std::exp(double(x[int64_t(t) * K + k]) - lse) * dsum;
        }
      }
    }
  }
#pragma omp parallel for schedule(static) if (par)
  for (int64_t i = 0; i < all; ++i) p.dscores[i] = float(d[size_t(i)]);
}

void softmax_assign_fwd_ref(const SoftmaxAssignParams& p) {
  const int K = p.K;
  for (int64_t r = 0; r < p.rows; ++r) {
    float* g = p.g + r * K;
    std::copy(p.scores + r * K, p.scores + (r + 1) * K, g);
    normalize_row(g, K);
    for (int k = 0; k < K; ++k) g[k] = std::exp(g[k]);
  }
}

void softmax_assign_bwd_ref(const SoftmaxAssignParams& p) {
  const int K = p.K;
  for (int64_t r = 0; r < p.rows; ++r) {
    const float *g = p.g + r * K, *dg = p.dg + r * K;
    double dot = 0.0;
    for (int k = 0; k < K; ++k) dot += double(g[k]) * dg[k];
    for (int k = 0; k < K; ++k) p.dscores[r * K + k] = float(g[k] * (dg[k] - dot));
  }
}

void topk_route_ref(const TopkRouteParams& p) {
  ATTN_REQUIRE(p.top_k >= 1 && p.top_k <= p.K, "topk_route: top_k must be in [1, %d], got %d", p.K,
               p.top_k);
  std::vector<int> order(size_t(p.K));
  for (int64_t r = 0; r < p.rows; ++r) {
    const float* g = p.g + r * p.K;
    for (int k = 0; k < p.K; ++k) order[size_t(k)] = k;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return g[a] > g[b]; });
    for (int j = 0; j < p.top_k; ++j) p.groups[r * p.top_k + j] = order[size_t(j)];
  }
}

namespace {
constexpr double kNormEps2 = 1e-12;  // |x| = sqrt(x.x + 1e-12): smooth at 0

// Unit rows of x [rows, d] in double, and their norms.
void unit_rows(const float* x, int64_t rows, int d, std::vector<double>& unit,
               std::vector<double>& norm) {
  unit.resize(size_t(rows * d));
  norm.resize(size_t(rows));
  for (int64_t r = 0; r < rows; ++r) {
    double s = kNormEps2;
    for (int c = 0; c < d; ++c) s += double(x[r * d + c]) * x[r * d + c];
    norm[size_t(r)] = std::sqrt(s);
    for (int c = 0; c < d; ++c) unit[size_t(r * d + c)] = x[r * d + c] / norm[size_t(r)];
  }
}
}  // namespace

void focus_scores_fwd_ref(const FocusScoresParams<float>& p) {
  const int K = p.K, d = p.d_g;
  std::vector<double> cu, cn;
  unit_rows(p.centroids, K, d, cu, cn);
#pragma omp parallel if (worth_parallel(p.N * K * d))
  {
    std::vector<double> zu, zn;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < p.N; ++i) {
      unit_rows(p.z + i * d, 1, d, zu, zn);
      for (int k = 0; k < K; ++k) {
        double s = 0.0;
        for (int c = 0; c < d; ++c) s += zu[size_t(c)] * cu[size_t(k * d + c)];
        p.scores[i * K + k] = float(s / p.tau);
      }
    }
  }
}

// With u = x / |x|: du -> dx = (du - u (u . du)) / |x|.
void focus_scores_bwd_ref(const FocusScoresParams<float>& p) {
  const int K = p.K, d = p.d_g;
  std::vector<double> cu, cn, zu, zn;
  unit_rows(p.centroids, K, d, cu, cn);
  unit_rows(p.z, p.N, d, zu, zn);
  std::vector<double> dcu(static_cast<size_t>(K) * d, 0.0), du(static_cast<size_t>(d));
  for (int64_t i = 0; i < p.N; ++i) {
    std::fill(du.begin(), du.end(), 0.0);
    for (int k = 0; k < K; ++k) {
      const double ds = double(p.dscores[i * K + k]) / p.tau;
      for (int c = 0; c < d; ++c) {
        du[size_t(c)] += ds * cu[size_t(k * d + c)];
        dcu[size_t(k * d + c)] += ds * zu[size_t(i * d + c)];
      }
    }
    double dot = 0.0;
    for (int c = 0; c < d; ++c) dot += du[size_t(c)] * zu[size_t(i * d + c)];
    for (int c = 0; c < d; ++c)
      p.dz[i * d + c] = float((du[size_t(c)] - zu[size_t(i * d + c)] * dot) / zn[size_t(i)]);
  }
  if (!p.dcentroids) return;
  for (int k = 0; k < K; ++k) {
    double dot = 0.0;
    for (int c = 0; c < d; ++c) dot += dcu[size_t(k * d + c)] * cu[size_t(k * d + c)];
    for (int c = 0; c < d; ++c)
      p.dcentroids[k * d + c] +=
          float((dcu[size_t(k * d + c)] - cu[size_t(k * d + c)] * dot) / cn[size_t(k)]);
  }
}

}  // namespace attnlab
