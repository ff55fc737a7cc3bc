// SFA benchmark (docs/sfa.md): FlashSFA (ops::sfa_flash_fwd/bwd) against our dense attention (the
// op a dense model runs: ops::attention_fwd/bwd, wgmma on sm_90a) and the masked-dense reference
// path (ops::sfa_attention_fwd/bwd: selection into a masked copy of qkv, then the dense kernels),
// in the same run. One GPU, bf16, batch 1, causal, n_kv_head = n_head: D = 64 (12 heads) with
// k 4, 8, 16 and D = 128 (8 heads) with k 8, 16, 32, at T 4K, 16K, 64K, 128K.
// FLOPs (causal: half the pairs): dense forward 2 products of n^2 d, backward 5; FlashSFA counts
// its score-type products (forward S; backward S, dQ, dK) as n^2 k^2 / d (the feature overlaps)
// and the others (P V; dP, dV) dense, so its TF/s is useful work per second. KV cache bytes per
// token and layer: dense 2 d values per kv head, SFA k (one-byte index + bf16 value) + d values
// (SfaKVCache::bytes_per_token), and SFA as a percentage of dense.
// Ratios: dense time / FlashSFA time and masked-dense time / FlashSFA time (> 1: FlashSFA faster).
// Usage: bench_sfa [--csv=PATH] [--T=4096,16384,...] [--D=64|128] [--fwd-only]
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/context.h"
#include "core/cuda_check.h"
#include "core/tensor.h"
#include "nn/attention_sfa.h"
#include "ops/ops.h"
#include "ops/sfa_ops.h"

using namespace attnlab;
using bench::fill_random_bf16;
using bench::median_ms;
using bench::parse_list;

namespace {

Tensor view(const Buffer& b, DType dt, Shape s) { return Tensor(b.data(), dt, Device::cuda, s); }

}  // namespace

