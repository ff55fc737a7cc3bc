// Hard-routed Focus forward (ops::focus_attention_fwd, gate hard -> kernels/focus/focus_hard*.cu)
// against our dense causal forward (ops::attention_fwd, the op the model uses) in the same run.
// bf16, batch 1, local window 128; shapes 12 heads x 64 and 8 heads x 128.
// Groups: scores [T, K] through the causal Sinkhorn op (ops::focus_sinkhorn_fwd, 10 iterations)
// and ops::focus_route_topk, as the model routes; "balanced": uniform random scores (groups about
// equal, neighbours unrelated); "realistic": scores from a smooth mean-reverting random walk, so
// nearby tokens share groups.
// Columns: dense_ms, hard_ms (index lists + attention + merge, as focus_attention_fwd runs it: the
// wgmma kernel's split schedule where available, else the mma kernel with 64 queries per block),
// speed-up dense/hard (top_k 1: the group pass on the group-sorted copy of qkv); mma_ms the mma
// kernel (64 queries per block) forced, and its speed-up (0 with --no-mma); list_ms the wgmma
// kernel with its group pass on rows gathered per tile (FocusHardKernel::wgmma; 0 where the
// wgmma kernel is unavailable), and its speed-up; sorted_ms the group pass on the group-sorted
// copy of qkv forced (FocusHardKernel::wgmma_sorted; top_k 1 only, else 0), and its speed-up;
// index_ms
// (the counting sort alone; idx fused / idx split: its fused kernel and its three kernels forced,
// FocusHardIndexPath); route_ms (Sinkhorn + top-k); route% = (route + index) / (route +
// hard), the routing overhead's share of the layer's attention; top = share of the tokens in the
// largest group (slot 0); masked_ms the masked wgmma kernel forced (FocusHardKernel::wgmma_masked:
// every causal tile as dense, the group test per distant pair; K <= 8, T <= 128K, else 0).
// Usage: bench_focus_hard [--T=1024,4096,...] [--K=4,8] [--top_k=1,2] [--D=64,128] [--H=n]
//                         [--groups=balanced,realistic] [--reps=N] [--queued=N] [--order=...]
//                         [--blocks=...] [--index=...] [--no-mma] [--csv=path]
// Defaults: T 1K 4K 16K 64K 256K 1M, K 4 8, top_k 1 2, D 64 128, H 12 at D 64 and 8 at D 128
// (--H sets every D's), both group kinds, reps 5 (2 at T >= 256K), --order=automatic |
// group_first | band_first | fused | fused_ws (FocusHardOrder) for the list and sorted columns
// (band_first, fused, fused_ws: top_k 1 rows only; fused and fused_ws: the list column, the sorted
// one then band_first; fused_ws at head dim 64, the automatic order at 128; the hard
// column is always the automatic choice), --blocks=automatic | longest_first |
// group_major (FocusHardBlockOrder) for the list and sorted columns and --index=automatic | fused
// | split (FocusHardIndexPath) for the list column (the others take the defaults), queued 1:
// each timed sample is one call between two events, its host work before the first launch included;
// --queued=N times N calls back to back per sample (the host runs ahead of the device, as in a
// model's forward over its layers), the same for every column.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/context.h"
#include "core/cuda_check.h"
#include "core/tensor.h"
#include "ops/focus_hard_ops.h"
#include "ops/focus_ops.h"
#include "ops/ops.h"

using namespace attnlab;
using bench::fill_random_bf16;
using bench::parse_list;

