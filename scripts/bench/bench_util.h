// Helpers shared by the benchmark executables (scripts/bench/*.cpp).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/cuda_check.h"

namespace attnlab::bench {

// Median over `reps` timed calls of f (CUDA events on the default stream around each call), after
// 3 untimed warm-up calls, in milliseconds.
template <typename F>
double median_ms(F&& f, int reps) {
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) f();  // warm-up
  std::vector<float> ms(reps);
  for (int i = 0; i < reps; ++i) {
    CUDA_CHECK(cudaEventRecord(a));
    f();
    CUDA_CHECK(cudaEventRecord(b));
    CUDA_CHECK(cudaEventSynchronize(b));
    CUDA_CHECK(cudaEventElapsedTime(&ms[i], a, b));
  }
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[reps / 2];
}

// The value of a --rows=N option: a positive integer, else a message on stderr and exit(2).
inline int64_t parse_rows(const char* prog, const char* text) {
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || v <= 0) {
    std::fprintf(stderr, "%s: --rows expects a positive integer, got '%s'\n", prog, text);
    std::exit(2);
  }
  return v;
}

}  // namespace attnlab::bench
