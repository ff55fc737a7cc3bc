// Attention benchmark: our flash-style bf16 kernels, forward and forward+backward, causal.
// FLOPs: forward 4*B*H*T*T*D/2 (two matmuls, half the square is causal), backward 2.5x that.
// Shapes: D 64/128 with model width 2048 (H = 2048/D), T 1K/4K/16K, B*T = 32K tokens.
// Usage: bench_attention [csv_out]   (prints a table; the CSV is read by scripts/device_check.sh)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "core/cuda_check.h"
#include "core/tensor.h"
#include "kernels/attention/attention.cuh"

using namespace attnlab;

namespace {

void fill_random_bf16(const Buffer& buf, size_t n, uint64_t seed) {
  std::vector<bf16> h(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    h[i] = bf16(float(int64_t(s >> 40) - (int64_t(1) << 23)) / float(1 << 23));  // [-1, 1)
  }
  CUDA_CHECK(cudaMemcpy(buf.data(), h.data(), n * sizeof(bf16), cudaMemcpyHostToDevice));
}

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

}  // namespace

int main(int argc, char** argv) {
  if (!cuda_available()) {
    std::printf("bench_attention: no CUDA device\n");
    return 0;
  }
  FILE* csv = argc > 1 ? std::fopen(argv[1], "w") : nullptr;
  if (csv) std::fprintf(csv, "D,T,B,H,fwd_ms,fwd_tflops,fwdbwd_ms,fwdbwd_tflops\n");
  std::printf("%4s %6s %3s %3s %10s %10s %12s %12s\n", "D", "T", "B", "H", "fwd ms", "fwd TF/s",
              "fwd+bwd ms", "fwd+bwd TF/s");
  const int64_t tokens = 32768, width = 2048;
  for (int D : {64, 128}) {
    for (int T : {1024, 4096, 16384}) {
      const int B = int(tokens / T), H = int(width / D);
      const size_t n_qkv = size_t(tokens) * 3 * width, n_o = size_t(tokens) * width;
      Buffer qkv(Device::cuda, n_qkv * 2), dqkv(Device::cuda, n_qkv * 2), o(Device::cuda, n_o * 2),
          dout(Device::cuda, n_o * 2), lse(Device::cuda, size_t(B) * H * T * 4);
      fill_random_bf16(qkv, n_qkv, 1);
      fill_random_bf16(dout, n_o, 2);
      AttentionParams<bf16> p;
      auto* q = static_cast<bf16*>(qkv.data());
      auto* dq = static_cast<bf16*>(dqkv.data());
      p.q = q, p.k = q + width, p.v = q + 2 * width;
      p.dq = dq, p.dk = dq + width, p.dv = dq + 2 * width;
      p.o = static_cast<bf16*>(o.data()), p.dout = static_cast<bf16*>(dout.data());
      p.lse = static_cast<float*>(lse.data());
      p.qkv_row_stride = 3 * width, p.qkv_batch_stride = 3 * width * T;
      p.o_row_stride = width, p.o_batch_stride = width * T;
      p.B = B, p.T_ = T, p.n_head = H, p.n_kv_head = H, p.D = D;
      p.scale = 1.f / std::sqrt(float(D));
      const double fwd_flops = 4.0 * B * H * double(T) * T * D / 2;
      const int reps = T >= 16384 ? 5 : 10;
      const double f_ms = median_ms([&] { launch_attention_fwd<bf16>(p, nullptr); }, reps);
      const double fb_ms = median_ms(
          [&] {
            launch_attention_fwd<bf16>(p, nullptr);
            launch_attention_bwd<bf16>(p, nullptr);
          },
          reps);
      CUDA_CHECK(cudaDeviceSynchronize());
      const double f_tf = fwd_flops / (f_ms * 1e-3) / 1e12;
      const double fb_tf = 3.5 * fwd_flops / (fb_ms * 1e-3) / 1e12;
      std::printf("%4d %6d %3d %3d %10.3f %10.1f %12.3f %12.1f\n", D, T, B, H, f_ms, f_tf, fb_ms,
                  fb_tf);
      if (csv) {
        std::fprintf(csv, "%d,%d,%d,%d,%.4f,%.2f,%.4f,%.2f\n", D, T, B, H, f_ms, f_tf, fb_ms,
                     fb_tf);
      }
    }
  }
  if (csv) std::fclose(csv);
  return 0;
}
