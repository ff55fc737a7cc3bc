// One Focus decode step at cache length L: with hard routing the group-indexed path generation uses
// (ops::focus_group_index_append of the new token + ops::focus_group_decode: the window plus the
// cached tokens of the query's top_k groups) against the masked full-cache path
// (ops::focus_attention_decode, gate hard: every cached key read, the distant ones masked; since
// branch soft-decode the decode-shaped kernel, before it one thread per row: masked_ms of earlier
// runs is that kernel's); with
// soft routing (the additive gate over every cached key, ops::focus_attention_decode: soft_ms);
// and dense decoding over the whole cache (ops::attention_decode, the O(L) reference), in the same
// run.
// bf16, batch 1, one new token at position L - 1, local window 128, K 8, top_k 2, groups from
// uniform random assignments (balanced: a query's groups hold about top_k / K of the cache).
// Shapes: 12 heads x 64 (no GQA) and 32 heads x 128 with 8 kv heads.
// Columns: keys = keys the query attends (window + its groups' distant tokens, each once),
// dense_ms, masked_ms, group_ms, masked/group speed-up, soft_ms.
// Usage: bench_focus_decode [--L=4096,16384,65536] [--reps=N] [--csv=path]
#include <cuda_runtime.h>

#include <algorithm>
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
#include "ops/focus_decode_ops.h"
#include "ops/focus_ops.h"
#include "ops/ops.h"

using namespace attnlab;
using bench::fill_random_bf16;
using bench::median_ms;
using bench::parse_list;

