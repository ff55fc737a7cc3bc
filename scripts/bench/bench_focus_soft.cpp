// Soft-gated Focus attention benchmark: the additive gate (local_window 128, K = 8 groups) forward
// and forward+backward against our dense causal attention in the same run, through the ops the
// model calls (ops::focus_attention_fwd / _bwd and ops::attention_fwd / _bwd). bf16, batch 1, 12
// heads x 64 and 8 heads x 128, T = 1K, 4K, 16K, 64K, 256K, 1M (from 256K on only dense and the
// wgmma kernel, with and without dg, one warm-up and 3 runs, 1 at 1M: the tiled kernel and dense's
// mma.sync kernels would take minutes there). The Focus backward computes dg (the
// assignment gradient) as in training. Two Focus kernels, chosen by ops::FocusSoftKernel: "tiled"
// (mma.sync, focus_tiled.cuh, every gate) and, for the additive gate where the build and device
// have it (sm_90a), "wgmma" (focus_wgmma.cuh, automatic's choice there; "nan" elsewhere). Ratios
// are Focus / dense (the target: fwd+bwd <= 1.15). Dense runs the Hopper wgmma kernels on sm_90a,
// so "mma f+b" also times dense fwd+bwd forced to its mma.sync kernels (AttentionParams::use_wgmma
// = false): tiled / mma is the tiled kernel's gate cost. "no dg" times the wgmma forward+backward
// without dg (the backward's loop without the dg products): against "wgmma f+b" it is what the
// assignment gradient costs, against dense what the gate alone costs.
// --gate=multiplicative|hard measures another gate; --shape=D:T one shape only. With --gate=hard
// (route_training: hard) every forward is the hard-routed kernel (focus_hard_ops.h), so "tiled
// f+b" is it plus the tiled backward and "wgmma f+b" it plus the wgmma kernel's hard-gate
// backward (the straight-through dg in its loop), what training with hard routing runs on sm_90a.
// --deterministic times every backward in its deterministic form (ExecContext::deterministic, as
// train.deterministic: dense's atomics-free mma.sync backward, Focus's wgmma one with ordered
// additions, focus_wgmma_det.h); run with and without it in one call to compare.
// Usage: bench_focus_soft [csv_out] [--gate=additive|multiplicative|hard] [--shape=D:T]
// [--deterministic] (D 64 or 128, T one of the lengths above; anything else is an error)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/context.h"
#include "core/cuda_check.h"
#include "core/tensor.h"
#include "kernels/attention/attention.cuh"
#include "ops/focus_ops.h"
#include "ops/ops.h"

using namespace attnlab;
using bench::fill_random_bf16;
using bench::median_ms;

