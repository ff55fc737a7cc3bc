// CPU reference of kernels/focus/focus_attention.cuh: one query row at a time over all its keys
// (O(T^2) per head; the CUDA kernels tile it flash-style). Double accumulation.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "ref/focus_ref.h"
#include "ref/parallel.h"

namespace attnlab {
namespace {

using P = FocusAttentionParams<float>;

inline double dot(const float* a, const float* b, int n) {
  double s = 0.0;
  for (int i = 0; i < n; ++i) s += double(a[i]) * b[i];
  return s;
}

inline const float* q_row(const P& p, int b, int t, int h) {
  return p.q + b * p.q_batch_stride + t * p.q_row_stride + int64_t(h) * p.D;
}
inline int64_t kv_off(const P& p, int b, int j, int hk) {
  return b * p.kv_batch_stride + j * p.kv_row_stride + hk * p.kv_head_stride;
}
inline int64_t o_off(const P& p, int b, int t, int h) {
  return b * p.o_batch_stride + t * p.o_row_stride + int64_t(h) * p.D;
}

// Affinity a = g_i . g_j of absolute positions i, j.
inline double affinity(const P& p, int b, int i, int j) {
  const float* gi = p.g + b * p.g_batch_stride + int64_t(i) * p.K;
  const float* gj = p.g + b * p.g_batch_stride + int64_t(j) * p.K;
  return dot(gi, gj, p.K);
}

inline bool share_group(const P& p, int b, int i, int j) {
  const int32_t* gi = p.groups + b * p.groups_batch_stride + int64_t(i) * p.top_k;
  const int32_t* gj = p.groups + b * p.groups_batch_stride + int64_t(j) * p.top_k;
  for (int x = 0; x < p.top_k; ++x)
    for (int y = 0; y < p.top_k; ++y)
      if (gi[x] == gj[y]) return true;
  return false;
}

inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// The logit of pair (i, j) given its score s (kNegInf: not attended).
inline double pair_logit(const P& p, int b, int i, int j, double s) {
  if (i - j <= p.gate.local_window) return s;
  switch (p.gate.kind) {
    case FocusGateKind::additive:
      return s + std::log(affinity(p, b, i, j) + p.gate.eps);
    case FocusGateKind::multiplicative:
      return s * sigmoid(p.gate.scale * affinity(p, b, i, j) + p.gate.bias);
    case FocusGateKind::hard:
      return share_group(p, b, i, j) ? s : kNegInf;
  }
  return s;
}

void check(const P& p) {
  ATTN_REQUIRE(p.n_kv_head > 0 && p.n_head % p.n_kv_head == 0,
               "focus attention: n_kv_head (%d) must divide n_head (%d)", p.n_kv_head, p.n_head);
  ATTN_REQUIRE(p.gate.kind == FocusGateKind::hard ? p.groups != nullptr : p.g != nullptr,
               "focus attention: the %s gate needs %s",
               p.gate.kind == FocusGateKind::hard ? "hard" : "soft",
               p.gate.kind == FocusGateKind::hard ? "group ids" : "the assignment g");
  ATTN_REQUIRE(p.gate.local_window >= 0, "focus attention: local_window must be >= 0, got %d",
               p.gate.local_window);
  if (p.gate.kind != FocusGateKind::hard) return;
  // Group ids name groups 0 .. K - 1 (focus_route_topk's output); the CUDA kernels read other ids
  // as no group at all or not at all, so they are refused here rather than compared as values.
  const int rows = p.pos + p.seq_len;
  for (int b = 0; b < p.B; ++b)
    for (int64_t i = 0; i < int64_t(rows) * p.top_k; ++i) {
      const int32_t id = p.groups[b * p.groups_batch_stride + i];
      ATTN_REQUIRE(id >= 0 && id < p.K,
                   "focus attention: group ids must be in [0, %d), got %d (batch %d, token %lld)",
                   p.K, id, b, (long long)(i / p.top_k));
    }
}

}  // namespace

void focus_attention_fwd_ref(const P& p) {
  check(p);
  const int T = p.seq_len, H = p.n_head, D = p.D, group = p.n_head / p.n_kv_head;
  const int n_keys = p.pos + T;
  const int64_t rows = int64_t(p.B) * H * T;
#pragma omp parallel if (worth_parallel(rows * n_keys * D))
  {
    std::vector<double> logit(static_cast<size_t>(n_keys)), acc(static_cast<size_t>(D));
#pragma omp for schedule(dynamic, 16)
    for (int64_t row = 0; row < rows; ++row) {
      const int t = int(row % T), h = int((row / T) % H), b = int(row / (int64_t(T) * H));
      const int hk = h / group, i = p.pos + t;
      const float* q = q_row(p, b, t, h);
      double mx = kNegInf;
      for (int j = 0; j <= i; ++j) {
        const double s = p.scale * dot(q, p.k + kv_off(p, b, j, hk), D);
        logit[size_t(j)] = pair_logit(p, b, i, j, s);
        mx = std::max(mx, logit[size_t(j)]);
      }
      double sum = 0.0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int j = 0; j <= i; ++j) {
        if (logit[size_t(j)] == kNegInf) continue;
        const double e = std::exp(logit[size_t(j)] - mx);
        sum += e;
        const float* v = p.v + kv_off(p, b, j, hk);
        for (int d = 0; d < D; ++d) acc[size_t(d)] += e * v[d];
      }
      float* o = p.o + o_off(p, b, t, h);
      for (int d = 0; d < D; ++d) o[d] = float(acc[size_t(d)] / sum);
      if (p.lse) p.lse[row] = float(mx + std::log(sum));  // row == (b*H + h)*T + t
    }
  }
}