namespace {

constexpr int kGroups = 8, kTopK = 2, kWindow = 128;

struct Shape3 {
  int H, Hkv, D;
};

// Keys the query at position i attends: the window plus the distant tokens sharing a group.
int64_t attended_keys(const std::vector<int32_t>& groups, int i) {
  int64_t n = 0;
  const int32_t* qg = groups.data() + int64_t(i) * kTopK;
  for (int j = 0; j <= i; ++j) {
    bool share = i - j <= kWindow;
    for (int x = 0; x < kTopK && !share; ++x)
      for (int y = 0; y < kTopK; ++y) share |= groups[size_t(j) * kTopK + y] == qg[x];
    n += share;
  }
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> lengths = {4096, 16384, 65536};
  int reps = 20;
  const char* csv_path = nullptr;
  for (int a = 1; a < argc; ++a) {
    if (!std::strncmp(argv[a], "--L=", 4))
      lengths = parse_list("bench_focus_decode", "--L", argv[a] + 4);
    else if (!std::strncmp(argv[a], "--reps=", 7))
      reps = parse_list("bench_focus_decode", "--reps", argv[a] + 7).at(0);
    else if (!std::strncmp(argv[a], "--csv=", 6))
      csv_path = argv[a] + 6;
    else {
      std::fprintf(stderr, "usage: bench_focus_decode [--L=4096,...] [--reps=N] [--csv=path]\n");
      return 2;
    }
  }
  if (!cuda_available()) {
    std::printf("bench_focus_decode: no CUDA device\n");
    return 0;
  }
  auto ctx = ExecContext::make_cuda(0);
  auto cpu = ExecContext::make_cpu();
  FILE* csv = csv_path ? std::fopen(csv_path, "w") : nullptr;
  if (csv) std::fprintf(csv, "H,Hkv,D,L,keys,dense_ms,masked_ms,group_ms,soft_ms\n");
  std::printf("%4s %4s %4s %7s %7s %10s %10s %10s %8s %10s\n", "H", "Hkv", "D", "L", "keys",
              "dense_ms", "masked_ms", "group_ms", "speedup", "soft_ms");
  for (const Shape3 s : {Shape3{12, 12, 64}, Shape3{32, 8, 128}})
    for (const int L : lengths) {
      const QKVLayout layout{s.H, s.Hkv, s.D};
      const int64_t W = layout.width(), Q = layout.q_width();
      const attnlab::Shape kv{1, s.Hkv, L, s.D};
      // Assignments and groups on the host (uniform random scores), then on the device.
      std::vector<float> g(size_t(L) * kGroups);
      uint64_t x = 88172645463325252ull;
      for (auto& v : g) x ^= x << 13, x ^= x >> 7, x ^= x << 17, v = float(x >> 40) / 16777216.f;
      std::vector<int32_t> groups(size_t(L) * kTopK);
      ops::focus_route_topk(*cpu, Tensor(groups.data(), DType::i32, Device::cpu, {1, L, kTopK}),
                            Tensor(g.data(), DType::f32, Device::cpu, {1, L, kGroups}));
      Buffer kc(Device::cuda, size_t(kv.numel()) * 2), vc(Device::cuda, size_t(kv.numel()) * 2);
      Buffer qkv(Device::cuda, size_t(W) * 2), out(Device::cuda, size_t(Q) * 2);
      Buffer gc(Device::cuda, g.size() * 4), grc(Device::cuda, groups.size() * 4);
      Buffer index(Device::cuda, size_t(kGroups) * L * 4), counts(Device::cuda, kGroups * 4);
      fill_random_bf16(kc, size_t(kv.numel()), 1);
      fill_random_bf16(vc, size_t(kv.numel()), 2);
      fill_random_bf16(qkv, size_t(W), 3);
      CUDA_CHECK(cudaMemcpy(gc.data(), g.data(), g.size() * 4, cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(grc.data(), groups.data(), groups.size() * 4, cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemset(counts.data(), 0, kGroups * 4));
      const Tensor kt(kc.data(), DType::bf16, Device::cuda, kv),
          vt(vc.data(), DType::bf16, Device::cuda, kv);
      const Tensor qt(qkv.data(), DType::bf16, Device::cuda, {1, 1, W});
      const Tensor ot(out.data(), DType::bf16, Device::cuda, {1, 1, Q});
      const Tensor gt(gc.data(), DType::f32, Device::cuda, {1, L, kGroups});
      const Tensor grt(grc.data(), DType::i32, Device::cuda, {1, L, kTopK});
      const Tensor it(index.data(), DType::i32, Device::cuda, {1, kGroups, L});
      const Tensor ct(counts.data(), DType::i32, Device::cuda, {1, kGroups});
      ops::focus_group_index_append(*ctx, it, ct, grt, 0, L);  // the cache's L tokens
      const int pos = L - 1;
      FocusGateParams gate;
      gate.kind = FocusGateKind::hard;
      gate.local_window = kWindow;
      const cudaStream_t st = reinterpret_cast<cudaStream_t>(ctx->stream);
      const double dense = median_ms(
          [&] { ops::attention_decode(*ctx, ot, qt, kt, vt, pos, layout, 0, 0); }, reps, st);
      const double masked = median_ms(
          [&] { ops::focus_attention_decode(*ctx, ot, qt, kt, vt, gt, grt, pos, layout, gate); },
          reps, st);
      const double group = median_ms(
          [&] {  // the new token's append (idempotent at the same position) and the attention
            ops::focus_group_index_append(*ctx, it, ct, grt, pos, 1);
            ops::focus_group_decode(*ctx, ot, qt, kt, vt, grt, it, ct, pos, layout, kWindow);
          },
          reps, st);
      FocusGateParams soft_gate;  // the additive gate (the recipe default), window 128
      soft_gate.local_window = kWindow;
      const double soft = median_ms(
          [&] {
            ops::focus_attention_decode(*ctx, ot, qt, kt, vt, gt, grt, pos, layout, soft_gate);
          },
          reps, st);
      const int64_t keys = attended_keys(groups, pos);
      std::printf("%4d %4d %4d %7d %7lld %10.4f %10.4f %10.4f %7.1fx %10.4f\n", s.H, s.Hkv, s.D, L,
                  (long long)keys, dense, masked, group, masked / group, soft);
      if (csv)
        std::fprintf(csv, "%d,%d,%d,%d,%lld,%.5f,%.5f,%.5f,%.5f\n", s.H, s.Hkv, s.D, L,
                     (long long)keys, dense, masked, group, soft);
    }
  if (csv) std::fclose(csv);
  return 0;
}
