// Focus group scores (docs/focus.md): cosine similarity of a token's group projection with each
// centroid, over a temperature.
// z, dz: [N, d_g] (the activation dtype T: z = h W_g^T from the matmul op); centroids,
// dcentroids: [K, d_g] (T); scores, dscores: [N, K] fp32.
// fwd: scores[i,k] = (z_i / |z_i|) . (c_k / |c_k|) / tau  written (=), |x| = sqrt(x.x + 1e-12).
// bwd: dz written (=); dcentroids accumulated (+=; null = frozen).
#pragma once
#include "kernels/common/launch.h"

namespace attnlab {

template <typename T>
struct FocusScoresParams {
  const T* z = nullptr;
  const T* centroids = nullptr;
  float* scores = nullptr;
  const float* dscores = nullptr;
  T* dz = nullptr;
  T* dcentroids = nullptr;
  int64_t N = 0;
  int K = 0, d_g = 0;
  float tau = 0.1f;
};

template <typename T>
void launch_focus_scores_fwd(const FocusScoresParams<T>& p, Stream s);
template <typename T>
void launch_focus_scores_bwd(const FocusScoresParams<T>& p, Stream s);

}  // namespace attnlab
