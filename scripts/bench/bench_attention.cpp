// Attention benchmark: our flash-style bf16 kernels, forward and forward+backward, causal.
// FLOPs: forward 4*B*H*T*T*D/2 (two matmuls, half the square is causal), backward 2.5x that.
// Shapes: D 64/128 with model width 2048 (H = 2048/D), T 1K/4K/16K, B*T = 32K tokens; with --gpt2
// also the GPT-2 124M training shape B=64 T=1024 H=12 D=64 (its own CSV row, "gpt2" in `shape`).
// fwd+bwd uses the default (fast) backward; "det" is fwd+bwd with AttentionParams::deterministic
// (--no-det skips it and prints 0); "bwd" is the fast backward alone; "delta" its first kernel
// alone (delta = rowsum(dO * O) and the fp32 dQ accumulator zeroed, launch_attention_bwd_delta).
// The kernels are what launch_attention_fwd/bwd<bf16> run by default: on sm_90a the Hopper wgmma
// forward and backward (one schedule per head dim, attention_wgmma.cuh), else mma.sync. --mma
// forces the mma.sync forward and backward (use_wgmma = false); --wgmma requires the wgmma kernels
// (refused where unsupported). The comparison is against the peer, PyTorch SDPA
// (scripts/bench/sdpa_peer.py, same shapes). Last, the default fwd+bwd once more
// (fwdbwd_again_ms: how far the card's speed drifted over the shape's runs). --shape=D:T runs
// only the sweep shape with that head dim and length (for profilers: scripts/ncu_attention.sh).
// Usage: bench_attention [csv_out] [--gpt2] [--no-det] [--mma | --wgmma] [--shape=D:T]
// (prints a table; the CSV is read by scripts/device_check.sh and scripts/wgmma_check.sh)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "bench_util.h"
#include "core/cuda_check.h"
#include "core/tensor.h"
#include "kernels/attention/attention.cuh"
#include "kernels/attention/attention_wgmma.cuh"

using namespace attnlab;
using bench::fill_random_bf16;
using bench::median_ms;

namespace {}  // namespace

