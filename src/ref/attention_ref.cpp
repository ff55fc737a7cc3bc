#include "ref/attention_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "ref/parallel.h"

namespace attnlab {

namespace {

// Keys [lo, hi) that query t attends to (AttentionMask: causal limits them to s <= t, a sliding
// window further to s > t - window). A window without causality is rejected up front.
inline void key_range(const AttentionParams<float>& p, int t, int* lo, int* hi) {
  *lo = p.mask.first_key(t);
  *hi = p.mask.key_end(t, p.seq_len);
}

// Element offset of (b, t, head h) in q/k/v (and dq/dk/dv), and in o/dout.
inline int64_t qkv_offset(const AttentionParams<float>& p, int b, int t, int h) {
  return b * p.qkv_batch_stride + t * p.qkv_row_stride + int64_t(h) * p.D;
}

inline int64_t o_offset(const AttentionParams<float>& p, int b, int t, int h) {
  return b * p.o_batch_stride + t * p.o_row_stride + int64_t(h) * p.D;
}

inline double dot(const float* a, const float* b, int n) {
  double s = 0.0;
  for (int i = 0; i < n; ++i) s += double(a[i]) * b[i];
  return s;
}

void check_params(const AttentionParams<float>& p) {
  ATTN_REQUIRE(p.n_kv_head > 0 && p.n_head % p.n_kv_head == 0,
               "attention: n_kv_head (%d) must divide n_head (%d)", p.n_kv_head, p.n_head);
  ATTN_REQUIRE(p.mask.window >= 0, "attention: window must be >= 0, got %d", p.mask.window);
  ATTN_REQUIRE(p.mask.window == 0 || p.mask.causal,
               "attention: a sliding window requires causal attention");
}

}  // namespace

// One query row at a time: scores over its key range in double, lse = max + log(sum exp),
// o = sum_s softmax_s v_s. Extra memory per thread: T + D doubles.
void attention_fwd_ref(const AttentionParams<float>& p) {
  check_params(p);
  const int T = p.seq_len, H = p.n_head, D = p.D, group = p.n_head / p.n_kv_head;
  const int64_t rows = int64_t(p.B) * H * T;
#pragma omp parallel if (worth_parallel(rows * T * D))
  {
    std::vector<double> score(T), acc(D);
#pragma omp for schedule(dynamic, 16)
    for (int64_t row = 0; row < rows; ++row) {
      const int t = int(row % T), h = int((row / T) % H), b = int(row / (int64_t(T) * H));
      const int hk = h / group;
      int lo, hi;
      key_range(p, t, &lo, &hi);
      const float* q = p.q + qkv_offset(p, b, t, h);
      double mx = -std::numeric_limits<double>::infinity();
      for (int s = lo; s < hi; ++s) {
        score[s] = p.scale * dot(q, p.k + qkv_offset(p, b, s, hk), D);
        mx = std::max(mx, score[s]);
      }
      double sum = 0.0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int s = lo; s < hi; ++s) {
        const double e = std::exp(score[s] - mx);
        sum += e;
        const float* v = p.v + qkv_offset(p, b, s, hk);
        for (int d = 0; d < D; ++d) acc[d] += e * v[d];
      }
      float* o = p.o + o_offset(p, b, t, h);
      for (int d = 0; d < D; ++d) o[d] = static_cast<float>(acc[d] / sum);
      p.lse[row] = static_cast<float>(mx + std::log(sum));  // row == (b*H + h)*T + t
    }
  }
}

// Flash-style backward: the probabilities are recomputed from the saved lse,
//   P_s = exp(scale q.k_s - lse),  dP_s = dout.v_s,  dS_s = P_s (dP_s - sum_s' P_s' dP_s'),
//   dq = scale sum_s dS_s k_s,  dk_s += scale dS_s q,  dv_s += P_s dout.
// Work is split by (batch, kv head): that task owns dk/dv of its kv head (accumulated in double
// over the query heads of its group and all query rows, in a fixed order) and dq of those heads.
// Extra memory per thread: 2 T + 2 T D + D doubles.
void attention_bwd_ref(const AttentionParams<float>& p) {
  check_params(p);
  const int T = p.seq_len, H = p.n_head, D = p.D, group = p.n_head / p.n_kv_head;
  const int tasks = p.B * p.n_kv_head;
  const int64_t work = int64_t(tasks) * group * T * T * D;
#pragma omp parallel if (tasks > 1 && worth_parallel(work))
  {
    std::vector<double> prob(T), dprob(T), dk(size_t(T) * D), dv(size_t(T) * D), dq(D);
#pragma omp for schedule(dynamic, 1)
    for (int task = 0; task < tasks; ++task) {
      const int b = task / p.n_kv_head, hk = task % p.n_kv_head;
      std::fill(dk.begin(), dk.end(), 0.0);
      std::fill(dv.begin(), dv.end(), 0.0);
      for (int h = hk * group; h < (hk + 1) * group; ++h) {
        for (int t = 0; t < T; ++t) {
          int lo, hi;
          key_range(p, t, &lo, &hi);
          const float* q = p.q + qkv_offset(p, b, t, h);
          const float* dout = p.dout + o_offset(p, b, t, h);
          const double lse = p.lse[(int64_t(b) * H + h) * T + t];
          double delta = 0.0;
          for (int s = lo; s < hi; ++s) {
            prob[s] = std::exp(p.scale * dot(q, p.k + qkv_offset(p, b, s, hk), D) - lse);
            dprob[s] = dot(dout, p.v + qkv_offset(p, b, s, hk), D);
            delta += prob[s] * dprob[s];
          }
          std::fill(dq.begin(), dq.end(), 0.0);
          for (int s = lo; s < hi; ++s) {
            const double ds = prob[s] * (dprob[s] - delta) * p.scale;
            const float* k = p.k + qkv_offset(p, b, s, hk);
            double* dk_s = dk.data() + size_t(s) * D;
            double* dv_s = dv.data() + size_t(s) * D;
            for (int d = 0; d < D; ++d) {
              dq[d] += ds * k[d];
              dk_s[d] += ds * q[d];
              dv_s[d] += prob[s] * dout[d];
            }
          }
          float* dq_out = p.dq + qkv_offset(p, b, t, h);
          for (int d = 0; d < D; ++d) dq_out[d] = static_cast<float>(dq[d]);
        }
      }
      for (int s = 0; s < T; ++s) {
        const int64_t off = qkv_offset(p, b, s, hk);
        for (int d = 0; d < D; ++d) {
          p.dk[off + d] = static_cast<float>(dk[size_t(s) * D + d]);
          p.dv[off + d] = static_cast<float>(dv[size_t(s) * D + d]);
        }
      }
    }
  }
}

}  // namespace attnlab
