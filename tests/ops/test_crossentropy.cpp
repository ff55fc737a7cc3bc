#include <gtest/gtest.h>

#include <cmath>

#include "ops/ops.h"
#include "ref/crossentropy_ref.h"
#include "test_util.h"

namespace attnlab {
namespace {

using test::cpu_tensor;
using test::max_rel_error;
using test::random_vector;

constexpr int kIgnore = -100;

// 7 rows over a vocab of 11 padded to 16; rows 2 and 5 are ignored. The padded columns hold
// large values so that any leak of them into the softmax shows.
struct CrossEntropyCase {
  int64_t N = 7;
  int V = 11, Vp = 16;
  std::vector<float> logits;
  std::vector<int32_t> targets;
  std::vector<float> losses;
  explicit CrossEntropyCase(uint32_t seed)
      : logits(random_vector(size_t(N) * Vp, seed, -4.f, 4.f)),
        targets(test::random_ints(size_t(N), seed + 1, V)),
        losses(size_t(N), -1.f) {
    targets[2] = kIgnore;
    targets[5] = kIgnore;
    for (int64_t i = 0; i < N; ++i)
      for (int j = V; j < Vp; ++j) logits[i * Vp + j] = 50.f;
  }
  CrossEntropyParams<float> params() {
    CrossEntropyParams<float> p;
    p.logits = logits.data();
    p.targets = targets.data();
    p.losses = losses.data();
    p.N = N;
    p.V = V;
    p.Vp = Vp;
    p.ignore_index = kIgnore;
    return p;
  }
};

TEST(CrossEntropyRef, ForwardMasksPaddingAndIgnoredRows) {
  CrossEntropyCase c(1);
  crossentropy_fwd_ref(c.params());
  for (int64_t i = 0; i < c.N; ++i) {
    if (c.targets[i] == kIgnore) {
      EXPECT_EQ(c.losses[i], 0.f);
      continue;
    }
    double sum = 0;
    for (int j = 0; j < c.V; ++j) sum += std::exp(double(c.logits[i * c.Vp + j]));
    const double expect = std::log(sum) - c.logits[i * c.Vp + c.targets[i]];
    EXPECT_NEAR(c.losses[i], expect, 1e-6 * std::fabs(expect) + 1e-7) << "row " << i;
  }
}

TEST(CrossEntropyRef, BackwardMatchesFiniteDifferences) {
  CrossEntropyCase c(3);
  const float dloss = 0.2f;
  auto loss = [&] {
    crossentropy_fwd_ref(c.params());
    double s = 0;
    for (float l : c.losses) s += double(l) * dloss;
    return s;
  };
  const auto fd = test::finite_difference(c.logits.data(), c.logits.size(), loss);
  std::vector<float> dlogits(c.logits.size(), 9.f);
  CrossEntropyParams<float> p = c.params();
  p.dlogits = dlogits.data();
  p.dloss = dloss;
  crossentropy_fwd_bwd_ref(p);
  EXPECT_LT(max_rel_error(dlogits, fd), 2e-4);
  for (int64_t i = 0; i < c.N; ++i)
    for (int j = 0; j < c.Vp; ++j)
      if (j >= c.V || c.targets[i] == kIgnore) {
        EXPECT_EQ(dlogits[i * c.Vp + j], 0.f);
      }
  // The fused call writes the same losses as the forward.
  const auto fused_losses = c.losses;
  crossentropy_fwd_ref(c.params());
  EXPECT_EQ(fused_losses, c.losses);

  // dlogits may alias logits.
  std::vector<float> inplace = c.logits;
  p.logits = inplace.data();
  p.dlogits = inplace.data();
  crossentropy_fwd_bwd_ref(p);
  EXPECT_EQ(inplace, dlogits);
  EXPECT_EQ(fused_losses, c.losses);
}

TEST(CrossEntropyOp, RunsAndChecksArguments) {
  auto ctx = ExecContext::make_cpu();
  CrossEntropyCase c(5);
  std::vector<float> losses(size_t(c.N)), dlogits(c.logits.size());
  ops::crossentropy_fwd_bwd(*ctx, cpu_tensor(losses, {c.N}), cpu_tensor(dlogits, {c.N, c.Vp}),
                            cpu_tensor(c.logits, {c.N, c.Vp}), cpu_tensor(c.targets, {c.N}), c.V,
                            kIgnore, 1.f);
  crossentropy_fwd_ref(c.params());
  EXPECT_EQ(losses, c.losses);

  c.targets[0] = c.V;  // a padded column is not a valid target
  EXPECT_EQ(test::thrown_message([&] {
              ops::crossentropy_fwd(*ctx, cpu_tensor(losses, {c.N}),
                                    cpu_tensor(c.logits, {c.N, c.Vp}), cpu_tensor(c.targets, {c.N}),
                                    c.V, kIgnore);
            }),
            "crossentropy: target 11 at row 0 is outside [0, 11) and not the ignore_index -100");
  EXPECT_EQ(test::thrown_message([&] {
              ops::crossentropy_fwd(*ctx, cpu_tensor(losses, {c.N}),
                                    cpu_tensor(c.logits, {c.N, c.Vp}), cpu_tensor(c.targets, {c.N}),
                                    17, kIgnore);
            }),
            "crossentropy: vocab size V = 17 must be in [1, 16] (the padded vocab of logits "
            "f32[7, 16] on cpu)");
  std::vector<float> short_losses(3);
  EXPECT_EQ(test::thrown_message([&] {
              ops::crossentropy_fwd(*ctx, cpu_tensor(short_losses, {3}),
                                    cpu_tensor(c.logits, {c.N, c.Vp}), cpu_tensor(c.targets, {c.N}),
                                    c.V, kIgnore);
            }),
            "crossentropy: losses must be f32 with 7 elements on cpu, got f32[3] on cpu");
}

}  // namespace
}  // namespace attnlab
