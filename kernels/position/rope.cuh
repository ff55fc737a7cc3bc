// Rotary position embedding (RoPE), Hugging Face LLaMA's rotate_half convention, in place on the
// q and k heads of a packed qkv activation (src/ops/qkv_layout.h): qkv [tokens = B * T, width],
// each row [q heads (n_head x D) | k heads (n_kv_head x D) | v heads]; v is untouched.
// Token r sits at position pos + r % seq_len. For each rotated head and i < D/2:
//   inv_freq_i = 1 / theta^(float(2i) / D)   (fp32 powf, as transformers' rope init), then
//                scaled by RopeScaling (Hugging Face's rope_type linear or llama3; none: as is)
//   a = float(pos + t) * inv_freq_i            (fp32 product), c = cos(a), s = sin(a)
//   fwd: x'_i = x_i c - x_{i+D/2} s,  x'_{i+D/2} = x_{i+D/2} c + x_i s        (in place)
//   bwd: the inverse rotation (angle -a; the transpose), applied to dq and dk    (in place)
// Rotation math in fp32 (the CPU reference in double, from the same fp32 c and s); T is float or
// bf16. D is even and at most kRopeMaxHeadDim.
#pragma once
#include <cmath>

#include "kernels/common/launch.h"
#include "kernels/position/rope_scaling.h"

namespace attnlab {

constexpr int kRopeMaxHeadDim = 512;  // the CUDA launcher passes inv_freq by value, D/2 floats

template <typename T>
struct RopeParams {
  T* qkv = nullptr;
  int64_t tokens = 0;  // B * T
  int seq_len = 0;     // T
  int64_t width = 0;   // QKVLayout::width(): the row stride of qkv
  int heads = 0;       // n_head + n_kv_head: the q then the k heads, from column 0
  int head_dim = 0;    // D
  int pos = 0;         // the position of t = 0
  float theta = 10000.f;
  RopeScaling scaling;
};

// inv_freq_i in fp32 exactly as transformers computes it (1.0 / (base ** (arange(0, D, 2).float()
// / D))), then scaled (rope_scaled_inv_freq). The CPU reference and the CUDA launcher both take
// it from here, so both rotate by the same fp32 angles.
inline float rope_inv_freq(int i, int head_dim, float theta) {
  return 1.0f / std::pow(theta, float(2 * i) / float(head_dim));
}

inline float rope_inv_freq(int i, int head_dim, float theta, const RopeScaling& s) {
  return rope_scaled_inv_freq(rope_inv_freq(i, head_dim, theta), s);
}

template <typename T>
void launch_rope_fwd(const RopeParams<T>& p, Stream s);
template <typename T>
void launch_rope_bwd(const RopeParams<T>& p, Stream s);

}  // namespace attnlab
