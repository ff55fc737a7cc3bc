#include "ref/crossentropy_ref.h"

#include <cmath>

#include "ref/parallel.h"

namespace attnlab {

namespace {

// Natural-log log-sum-exp of the V real columns of one row, in double.
double row_logsumexp(const float* logits, int V) {
  float mx = logits[0];
  for (int j = 1; j < V; ++j) mx = std::fmax(mx, logits[j]);
  double sum = 0.0;
  for (int j = 0; j < V; ++j) sum += std::exp(double(logits[j]) - mx);
  return mx + std::log(sum);
}

// One row: loss and, when dlogits is non-null, its gradient. dlogits may alias logits: the loss
// reads logits[target] before the gradient pass overwrites the row, and that pass reads each
// element before writing it.
void crossentropy_row(const CrossEntropyParams<float>& p, int64_t i, float* dlogits) {
  const float* logits = p.logits + i * p.Vp;
  const int target = p.targets[i];
  if (target == p.ignore_index) {
    p.losses[i] = 0.f;
    if (dlogits)
      for (int j = 0; j < p.Vp; ++j) dlogits[j] = 0.f;
    return;
  }
  const double lse = row_logsumexp(logits, p.V);
  p.losses[i] = static_cast<float>(lse - logits[target]);
  if (!dlogits) return;
  for (int j = 0; j < p.V; ++j) {
    const double prob = std::exp(double(logits[j]) - lse);
    dlogits[j] = static_cast<float>((prob - (j == target ? 1.0 : 0.0)) * p.dloss);
  }
  for (int j = p.V; j < p.Vp; ++j) dlogits[j] = 0.f;
}

}  // namespace

void crossentropy_fwd_ref(const CrossEntropyParams<float>& p) {
#pragma omp parallel for schedule(static) if (worth_parallel(p.N * p.Vp))
  for (int64_t i = 0; i < p.N; ++i) crossentropy_row(p, i, nullptr);
}

void crossentropy_fwd_bwd_ref(const CrossEntropyParams<float>& p) {
#pragma omp parallel for schedule(static) if (worth_parallel(p.N * p.Vp))
  for (int64_t i = 0; i < p.N; ++i) crossentropy_row(p, i, p.dlogits + i * p.Vp);
}

void crossentropy_loss_sum_ref(const float* losses, const int32_t* targets, int64_t N,
                               int ignore_index, double* totals) {
  double sum = 0.0;
  int64_t count = 0;
  for (int64_t i = 0; i < N; ++i) {
    if (targets[i] == ignore_index) continue;
    sum += double(losses[i]);
    ++count;
  }
  totals[0] += sum;
  totals[1] += double(count);
}

}  // namespace attnlab
