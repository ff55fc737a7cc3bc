#include "ref/rope_ref.h"

#include <cmath>
#include <vector>

#include "core/error.h"
#include "ref/parallel.h"

namespace attnlab {

namespace {

// sign = +1: the forward rotation; -1: the inverse. The angle, cos and sin are fp32 (as the CUDA
// kernel and transformers compute them); the rotation itself is done in double and rounded once.
void rope_rotate(const RopeParams<float>& p, float sign) {
  if (p.tokens <= 0 || p.heads <= 0) return;
  ATTN_REQUIRE(p.head_dim > 0 && p.head_dim % 2 == 0,
               "rope: head dim must be even and positive, got %d", p.head_dim);
  const int D = p.head_dim, half = D / 2;
  std::vector<float> inv_freq(half);
  for (int i = 0; i < half; ++i) inv_freq[i] = rope_inv_freq(i, D, p.theta, p.scaling);
#pragma omp parallel for schedule(static) if (worth_parallel(p.tokens * p.heads * D * 4))
  for (int64_t token = 0; token < p.tokens; ++token) {
    const float position = float(int64_t(p.pos) + token % p.seq_len);
    float* row = p.qkv + token * p.width;
    for (int i = 0; i < half; ++i) {
      const float angle = position * inv_freq[i];
      const double c = std::cos(angle), s = sign * std::sin(angle);  // float cos / sin
      for (int h = 0; h < p.heads; ++h) {
        float* lo = row + int64_t(h) * D + i;
        const double x0 = lo[0], x1 = lo[half];
        lo[0] = static_cast<float>(x0 * c - x1 * s);
        lo[half] = static_cast<float>(x1 * c + x0 * s);
      }
    }
  }
}

}  // namespace

void rope_fwd_ref(const RopeParams<float>& p) { rope_rotate(p, 1.f); }
void rope_bwd_ref(const RopeParams<float>& p) { rope_rotate(p, -1.f); }

}  // namespace attnlab