// Per (batch, kv head) task, as the dense reference: P = exp(logit - lse), dP = dout . v,
// dlogit = P (dP - delta); the score gets dlogit times d logit / d s, the affinity of a distant
// pair the rest (additive: exp(s - lse)(dP - delta), i.e. dlogit / (a + eps); multiplicative:
// dlogit s gate_scale sig (1 - sig); hard: the straight-through min(exp(s - lse), 1)(dP - delta),
// docs/focus.md: a masked pair's exp(s - lse) is not a probability and is unbounded).
// dg gathers a task's contributions in its own buffer; the buffers are added in task order.
// bf16_da: each dA rounded to bf16 before the dg products (focus_attention_bwd_bf16_da_ref).
namespace {
void focus_attention_bwd(const P& p, bool bf16_da) {
  check(p);
  ATTN_REQUIRE(p.pos == 0, "focus attention: the backward runs from position 0, got %d", p.pos);
  const int T = p.seq_len, H = p.n_head, D = p.D, K = p.K, group = p.n_head / p.n_kv_head;
  const int tasks = p.B * p.n_kv_head;
  const bool want_dg = p.dg != nullptr && p.g != nullptr;
  std::vector<double> dg_task(want_dg ? size_t(tasks) * T * K : 0, 0.0);
  const int64_t work = int64_t(tasks) * group * T * T * D;
#pragma omp parallel if (tasks > 1 && worth_parallel(work))
  {
    const size_t Tz = static_cast<size_t>(T), Dz = static_cast<size_t>(D);
    std::vector<double> prob(Tz), dprob(Tz), score(Tz);
    std::vector<double> dk(Tz * Dz), dv(Tz * Dz), dq(Dz);
#pragma omp for schedule(dynamic, 1)
    for (int task = 0; task < tasks; ++task) {
      const int b = task / p.n_kv_head, hk = task % p.n_kv_head;
      double* dg = want_dg ? dg_task.data() + size_t(task) * T * K : nullptr;
      std::fill(dk.begin(), dk.end(), 0.0);
      std::fill(dv.begin(), dv.end(), 0.0);
      for (int h = hk * group; h < (hk + 1) * group; ++h) {
        for (int t = 0; t < T; ++t) {
          const float* q = q_row(p, b, t, h);
          const float* dout = p.dout + o_off(p, b, t, h);
          const double lse = p.lse[(int64_t(b) * H + h) * T + t];
          double delta = 0.0;
          for (int j = 0; j <= t; ++j) {
            score[size_t(j)] = p.scale * dot(q, p.k + kv_off(p, b, j, hk), D);
            const double l = pair_logit(p, b, t, j, score[size_t(j)]);
            prob[size_t(j)] = l == kNegInf ? 0.0 : std::exp(l - lse);
            dprob[size_t(j)] = dot(dout, p.v + kv_off(p, b, j, hk), D);
            delta += prob[size_t(j)] * dprob[size_t(j)];
          }
          std::fill(dq.begin(), dq.end(), 0.0);
          for (int j = 0; j <= t; ++j) {
            const double s = score[size_t(j)];
            const double dl = prob[size_t(j)] * (dprob[size_t(j)] - delta);
            double ds = dl, da = 0.0;
            if (t - j > p.gate.local_window) {
              switch (p.gate.kind) {
                case FocusGateKind::additive:
                  da = std::exp(s - lse) * (dprob[size_t(j)] - delta);
                  break;
                case FocusGateKind::hard:
                  da = hard_straight_through_weight(std::exp(s - lse)) * (dprob[size_t(j)] - delta);
                  break;
                case FocusGateKind::multiplicative: {
                  const double sg = sigmoid(p.gate.scale * affinity(p, b, t, j) + p.gate.bias);
                  ds = dl * sg;
                  da = dl * s * p.gate.scale * sg * (1.0 - sg);
                  break;
                }
              }
            }
            if (bf16_da) da = double(__bfloat162float(__float2bfloat16_rn(float(da))));
            if (dg && da != 0.0) {
              const float* gi = p.g + b * p.g_batch_stride + int64_t(t) * K;
              const float* gj = p.g + b * p.g_batch_stride + int64_t(j) * K;
              for (int k = 0; k < K; ++k) {
                dg[size_t(t) * K + k] += da * gj[k];
                dg[size_t(j) * K + k] += da * gi[k];
              }
            }
            ds *= p.scale;
            const float* k = p.k + kv_off(p, b, j, hk);
            double* dk_j = dk.data() + size_t(j) * D;
            double* dv_j = dv.data() + size_t(j) * D;
            for (int d = 0; d < D; ++d) {
              dq[size_t(d)] += ds * k[d];
              dk_j[d] += ds * q[d];
              dv_j[d] += prob[size_t(j)] * dout[d];
            }
          }
          float* dq_out = p.dq + (q_row(p, b, t, h) - p.q);
          for (int d = 0; d < D; ++d) dq_out[d] = float(dq[size_t(d)]);
        }
      }
      for (int j = 0; j < T; ++j) {
        const int64_t off = kv_off(p, b, j, hk);
        for (int d = 0; d < D; ++d) {
          p.dk[off + d] = float(dk[size_t(j) * D + d]);
          p.dv[off + d] = float(dv[size_t(j) * D + d]);
        }
      }
    }
  }
  if (!p.dg) return;
  for (int b = 0; b < p.B; ++b)
    for (int64_t e = 0; e < int64_t(T) * K; ++e) {
      double s = 0.0;
      if (want_dg)
        for (int hk = 0; hk < p.n_kv_head; ++hk)
          s += dg_task[(size_t(b) * p.n_kv_head + hk) * T * K + size_t(e)];
      p.dg[b * int64_t(T) * K + e] = float(s);
    }
}
}  // namespace

void focus_attention_bwd_ref(const P& p) { focus_attention_bwd(p, false); }

void focus_attention_bwd_bf16_da_ref(const P& p) { focus_attention_bwd(p, true); }

}  // namespace attnlab