int main(int argc, char** argv) {
  const char* csv_path = nullptr;
  std::vector<int> Ts = {4096, 16384, 65536, 131072};
  int only_D = 0;
  bool fwd_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--csv=", 6) == 0) {
      csv_path = argv[i] + 6;
    } else if (std::strncmp(argv[i], "--T=", 4) == 0) {
      Ts = parse_list("bench_sfa", "--T", argv[i] + 4);
    } else if (std::strcmp(argv[i], "--D=64") == 0 || std::strcmp(argv[i], "--D=128") == 0) {
      only_D = std::atoi(argv[i] + 4);
    } else if (std::strcmp(argv[i], "--fwd-only") == 0) {
      fwd_only = true;
    } else {
      std::fprintf(stderr,
                   "bench_sfa: unknown option %s (valid: --csv=PATH, --T=N[,N...], --D=64|128, "
                   "--fwd-only)\n",
                   argv[i]);
      return 2;
    }
  }
  if (!cuda_available()) {
    std::printf("bench_sfa: no CUDA device\n");
    return 0;
  }
  auto ctx = ExecContext::make_cuda(0);
  auto cpu = ExecContext::make_cpu();  // the KV-cache accounting (a one-token cache)
  FILE* csv = csv_path ? std::fopen(csv_path, "w") : nullptr;
  if (csv_path && !csv) {
    std::fprintf(stderr, "bench_sfa: cannot write %s\n", csv_path);
    return 2;
  }
  if (csv)
    std::fprintf(
        csv,
        "D,H,k,T,dense_fwd_ms,masked_fwd_ms,flash_fwd_ms,dense_fwdbwd_ms,"
        "masked_fwdbwd_ms,flash_fwdbwd_ms,dense_fwd_tflops,flash_fwd_tflops_sparse,"
        "dense_fwdbwd_tflops,flash_fwdbwd_tflops_sparse,kv_bytes_dense,kv_bytes_sfa,kv_sfa_pct\n");
  std::printf(
      "%4s %3s %3s %7s | %9s %9s %9s | %9s %9s %9s | %6s %6s %6s %6s | %7s %7s | %5s %5s %4s\n",
      "D", "H", "k", "T", "dense f", "masked f", "flash f", "dense fb", "masked fb", "flash fb",
      "d/fl f", "m/fl f", "d/fl fb", "m/fl fb", "dn TF/s", "fl TF/s", "KV dn", "KV sf", "KV%");
  struct Config {
    int D, H;
    std::vector<int> ks;
  };
  for (const Config& cfg : {Config{64, 12, {4, 8, 16}}, Config{128, 8, {8, 16, 32}}}) {
    if (only_D != 0 && cfg.D != only_D) continue;
    for (int T : Ts) {
      const int D = cfg.D, H = cfg.H, B = 1;
      const QKVLayout l{H, H, D};
      const int64_t W = l.width();
      const Shape s{B, T, W}, os{B, T, l.q_width()}, ls{B, H, T};
      Buffer qkv(Device::cuda, size_t(T) * W * 2), dqkv(Device::cuda, size_t(T) * W * 2),
          sparse(Device::cuda, size_t(T) * W * 2), o(Device::cuda, size_t(T) * l.q_width() * 2),
          dout(Device::cuda, size_t(T) * l.q_width() * 2), lse(Device::cuda, size_t(H) * T * 4);
      fill_random_bf16(qkv, size_t(T) * W, 1);
      fill_random_bf16(dout, size_t(T) * l.q_width(), 2);
      const Tensor tq = view(qkv, DType::bf16, s), td = view(dqkv, DType::bf16, s),
                   ts = view(sparse, DType::bf16, s), to = view(o, DType::bf16, os),
                   tdo = view(dout, DType::bf16, os), tl = view(lse, DType::f32, ls);
      const int reps = T >= 65536 ? 3 : 10;
      // Dense: once per (D, T).
      const double dense_f = median_ms([&] { ops::attention_fwd(*ctx, to, tl, tq, l); }, reps);
      const double dense_fb = fwd_only ? 0.0
                                       : median_ms(
                                             [&] {
                                               ops::attention_fwd(*ctx, to, tl, tq, l);
                                               ops::attention_bwd(*ctx, td, tdo, tq, to, tl, l);
                                             },
                                             reps);
      for (int k : cfg.ks) {
        const Shape qs{B, T, H, k};
        Buffer qi(Device::cuda, size_t(T) * H * k * 4), qv(Device::cuda, size_t(T) * H * k * 2),
            ki(Device::cuda, size_t(T) * H * k * 4), kv(Device::cuda, size_t(T) * H * k * 2);
        const Tensor tqi = view(qi, DType::i32, qs), tqv = view(qv, DType::bf16, qs),
                     tki = view(ki, DType::i32, qs), tkv = view(kv, DType::bf16, qs);
        const double md_f =
            median_ms([&] { ops::sfa_attention_fwd(*ctx, to, tl, ts, tq, l, k); }, reps);
        const double fl_f =
            median_ms([&] { ops::sfa_flash_fwd(*ctx, to, tl, tqi, tqv, tki, tkv, tq, l); }, reps);
        double md_fb = 0.0, fl_fb = 0.0;
        if (!fwd_only) {
          md_fb = median_ms(
              [&] {
                ops::sfa_attention_fwd(*ctx, to, tl, ts, tq, l, k);
                ops::sfa_attention_bwd(*ctx, td, tdo, ts, to, tl, tq, l, k);
              },
              reps);
          fl_fb = median_ms(
              [&] {
                ops::sfa_flash_fwd(*ctx, to, tl, tqi, tqv, tki, tkv, tq, l);
                ops::sfa_flash_bwd(*ctx, td, tdo, to, tl, tqi, tqv, tki, tkv, tq, l);
              },
              reps);
        }
        const double pairs = double(H) * double(T) * double(T) / 2.0;  // causal
        const double dense_fwd_flops = 2.0 * pairs * 2.0 * D;
        const double dense_bwd_flops = 2.0 * pairs * 5.0 * D;
        const double qk = double(k) * k / D;  // multiply-adds per pair of a sparse score product
        const double sfa_fwd_flops = 2.0 * pairs * (qk + D);
        const double sfa_bwd_flops = 2.0 * pairs * (3.0 * qk + 2.0 * D);
        auto tf = [](double flops, double ms) { return ms > 0 ? flops / (ms * 1e9) : 0.0; };
        const int kv_dense = 2 * H * D * 2,
                  kv_sfa = int(SfaKVCache(*cpu, 1, 1, l, DType::bf16, k).bytes_per_token());
        const double kv_pct = 100.0 * kv_sfa / kv_dense;
        auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
        std::printf(
            "%4d %3d %3d %7d | %9.3f %9.3f %9.3f | %9.3f %9.3f %9.3f | %6.2f %6.2f %6.2f %6.2f | "
            "%7.1f %7.1f | %5d %5d %4.0f\n",
            D, H, k, T, dense_f, md_f, fl_f, dense_fb, md_fb, fl_fb, ratio(dense_f, fl_f),
            ratio(md_f, fl_f), ratio(dense_fb, fl_fb), ratio(md_fb, fl_fb),
            tf(dense_fwd_flops, dense_f), tf(sfa_fwd_flops, fl_f), kv_dense / H, kv_sfa / H,
            kv_pct);
        if (csv)
          std::fprintf(
              csv, "%d,%d,%d,%d,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.2f,%.2f,%.2f,%.2f,%d,%d,%.1f\n", D,
              H, k, T, dense_f, md_f, fl_f, dense_fb, md_fb, fl_fb, tf(dense_fwd_flops, dense_f),
              tf(sfa_fwd_flops, fl_f), tf(dense_fwd_flops + dense_bwd_flops, dense_fb),
              tf(sfa_fwd_flops + sfa_bwd_flops, fl_fb), kv_dense, kv_sfa, kv_pct);
      }
    }
  }
  std::printf(
      "(ms: median; d/fl, m/fl: dense or masked-dense time over FlashSFA time; TF/s: "
      "forward, FlashSFA counting overlaps as k^2/d; KV: bytes per token per kv head, KV%: SFA / "
      "dense)\n");
  if (csv) std::fclose(csv);
  return 0;
}
