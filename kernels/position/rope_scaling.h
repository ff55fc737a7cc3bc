// RoPE frequency scaling (host code, no CUDA): the scaling of kernels/position/rope.cuh's inv_freq,
// shared by the CPU reference, the CUDA launcher, the model's config and the Hugging Face interop.
#pragma once
#include <cmath>
#include <cstdint>

namespace attnlab {

// Frequency scaling for contexts past the pretraining length, as transformers' rope init:
//   linear (rope_type "linear"): inv_freq / factor (positions interpolated by factor);
//   llama3 (LLaMA 3.1+): with wavelen = 2 pi / inv_freq, L = original_context,
//     wavelen < L / high_freq_factor: inv_freq (high frequencies kept),
//     wavelen > L / low_freq_factor: inv_freq / factor (low frequencies interpolated),
//     otherwise (1 - s) inv_freq / factor + s inv_freq, s = (L / wavelen - low_freq_factor) /
//     (high_freq_factor - low_freq_factor),
//   all in fp32 in transformers' order of operations (rope_scaled_inv_freq).
enum class RopeScalingType : uint8_t { none, linear, llama3 };
struct RopeScaling {
  RopeScalingType type = RopeScalingType::none;
  float factor = 1.f;                            // linear, llama3
  float low_freq_factor = 1.f;                   // llama3
  float high_freq_factor = 4.f;                  // llama3 (> low_freq_factor)
  int original_context = 8192;                   // llama3: the pretraining context L
  bool operator==(const RopeScaling& o) const {  // (written out: the CUDA files are C++17)
    return type == o.type && factor == o.factor && low_freq_factor == o.low_freq_factor &&
           high_freq_factor == o.high_freq_factor && original_context == o.original_context;
  }
};

// `inv_freq` under `s`, in fp32 as transformers' _compute_linear_scaling_rope_parameters and
// _compute_llama3_parameters compute it: python scalars are fp32 operands, and a scalar divided by
// a tensor is the tensor's reciprocal times the scalar (torch's Tensor.__rdiv__), which rounds
// differently from one division (1 ulp of inv_freq at some original contexts, e.g. 32768).
inline float rope_scaled_inv_freq(float inv_freq, const RopeScaling& s) {
  switch (s.type) {
    case RopeScalingType::none:
      return inv_freq;
    case RopeScalingType::linear:
      return inv_freq / s.factor;
    case RopeScalingType::llama3: {
      const float L = float(s.original_context);
      const float low_wavelen = float(double(s.original_context) / s.low_freq_factor);
      const float high_wavelen = float(double(s.original_context) / s.high_freq_factor);
      const float wavelen = (1.f / inv_freq) * float(2.0 * M_PI);  // 2 pi / inv_freq
      const float scaled = wavelen > low_wavelen ? inv_freq / s.factor : inv_freq;
      if (wavelen < high_wavelen || wavelen > low_wavelen) return scaled;
      const float smooth = ((1.f / wavelen) * L - s.low_freq_factor) /  // L / wavelen
                           float(double(s.high_freq_factor) - double(s.low_freq_factor));
      return (1.f - smooth) * scaled / s.factor + smooth * scaled;
    }
  }
  return inv_freq;
}

}  // namespace attnlab
