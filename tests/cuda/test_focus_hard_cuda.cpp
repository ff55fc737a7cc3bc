// The hard-routed Focus forward on CUDA (kernels/focus/focus_hard*.cu, via focus_attention_fwd)
// against the CPU fp32 masked reference, the plain bf16 kernel (launch_focus_attention_fwd) and,
// where the mask is all causal pairs (K = 1 or w >= T), dense attention. Skipped without a GPU.
//
// Tolerance (max |gpu - ref| / max |ref|, inputs rounded to bf16 first): the kernel rounds P to
// bf16 before P V (as the dense mma kernel does) and the output once more, so its error is at most
// about 2^-9 + 2^-9 = 2^-8 of the output scale; the bound is 2x that, or 2x the error of the
// same-precision references run on the same inputs (plain bf16 kernel, dense bf16 kernel) when
// larger. Both are printed ([cuda-err]).
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "cuda_test_util.h"
#include "ops/focus_hard_ops.h"
#include "ops/focus_ops.h"
#include "ops/ops.h"

namespace attnlab {
namespace {

using test::cpu_tensor;
using test::DeviceArray;
using test::DeviceInts;

enum class Groups { balanced, unbalanced, empty, duplicates };

Tensor dev(const DeviceArray<bf16>& a, Shape s) {
  return Tensor(a.ptr(), DType::bf16, Device::cuda, s);
}
Tensor dev(const DeviceArray<float>& a, Shape s) {
  return Tensor(a.ptr(), DType::f32, Device::cuda, s);
}
Tensor dev(const DeviceInts& a, Shape s) { return Tensor(a.ptr(), DType::i32, Device::cuda, s); }

// An assignment g [B, T, K] (rows sum to 1) of the given kind: balanced (random, also for
// duplicates), unbalanced (90% of the tokens prefer group 0), empty (the upper half of the groups,
// K >= 2, never chosen).
std::vector<float> make_g(int B, int T, int K, Groups kind, uint32_t seed) {
  std::vector<float> g = test::random_vector(size_t(B) * T * K, seed, 0.01f, 1.f);
  const std::vector<int32_t> pick = test::random_ints(size_t(B) * T, seed + 1, 10);
  for (size_t r = 0; r < size_t(B) * T; ++r) {
    float* row = g.data() + r * K;
    if (kind == Groups::unbalanced && pick[r] < 9) row[0] += 3.f;
    if (kind == Groups::empty)
      for (int k = (K + 1) / 2; k < K && K >= 2; ++k) row[k] = 0.f;
    double s = 0;
    for (int k = 0; k < K; ++k) s += row[k];
    for (int k = 0; k < K; ++k) row[k] = float(row[k] / s);
  }
  return g;
}

struct Case {
  int D, T, K, top_k, w, n_kv_head;
  Groups kind;
};

// The plain bf16 kernel (one thread per row), called directly: focus_attention_fwd now dispatches
// these shapes to the hard kernel.
void plain_bf16_fwd(const DeviceArray<bf16>& qkv, const DeviceArray<bf16>& out,
                    const DeviceArray<float>& lse, const DeviceInts& groups, int B, int T,
                    const QKVLayout& l, int K, int top_k, int w) {
  FocusAttentionParams<bf16> p;
  p.q = qkv.ptr();
  p.k = qkv.ptr() + l.k_offset();
  p.v = qkv.ptr() + l.v_offset();
  p.o = out.ptr();
  p.lse = lse.ptr();
  p.groups = groups.ptr();
  p.q_batch_stride = p.kv_batch_stride = T * l.width();
  p.q_row_stride = p.kv_row_stride = l.width();
  p.kv_head_stride = l.head_dim;
  p.o_batch_stride = T * l.q_width();
  p.o_row_stride = l.q_width();
  p.groups_batch_stride = int64_t(T) * top_k;
  p.B = B, p.seq_len = T, p.n_head = l.n_head, p.n_kv_head = l.n_kv_head, p.D = l.head_dim;
  p.K = K, p.top_k = top_k;
  p.scale = float(1.0 / std::sqrt(double(l.head_dim)));
  p.gate.kind = FocusGateKind::hard;
  p.gate.local_window = w;
  launch_focus_attention_fwd<bf16>(p, nullptr);
}

constexpr double kOutputBound = 2.0 / 256.0;  // 2x (2^-9 P rounding + 2^-9 output rounding)

void run_case(const Case& c) {
  SCOPED_TRACE(testing::Message() << "D " << c.D << " T " << c.T << " K " << c.K << " top_k "
                                  << c.top_k << " w " << c.w << " kv heads " << c.n_kv_head
                                  << " groups " << int(c.kind));
  auto cpu = ExecContext::make_cpu();
  auto gpu = ExecContext::make_cuda(0);
  const int B = 2, T = c.T, H = 4;
  const QKVLayout l{H, c.n_kv_head, c.D};
  const int64_t W = l.width(), Q = l.q_width();
  std::vector<float> qkv = test::to_precision<bf16>(
      test::random_vector(size_t(B) * T * W, uint32_t(T * 7 + c.K), -2.f, 2.f));
  std::vector<float> g = make_g(B, T, c.K, c.kind, uint32_t(T + c.top_k));
  std::vector<int32_t> groups(size_t(B) * T * c.top_k);
  const Shape qs{B, T, W}, os{B, T, Q}, ls{B, H, T}, gs{B, T, c.K}, grs{B, T, c.top_k};
  ops::focus_route_topk(*cpu, cpu_tensor(groups, grs), cpu_tensor(g, gs));
  if (c.kind == Groups::duplicates) {  // every third token names its first group twice or more
    for (size_t r = 0; r < size_t(B) * T; r += 3)
      for (int x = 1; x < c.top_k; ++x) groups[r * c.top_k + x] = groups[r * c.top_k];
  }
  FocusGateParams gate;
  gate.kind = FocusGateKind::hard;
  gate.local_window = c.w;
  std::vector<float> out(size_t(B) * T * Q), lse(size_t(B) * H * T);
  ops::focus_attention_fwd(*cpu, cpu_tensor(out, os), cpu_tensor(lse, ls), cpu_tensor(qkv, qs), l,
                           cpu_tensor(g, gs), cpu_tensor(groups, grs), gate);

  DeviceArray<bf16> gq(qkv), go(out.size()), gplain(out.size());
  DeviceArray<float> gl(lse.size()), gpl(lse.size()), gg(g);
  DeviceInts ggr(groups);
  // The kernels' workspace (index lists, partials) NaN when allocated: a partial no pass
  // of the call wrote shows, rather than an earlier variant's equal values in the reused pool.
  const test::PoisonScratch poison;
  go.poison();
  gl.poison();
  ops::focus_attention_fwd(*gpu, dev(go, os), dev(gl, ls), dev(gq, qs), l, dev(gg, gs),
                           dev(ggr, grs), gate);
  plain_bf16_fwd(gq, gplain, gpl, ggr, B, T, l, c.K, c.top_k, c.w);
  const std::vector<float> o_hard = go.download(), o_plain = gplain.download();
  const double e_plain =
      test::report("focus hard: plain bf16 kernel out", test::max_rel_error(o_plain, out));
  const double bound = std::max(kOutputBound, 2 * e_plain);
  EXPECT_LT(test::report("focus hard out vs fp32 reference", test::max_rel_error(o_hard, out)),
            bound);
  EXPECT_LT(test::report("focus hard out vs plain bf16", test::max_rel_error(o_hard, o_plain)),
            bound);
  const double e_plain_lse = test::max_rel_error(gpl.download(), lse);
  EXPECT_LT(test::report("focus hard lse", test::max_rel_error(gl.download(), lse)),
            std::max(1e-4, 2 * e_plain_lse));
  // Each kernel called directly (focus_attention_fwd above runs the automatic choice): the mma
  // kernel with 64 and (head dim 64) 128 queries per block, and the wgmma kernel where available
  // with its group pass on rows gathered per tile and (top_k 1) on the group-sorted copy, each
  // (top_k 1) with either order of its passes, and the list group pass with its blocks group
  // after group (the same blocks in another order: bitwise the same output); the masked wgmma
  // kernel (K <= 8).
  struct Variant {
    const char* name;
    int rows;
    ops::FocusHardKernel kernel;
    ops::FocusHardOrder order;
    ops::FocusHardBlockOrder blocks = ops::FocusHardBlockOrder::longest_first;
  };
  using Kernel = ops::FocusHardKernel;
  using Order = ops::FocusHardOrder;
  constexpr auto kLongest = ops::FocusHardBlockOrder::longest_first;
  const Variant variants[] = {
      {"mma 64 rows", 64, Kernel::mma, Order::automatic},
      {"mma 128 rows", 128, Kernel::mma, Order::automatic},
      {"wgmma", 0, Kernel::wgmma, Order::automatic},
      {"wgmma, group-major blocks", 0, Kernel::wgmma, Order::automatic,
       ops::FocusHardBlockOrder::group_major},
      {"wgmma, group first", 0, Kernel::wgmma, Order::group_first},
      {"wgmma, band first", 0, Kernel::wgmma, Order::band_first},
      {"wgmma, fused launch", 0, Kernel::wgmma, Order::fused},
      {"wgmma, fused launch, warp-specialised", 0, Kernel::wgmma, Order::fused_ws},
      {"wgmma sorted", 0, Kernel::wgmma_sorted, Order::automatic},
      {"wgmma sorted, group-major blocks", 0, Kernel::wgmma_sorted, Order::automatic,
       ops::FocusHardBlockOrder::group_major},
      {"wgmma sorted, group first", 0, Kernel::wgmma_sorted, Order::group_first},
      {"wgmma sorted, band first", 0, Kernel::wgmma_sorted, Order::band_first},
      {"wgmma masked", 0, Kernel::wgmma_masked, Order::automatic}};
  // Per kernel and order, the output of its variant with longest-first blocks ("wgmma", "wgmma
  // sorted"), which the other block order must equal bitwise.
  std::map<std::pair<int, int>, std::pair<std::vector<float>, std::vector<float>>> reference;
  for (const Variant& v : variants) {
    if (v.rows == 128 && c.D != 64) continue;
    if (v.kernel != Kernel::mma && !ops::focus_hard_wgmma_available(c.D)) continue;
    if ((v.kernel == Kernel::wgmma_sorted || v.order == Order::band_first ||
         v.order == Order::fused || v.order == Order::fused_ws) &&
        c.top_k != 1)
      continue;
    if (v.order == Order::fused_ws && c.D != 64) continue;
    if (v.kernel == Kernel::wgmma_masked && c.K > ops::kFocusHardMaskedMaxGroups) continue;
    SCOPED_TRACE(v.name);
    go.poison();
    gl.poison();
    ops::focus_hard_attention_fwd(*gpu, dev(go, os), dev(gl, ls), dev(gq, qs), l, dev(ggr, grs),
                                  c.K, c.w, v.rows, v.kernel, v.order, v.blocks);
    const std::vector<float> o_v = go.download(), lse_v = gl.download();
    EXPECT_LT(
        test::report("focus hard (direct) out vs fp32 reference", test::max_rel_error(o_v, out)),
        bound);
    EXPECT_LT(test::report("focus hard (direct) lse", test::max_rel_error(lse_v, lse)),
              std::max(1e-4, 2 * e_plain_lse));
    // The fused launches: the same bits in every repeat (a race between their items or
    // warpgroups, or with the index build, would show as NaN from the poisoned workspace or a
    // changed value).
    auto expect_repeats_equal = [&](const char* what) {
      for (int rep = 0; rep < 3; ++rep) {
        go.poison();
        gl.poison();
        ops::focus_hard_attention_fwd(*gpu, dev(go, os), dev(gl, ls), dev(gq, qs), l, dev(ggr, grs),
                                      c.K, c.w, v.rows, v.kernel, v.order, v.blocks);
        EXPECT_EQ(go.download(), o_v) << what << ", repeat " << rep;
        EXPECT_EQ(gl.download(), lse_v) << what << ", repeat " << rep;
      }
    };
    if (v.order == Order::fused) {
      // The same device functions as the band-first launches, in one grid: bitwise their output.
      const auto band_first = std::make_pair(int(Kernel::wgmma), int(Order::band_first));
      ASSERT_EQ(reference.count(band_first), 1u) << "no band-first variant before the fused one";
      EXPECT_EQ(o_v, reference[band_first].first) << "fused launch against band first: out";
      EXPECT_EQ(lse_v, reference[band_first].second) << "fused launch against band first: lse";
      expect_repeats_equal("fused launch");
    }
    if (v.order == Order::fused_ws) {
      // Its own arithmetic (128-key group tiles), each output row written by one thread.
      expect_repeats_equal("warp-specialised fused launch");
      continue;
    }
    if (v.kernel != Kernel::mma) {
      const auto key = std::make_pair(int(v.kernel), int(v.order));
      if (v.blocks == kLongest) {
        reference[key] = {o_v, lse_v};
      } else if (reference.count(key) != 0) {
        EXPECT_EQ(o_v, reference[key].first) << "the block order changed the output";
        EXPECT_EQ(lse_v, reference[key].second) << "the block order changed lse";
      } else {
        ADD_FAILURE() << "no reference variant before " << v.name;
      }
    }
  }
}

TEST(FocusHardCuda, MatchesTheMaskedReference) {
  CUDA_TEST_PREAMBLE();
  // Every T, K and top_k in {1, 2, K}; window, group kind, head dim and GQA cycle through their
  // values so each meets every T.
  const int windows[] = {0, 37, 128, 1 << 20};
  const Groups kinds[] = {Groups::balanced, Groups::unbalanced, Groups::empty};
  int n = 0;
  for (int T : {1, 127, 129, 1000})
    for (int K : {1, 4, 8})
      for (int ti = 0; ti < 3; ++ti) {
        const int top_k = ti < 2 ? ti + 1 : K;
        if (top_k > K || (ti == 2 && K <= 2)) continue;
        const int w = windows[n % 4];
        run_case({n % 2 ? 128 : 64, T, K, top_k, w == (1 << 20) ? T : w, (n / 2) % 2 ? 2 : 4,
                  kinds[n % 3]});
        ++n;
      }
  run_case({64, 4099, 8, 1, 128, 4, Groups::balanced});
  run_case({128, 4099, 8, 2, 37, 2, Groups::unbalanced});
  run_case({64, 4099, 4, 4, 0, 2, Groups::empty});
}

// The lengths, group counts and top_k the wgmma kernel's split schedule must cover (tile and
// window edges: 1, 127, 129, 1000, 4096; K 4 and 8; top_k 1 and 2; GQA; D 64 and 128), through
// run_case (which runs every kernel; the wgmma one only where available).
TEST(FocusHardCuda, WgmmaSplitMatchesTheMaskedReference) {
  CUDA_TEST_PREAMBLE();
  if (!ops::focus_hard_wgmma_available(64)) GTEST_SKIP() << "no sm_90a build or not an sm_90 GPU";
  const Groups kinds[] = {Groups::balanced, Groups::unbalanced, Groups::empty};
  int n = 0;
  for (int T : {1, 127, 129, 1000, 4096})
    for (int K : {4, 8})
      for (int top_k : {1, 2}) {
        const int w = n % 3 == 2 ? 37 : 128;
        run_case({n % 2 ? 128 : 64, T, K, top_k, w, (n / 2) % 2 ? 2 : 4, kinds[n % 3]});
        ++n;
      }
  run_case({128, 1000, 8, 1, 0, 4, Groups::balanced});      // w = 0: the band pass only merges
  run_case({64, 1000, 4, 4, 1000, 2, Groups::unbalanced});  // w >= T, top_k = K
  // A token naming a group twice (the pair counts once; one partial per distinct group).
  run_case({64, 1000, 8, 2, 37, 2, Groups::duplicates});
  run_case({128, 700, 4, 3, 0, 4, Groups::duplicates});
  // 8192 tokens, both head dims (top_k 1: the automatic list group pass and, forced, the sorted
  // one).
  run_case({64, 8192, 8, 2, 128, 4, Groups::balanced});
  run_case({128, 8192, 8, 1, 37, 2, Groups::unbalanced});
  // 16384 tokens, top_k 1: the automatic group pass is the list one up to kSortedMinT (32768),
  // here with the split index build (past the fused kernel's 8192) and the band pass first.
  run_case({64, 16384, 8, 1, 128, 4, Groups::unbalanced});
  // More than 32 groups: the group sets' high word (the longest-first decode's high ballot).
  run_case({64, 1000, 40, 3, 37, 2, Groups::unbalanced});
  run_case({128, 700, 64, 2, 128, 4, Groups::duplicates});
}

// K = 1 or w >= T: every causal pair is attended, so the result is dense causal attention.
TEST(FocusHardCuda, AllPairsEqualDenseAttention) {
  CUDA_TEST_PREAMBLE();
  auto cpu = ExecContext::make_cpu();
  auto gpu = ExecContext::make_cuda(0);
  for (int D : {64, 128})
    for (int T : {129, 1000})
      for (bool one_group : {true, false}) {
        SCOPED_TRACE(testing::Message() << "D " << D << " T " << T << " K = 1: " << one_group);
        const int B = 2, H = 4, K = one_group ? 1 : 8, top_k = one_group ? 1 : 2;
        const QKVLayout l{H, 2, D};
        const int64_t W = l.width(), Q = l.q_width();
        std::vector<float> qkv = test::to_precision<bf16>(
            test::random_vector(size_t(B) * T * W, uint32_t(T + D), -2.f, 2.f));
        std::vector<float> g = make_g(B, T, K, Groups::balanced, 5);
        std::vector<int32_t> groups(size_t(B) * T * top_k);
        const Shape qs{B, T, W}, os{B, T, Q}, ls{B, H, T}, gs{B, T, K}, grs{B, T, top_k};
        ops::focus_route_topk(*cpu, cpu_tensor(groups, grs), cpu_tensor(g, gs));
        std::vector<float> out(size_t(B) * T * Q), lse(size_t(B) * H * T);
        ops::attention_fwd(*cpu, cpu_tensor(out, os), cpu_tensor(lse, ls), cpu_tensor(qkv, qs), l);
        FocusGateParams gate;
        gate.kind = FocusGateKind::hard;
        // Every pair local: w = T, and INT_MAX at T 1000 (the mma kernel's 32-bit window
        // arithmetic wrapped there until the op clamped the window to T).
        gate.local_window = one_group ? 16 : T == 1000 ? INT_MAX : T;
        DeviceArray<bf16> gq(qkv), go(out.size()), gd(out.size());
        DeviceArray<float> gl(lse.size()), gdl(lse.size()), gg(g);
        DeviceInts ggr(groups);
        go.poison();
        ops::focus_attention_fwd(*gpu, dev(go, os), dev(gl, ls), dev(gq, qs), l, dev(gg, gs),
                                 dev(ggr, grs), gate);
        ops::attention_fwd(*gpu, dev(gd, os), dev(gdl, ls), dev(gq, qs), l);
        const double e_dense = test::report("focus hard: dense bf16 kernel out",
                                            test::max_rel_error(gd.download(), out));
        const double bound = std::max(kOutputBound, 2 * e_dense);
        EXPECT_LT(test::report("focus hard (all pairs) vs dense fp32",
                               test::max_rel_error(go.download(), out)),
                  bound);
        EXPECT_LT(
            test::report("focus hard (all pairs) lse", test::max_rel_error(gl.download(), lse)),
            1e-4);
        for (ops::FocusHardKernel kernel : {ops::FocusHardKernel::mma, ops::FocusHardKernel::wgmma,
                                            ops::FocusHardKernel::wgmma_sorted}) {
          const bool mma = kernel == ops::FocusHardKernel::mma;
          if (mma ? D != 64 : !ops::focus_hard_wgmma_available(D)) continue;
          if (kernel == ops::FocusHardKernel::wgmma_sorted && top_k != 1) continue;
          SCOPED_TRACE(mma                                     ? "mma 128 rows"
                       : kernel == ops::FocusHardKernel::wgmma ? "wgmma"
                                                               : "wgmma sorted");
          go.poison();
          ops::focus_hard_attention_fwd(*gpu, dev(go, os), dev(gl, ls), dev(gq, qs), l,
                                        dev(ggr, grs), K, gate.local_window, mma ? 128 : 0, kernel);
          EXPECT_LT(test::report("focus hard (all pairs, direct) vs dense fp32",
                                 test::max_rel_error(go.download(), out)),
                    bound);
        }
      }
}

// The index lists against a CPU construction: group-major, positions increasing, every token
// once per distinct valid group (the input lists duplicates and out-of-range ids on purpose).
TEST(FocusHardCuda, IndexListsAreStableCountingSorts) {
  CUDA_TEST_PREAMBLE();
  auto gpu = ExecContext::make_cuda(0);
  struct IndexCase {
    int B, T, K, top_k, rows;
  };
  for (const IndexCase c :
       {IndexCase{2, 1, 1, 1, 64}, IndexCase{2, 1000, 8, 2, 64}, IndexCase{3, 5000, 8, 1, 128},
        IndexCase{1, 3000, 64, 3, 64}, IndexCase{2, 2049, 5, 5, 128},
        // Up to 4 chunks of 1024 the automatic path is one fused kernel (it takes 8 when
        // forced), past that three kernels; every path is run below where it applies.
        IndexCase{2, 8192, 64, 2, 128}, IndexCase{1, 8193, 8, 1, 64},
        IndexCase{2, 20000, 8, 2, 128}}) {
    SCOPED_TRACE(testing::Message()
                 << "B " << c.B << " T " << c.T << " K " << c.K << " rows " << c.rows);
    const int B = c.B, T = c.T, K = c.K, tk = c.top_k;
    std::vector<int32_t> groups = test::random_ints(size_t(B) * T * tk, uint32_t(T), K + 1);
    for (size_t i = 0; i < groups.size(); ++i)
      if (groups[i] == K && i % 2) groups[i] = -1;  // ids out of range on either side
    std::vector<int32_t> list_want, offs_want, toff_want;
    std::vector<uint32_t> mask_want;
    for (int b = 0; b < B; ++b) {
      std::vector<uint64_t> m(T, 0);
      for (int t = 0; t < T; ++t)
        for (int s = 0; s < tk; ++s) {
          const int x = groups[(size_t(b) * T + t) * tk + s];
          if (x >= 0 && x < K) m[t] |= uint64_t(1) << x;
        }
      std::vector<int32_t> row;
      int tiles = 0;
      for (int g = 0; g < K; ++g) {
        offs_want.push_back(int32_t(row.size()));
        toff_want.push_back(tiles);
        const size_t before = row.size();
        for (int t = 0; t < T; ++t)
          if ((m[t] >> g) & 1) row.push_back(t);
        tiles += int((row.size() - before + c.rows - 1) / c.rows);
      }
      offs_want.push_back(int32_t(row.size()));
      toff_want.push_back(tiles);
      row.resize(size_t(T) * tk, -7);
      list_want.insert(list_want.end(), row.begin(), row.end());
      for (int t = 0; t < T; ++t) {
        mask_want.push_back(uint32_t(m[t]));
        mask_want.push_back(uint32_t(m[t] >> 32));
      }
    }
    // Each path that applies (automatic, the three kernels, the fused kernel up to 8 chunks)
    // gives the same lists.
    for (const FocusHardIndexPath path :
         {FocusHardIndexPath::automatic, FocusHardIndexPath::split, FocusHardIndexPath::fused}) {
      if (path == FocusHardIndexPath::fused && T > kFocusHardFusedMaxChunks * kFocusHardChunk)
        continue;
      SCOPED_TRACE(testing::Message() << "path " << int(path));
      DeviceInts dgr(groups), dlist(std::vector<int32_t>(list_want.size(), -7)),
          doffs(std::vector<int32_t>(offs_want.size(), -1)),
          dtoff(std::vector<int32_t>(toff_want.size(), -1)),
          dmask(std::vector<int32_t>(mask_want.size(), -1));
      ops::focus_hard_index(*gpu, dev(dlist, {B, int64_t(T) * tk}), dev(doffs, {B, K + 1}),
                            dev(dtoff, {B, K + 1}),
                            Tensor(dmask.ptr(), DType::u32, Device::cuda, Shape{B, T, 2}),
                            dev(dgr, {B, T, tk}), K, c.rows, path);
      auto back = [](const DeviceInts& d, size_t n) {
        std::vector<int32_t> h(n);
        CUDA_CHECK(cudaMemcpy(h.data(), d.ptr(), n * 4, cudaMemcpyDeviceToHost));
        return h;
      };
      EXPECT_EQ(back(doffs, offs_want.size()), offs_want);
      EXPECT_EQ(back(dtoff, toff_want.size()), toff_want);
      EXPECT_EQ(back(dlist, list_want.size()), list_want);
      const std::vector<int32_t> masks = back(dmask, mask_want.size());
      EXPECT_TRUE(std::equal(masks.begin(), masks.end(), mask_want.begin(),
                             [](int32_t a, uint32_t b) { return uint32_t(a) == b; }));
    }
  }
}

// Forcing the fused index kernel past its 8 chunks is an error naming the limit, not a wrong list.
// The check comes before any launch, so it runs without a GPU.
TEST(FocusHard, FusedIndexPastItsLimitIsAnError) {
  FocusHardIndexParams p;
  p.B = 1, p.T = kFocusHardFusedMaxChunks * kFocusHardChunk + 1, p.K = 8, p.top_k = 1;
  p.path = FocusHardIndexPath::fused;
  try {
    launch_focus_hard_index(p, nullptr);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("8192"), std::string::npos) << e.what();
  }
}

TEST(FocusHard, RejectsBadArguments) {
  auto cpu = ExecContext::make_cpu();
  std::vector<float> qkv(2 * 3 * 64 * 3);
  std::vector<int32_t> groups(2 * 3 * 2, 0);
  std::vector<float> out(2 * 3 * 64), lse(2 * 3);
  const QKVLayout l{1, 1, 64};
  EXPECT_FALSE(ops::focus_hard_supported(*cpu, cpu_tensor(qkv, {2, 3, 192}), l, 8));
  test::expect_error(
      [&] {
        ops::focus_hard_attention_fwd(*cpu, cpu_tensor(out, {2, 3, 64}), cpu_tensor(lse, {2, 1, 3}),
                                      cpu_tensor(qkv, {2, 3, 192}), l,
                                      cpu_tensor(groups, {2, 3, 2}), 8, 128);
      },
      {"focus_hard_attention", "cuda only"});
  if (!cuda_available()) return;
  auto gpu = ExecContext::make_cuda(0);
  DeviceInts dgr(groups);
  DeviceArray<bf16> dq(qkv.size()), dout(out.size());
  DeviceArray<float> dl(lse.size());
  auto call = [&](int K, const QKVLayout& lay) {
    ops::focus_hard_attention_fwd(*gpu, dev(dout, {2, 3, 64}), dev(dl, {2, 1, 3}),
                                  dev(dq, {2, 3, 192}), lay, dev(dgr, {2, 3, 2}), K, 128);
  };
  test::expect_error([&] { call(65, l); }, {"groups K must be in [1, 64]", "65"});
  test::expect_error([&] { call(1, l); }, {"top_k", "[1, 1]", "2"});
  test::expect_error([&] { call(8, QKVLayout{2, 2, 32}); }, {"head dim must be 64 or 128", "32"});
  // K 8, head dim 64, with the op's options.
  auto call_with = [&](int tile_rows, ops::FocusHardKernel kernel, ops::FocusHardOrder order) {
    ops::focus_hard_attention_fwd(*gpu, dev(dout, {2, 3, 64}), dev(dl, {2, 1, 3}),
                                  dev(dq, {2, 3, 192}), l, dev(dgr, {2, 3, 2}), 8, 128, tile_rows,
                                  kernel, order);
  };
  using Kernel = ops::FocusHardKernel;
  using Order = ops::FocusHardOrder;
  test::expect_error([&] { call_with(96, Kernel::automatic, Order::automatic); },
                     {"tile_rows must be 64 or 128", "96"});
  DeviceArray<bf16> dq128(2 * 3 * 384), dout128(2 * 3 * 128);
  test::expect_error(
      [&] {
        ops::focus_hard_attention_fwd(*gpu, dev(dout128, {2, 3, 128}), dev(dl, {2, 1, 3}),
                                      dev(dq128, {2, 3, 384}), QKVLayout{1, 1, 128},
                                      dev(dgr, {2, 3, 2}), 8, 128, 128);
      },
      {"tile_rows 128 needs head dim 64", "128"});
  test::expect_error([&] { call_with(0, Kernel::wgmma_sorted, Order::automatic); },
                     {"sorted group pass (wgmma_sorted) takes top_k 1 only", "2"});
  test::expect_error([&] { call_with(0, Kernel::automatic, Order::band_first); },
                     {"band pass first", "top_k 2"});
  // The option rules are ops::plan_focus_hard's, checked combination by combination on the CPU
  // (FocusHardPlan.*); here only that the op goes through them before any launch.
  test::expect_error([&] { call_with(0, Kernel::mma, Order::band_first); },
                     {"band pass first", "the mma kernel"});
  if (!ops::focus_hard_wgmma_available(64)) {
    test::expect_error([&] { call_with(0, Kernel::wgmma, Order::automatic); },
                       {"focus_hard_attention", "wgmma kernel needs"});
  }
}

}  // namespace
}  // namespace attnlab
