// AdamW with decoupled weight decay, over one flat range of parameters.
// param: [n] (T); master: [n] fp32 or null (when T is bf16 the fp32 master copy is updated and
// rounded into param); grad: [n] (T); m, v: [n] fp32.
//   g = grad * grad_scale                    (grad_scale folds in global-norm clipping)
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   mhat = m / (1 - b1^step); vhat = v / (1 - b2^step)
//   w = w - lr * (mhat / (sqrt(vhat) + eps) + weight_decay * w)
// All of param, master, m, v are updated in place; step counts from 1.
// Also: sum of squares of a gradient range (for the global norm), deterministic.
//
// Multi-tensor form (launch_adamw_multi): one launch over many ranges of the same flat buffers.
// Range r is updated exactly as launch_adamw would update the sub-range alone with
// weight_decay = (ranges[r].decay ? weight_decay : 0) and seed = seed ^ ranges[r].seed: the same
// per-element math and the same stochastic-rounding bits (element index counted from the range's
// start), so the two forms give bitwise identical results. The range table lives in device memory
// (built once with adamw_multi_plan); ranges must not overlap.
#pragma once
#include "kernels/common/launch.h"

namespace attnlab {

template <typename T>
struct AdamWParams {
  T* param = nullptr;
  float* master = nullptr;
  const T* grad = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  int64_t n = 0;
  float lr = 0.f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.f;
  float grad_scale = 1.f;
  int step = 1;
  uint32_t seed = 0;  // for stochastic rounding into bf16 params (CUDA)
};

template <typename T>
void launch_adamw(const AdamWParams<T>& p, Stream s);

struct AdamWRange {
  int64_t offset = 0;       // elements into the flat buffers
  int64_t numel = 0;        // > 0
  int64_t block_begin = 0;  // first work block of the range (set by adamw_multi_plan)
  uint32_t seed = 0;        // xor-ed into AdamWMultiParams::seed for this range
  int32_t decay = 0;        // 1: apply weight_decay, 0: none
};

// Assigns work blocks to the ranges (in order) and returns their total, the launch's work size.
int64_t adamw_multi_plan(AdamWRange* ranges, int num_ranges);

template <typename T>
struct AdamWMultiParams {
  T* param = nullptr;  // flat buffers; AdamWRange::offset indexes all five
  float* master = nullptr;
  const T* grad = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  const AdamWRange* ranges = nullptr;  // device memory, planned by adamw_multi_plan
  int num_ranges = 0;
  int64_t num_blocks = 0;  // adamw_multi_plan's result
  float lr = 0.f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.f;
  float grad_scale = 1.f;
  int step = 1;
  uint32_t seed = 0;
};

template <typename T>
void launch_adamw_multi(const AdamWMultiParams<T>& p, Stream s);

// out[0] = sum(grad[i]^2) in fp32, with a fixed reduction order; out is device memory.
template <typename T>
void launch_sumsq(const T* grad, int64_t n, float* out, Stream s);

}  // namespace attnlab
