// The host/device helpers of the hard-routed forward's passes that run without the index
// (kernels/focus/focus_hard_walk.h): group_set (the band pass's group sets from the groups rows,
// which must equal the index's masks) and merge_weights (the group pass merging the band's
// partial for top_k 1: two softmax partials over disjoint key sets must give the softmax over
// their union).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/focus/focus_hard_walk.h"

namespace attnlab {
namespace {

TEST(FocusHardMerge, GroupSetKeepsEachValidIdOnce) {
  const int32_t row[] = {3, -1, 3, 64, 0, 63};
  EXPECT_EQ(focus_hard::group_set(row, 6, 64), (uint64_t(1) << 3) | 1u | (uint64_t(1) << 63));
  EXPECT_EQ(focus_hard::group_set(row, 1, 64), uint64_t(1) << 3);
  EXPECT_EQ(focus_hard::group_set(row, 6, 3), 1u);  // 3 and 63 are out of range at K 3
  const int32_t none[] = {-1, 8};
  EXPECT_EQ(focus_hard::group_set(none, 2, 8), 0u);
}

// Softmax partial (o normalised, lse) of scores s over rows v, keys where take[j]; empty: -inf, 0.
void partial(const std::vector<double>& s, const std::vector<std::vector<double>>& v,
             const std::vector<bool>& take, double* lse, std::vector<double>* o) {
  double mx = -INFINITY;
  for (size_t j = 0; j < s.size(); ++j)
    if (take[j]) mx = std::max(mx, s[j]);
  o->assign(v[0].size(), 0.0);
  if (mx == -INFINITY) {
    *lse = -INFINITY;
    return;
  }
  double sum = 0;
  for (size_t j = 0; j < s.size(); ++j) {
    if (!take[j]) continue;
    const double e = std::exp(s[j] - mx);
    sum += e;
    for (size_t d = 0; d < o->size(); ++d) (*o)[d] += e * v[j][d];
  }
  for (double& x : *o) x /= sum;
  *lse = mx + std::log(sum);
}

TEST(FocusHardMerge, TwoPartialsGiveTheSoftmaxOverTheirUnion) {
  std::mt19937_64 gen(7);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + trial % 37, D = 8;
    const double scale = trial % 3 == 0 ? 40.0 : 4.0;  // far-apart lse too
    std::vector<double> s(n);
    std::vector<std::vector<double>> v(n, std::vector<double>(D));
    std::vector<bool> in_a(n), all(n, true);
    for (int j = 0; j < n; ++j) {
      s[j] = scale * u(gen);
      for (double& x : v[j]) x = u(gen);
      in_a[j] = trial % 5 == 0 ? true : u(gen) < 0.3;  // every fifth: b empty
    }
    std::vector<bool> in_b(n);
    for (int j = 0; j < n; ++j) in_b[j] = !in_a[j];
    double la, lb, lr;
    std::vector<double> oa, ob, ref;
    partial(s, v, in_a, &la, &oa);
    partial(s, v, in_b, &lb, &ob);
    partial(s, v, all, &lr, &ref);
    for (int order = 0; order < 2; ++order) {  // either side may be the empty one
      float wa, wb, lse;
      if (order == 0)
        focus_hard::merge_weights(float(la), float(lb), &wa, &wb, &lse);
      else
        focus_hard::merge_weights(float(lb), float(la), &wb, &wa, &lse);
      ASSERT_TRUE(std::isfinite(lse)) << trial;
      EXPECT_NEAR(lse, lr, 1e-5 * std::max(1.0, std::abs(lr))) << trial;
      for (int d = 0; d < D; ++d) {
        const double got = wa * oa[d] + wb * ob[d];
        EXPECT_NEAR(got, ref[d], 1e-6) << trial << " " << d;
      }
    }
  }
}

}  // namespace
}  // namespace attnlab
