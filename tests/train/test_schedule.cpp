// Learning-rate schedules against values worked out by hand at the key steps.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <string>

#include "core/error.h"
#include "test_util.h"
#include "train/from_recipe.h"
#include "train/schedule.h"

namespace attnlab {
namespace {

using test::expect_error;

ScheduleSpec make(ScheduleSpec::Type type, int warmup, int total, float final_frac = 0.1f,
                  float decay_frac = 0.2f) {
  ScheduleSpec s;
  s.type = type;
  s.lr = 1e-3f;
  s.warmup_steps = warmup;
  s.total_steps = total;
  s.final_lr_frac = final_frac;
  s.decay_frac = decay_frac;
  return s;
}

constexpr double kTol = 1e-9;  // lr_at returns float: compare with float rounding of 1e-3

void expect_lr(const ScheduleSpec& s, int step, double expected) {
  EXPECT_NEAR(lr_at(s, step), expected, kTol + 1e-6 * expected)
      << schedule_type_name(s.type) << " step " << step;
}

TEST(Schedule, WarmupIsShared) {
  // Warmup 10: step k gives lr * (k+1)/10 for every type.
  for (auto type :
       {ScheduleSpec::cosine, ScheduleSpec::linear, ScheduleSpec::constant, ScheduleSpec::wsd}) {
    const ScheduleSpec s = make(type, 10, 110);
    expect_lr(s, 0, 1e-4);
    expect_lr(s, 4, 5e-4);
    expect_lr(s, 9, 1e-3);   // warmup-1 reaches the peak
    expect_lr(s, 10, 1e-3);  // first step after warmup starts at the peak
  }
}

TEST(Schedule, Cosine) {
  // W = 10, N = 111: the decay runs over steps 10..110 (r = (step-10)/100), lr_min = 1e-4.
  const ScheduleSpec s = make(ScheduleSpec::cosine, 10, 111);
  expect_lr(s, 10, 1e-3);
  expect_lr(s, 35, 1e-4 + 9e-4 * 0.5 * (1 + std::cos(std::numbers::pi * 0.25)));
  expect_lr(s, 60, 5.5e-4);  // midpoint: cos(pi/2) = 0
  expect_lr(s, 110, 1e-4);   // last step
  expect_lr(s, 500, 1e-4);   // past the end: stays at lr_min
  EXPECT_GT(lr_at(s, 59), lr_at(s, 60));
}

TEST(Schedule, Linear) {
  const ScheduleSpec s = make(ScheduleSpec::linear, 10, 111);
  expect_lr(s, 10, 1e-3);
  expect_lr(s, 35, 1e-3 - 9e-4 * 0.25);
  expect_lr(s, 60, 5.5e-4);
  expect_lr(s, 110, 1e-4);
  // No warmup: step 0 is the peak, decay to zero.
  const ScheduleSpec z = make(ScheduleSpec::linear, 0, 5, 0.f);
  expect_lr(z, 0, 1e-3);
  expect_lr(z, 1, 7.5e-4);
  expect_lr(z, 4, 0.0);
}

TEST(Schedule, Constant) {
  const ScheduleSpec s = make(ScheduleSpec::constant, 5, 50);
  expect_lr(s, 0, 2e-4);
  expect_lr(s, 5, 1e-3);
  expect_lr(s, 49, 1e-3);
  expect_lr(make(ScheduleSpec::constant, 0, 1), 0, 1e-3);
}

TEST(Schedule, WsdBoundaries) {
  // N = 100, decay_frac 0.2: D = 20 decay steps, S = 80. Stable for 10..79, then
  // lr - (lr - lr_min) * (step - 79) / 20, reaching lr_min (1e-4) at step 99.
  const ScheduleSpec s = make(ScheduleSpec::wsd, 10, 100);
  expect_lr(s, 9, 1e-3);
  expect_lr(s, 10, 1e-3);
  expect_lr(s, 50, 1e-3);
  expect_lr(s, 79, 1e-3);                   // last stable step
  expect_lr(s, 80, 1e-3 - 9e-4 / 20);       // first decay step is already below the peak
  expect_lr(s, 89, 1e-3 - 9e-4 * 10 / 20);  // halfway
  expect_lr(s, 99, 1e-4);                   // last step
  expect_lr(s, 120, 1e-4);
  // decay_frac 0: never decays. decay_frac rounds: 0.25 of 10 steps = 2.5 -> 3 steps.
  const ScheduleSpec flat = make(ScheduleSpec::wsd, 2, 10, 0.1f, 0.f);
  expect_lr(flat, 9, 1e-3);
  const ScheduleSpec r = make(ScheduleSpec::wsd, 0, 10, 0.f, 0.25f);
  expect_lr(r, 6, 1e-3);
  expect_lr(r, 7, 1e-3 * 2 / 3);
  expect_lr(r, 9, 0.0);
}

TEST(Schedule, EdgeCases) {
  // One step after warmup: it stays at the peak (the decay has no room).
  expect_lr(make(ScheduleSpec::cosine, 4, 5), 4, 1e-3);
  // Warmup covering the whole run.
  expect_lr(make(ScheduleSpec::cosine, 5, 5), 4, 1e-3);
  expect_lr(make(ScheduleSpec::cosine, 0, 1), 0, 1e-3);
}

TEST(Schedule, ParseAndErrors) {
  EXPECT_EQ(parse_schedule_type("cosine"), ScheduleSpec::cosine);
  EXPECT_EQ(parse_schedule_type("linear"), ScheduleSpec::linear);
  EXPECT_EQ(parse_schedule_type("constant"), ScheduleSpec::constant);
  EXPECT_EQ(parse_schedule_type("wsd"), ScheduleSpec::wsd);
  expect_error([] { parse_schedule_type("Cosine"); },
               "unknown lr schedule 'Cosine' (valid: cosine, linear, constant, wsd)");
  expect_error([] { lr_at(make(ScheduleSpec::cosine, 0, 0), 0); }, "total_steps must be >= 1");
  expect_error([] { lr_at(make(ScheduleSpec::cosine, 11, 10), 0); }, "warmup_steps must be in");
  expect_error([] { lr_at(make(ScheduleSpec::cosine, 1, 10, 1.5f), 0); }, "final_lr_frac");
  expect_error([] { lr_at(make(ScheduleSpec::wsd, 1, 10, 0.1f, -0.1f), 0); }, "decay_frac");
  expect_error([] { lr_at(make(ScheduleSpec::wsd, 5, 10, 0.1f, 0.6f), 0); },
               "overlaps the 5 warmup steps");
  expect_error([] { lr_at(make(ScheduleSpec::cosine, 1, 10), -1); }, "step must be >= 0");
  ScheduleSpec nan_lr = make(ScheduleSpec::cosine, 1, 10);
  nan_lr.lr = NAN;
  expect_error([&] { lr_at(nan_lr, 0); }, "lr must be finite");
}

// A resume that lengthens a cosine run recomputes its schedule: the lr jumps back up, said.
TEST(Schedule, AResumeThatChangesTheScheduleIsNamed) {
  const ScheduleSpec was = make(ScheduleSpec::cosine, 0, 4), same = was;
  ScheduleSpec longer = was;
  longer.total_steps = 8;
  EXPECT_EQ(schedule_change_note(was, same, 4), "");
  const std::string note = schedule_change_note(was, longer, 4);
  EXPECT_NE(note.find("cosine over 8 steps"), std::string::npos) << note;
  EXPECT_NE(note.find("step 5 runs at lr"), std::string::npos) << note;
  // Only the lr of the next step counts: a change that leaves it (the constant schedule's
  // length) is not worth a warning.
  ScheduleSpec constant = make(ScheduleSpec::constant, 0, 4), constant_longer = constant;
  constant_longer.total_steps = 8;
  EXPECT_EQ(schedule_change_note(constant, constant_longer, 2), "");
}

}  // namespace
}  // namespace attnlab
