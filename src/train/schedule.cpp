#include "train/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "config/recipe.h"
#include "core/error.h"

namespace attnlab {

ScheduleSpec::Type parse_schedule_type(const std::string& s) {
  if (s == "cosine") return ScheduleSpec::cosine;
  if (s == "linear") return ScheduleSpec::linear;
  if (s == "constant") return ScheduleSpec::constant;
  if (s == "wsd") return ScheduleSpec::wsd;
  ATTN_FAIL("unknown lr schedule '%s' (valid: cosine, linear, constant, wsd)", s.c_str());
}

const char* schedule_type_name(ScheduleSpec::Type t) {
  switch (t) {
    case ScheduleSpec::cosine:
      return "cosine";
    case ScheduleSpec::linear:
      return "linear";
    case ScheduleSpec::constant:
      return "constant";
    case ScheduleSpec::wsd:
      return "wsd";
  }
  return "?";
}

namespace {
int wsd_decay_steps(const ScheduleSpec& s) {
  return int(attnlab::wsd_decay_steps(s.decay_frac, s.total_steps));
}
}  // namespace

void validate(const ScheduleSpec& s) {
  ATTN_REQUIRE(std::isfinite(s.lr) && s.lr >= 0.f,
               "lr schedule: lr must be finite and >= 0, got %g", s.lr);
  ATTN_REQUIRE(s.total_steps >= 1, "lr schedule: total_steps must be >= 1, got %d", s.total_steps);
  ATTN_REQUIRE(s.warmup_steps >= 0 && s.warmup_steps <= s.total_steps,
               "lr schedule: warmup_steps must be in [0, total_steps=%d], got %d", s.total_steps,
               s.warmup_steps);
  ATTN_REQUIRE(s.final_lr_frac >= 0.f && s.final_lr_frac <= 1.f,
               "lr schedule: final_lr_frac must be in [0, 1], got %g", s.final_lr_frac);
  if (s.type == ScheduleSpec::wsd) {
    ATTN_REQUIRE(s.decay_frac >= 0.f && s.decay_frac <= 1.f,
                 "lr schedule: decay_frac must be in [0, 1], got %g", s.decay_frac);
    const int decay = wsd_decay_steps(s);
    ATTN_REQUIRE(s.total_steps - decay >= s.warmup_steps,
                 "lr schedule: wsd decay (decay_frac %g of %d steps = %d steps) overlaps the %d "
                 "warmup steps",
                 s.decay_frac, s.total_steps, decay, s.warmup_steps);
  }
}

float lr_at(const ScheduleSpec& s, int step) {
  validate(s);
  ATTN_REQUIRE(step >= 0, "lr schedule: step must be >= 0, got %d", step);
  if (step >= s.total_steps) step = s.total_steps - 1;
  const double lr = s.lr, lr_min = double(s.lr) * s.final_lr_frac;
  const int W = s.warmup_steps, N = s.total_steps;
  if (step < W) return float(lr * (step + 1) / W);
  if (s.type == ScheduleSpec::constant) return s.lr;
  if (s.type == ScheduleSpec::wsd) {
    const int D = wsd_decay_steps(s), S = N - D;
    if (step < S) return s.lr;
    const double r = std::min(1.0, double(step - S + 1) / D);
    return float(lr - (lr - lr_min) * r);
  }
  const int span = N - 1 - W;
  const double r = span <= 0 ? 0.0 : std::clamp(double(step - W) / span, 0.0, 1.0);
  if (s.type == ScheduleSpec::linear) return float(lr - (lr - lr_min) * r);
  return float(lr_min + (lr - lr_min) * 0.5 * (1.0 + std::cos(std::numbers::pi * r)));
}

}  // namespace attnlab
