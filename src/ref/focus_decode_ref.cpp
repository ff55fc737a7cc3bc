// CPU reference of kernels/focus/focus_decode.cuh: the index append per (b, group), and the
// group-indexed decode one query row at a time over the keys the lists name.
#include "ref/focus_decode_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "ref/parallel.h"

namespace attnlab {

void focus_group_index_append_ref(const FocusGroupIndexParams& p) {
  ATTN_ASSERT(p.pos >= 0 && p.pos + p.Tq <= p.max_T);
  for (int b = 0; b < p.B; ++b)
    for (int c = 0; c < p.K; ++c) {
      int32_t* list = p.index + (int64_t(b) * p.K + c) * p.max_T;
      int32_t& n = p.counts[b * p.K + c];
      n = int32_t(std::lower_bound(list, list + n, p.pos) - list);  // drop entries >= pos
      for (int t = 0; t < p.Tq; ++t) {
        const int32_t* g = p.groups + (int64_t(b) * p.max_T + p.pos + t) * p.top_k;
        if (std::find(g, g + p.top_k, c) != g + p.top_k) list[n++] = p.pos + t;
      }
    }
}

void focus_group_decode_ref(const FocusGroupDecodeParams<float>& p) {
  ATTN_ASSERT(p.n_kv_head > 0 && p.n_head % p.n_kv_head == 0 && p.local_window >= 0);
  const int H = p.n_head, D = p.D, per_kv = p.n_head / p.n_kv_head;
  const int64_t rows = int64_t(p.B) * p.Tq * H;
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
#pragma omp parallel if (worth_parallel(rows * (p.local_window + 1 + p.max_T / 4) * D))
  {
    std::vector<int> keys;
    std::vector<double> logit, acc(static_cast<size_t>(D));
#pragma omp for schedule(dynamic, 4)
    for (int64_t row = 0; row < rows; ++row) {
      const int h = int(row % H), t = int((row / H) % p.Tq), b = int(row / (int64_t(H) * p.Tq));
      const int i = p.pos + t, near = i - p.local_window;  // distant keys: j < near
      keys.clear();
      for (int j = std::max(0, near); j <= i; ++j) keys.push_back(j);
      const int32_t* qg = p.groups + (int64_t(b) * p.max_T + i) * p.top_k;
      for (int x = 0; x < p.top_k; ++x) {
        const int32_t* list = p.index + (int64_t(b) * p.K + qg[x]) * p.max_T;
        const int n = p.counts[b * p.K + qg[x]];
        for (int e = 0; e < n && list[e] < near; ++e) {
          const int32_t* kg = p.groups + (int64_t(b) * p.max_T + list[e]) * p.top_k;
          bool seen = false;  // shares an earlier query group: already listed
          for (int y = 0; y < x && !seen; ++y)
            seen = std::find(kg, kg + p.top_k, qg[y]) != kg + p.top_k;
          if (!seen) keys.push_back(list[e]);
        }
      }
      const float* q = p.q + b * p.q_batch_stride + t * p.q_row_stride + int64_t(h) * D;
      const int64_t kv = (int64_t(b) * p.n_kv_head + h / per_kv) * p.max_T * D;
      logit.resize(keys.size());
      double mx = kNegInf;
      for (size_t e = 0; e < keys.size(); ++e) {
        const float* k = p.k_cache + kv + int64_t(keys[e]) * D;
        double s = 0.0;
        for (int d = 0; d < D; ++d) s += double(q[d]) * k[d];
        logit[e] = p.scale * s;
        mx = std::max(mx, logit[e]);
      }
      double sum = 0.0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (size_t e = 0; e < keys.size(); ++e) {
        const double w = std::exp(logit[e] - mx);
        sum += w;
        const float* v = p.v_cache + kv + int64_t(keys[e]) * D;
        for (int d = 0; d < D; ++d) acc[size_t(d)] += w * v[d];
      }
      float* o = p.o + b * p.o_batch_stride + t * p.o_row_stride + int64_t(h) * D;
      for (int d = 0; d < D; ++d) o[d] = float(acc[size_t(d)] / sum);
    }
  }
}

}  // namespace attnlab
