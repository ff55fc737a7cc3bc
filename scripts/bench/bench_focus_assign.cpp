// Focus group-assignment benchmark (kernels/focus/focus_assign.cuh): Sinkhorn forward and
// forward+backward in both scopes (N = 10 iterations), the softmax assignment (forward and
// forward+backward) and top-k routing (top_k 1 and 2), at B = 1, K in {4, 8}, T = 1K .. 1M.
// GB/s counts the fp32 traffic the kernels are designed to move, per element of [T, K]:
//   sinkhorn fwd       2N + 3  (scores in, X_0 .. X_N out, each X_n read once, g out)
//   sinkhorn fwd+bwd   fwd + 8N + 1 causal, + 7N + 1 sequence (per iteration: X_n read three
//                      times (twice for sequence), X_{n+1} once, dscores read twice and written
//                      twice)
//   softmax fwd 2, fwd+bwd 5; top-k 1 + top_k / K
// and the cosine scores (bf16 z [T, d_g = 16], fp32 scores): fwd z + scores, fwd+bwd adds
// dscores, z twice (dz, dcentroids) and dz, in bytes.
// and is printed beside the card's measured ceiling (a device-to-device copy, read + write).
// The Sinkhorn rows time the chunked kernels (one launch per step) and, where they fit
// (sinkhorn_cooperative_fits), the cooperative ones (one launch per direction: "coop" rows), and
// where it fits the one-block forward ("block" rows; their backward the one-block backward where
// T <= kSinkhornBlockBwdMaxT, else as automatic).
// --B=N: sequences per call (default 1; training runs B = micro-batch, the same B for every row).
// Usage: bench_focus_assign [--csv=PATH] [--max-t=N] [--B=N]   (prints a table; CSV rows:
//   op,scope,K,T,ms,gbps; T counts the tokens of one sequence, GB/s all B of them)
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/cuda_check.h"
#include "core/tensor.h"
#include "kernels/focus/focus_assign.cuh"
#include "kernels/focus/focus_scores.cuh"

using namespace attnlab;
using bench::median_ms;