namespace {

// The index of `value` among `names` (an enum's values in declaration order), or -1 after an
// error naming the flag and the valid names.
int choice(const char* prog, const char* flag, const std::string& value,
           std::initializer_list<const char*> names) {
  int i = 0;
  for (const char* n : names) {
    if (value == n) return i;
    ++i;
  }
  std::string valid;
  for (const char* n : names) valid += (valid.empty() ? "" : ", ") + std::string(n);
  std::fprintf(stderr, "%s: %s expects one of %s, got '%s'\n", prog, flag, valid.c_str(),
               value.c_str());
  return -1;
}

// --queued=N: calls per timed sample (bench::median_ms); 1 by default.
int g_queued = 1;
// --order=: the order of the wgmma kernel's passes in the hard, list and sorted columns.
ops::FocusHardOrder g_order = ops::FocusHardOrder::automatic;
// --blocks=: the order of the group passes' blocks in the list and sorted columns.
ops::FocusHardBlockOrder g_blocks = ops::FocusHardBlockOrder::automatic;
// --index=: which kernels build the index in the list column.
FocusHardIndexPath g_index = FocusHardIndexPath::automatic;

// Median of reps timed samples on the context's stream after `warm` untimed calls, ms per call.
template <typename F>
double time_ms(const ExecContext& ctx, F&& f, int reps, int warm) {
  return bench::median_ms(f, reps, reinterpret_cast<cudaStream_t>(ctx.stream), warm, g_queued);
}

// Scores [T, K]: uniform in [-10, 10] (balanced) or 10 x a mean-reverting random walk per group
// (realistic: stationary std 1, correlation length ~100 tokens).
std::vector<float> make_scores(int T, int K, bool realistic, uint64_t seed) {
  std::vector<float> s(size_t(T) * K);
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> u(-10.f, 10.f);
  std::normal_distribution<float> n(0.f, 1.f);
  std::vector<float> x(K, 0.f);
  for (int t = 0; t < T; ++t)
    for (int k = 0; k < K; ++k) {
      x[k] = 0.99f * x[k] + 0.141f * n(gen);
      s[size_t(t) * K + k] = realistic ? 10.f * x[k] : u(gen);
    }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const char* prog = "bench_focus_hard";
  std::vector<int> Ts = {1024, 4096, 16384, 65536, 262144, 1048576}, Ks = {4, 8}, tks = {1, 2},
                   Ds = {64, 128};
  std::vector<bool> kinds = {false, true};  // realistic?
  int reps_opt = 0, heads_opt = 0;
  bool run_mma = true;
  const char* csv_path = nullptr;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (std::strncmp(a, "--T=", 4) == 0) {
      Ts = parse_list(prog, "--T", a + 4);
    } else if (std::strncmp(a, "--K=", 4) == 0) {
      Ks = parse_list(prog, "--K", a + 4);
    } else if (std::strncmp(a, "--top_k=", 8) == 0) {
      tks = parse_list(prog, "--top_k", a + 8);
    } else if (std::strncmp(a, "--D=", 4) == 0) {
      Ds = parse_list(prog, "--D", a + 4);
      for (int d : Ds)
        if (d != 64 && d != 128) {
          std::fprintf(stderr, "%s: --D expects 64 and/or 128, got %d\n", prog, d);
          return 2;
        }
    } else if (std::strncmp(a, "--H=", 4) == 0) {
      heads_opt = parse_list(prog, "--H", a + 4)[0];
    } else if (std::strncmp(a, "--reps=", 7) == 0) {
      reps_opt = parse_list(prog, "--reps", a + 7)[0];
    } else if (std::strncmp(a, "--groups=", 9) == 0) {
      kinds.clear();
      const std::string v(a + 9);
      if (v == "balanced" || v == "balanced,realistic" || v == "realistic,balanced")
        kinds.push_back(false);
      if (v == "realistic" || v == "balanced,realistic" || v == "realistic,balanced")
        kinds.push_back(true);
      if (kinds.empty()) {
        std::fprintf(stderr, "%s: --groups expects balanced and/or realistic, got '%s'\n", prog,
                     v.c_str());
        return 2;
      }
    } else if (std::strncmp(a, "--order=", 8) == 0) {
      const int i = choice(prog, "--order", a + 8,
                           {"automatic", "group_first", "band_first", "fused", "fused_ws"});
      if (i < 0) return 2;
      g_order = static_cast<ops::FocusHardOrder>(i);
    } else if (std::strncmp(a, "--blocks=", 9) == 0) {
      const int i = choice(prog, "--blocks", a + 9, {"automatic", "longest_first", "group_major"});
      if (i < 0) return 2;
      g_blocks = static_cast<ops::FocusHardBlockOrder>(i);
    } else if (std::strncmp(a, "--index=", 8) == 0) {
      const int i = choice(prog, "--index", a + 8, {"automatic", "fused", "split"});
      if (i < 0) return 2;
      g_index = static_cast<FocusHardIndexPath>(i);
    } else if (std::strncmp(a, "--queued=", 9) == 0) {
      g_queued = parse_list(prog, "--queued", a + 9)[0];
    } else if (std::strcmp(a, "--no-mma") == 0) {
      run_mma = false;
    } else if (std::strncmp(a, "--csv=", 6) == 0) {
      csv_path = a + 6;
    } else {
      std::fprintf(stderr,
                   "%s: unknown option %s (valid: --T=, --K=, --top_k=, --D=, --H=, --groups=, "
                   "--reps=, --queued=, --order=, --blocks=, --index=, --no-mma, --csv=)\n",
                   prog, a);
      return 2;
    }
  }
  if (!cuda_available()) {
    std::printf("%s: no CUDA device\n", prog);
    return 0;
  }
  auto ctx = ExecContext::make_cuda(0);
  // The op's workspace is stream-ordered (cudaMallocAsync); keep freed pool memory mapped between
  // calls, as a long-running process would, so the timings do not include re-mapping it.
  {
    cudaMemPool_t pool;
    CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
    uint64_t keep = UINT64_MAX;
    CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  }
  FILE* csv = csv_path ? std::fopen(csv_path, "w") : nullptr;
  if (csv_path && !csv) {
    std::fprintf(stderr, "%s: cannot write %s\n", prog, csv_path);
    return 2;
  }
  if (csv)
    std::fprintf(
        csv,
        "D,H,T,K,top_k,groups,dense_ms,hard_ms,speedup,mma_ms,speedup_mma,list_ms,"
        "speedup_list,sorted_ms,speedup_sorted,index_ms,route_ms,route_share,top_group_share,"
        "index_fused_ms,index_split_ms,masked_ms,speedup_masked\n");
  std::printf(
      "%4s %3s %8s %2s %5s %9s | %10s %10s %7s %10s %7s %10s %7s %10s %7s | %9s %9s %6s %5s | %9s "
      "%9s | %10s %7s\n",
      "D", "H", "T", "K", "top_k", "groups", "dense ms", "hard ms", "x dense", "mma ms", "x dense",
      "list ms", "x dense", "sorted ms", "x dense", "index ms", "route ms", "route%", "top",
      "idx fused", "idx split", "masked ms", "x dense");
  const int w = 128, B = 1, N = 10;
  for (int D : Ds) {
    const int H = heads_opt > 0 ? heads_opt : D == 64 ? 12 : 8;
    const QKVLayout l{H, H, D};
    for (int T : Ts) {
      const int reps = reps_opt > 0 ? reps_opt : (T >= 262144 ? 2 : 5);
      const int warm = T >= 262144 ? 1 : 3;
      const size_t n_qkv = size_t(T) * l.width(), n_o = size_t(T) * l.q_width();
      Buffer qkv(Device::cuda, n_qkv * 2), out(Device::cuda, n_o * 2),
          lse(Device::cuda, size_t(H) * T * 4);
      fill_random_bf16(qkv, n_qkv, uint64_t(T) + D);
      const Tensor tq(qkv.data(), DType::bf16, Device::cuda, Shape{B, T, l.width()});
      const Tensor to(out.data(), DType::bf16, Device::cuda, Shape{B, T, l.q_width()});
      const Tensor tl(lse.data(), DType::f32, Device::cuda, Shape{B, H, T});
      const double dense_ms = time_ms(
          *ctx, [&] { ops::attention_fwd(*ctx, to, tl, tq, l); }, reps, warm);
      for (int K : Ks)
        for (bool realistic : kinds) {
          const Shape gs{B, T, K};
          std::vector<float> sc = make_scores(T, K, realistic, uint64_t(T) * 31 + K);
          Buffer scores(Device::cuda, sc.size() * 4), g(Device::cuda, sc.size() * 4),
              iters(Device::cuda, sc.size() * 4 * (N + 1));
          CUDA_CHECK(cudaMemcpy(scores.data(), sc.data(), sc.size() * 4, cudaMemcpyHostToDevice));
          const Tensor ts(scores.data(), DType::f32, Device::cuda, gs);
          const Tensor tg(g.data(), DType::f32, Device::cuda, gs);
          const Tensor ti(iters.data(), DType::f32, Device::cuda, Shape{N + 1, B, T, K});
          for (int tk : tks) {
            if (tk > K) continue;
            Buffer groups(Device::cuda, size_t(T) * tk * 4);
            const Tensor tgr(groups.data(), DType::i32, Device::cuda, Shape{B, T, tk});
            auto route = [&] {
              ops::focus_sinkhorn_fwd(*ctx, tg, ti, ts, true);
              ops::focus_route_topk(*ctx, tgr, tg);
            };
            const double route_ms = time_ms(*ctx, route, reps, 1);
            FocusGateParams gate;
            gate.kind = FocusGateKind::hard;
            gate.local_window = w;
            const double hard_ms = time_ms(
                *ctx, [&] { ops::focus_attention_fwd(*ctx, to, tl, tq, l, tg, tgr, gate); }, reps,
                warm);
            // The mma kernel forced (the fallback; = hard_ms where wgmma is unavailable).
            auto hard_mma = [&] {
              ops::focus_hard_attention_fwd(*ctx, to, tl, tq, l, tgr, K, w, 64,
                                            ops::FocusHardKernel::mma);
            };
            const double mma_ms = run_mma ? time_ms(*ctx, hard_mma, reps, warm) : 0.0;
            // The wgmma kernel with the group pass on rows gathered per tile; --order applies to it
            // and to the sorted pass (band_first, fused and fused_ws: top_k 1 only; the fused
            // orders: the list pass only, the sorted column then runs band_first).
            const bool fused =
                g_order == ops::FocusHardOrder::fused || g_order == ops::FocusHardOrder::fused_ws;
            const bool top_k_1_only = g_order == ops::FocusHardOrder::band_first || fused;
            // (fused_ws: head dim 64 only; the automatic order at 128)
            const ops::FocusHardOrder order =
                (tk == 1 || !top_k_1_only) && (g_order != ops::FocusHardOrder::fused_ws || D == 64)
                    ? g_order
                    : ops::FocusHardOrder::automatic;
            const ops::FocusHardOrder sorted_order =
                fused ? ops::FocusHardOrder::band_first : order;
            auto hard_list = [&] {
              ops::focus_hard_attention_fwd(*ctx, to, tl, tq, l, tgr, K, w, 0,
                                            ops::FocusHardKernel::wgmma, order, g_blocks, g_index);
            };
            const double list_ms =
                ops::focus_hard_wgmma_available(D) ? time_ms(*ctx, hard_list, reps, warm) : 0.0;
            auto hard_sorted = [&] {
              ops::focus_hard_attention_fwd(*ctx, to, tl, tq, l, tgr, K, w, 0,
                                            ops::FocusHardKernel::wgmma_sorted, sorted_order,
                                            g_blocks);
            };
            const double sorted_ms = ops::focus_hard_wgmma_available(D) && tk == 1
                                         ? time_ms(*ctx, hard_sorted, reps, warm)
                                         : 0.0;
            // The masked wgmma kernel (dense tile work with the group test; up to 128K tokens,
            // beyond which its dense cost is never a contender).
            auto hard_masked = [&] {
              ops::focus_hard_attention_fwd(*ctx, to, tl, tq, l, tgr, K, w, 0,
                                            ops::FocusHardKernel::wgmma_masked);
            };
            const double masked_ms = ops::focus_hard_wgmma_available(D) &&
                                             K <= ops::kFocusHardMaskedMaxGroups && T <= 131072
                                         ? time_ms(*ctx, hard_masked, reps, warm)
                                         : 0.0;
            Buffer list(Device::cuda, size_t(T) * tk * 4), offs(Device::cuda, (K + 1) * 4),
                toff(Device::cuda, (K + 1) * 4), masks(Device::cuda, size_t(T) * 8);
            auto index_time = [&](FocusHardIndexPath path) {
              return time_ms(
                  *ctx,
                  [&] {
                    ops::focus_hard_index(
                        *ctx, Tensor(list.data(), DType::i32, Device::cuda, Shape{B, T * tk}),
                        Tensor(offs.data(), DType::i32, Device::cuda, Shape{B, K + 1}),
                        Tensor(toff.data(), DType::i32, Device::cuda, Shape{B, K + 1}),
                        Tensor(masks.data(), DType::u32, Device::cuda, Shape{B, T, 2}), tgr, K, 64,
                        path);
                  },
                  reps, 1);
            };
            const double index_ms = index_time(FocusHardIndexPath::automatic);
            const double index_fused_ms = T <= kFocusHardFusedMaxChunks * kFocusHardChunk
                                              ? index_time(FocusHardIndexPath::fused)
                                              : 0.0;
            const double index_split_ms = index_time(FocusHardIndexPath::split);
            std::vector<int32_t> hg(size_t(T) * tk);
            CUDA_CHECK(cudaMemcpy(hg.data(), groups.data(), hg.size() * 4, cudaMemcpyDeviceToHost));
            std::vector<int64_t> cnt(K, 0);
            for (int t = 0; t < T; ++t) ++cnt[hg[size_t(t) * tk]];
            const double top = double(*std::max_element(cnt.begin(), cnt.end())) / T;
            const double share = (route_ms + index_ms) / (route_ms + hard_ms);
            const char* kind = realistic ? "realistic" : "balanced";
            std::printf(
                "%4d %3d %8d %2d %5d %9s | %10.3f %10.3f %7.2f %10.3f %7.2f %10.3f %7.2f %10.3f "
                "%7.2f | "
                "%9.3f "
                "%9.3f %5.1f%% %5.2f | %9.4f %9.4f | %10.3f %7.2f\n",
                D, H, T, K, tk, kind, dense_ms, hard_ms, dense_ms / hard_ms, mma_ms,
                mma_ms > 0 ? dense_ms / mma_ms : 0.0, list_ms,
                list_ms > 0 ? dense_ms / list_ms : 0.0, sorted_ms,
                sorted_ms > 0 ? dense_ms / sorted_ms : 0.0, index_ms, route_ms, 100 * share, top,
                index_fused_ms, index_split_ms, masked_ms,
                masked_ms > 0 ? dense_ms / masked_ms : 0.0);
            std::fflush(stdout);
            if (csv)
              std::fprintf(
                  csv,
                  "%d,%d,%d,%d,%d,%s,%.4f,%.4f,%.3f,%.4f,%.3f,%.4f,%.3f,%.4f,%.3f,%.4f,%.4f,%.4f,"
                  "%.4f,%.4f,%.4f,%.4f,%.3f\n",
                  D, H, T, K, tk, kind, dense_ms, hard_ms, dense_ms / hard_ms, mma_ms,
                  mma_ms > 0 ? dense_ms / mma_ms : 0.0, list_ms,
                  list_ms > 0 ? dense_ms / list_ms : 0.0, sorted_ms,
                  sorted_ms > 0 ? dense_ms / sorted_ms : 0.0, index_ms, route_ms, share, top,
                  index_fused_ms, index_split_ms, masked_ms,
                  masked_ms > 0 ? dense_ms / masked_ms : 0.0);
          }
        }
    }
  }
  if (csv) std::fclose(csv);
  return 0;
}