int main(int argc, char** argv) {
  if (!cuda_available()) {
    std::printf("bench_attention: no CUDA device\n");
    return 0;
  }
  const char* csv_path = nullptr;
  bool gpt2 = false, det = true, wgmma = false, mma = false;
  int only_D = 0, only_T = 0;  // --shape: the one sweep shape to run
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--gpt2") == 0) {
      gpt2 = true;
    } else if (std::strcmp(argv[i], "--no-det") == 0) {
      det = false;
    } else if (std::strcmp(argv[i], "--mma") == 0) {
      mma = true;
    } else if (std::strcmp(argv[i], "--wgmma") == 0) {
      wgmma = true;
    } else if (std::strncmp(argv[i], "--shape=", 8) == 0) {
      if (std::sscanf(argv[i] + 8, "%d:%d", &only_D, &only_T) != 2 ||
          (only_D != 64 && only_D != 128) ||
          (only_T != 1024 && only_T != 4096 && only_T != 16384)) {
        std::fprintf(stderr,
                     "bench_attention: --shape=D:T needs D 64 or 128 and T 1024, 4096 or "
                     "16384 (got %s)\n",
                     argv[i] + 8);
        return 2;
      }
    } else if (argv[i][0] != '-') {
      csv_path = argv[i];
    } else {
      std::fprintf(stderr,
                   "bench_attention: unknown option %s (valid: --gpt2, --no-det, --mma, --wgmma, "
                   "--shape=D:T)\n",
                   argv[i]);
      return 2;
    }
  }
  if (mma && wgmma) {
    std::fprintf(stderr, "bench_attention: --mma and --wgmma exclude each other\n");
    return 2;
  }
  FILE* csv = csv_path ? std::fopen(csv_path, "w") : nullptr;
  if (csv) {
    std::fprintf(csv,
                 "D,T,B,H,fwd_ms,fwd_tflops,fwdbwd_ms,fwdbwd_tflops,det_fwdbwd_ms,shape,bwd_ms,"
                 "bwd_tflops,delta_ms,fwdbwd_again_ms\n");
  }
  {
    AttentionParams<bf16> probe;
    probe.D = 64;
    const bool on_wgmma = !mma && (wgmma || attention_fwd_wgmma_supported(probe));
    std::printf("kernels: %s\n", on_wgmma ? "wgmma forward and backward (sm_90a)" : "mma.sync");
  }
  std::printf("%4s %6s %3s %3s %9s %9s %11s %11s %9s %9s %11s %8s %11s\n", "D", "T", "B", "H",
              "fwd ms", "fwd TF/s", "f+b ms", "f+b TF/s", "bwd ms", "bwd TF/s", "det f+b ms",
              "delta ms", "f+b again");
  struct Shape {
    int D, T, B, H;
  };
  std::vector<Shape> shapes;
  for (int D : {64, 128}) {
    for (int T : {1024, 4096, 16384}) {
      if (only_D == 0 || (D == only_D && T == only_T))
        shapes.push_back({D, T, 32768 / T, 2048 / D});
    }
  }
  if (gpt2) shapes.push_back({64, 1024, 64, 12});
  for (size_t si = 0; si < shapes.size(); ++si) {
    const int D = shapes[si].D, T = shapes[si].T, B = shapes[si].B, H = shapes[si].H;
    const int64_t tokens = int64_t(B) * T, width = int64_t(H) * D;
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
    p.B = B, p.seq_len = T, p.n_head = H, p.n_kv_head = H, p.D = D;
    p.scale = 1.f / std::sqrt(float(D));
    p.use_wgmma = !mma;
    if (wgmma && !attention_fwd_wgmma_supported(p)) {
      std::fprintf(stderr,
                   "bench_attention: --wgmma: the wgmma forward is not supported here (needs an "
                   "sm_90a build and a compute capability 9.0 device)\n");
      return 2;
    }
    const double fwd_flops = 4.0 * B * H * double(T) * T * D / 2;
    const int reps = T >= 16384 ? 5 : 10;
    auto forward = [&] { launch_attention_fwd<bf16>(p, nullptr); };
    const double f_ms = median_ms(forward, reps);
    const double fb_ms = median_ms(
        [&] {
          forward();
          launch_attention_bwd<bf16>(p, nullptr);
        },
        reps);
    const double b_ms = median_ms([&] { launch_attention_bwd<bf16>(p, nullptr); }, reps);
    double delta_ms = 0.0;  // the backward's first kernel (delta, dQ accumulator zeroed) alone
    {
      Buffer delta(Device::cuda, size_t(B) * H * T * 4), dq_accum(Device::cuda, n_o * 4);
      delta_ms = median_ms(
          [&] {
            launch_attention_bwd_delta(p, static_cast<float*>(delta.data()),
                                       static_cast<float*>(dq_accum.data()), nullptr);
          },
          reps);
    }
    p.deterministic = true;
    const double det_ms = !det ? 0.0
                               : median_ms(
                                     [&] {
                                       launch_attention_fwd<bf16>(p, nullptr);
                                       launch_attention_bwd<bf16>(p, nullptr);
                                     },
                                     reps);
    // The default fwd+bwd again, after everything else of the shape: how much the card's speed
    // drifted during the shape's runs (clocks under sustained load), i.e. how far the columns
    // measured in between can be compared with fb_ms.
    p.deterministic = false;
    const double fb_again_ms = median_ms(
        [&] {
          forward();
          launch_attention_bwd<bf16>(p, nullptr);
        },
        reps);
    CUDA_CHECK(cudaDeviceSynchronize());
    const double f_tf = fwd_flops / (f_ms * 1e-3) / 1e12;
    const double fb_tf = 3.5 * fwd_flops / (fb_ms * 1e-3) / 1e12;
    const double b_tf = 2.5 * fwd_flops / (b_ms * 1e-3) / 1e12;
    const bool is_gpt2 = si + 1 == shapes.size() && gpt2;
    std::printf("%4d %6d %3d %3d %9.3f %9.1f %11.3f %11.1f %9.3f %9.1f %11.3f %8.3f %11.3f%s\n", D,
                T, B, H, f_ms, f_tf, fb_ms, fb_tf, b_ms, b_tf, det_ms, delta_ms, fb_again_ms,
                is_gpt2 ? "  (gpt2)" : "");
    if (csv) {
      std::fprintf(csv, "%d,%d,%d,%d,%.4f,%.2f,%.4f,%.2f,%.4f,%s,%.4f,%.2f,%.4f,%.4f\n", D, T, B, H,
                   f_ms, f_tf, fb_ms, fb_tf, det_ms, is_gpt2 ? "gpt2" : "sweep", b_ms, b_tf,
                   delta_ms, fb_again_ms);
    }
  }
  if (csv) std::fclose(csv);
  return 0;
}
