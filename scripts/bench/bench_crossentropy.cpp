// Fused cross-entropy benchmark at the GPT-2 124M step's shape: launch_crossentropy_fwd_bwd, bf16
// logits [65536, 50304] (50257 real columns), dlogits written over the logits as the model does;
// median of 10 after 3 warm-ups; prints ms and the bandwidth of one read and one write of the
// logits. Usage: bench_crossentropy [--rows=N]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench_util.h"
#include "core/cuda_check.h"
#include "core/tensor.h"
#include "kernels/loss/crossentropy.cuh"

using namespace attnlab;
using bench::median_ms;

int main(int argc, char** argv) {
  int64_t rows = 65536;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--rows=", 7) == 0) {
      rows = bench::parse_rows("bench_crossentropy", argv[i] + 7);
    } else {
      std::fprintf(stderr, "bench_crossentropy: unknown option %s (expected [--rows=N])\n",
                   argv[i]);
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "bench_crossentropy: no CUDA device\n");
    return 1;
  }
  const int V = 50257, Vp = 50304;
  const size_t n = size_t(rows) * Vp;
  Buffer logits(Device::cuda, n * sizeof(bf16)), targets(Device::cuda, size_t(rows) * 4),
      losses(Device::cuda, size_t(rows) * 4);
  {
    std::vector<bf16> h(size_t(Vp) * 64);
    uint64_t s = 88172645463325252ull;
    for (auto& v : h) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      v = bf16(float(int64_t(s >> 40) - (int64_t(1) << 23)) / float(1 << 21));  // [-4, 4)
    }
    for (int64_t r = 0; r < rows; r += 64) {  // 64 distinct rows, repeated
      const size_t cnt = size_t(std::min<int64_t>(64, rows - r)) * Vp;
      CUDA_CHECK(cudaMemcpy(static_cast<bf16*>(logits.data()) + size_t(r) * Vp, h.data(),
                            cnt * sizeof(bf16), cudaMemcpyHostToDevice));
    }
    std::vector<int32_t> t(static_cast<size_t>(rows));
    for (size_t i = 0; i < t.size(); ++i) t[i] = int32_t((i * 7919) % V);
    CUDA_CHECK(cudaMemcpy(targets.data(), t.data(), t.size() * 4, cudaMemcpyHostToDevice));
  }
  CrossEntropyParams<bf16> p;
  p.logits = static_cast<const bf16*>(logits.data());
  p.dlogits = static_cast<bf16*>(logits.data());  // aliased, as GPT::forward_backward
  p.targets = static_cast<const int32_t*>(targets.data());
  p.losses = static_cast<float*>(losses.data());
  p.N = rows, p.V = V, p.Vp = Vp, p.dloss = 1.f / float(rows);
  const double gb = 2.0 * double(n) * sizeof(bf16) / 1e9;
  const double ms = median_ms([&] { launch_crossentropy_fwd_bwd<bf16>(p, nullptr); }, 10);
  std::printf("crossentropy fwd+bwd bf16 %lld x %d: %.3f ms, %.2f TB/s (read + write)\n",
              (long long)rows, Vp, ms, gb / ms);
  return 0;
}
