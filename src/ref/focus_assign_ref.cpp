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

// One task per sequence b: N iterations of a column step over its T tokens and a row step.
void sinkhorn_fwd_ref(const SinkhornParams& p) {
  check(p);
  const int T = p.T, K = p.K, N = p.iterations;
  const int64_t seq = int64_t(T) * K, all = int64_t(p.B) * seq;
#pragma omp parallel for schedule(dynamic, 1) if (p.B > 1 && worth_parallel(all * N * 8))
  for (int b = 0; b < p.B; ++b) {
    float* x0 = p.iterates + b * seq;
    std::copy(p.scores + b * seq, p.scores + (b + 1) * seq, x0);
    for (int n = 0; n < N; ++n) {
      const float* x = p.iterates + n * all + b * seq;
      float* y = p.iterates + (n + 1) * all + b * seq;
      for (int k = 0; k < K; ++k) {
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
      for (int t = 0; t < T; ++t) normalize_row(y + int64_t(t) * K, K);
    }
    const float* xn = p.iterates + N * all + b * seq;
    for (int64_t i = 0; i < seq; ++i) p.g[b * seq + i] = std::exp(xn[i]);
  }
}

// Backward through the unrolled iterations, last to first, from the saved iterates:
//   row step   (Y -> X' = Y - lse_k Y):  dY = dX' - exp(X') sum_k dX'
//   column step sequence: dX = dY - softmax_t(X)[t] sum_t dY
//               causal:   dX_t = dY_t - exp(X_t - M_t) R_t with M_t = logcumsumexp_{t'<=t} X and
//                         R_t = sum_{i>=t} dY_i exp(M_t - M_i) = dY_t + exp(M_t - M_{t+1}) R_{t+1}
//                         (M is nondecreasing, so every exponent is <= 0: no overflow).
void sinkhorn_bwd_ref(const SinkhornParams& p) {
  check(p);
  ATTN_REQUIRE(p.state == nullptr && p.pos == 0, "sinkhorn: the backward runs from position 0");
  const int T = p.T, K = p.K, N = p.iterations;
  const int64_t seq = int64_t(T) * K, all = int64_t(p.B) * seq;
#pragma omp parallel for schedule(dynamic, 1) if (p.B > 1 && worth_parallel(all * N * 8))
  for (int b = 0; b < p.B; ++b) {
    std::vector<double> d(static_cast<size_t>(seq)), prefix(static_cast<size_t>(T));
    const float* g = p.g + b * seq;
    for (int64_t i = 0; i < seq; ++i) d[size_t(i)] = double(p.dg[b * seq + i]) * g[i];
    for (int n = N - 1; n >= 0; --n) {
      const float* x = p.iterates + n * all + b * seq;
      const float* xn = p.iterates + (n + 1) * all + b * seq;
      for (int t = 0; t < T; ++t) {
        double sum = 0.0;
        for (int k = 0; k < K; ++k) sum += d[size_t(t) * K + k];
        for (int k = 0; k < K; ++k) d[size_t(t) * K + k] -= std::exp(double(xn[t * K + k])) * sum;
      }
      for (int k = 0; k < K; ++k) {
        if (p.causal) {
          double m = kNegInf;
          for (int t = 0; t < T; ++t) prefix[size_t(t)] = m = log_add_exp(m, x[int64_t(t) * K + k]);
          double r = 0.0;
          for (int t = T - 1; t >= 0; --t) {
            double& dt = d[size_t(t) * K + k];
            r = dt + (t + 1 < T ? std::exp(prefix[size_t(t)] - prefix[size_t(t) + 1]) * r : 0.0);
            dt -= std::exp(double(x[int64_t(t) * K + k]) - prefix[size_t(t)]) * r;
          }
        } else {
          double m = kNegInf, sum = 0.0, dsum = 0.0;
          for (int t = 0; t < T; ++t) m = std::max(m, double(x[int64_t(t) * K + k]));
          for (int t = 0; t < T; ++t) {
            sum += std::exp(double(x[int64_t(t) * K + k]) - m);
            dsum += d[size_t(t) * K + k];
          }
          const double lse = m + std::log(sum);
          for (int t = 0; t < T; ++t)
            d[size_t(t) * K + k] -= std::exp(double(x[int64_t(t) * K + k]) - lse) * dsum;
        }
      }
    }
    for (int64_t i = 0; i < seq; ++i) p.dscores[b * seq + i] = float(d[size_t(i)]);
  }
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
