#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "ref/parallel.h"
#include "ref/sfa_ref.h"

namespace attnlab {

namespace {

// KI: the key coordinates' type (i32 packed, or one byte in the decode cache).
template <typename KI>
void attend(const SfaAttentionParams<float>& p, const KI* k_idx) {
  const int group = p.n_head / p.n_kv_head, K = p.k;
  const int64_t rows = int64_t(p.B) * p.Tq * p.n_head;
  const int64_t work = rows * int64_t(p.pos + p.Tq) * (2 * K + p.D);
#pragma omp parallel if (worth_parallel(work))
  {
    std::vector<double> score, acc(static_cast<size_t>(p.D));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int h = int(r % p.n_head);
      const int t = int((r / p.n_head) % p.Tq);
      const int b = int(r / (int64_t(p.n_head) * p.Tq));
      const int g = h / group, len = p.pos + t + 1;  // keys 0 .. pos + t
      const int64_t qa = b * p.q_batch_stride + t * p.q_row_stride + h * p.q_head_stride;
      const int32_t* qi = p.q_idx + qa;
      const float* qv = p.q_val + qa;
      score.resize(size_t(len));
      double mx = -INFINITY;
      for (int j = 0; j < len; ++j) {
        const int64_t ka = b * p.k_batch_stride + j * p.k_row_stride + g * p.k_head_stride;
        const KI* ki = k_idx + ka;
        const float* kv = p.k_val + ka;
        double d = 0.0;  // merge of two ascending coordinate lists
        for (int a = 0, c = 0; a < K && c < K;) {
          if (qi[a] == int32_t(ki[c]))
            d += double(qv[a++]) * kv[c++];
          else if (qi[a] < int32_t(ki[c]))
            ++a;
          else
            ++c;
        }
        score[size_t(j)] = d * p.scale;
        mx = std::max(mx, score[size_t(j)]);
      }
      double sum = 0.0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int j = 0; j < len; ++j) {
        const double w = std::exp(score[size_t(j)] - mx);
        sum += w;
        const float* v = p.v + b * p.v_batch_stride + j * p.v_row_stride + g * p.v_head_stride;
        for (int c = 0; c < p.D; ++c) acc[size_t(c)] += w * v[c];
      }
      float* o = p.o + b * p.o_batch_stride + t * p.o_row_stride + int64_t(h) * p.D;
      for (int c = 0; c < p.D; ++c) o[c] = float(acc[size_t(c)] / sum);
      if (p.lse) p.lse[(int64_t(b) * p.n_head + h) * p.Tq + t] = float(mx + std::log(sum));
    }
  }
}

}  // namespace

void sfa_attention_fwd_ref(const SfaAttentionParams<float>& p) {
  ATTN_REQUIRE(p.n_kv_head > 0 && p.n_head % p.n_kv_head == 0,
               "sfa_attention: n_kv_head (%d) must divide n_head (%d)", p.n_kv_head, p.n_head);
  ATTN_REQUIRE((p.k_idx == nullptr) != (p.k_idx8 == nullptr),
               "sfa_attention: exactly one of k_idx, k_idx8 must be set");
  if (p.k_idx8)
    attend(p, p.k_idx8);
  else
    attend(p, p.k_idx);
}

void sfa_distill_fwd_ref(const SfaDistillParams<float>& p) {
  double sum = 0.0;  // serial: the order is fixed, the term is a small part of a step
  for (int64_t i = 0; i < p.n; ++i) {
    const double d = double(p.student[i]) - p.teacher[i];
    sum += d * d;
  }
  *p.total += double(p.weight) * sum / double(p.n);
}

void sfa_distill_bwd_ref(const SfaDistillParams<float>& p) {
  const double c = 2.0 * double(p.weight) / double(p.n);
  for (int64_t i = 0; i < p.n; ++i)
    p.dstudent[i] = float(p.dout[i] + c * (double(p.student[i]) - p.teacher[i]));
}

}  // namespace attnlab
