// Helpers shared by the benchmark executables (scripts/bench/*.cpp).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "core/cuda_check.h"
#include "core/tensor.h"

namespace attnlab::bench {

// Median over `reps` timed samples of f (CUDA events on `stream` around each sample), after `warm`
// untimed warm-up calls, in milliseconds per call. A sample is `queued` calls back to back (1: one
// call, whose host-side work before its first launch is inside the events; more: the host runs
// ahead of the device, as in a model's forward, and the time per call is the device's).
template <typename F>
double median_ms(F&& f, int reps, cudaStream_t stream = nullptr, int warm = 3, int queued = 1) {
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < warm; ++i) f();
  std::vector<float> ms(reps);
  for (int i = 0; i < reps; ++i) {
    CUDA_CHECK(cudaEventRecord(a, stream));
    for (int c = 0; c < queued; ++c) f();
    CUDA_CHECK(cudaEventRecord(b, stream));
    CUDA_CHECK(cudaEventSynchronize(b));
    CUDA_CHECK(cudaEventElapsedTime(&ms[i], a, b));
    ms[i] /= float(queued);
  }
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[reps / 2];
}

// n bf16 values uniform in [-1, 1) copied into buf: xorshift, one generator per chunk of 2^16
// values seeded from (seed, chunk), the chunks filled in parallel (OpenMP), so the values do not
// depend on the thread count (bench_focus_soft's qkv and dout at 1M tokens are 3.1G values: ~23 s
// serially at the 3 s per 420M values measured on this project's 2-core machine).
inline void fill_random_bf16(const Buffer& buf, size_t n, uint64_t seed) {
  std::unique_ptr<bf16[]> h(new bf16[n]);  // (not zeroed first: every value is written below)
  constexpr size_t kChunk = size_t(1) << 16;
  const int64_t chunks = int64_t((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    uint64_t s = (seed * 0x9E3779B97F4A7C15ull) ^ (uint64_t(c + 1) * 0xD1B54A32D192ED03ull);
    if (s == 0) s = 1;  // xorshift's fixed point
    const size_t end = std::min(n, size_t(c + 1) * kChunk);
    for (size_t i = size_t(c) * kChunk; i < end; ++i) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      h[i] = bf16(float(int64_t(s >> 40) - (int64_t(1) << 23)) / float(1 << 23));
    }
  }
  CUDA_CHECK(cudaMemcpy(buf.data(), h.get(), n * sizeof(bf16), cudaMemcpyHostToDevice));
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

// The value of a list option (--T=4096,16384): positive integers separated by commas, else a
// message naming the program and the option on stderr and exit(2).
inline std::vector<int> parse_list(const char* prog, const char* key, const char* text) {
  std::vector<int> v;
  for (const char* p = text;;) {
    char* end = nullptr;
    const long x = std::strtol(p, &end, 10);
    if (end == p || x <= 0 || (*end != ',' && *end != '\0')) {
      std::fprintf(stderr, "%s: %s expects positive integers separated by commas, got '%s'\n", prog,
                   key, text);
      std::exit(2);
    }
    v.push_back(int(x));
    if (*end == '\0') return v;
    p = end + 1;
  }
}

}  // namespace attnlab::bench