namespace {

constexpr int kIterations = 10;

void fill_random(const Buffer& buf, size_t n, uint64_t seed, float lo, float hi) {
  std::vector<float> h(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    h[i] = lo + (hi - lo) * float(s >> 40) / float(1 << 24);
  }
  CUDA_CHECK(cudaMemcpy(buf.data(), h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
}

struct Row {
  const char* op;
  const char* scope;
  int K;
  int64_t T;
  double ms, gbps;
};

double copy_ceiling_gbps() {
  const size_t bytes = size_t(512) << 20;
  Buffer a(Device::cuda, bytes), b(Device::cuda, bytes);
  const double ms = median_ms(
      [&] { CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice)); },
      10);
  return 2.0 * double(bytes) / (ms * 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  const char* csv_path = nullptr;
  int64_t max_T = int64_t(1) << 20;
  int B = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--csv=", 6) == 0) {
      csv_path = argv[i] + 6;
    } else if (std::strncmp(argv[i], "--B=", 4) == 0) {
      char* end = nullptr;
      const long v = std::strtol(argv[i] + 4, &end, 10);
      if (end == argv[i] + 4 || *end != '\0' || v < 1 || v > 4096) {
        std::fprintf(stderr, "%s: --B expects an integer in [1, 4096], got '%s'\n", argv[0],
                     argv[i] + 4);
        return 2;
      }
      B = int(v);
    } else if (std::strncmp(argv[i], "--max-t=", 8) == 0) {
      char* end = nullptr;
      max_T = std::strtoll(argv[i] + 8, &end, 10);
      if (end == argv[i] + 8 || *end != '\0' || max_T < 1024) {
        std::fprintf(stderr, "%s: --max-t expects an integer >= 1024, got '%s'\n", argv[0],
                     argv[i] + 8);
        return 2;
      }
    } else {
      std::fprintf(stderr, "usage: %s [--csv=PATH] [--max-t=N] [--B=N], got '%s'\n", argv[0],
                   argv[i]);
      return 2;
    }
  }
  if (!cuda_available()) {
    std::printf("bench_focus_assign: no CUDA device\n");
    return 0;
  }
  const double ceiling = copy_ceiling_gbps();
  std::printf("device-to-device copy ceiling: %.0f GB/s; B = %d\n", ceiling, B);
  std::printf("%-18s %-9s %3s %8s %10s %8s %7s\n", "op", "scope", "K", "T", "ms", "GB/s",
              "of peak");
  std::vector<Row> rows;
  auto record = [&](const char* op, const char* scope, int K, int64_t T, double ms,
                    double elems_moved) {
    const double gbps = elems_moved * 4.0 / (ms * 1e6);
    rows.push_back({op, scope, K, T, ms, gbps});
    std::printf("%-18s %-9s %3d %8lld %10.4f %8.0f %6.0f%%\n", op, scope, K, (long long)T, ms, gbps,
                100.0 * gbps / ceiling);
  };
  const int N = kIterations;
  for (int K : {4, 8}) {
    for (int64_t T = 1024; T <= max_T; T *= 4) {
      const int64_t rows = int64_t(B) * T;  // tokens of all sequences
      const size_t n = size_t(rows) * K;
      Buffer scores(Device::cuda, n * 4), g(Device::cuda, n * 4), dg(Device::cuda, n * 4),
          ds(Device::cuda, n * 4), it(Device::cuda, n * 4 * (N + 1));
      Buffer groups(Device::cuda, size_t(rows) * 2 * 4);
      fill_random(scores, n, uint64_t(T) + K, -10.f, 10.f);
      fill_random(dg, n, 7, -1.f, 1.f);
      for (bool causal : {true, false}) {
        SinkhornParams p;
        p.scores = static_cast<float*>(scores.data());
        p.iterates = static_cast<float*>(it.data());
        p.g = static_cast<float*>(g.data());
        p.dg = static_cast<float*>(dg.data());
        p.dscores = static_cast<float*>(ds.data());
        p.B = B;
        p.T = int(T);
        p.K = K;
        p.iterations = N;
        p.causal = causal;
        const char* scope = causal ? "causal" : "sequence";
        for (SinkhornPath path :
             {SinkhornPath::chunked, SinkhornPath::cooperative, SinkhornPath::block}) {
          const bool coop = path == SinkhornPath::cooperative, block = path == SinkhornPath::block;
          if (coop && !(sinkhorn_cooperative_fits(p, false) && sinkhorn_cooperative_fits(p, true)))
            continue;
          if (block && !sinkhorn_block_fits(p)) continue;
          p.path = path;
          const double fwd = median_ms([&] { launch_sinkhorn_fwd(p, nullptr); }, 20);
          record(block  ? "sinkhorn fwd block"
                 : coop ? "sinkhorn fwd coop"
                        : "sinkhorn fwd",
                 scope, K, T, fwd, double(n) * (2 * N + 3));
          const double both = median_ms(
              [&] {
                launch_sinkhorn_fwd(p, nullptr);
                launch_sinkhorn_bwd(p, nullptr);
              },
              20);
          record(block  ? "sinkhorn f+b block"
                 : coop ? "sinkhorn f+b coop"
                        : "sinkhorn fwd+bwd",
                 scope, K, T, both, double(n) * (2 * N + 3 + (causal ? 8 : 7) * N + 1));
        }
      }
      SoftmaxAssignParams sp;
      sp.scores = static_cast<float*>(scores.data());
      sp.g = static_cast<float*>(g.data());
      sp.dg = static_cast<float*>(dg.data());
      sp.dscores = static_cast<float*>(ds.data());
      sp.rows = rows;
      sp.K = K;
      record("softmax fwd", "-", K, T,
             median_ms([&] { launch_softmax_assign_fwd(sp, nullptr); }, 20), double(n) * 2);
      record("softmax fwd+bwd", "-", K, T,
             median_ms(
                 [&] {
                   launch_softmax_assign_fwd(sp, nullptr);
                   launch_softmax_assign_bwd(sp, nullptr);
                 },
                 20),
             double(n) * 5);
      {
        constexpr int d_g = 16;
        Buffer z(Device::cuda, size_t(rows) * d_g * 2), dz(Device::cuda, size_t(rows) * d_g * 2),
            cent(Device::cuda, size_t(K) * d_g * 2), dcent(Device::cuda, size_t(K) * d_g * 2);
        CUDA_CHECK(cudaMemset(z.data(), 0x3c, size_t(rows) * d_g * 2));  // bf16 ~0.0115 everywhere
        CUDA_CHECK(cudaMemset(cent.data(), 0x3c, size_t(K) * d_g * 2));
        FocusScoresParams<bf16> fp;
        fp.z = static_cast<bf16*>(z.data());
        fp.centroids = static_cast<bf16*>(cent.data());
        fp.scores = static_cast<float*>(g.data());
        fp.dscores = static_cast<float*>(dg.data());
        fp.dz = static_cast<bf16*>(dz.data());
        fp.dcentroids = static_cast<bf16*>(dcent.data());
        fp.N = rows;
        fp.K = K;
        fp.d_g = d_g;
        const double zb = double(rows) * d_g * 2 / 4, sb = double(n);  // in fp32 elements
        record("scores fwd", "bf16", K, T,
               median_ms([&] { launch_focus_scores_fwd(fp, nullptr); }, 20), zb + sb);
        record("scores fwd+bwd", "bf16", K, T,
               median_ms(
                   [&] {
                     launch_focus_scores_fwd(fp, nullptr);
                     launch_focus_scores_bwd(fp, nullptr);
                   },
                   20),
               zb + sb + sb + 3 * zb);
      }
      for (int top_k : {1, 2}) {
        TopkRouteParams tp;
        tp.g = static_cast<float*>(g.data());
        tp.groups = static_cast<int32_t*>(groups.data());
        tp.rows = rows;
        tp.K = K;
        tp.top_k = top_k;
        record(top_k == 1 ? "topk1" : "topk2", "-", K, T,
               median_ms([&] { launch_topk_route(tp, nullptr); }, 20), double(rows) * (K + top_k));
      }
    }
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  if (csv_path) {
    FILE* f = std::fopen(csv_path, "w");
    if (!f) {
      std::fprintf(stderr, "bench_focus_assign: cannot write %s\n", csv_path);
      return 1;
    }
    std::fprintf(f, "op,scope,K,T,ms,gbps\n");
    for (const Row& r : rows)
      std::fprintf(f, "%s,%s,%d,%lld,%.5f,%.1f\n", r.op, r.scope, r.K, (long long)r.T, r.ms,
                   r.gbps);
    std::fclose(f);
  }
  return 0;
}
