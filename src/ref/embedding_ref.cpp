#include "ref/embedding_ref.h"

#include <vector>

#include "ref/parallel.h"

namespace attnlab {

void embedding_fwd_ref(const EmbeddingParams<float>& p) {
  const int64_t rows = p.B * p.T_;
  const int C = p.C;
#pragma omp parallel for schedule(static) if (worth_parallel(rows * C))
  for (int64_t r = 0; r < rows; ++r) {
    const float* te = p.wte + int64_t(p.tokens[r]) * C;
    float* o = p.out + r * C;
    if (!p.wpe) {
      for (int c = 0; c < C; ++c) o[c] = te[c];
      continue;
    }
    const float* pe = p.wpe + int64_t(r % p.T_) * C;
    for (int c = 0; c < C; ++c) o[c] = te[c] + pe[c];
  }
}

// dwpe: each position t is owned by one thread and sums its B rows in batch order.
// dwte: the rows are bucketed by token (a stable counting sort), then each token row is owned by
// one thread and sums its occurrences in increasing row order, in double.
void embedding_bwd_ref(const EmbeddingParams<float>& p) {
  const int64_t rows = p.B * p.T_;
  const int C = p.C;
  if (p.dwpe) {
#pragma omp parallel if (worth_parallel(rows * C))
    {
      std::vector<double> acc(C);
#pragma omp for schedule(static)
      for (int t = 0; t < p.T_; ++t) {
        float* dpe = p.dwpe + int64_t(t) * C;
        for (int c = 0; c < C; ++c) acc[c] = dpe[c];
        for (int64_t b = 0; b < p.B; ++b) {
          const float* g = p.dout + (b * p.T_ + t) * C;
          for (int c = 0; c < C; ++c) acc[c] += g[c];
        }
        for (int c = 0; c < C; ++c) dpe[c] = static_cast<float>(acc[c]);
      }
    }
  }
  if (p.dwte) {
    std::vector<int64_t> start(size_t(p.vocab) + 1, 0);
    for (int64_t r = 0; r < rows; ++r) ++start[size_t(p.tokens[r]) + 1];
    for (int v = 0; v < p.vocab; ++v) start[v + 1] += start[v];
    std::vector<int64_t> order(static_cast<size_t>(rows));
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    for (int64_t r = 0; r < rows; ++r) order[size_t(fill[size_t(p.tokens[r])]++)] = r;
#pragma omp parallel if (worth_parallel(rows * C))
    {
      std::vector<double> acc(C);
#pragma omp for schedule(dynamic, 64)
      for (int v = 0; v < p.vocab; ++v) {
        if (start[v] == start[v + 1]) continue;
        float* dte = p.dwte + int64_t(v) * C;
        for (int c = 0; c < C; ++c) acc[c] = dte[c];
        for (int64_t i = start[v]; i < start[v + 1]; ++i) {
          const float* g = p.dout + order[size_t(i)] * C;
          for (int c = 0; c < C; ++c) acc[c] += g[c];
        }
        for (int c = 0; c < C; ++c) dte[c] = static_cast<float>(acc[c]);
      }
    }
  }
}

}  // namespace attnlab
