// Softmax cross-entropy over a padded vocabulary.
// logits, dlogits: [N, Vp]; targets: [N] i32; losses: [N] fp32.
// Columns >= V (vocab padding) are masked out of the softmax. Rows whose target == ignore_index
// get loss 0 and zero gradient.
// Every other target must be in [0, V): the CUDA kernels do not check (ops::crossentropy checks on
// the CPU path; the data loader checks every token against the vocabulary).
// fwd: losses[i] = logsumexp(logits[i, :V]) - logits[i, target[i]]                (written =)
// bwd: dlogits[i, j] = (softmax(logits[i, :V])[j] - [j == target]) * dloss for j < V, 0 for j >= V
//      (written =; dlogits may alias logits: the CUDA path fuses fwd+bwd in one pass).
// dloss is the scale of each row's loss in the total (the trainer's: 1 / the valid targets of the
// whole step, over its micro-steps and ranks).
#pragma once
#include "kernels/common/launch.h"

namespace attnlab {

template <typename T>
struct CrossEntropyParams {
  const T* logits = nullptr;
  const int32_t* targets = nullptr;
  float* losses = nullptr;
  T* dlogits = nullptr;
  int64_t N = 0;
  int V = 0;
  int Vp = 0;
  int ignore_index = -1;
  float dloss = 1.f;
};

template <typename T>
void launch_crossentropy_fwd(const CrossEntropyParams<T>& p, Stream s);
// Fused: writes losses and dlogits in one pass over the logits.
template <typename T>
void launch_crossentropy_fwd_bwd(const CrossEntropyParams<T>& p, Stream s);

// Loss totals of a micro-batch, accumulated on the device (no host synchronisation):
//   totals[0] += sum of losses[i] over rows with targets[i] != ignore_index    (in double)
//   totals[1] += number of those rows
// losses, targets: [N]; totals: 2 doubles (accumulated +=). One block in a fixed order (thread t
// takes rows t, t + blockDim, ...; then a fixed tree): the same inputs give the same bits.
void launch_crossentropy_loss_sum(const float* losses, const int32_t* targets, int64_t N,
                                  int ignore_index, double* totals, Stream s);

}  // namespace attnlab
