// The choices of the hard-routed Focus forward (ops::plan_focus_hard, src/ops/focus_hard.cpp):
// for every kernel, pass order, index path and block order, with and without the wgmma kernel
// available, either a plan that keeps the kernels' contracts (focus_hard.cuh) and the documented
// automatic choices, or an error naming the option. Host only: runs without a GPU.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "ops/focus_hard_ops.h"
#include "test_util.h"

namespace attnlab {
namespace {

using ops::FocusHardKernel;
using ops::FocusHardOrder;

constexpr FocusHardKernel kKernels[] = {FocusHardKernel::automatic, FocusHardKernel::mma,
                                        FocusHardKernel::wgmma, FocusHardKernel::wgmma_sorted,
                                        FocusHardKernel::wgmma_masked};
constexpr FocusHardOrder kOrders[] = {FocusHardOrder::automatic, FocusHardOrder::group_first,
                                      FocusHardOrder::band_first, FocusHardOrder::fused,
                                      FocusHardOrder::fused_ws};
constexpr FocusHardIndexPath kIndex[] = {FocusHardIndexPath::automatic, FocusHardIndexPath::fused,
                                         FocusHardIndexPath::split};
constexpr ops::FocusHardBlockOrder kBlocks[] = {ops::FocusHardBlockOrder::automatic,
                                                ops::FocusHardBlockOrder::longest_first,
                                                ops::FocusHardBlockOrder::group_major};

TEST(FocusHardPlan, EveryCombinationIsAValidPlanOrAnError) {
  int plans = 0, errors = 0;
  for (const FocusHardKernel kernel : kKernels)
    for (const FocusHardOrder order : kOrders)
      for (const FocusHardIndexPath index : kIndex)
        for (const int64_t T :
             {int64_t(1), int64_t(1024), int64_t(1025), int64_t(4096), int64_t(8192), int64_t(8193),
              int64_t(16384), int64_t(16385), int64_t(32767), int64_t(32768)})
          for (const int64_t top_k : {1, 2})
            for (const int K : {4, 8, 9})
              for (const int D : {64, 128})
                for (const bool supported : {false, true})
                  for (const ops::FocusHardBlockOrder blocks : kBlocks) {
                    SCOPED_TRACE(testing::Message()
                                 << "kernel " << int(kernel) << " order " << int(order) << " index "
                                 << int(index) << " T " << T << " top_k " << top_k << " K " << K
                                 << " D " << D << " wgmma available " << supported << " blocks "
                                 << int(blocks));
                    ops::FocusHardPlan plan;
                    try {
                      plan = ops::plan_focus_hard(kernel, order, index, T, top_k, K, D, supported,
                                                  blocks);
                    } catch (const Error& e) {
                      ++errors;
                      EXPECT_NE(std::string(e.what()).find("focus_hard_attention"),
                                std::string::npos)
                          << e.what();
                      continue;
                    }
                    ++plans;
                    // The kernels' contracts.
                    EXPECT_TRUE(!plan.wgmma || supported);
                    EXPECT_TRUE(!plan.sorted || (plan.wgmma && top_k == 1));
                    EXPECT_TRUE(!plan.band_first || (plan.wgmma && top_k == 1));
                    EXPECT_TRUE(!plan.fused || (plan.band_first && !plan.sorted));
                    EXPECT_TRUE(index != FocusHardIndexPath::fused || T <= 8192);
                    // What was asked for is what runs.
                    if (order == FocusHardOrder::band_first) {
                      EXPECT_TRUE(plan.band_first);
                    }
                    if (order == FocusHardOrder::group_first) {
                      EXPECT_FALSE(plan.band_first);
                    }
                    if (order != FocusHardOrder::automatic) {
                      EXPECT_EQ(plan.fused, order == FocusHardOrder::fused ||
                                                order == FocusHardOrder::fused_ws);
                    }
                    EXPECT_EQ(plan.warp_specialised,
                              order == FocusHardOrder::fused_ws ||
                                  (order == FocusHardOrder::automatic && plan.fused));
                    EXPECT_TRUE(!plan.warp_specialised || (plan.fused && D == 64));
                    if (kernel == FocusHardKernel::mma) {
                      EXPECT_FALSE(plan.wgmma);
                    }
                    if (kernel == FocusHardKernel::wgmma) {
                      EXPECT_TRUE(plan.wgmma && !plan.sorted);
                    }
                    if (kernel == FocusHardKernel::wgmma_sorted) {
                      EXPECT_TRUE(plan.sorted);
                    }
                    // The masked kernel: forced, or automatic for top_k >= 2 and K <= 8 (with
                    // every option automatic) up to 8192 tokens, 16384 where 8 top_k >= 3 K or at
                    // head dim 128; no passes, no index.
                    const int64_t masked_max_t = (8 * top_k >= 3 * K || D == 128) ? 16384 : 8192;
                    EXPECT_EQ(plan.masked,
                              kernel == FocusHardKernel::wgmma_masked ||
                                  (kernel == FocusHardKernel::automatic &&
                                   order == FocusHardOrder::automatic &&
                                   index == FocusHardIndexPath::automatic && supported &&
                                   top_k >= 2 && K <= 8 && T <= masked_max_t));
                    if (plan.masked) {
                      EXPECT_TRUE(plan.wgmma && supported && order == FocusHardOrder::automatic &&
                                  index == FocusHardIndexPath::automatic);
                      EXPECT_FALSE(plan.sorted || plan.band_first || plan.fused);
                      continue;
                    }
                    // The automatic choices (docs/focus_hard.md): the wgmma kernel where available,
                    // its sorted group pass for top_k 1 from 32768 tokens, the band pass first for
                    // the list group pass at head dim 64 with top_k 1, in the warp-specialised
                    // fused launch from T 1025 on.
                    if (kernel == FocusHardKernel::automatic) {
                      EXPECT_EQ(plan.wgmma, supported);
                      EXPECT_EQ(plan.sorted, supported && top_k == 1 && T >= 32768 &&
                                                 order != FocusHardOrder::fused &&
                                                 order != FocusHardOrder::fused_ws);
                    }
                    if (order == FocusHardOrder::automatic) {
                      EXPECT_EQ(plan.band_first,
                                plan.wgmma && top_k == 1 && !plan.sorted && D == 64);
                      EXPECT_EQ(plan.fused, plan.band_first && T > 1024);
                    }
                    // The block order as asked; automatic: group major for the sorted pass only.
                    if (blocks == ops::FocusHardBlockOrder::automatic) {
                      EXPECT_EQ(plan.longest_first, !plan.sorted);
                    } else {
                      EXPECT_EQ(plan.longest_first,
                                blocks == ops::FocusHardBlockOrder::longest_first);
                    }
                  }
  EXPECT_GT(plans, 100);
  EXPECT_GT(errors, 100);
}

// The errors a user meets, by the option that does not apply.
TEST(FocusHardPlan, OptionsThatDoNotApplyNameThemselves) {
  using ops::plan_focus_hard;
  const auto automatic = FocusHardIndexPath::automatic;
  test::expect_error(
      [&] {
        plan_focus_hard(FocusHardKernel::wgmma_sorted, FocusHardOrder::automatic, automatic, 64, 2,
                        8, 64, true);
      },
      {"sorted group pass (wgmma_sorted) takes top_k 1 only", "2"});
  test::expect_error(
      [&] {
        plan_focus_hard(FocusHardKernel::automatic, FocusHardOrder::automatic,
                        FocusHardIndexPath::fused, 8193, 1, 8, 64, true);
      },
      {"fused index kernel takes T up to 8192", "8193"});
  test::expect_error(
      [&] {
        plan_focus_hard(FocusHardKernel::wgmma, FocusHardOrder::automatic, automatic, 64, 1, 8, 64,
                        false);
      },
      {"wgmma kernel needs a build with sm_90a code"});
  test::expect_error(
      [&] {
        plan_focus_hard(FocusHardKernel::mma, FocusHardOrder::band_first, automatic, 64, 1, 8, 64,
                        true);
      },
      {"band pass first", "the mma kernel"});
  test::expect_error(
      [&] {
        plan_focus_hard(FocusHardKernel::wgmma, FocusHardOrder::band_first, automatic, 64, 2, 8, 64,
                        true);
      },
      {"band pass first", "top_k 2"});
  test::expect_error(
      [&] {
        plan_focus_hard(FocusHardKernel::wgmma, FocusHardOrder::fused, automatic, 64, 2, 8, 64,
                        true);
      },
      {"fused launch (FocusHardOrder::fused, fused_ws)", "top_k 2"});
  test::expect_error(
      [&] {
        plan_focus_hard(FocusHardKernel::wgmma_sorted, FocusHardOrder::fused, automatic, 64, 1, 8,
                        64, true);
      },
      {"fused launch (FocusHardOrder::fused, fused_ws)", "sorted pass"});
  test::expect_error(
      [&] {
        plan_focus_hard(FocusHardKernel::mma, FocusHardOrder::fused, automatic, 64, 1, 8, 64, true);
      },
      {"fused launch (FocusHardOrder::fused, fused_ws)", "the mma kernel"});
  test::expect_error(
      [&] {
        plan_focus_hard(FocusHardKernel::wgmma, FocusHardOrder::fused_ws, automatic, 64, 1, 8, 128,
                        true);
      },
      {"warp-specialised fused launch (FocusHardOrder::fused_ws) takes head dim 64", "128"});
  test::expect_error(
      [&] {
        plan_focus_hard(FocusHardKernel::wgmma_masked, FocusHardOrder::automatic, automatic, 64, 2,
                        8, 64, false);
      },
      {"masked wgmma kernel (wgmma_masked) needs a build with sm_90a code"});
  test::expect_error(
      [&] {
        plan_focus_hard(FocusHardKernel::wgmma_masked, FocusHardOrder::band_first, automatic, 64, 2,
                        8, 64, true);
      },
      {"masked wgmma kernel (wgmma_masked) has no passes", "FocusHardOrder"});
  test::expect_error(
      [&] {
        plan_focus_hard(FocusHardKernel::wgmma_masked, FocusHardOrder::automatic,
                        FocusHardIndexPath::split, 64, 2, 8, 64, true);
      },
      {"masked wgmma kernel (wgmma_masked)", "FocusHardIndexPath"});
}

}  // namespace
}  // namespace attnlab