namespace {

// Assignment rows: positive, summing to 1, one dominant group per token; top-2 group ids.
void upload_assignment(const Buffer& g, const Buffer& groups, int64_t tokens, int K) {
  std::vector<float> h(size_t(tokens) * K);
  std::vector<int32_t> ids(size_t(tokens) * 2);
  uint64_t s = 12345;
  for (int64_t t = 0; t < tokens; ++t) {
    float sum = 0.f;
    for (int k = 0; k < K; ++k) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      h[t * K + k] = 0.05f + float(s >> 40) / float(1 << 24);
      sum += h[t * K + k];
    }
    const int top = int(t * 7 % K);
    h[t * K + top] += 2.f, sum += 2.f;
    for (int k = 0; k < K; ++k) h[t * K + k] /= sum;
    ids[t * 2] = top;
    ids[t * 2 + 1] = (top + 1) % K;
  }
  CUDA_CHECK(cudaMemcpy(g.data(), h.data(), h.size() * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(groups.data(), ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
}

// The sequence lengths timed (--shape picks one).
constexpr int kTs[] = {1024, 4096, 16384, 65536, 262144, 1048576};

}  // namespace

int main(int argc, char** argv) {
  const char* csv_path = nullptr;
  FocusGateParams gate;
  gate.kind = FocusGateKind::additive;
  gate.local_window = 128;
  int only_D = 0, only_T = 0;
  bool deterministic = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--deterministic") == 0) {
      deterministic = true;
    } else if (std::strncmp(argv[i], "--gate=", 7) == 0) {
      const std::string v = argv[i] + 7;
      if (v == "additive") {
        gate.kind = FocusGateKind::additive;
      } else if (v == "multiplicative") {
        gate.kind = FocusGateKind::multiplicative;
      } else if (v == "hard") {
        gate.kind = FocusGateKind::hard;
      } else {
        std::fprintf(stderr,
                     "bench_focus_soft: --gate must be additive, multiplicative or hard, got %s\n",
                     v.c_str());
        return 2;
      }
    } else if (std::strncmp(argv[i], "--shape=", 8) == 0) {
      const bool parsed = std::sscanf(argv[i] + 8, "%d:%d", &only_D, &only_T) == 2;
      if (!parsed || (only_D != 64 && only_D != 128) ||
          std::find(std::begin(kTs), std::end(kTs), only_T) == std::end(kTs)) {
        std::fprintf(stderr,
                     "bench_focus_soft: --shape=D:T needs D 64 or 128 and T one of 1024, 4096, "
                     "16384, 65536, 262144, 1048576 (got %s)\n",
                     argv[i] + 8);
        return 2;
      }
    } else if (argv[i][0] != '-') {
      csv_path = argv[i];
    } else {
      std::fprintf(stderr,
                   "bench_focus_soft: unknown option %s (valid: --gate=, --shape=D:T, "
                   "--deterministic)\n",
                   argv[i]);
      return 2;
    }
  }
  if (!cuda_available()) {
    std::printf("bench_focus_soft: no CUDA device\n");
    return 0;
  }
  FILE* csv = csv_path ? std::fopen(csv_path, "w") : nullptr;
  if (csv) {
    std::fprintf(csv,
                 "gate,D,T,H,K,window,dense_fwd_ms,focus_fwd_ms,fwd_ratio,dense_fwdbwd_ms,"
                 "focus_fwdbwd_ms,fwdbwd_ratio,dense_mma_fwdbwd_ms,fwdbwd_ratio_vs_mma,"
                 "wgmma_fwd_ms,wgmma_fwd_ratio,wgmma_fwdbwd_ms,wgmma_fwdbwd_ratio,"
                 "wgmma_fwdbwd_nodg_ms,wgmma_fwdbwd_nodg_ratio\n");
  }
  const char* gate_name = gate.kind == FocusGateKind::additive         ? "additive"
                          : gate.kind == FocusGateKind::multiplicative ? "multiplicative"
                                                                       : "hard";
  const int K = 8;
  std::printf(
      "focus gate %s, local_window %d, K %d, bf16, batch 1, %s backward (ratio = focus / "
      "dense)\n",
      gate_name, gate.local_window, K, deterministic ? "deterministic" : "fast");
  std::printf("%4s %6s %3s %10s %10s %6s %10s %6s %10s %10s %6s %10s %6s %10s %6s %10s %6s\n", "D",
              "T", "H", "dense fwd", "tiled fwd", "ratio", "wgmma fwd", "ratio", "dense f+b",
              "tiled f+b", "ratio", "wgmma f+b", "ratio", "mma f+b", "vs mma", "no dg", "ratio");
  auto ctx = ExecContext::make_cuda(0);
  ctx->deterministic = deterministic;
  for (int D : {64, 128}) {
    for (int T : kTs) {
      if (only_D != 0 && (D != only_D || T != only_T)) continue;
      const int H = D == 64 ? 12 : 8, B = 1;
      const QKVLayout l{H, H, D};
      const int64_t tokens = int64_t(B) * T, W = l.width(), Q = l.q_width();
      Buffer qkv(Device::cuda, size_t(tokens * W) * 2), dqkv(Device::cuda, size_t(tokens * W) * 2),
          o(Device::cuda, size_t(tokens * Q) * 2), dout(Device::cuda, size_t(tokens * Q) * 2),
          lse(Device::cuda, size_t(B) * H * T * 4), g(Device::cuda, size_t(tokens) * K * 4),
          dg(Device::cuda, size_t(tokens) * K * 4), groups(Device::cuda, size_t(tokens) * 2 * 4);
      fill_random_bf16(qkv, size_t(tokens * W), 1);
      fill_random_bf16(dout, size_t(tokens * Q), 2);
      upload_assignment(g, groups, tokens, K);
      const Tensor tq(qkv.data(), DType::bf16, Device::cuda, Shape{B, T, W});
      const Tensor tdq(dqkv.data(), DType::bf16, Device::cuda, Shape{B, T, W});
      const Tensor to(o.data(), DType::bf16, Device::cuda, Shape{B, T, Q});
      const Tensor tdo(dout.data(), DType::bf16, Device::cuda, Shape{B, T, Q});
      const Tensor tl(lse.data(), DType::f32, Device::cuda, Shape{B, H, T});
      const Tensor tg(g.data(), DType::f32, Device::cuda, Shape{B, T, K});
      const Tensor tdg(dg.data(), DType::f32, Device::cuda, Shape{B, T, K});
      const Tensor tgr(groups.data(), DType::i32, Device::cuda, Shape{B, T, 2});
      const bool long_T = T >= 262144;  // dense and wgmma only, few runs
      const int reps = T >= 1048576 ? 1 : long_T ? 3 : T >= 16384 ? 5 : 10, warm = long_T ? 1 : 3;
      auto dense_fwd = [&] { ops::attention_fwd(*ctx, to, tl, tq, l); };
      auto dense_bwd = [&] { ops::attention_bwd(*ctx, tdq, tdo, tq, to, tl, l); };
      using ops::FocusSoftKernel;
      auto focus_fwd = [&](FocusSoftKernel k) {
        ops::focus_attention_fwd(*ctx, to, tl, tq, l, tg, tgr, gate, k);
      };
      auto focus_bwd = [&](FocusSoftKernel k, bool with_dg = true) {
        ops::focus_attention_bwd(*ctx, tdq, with_dg ? tdg : Tensor(), tdo, tq, to, tl, l, tg, tgr,
                                 gate, k);
      };
      auto time = [&](auto&& f) { return median_ms(f, reps, nullptr, warm); };
      const double df = time(dense_fwd);
      const double dfb = time([&] { dense_fwd(), dense_bwd(); });
      const FocusSoftKernel tiled = FocusSoftKernel::tiled, wgmma = FocusSoftKernel::wgmma;
      const double ff = long_T ? NAN : time([&] { focus_fwd(tiled); });
      const double ffb = long_T ? NAN : time([&] { focus_fwd(tiled), focus_bwd(tiled); });
      const bool has_wgmma =
          gate.kind != FocusGateKind::multiplicative && ops::focus_soft_wgmma_available(D, K);
      const double wf = has_wgmma ? time([&] { focus_fwd(wgmma); }) : NAN;
      const double wfb = has_wgmma ? time([&] { focus_fwd(wgmma), focus_bwd(wgmma); }) : NAN;
      const double wfb_nodg =
          has_wgmma ? time([&] { focus_fwd(wgmma), focus_bwd(wgmma, false); }) : NAN;
      AttentionParams<bf16> ap;  // dense on its mma.sync kernels
      auto* q = static_cast<bf16*>(qkv.data());
      auto* dq = static_cast<bf16*>(dqkv.data());
      ap.q = q, ap.k = q + l.k_offset(), ap.v = q + l.v_offset();
      ap.dq = dq, ap.dk = dq + l.k_offset(), ap.dv = dq + l.v_offset();
      ap.o = static_cast<bf16*>(o.data()), ap.dout = static_cast<bf16*>(dout.data());
      ap.lse = static_cast<float*>(lse.data());
      ap.qkv_row_stride = W, ap.qkv_batch_stride = W * T;
      ap.o_row_stride = Q, ap.o_batch_stride = Q * T;
      ap.B = B, ap.seq_len = T, ap.n_head = H, ap.n_kv_head = H, ap.D = D;
      ap.scale = 1.f / std::sqrt(float(D));
      ap.use_wgmma = false;
      const double mfb = long_T ? NAN : time([&] {
        launch_attention_fwd<bf16>(ap, ctx->stream);
        launch_attention_bwd<bf16>(ap, ctx->stream);
      });
      CUDA_CHECK(cudaDeviceSynchronize());
      std::printf(
          "%4d %6d %3d %10.3f %10.3f %6.2f %10.3f %6.2f %10.3f %10.3f %6.2f %10.3f %6.2f "
          "%10.3f %6.2f %10.3f %6.2f\n",
          D, T, H, df, ff, ff / df, wf, wf / df, dfb, ffb, ffb / dfb, wfb, wfb / dfb, mfb,
          ffb / mfb, wfb_nodg, wfb_nodg / dfb);
      if (csv) {
        std::fprintf(csv,
                     "%s,%d,%d,%d,%d,%d,%.4f,%.4f,%.3f,%.4f,%.4f,%.3f,%.4f,%.3f,%.4f,%.3f,%.4f,"
                     "%.3f,%.4f,%.3f\n",
                     gate_name, D, T, H, K, gate.local_window, df, ff, ff / df, dfb, ffb, ffb / dfb,
                     mfb, ffb / mfb, wf, wf / df, wfb, wfb / dfb, wfb_nodg, wfb_nodg / dfb);
      }
    }
  }
  if (csv) std::fclose(csv);
  return 0;
}
