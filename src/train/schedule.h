// Learning-rate schedules. `step` is the 0-based optimizer step; the run has total_steps steps
// (0 .. total_steps-1). With W = warmup_steps, N = total_steps, lr_min = lr * final_lr_frac:
//
//   warmup (all types), step < W:   lr * (step + 1) / W      (llm.c: the first step is not 0;
//                                                             step W-1 reaches the full lr)
//   after warmup, with r = (step - W) / (N - 1 - W) clamped to [0, 1] (r = 0 when N - 1 - W <= 0):
//     cosine:   lr_min + (lr - lr_min) * 0.5 * (1 + cos(pi * r))
//     linear:   lr - (lr - lr_min) * r
//     constant: lr
//   so the decay starts at lr at step W and ends exactly at lr_min at the last step N-1.
//
//   wsd (warmup-stable-decay): D = round(decay_frac * N) decay steps at the end of the run, which
//   starts decaying at S = N - D (S >= W is required):
//     W <= step < S:  lr
//     step >= S:      lr - (lr - lr_min) * min(1, (step - S + 1) / D)
//   so each decay step is below lr and the last step N-1 is exactly lr_min.
//
// Steps at or past N keep the value of step N-1 (lr_min for the decaying types).
#pragma once
#include <string>

namespace attnlab {

struct ScheduleSpec {
  enum Type { cosine, linear, constant, wsd };
  Type type = cosine;
  float lr = 3e-4f;
  int warmup_steps = 0;
  int total_steps = 1;
  float final_lr_frac = 0.f;  // lr_min = lr * final_lr_frac (cosine, linear, wsd)
  float decay_frac = 0.2f;    // wsd only: fraction of total_steps spent decaying
};

// "cosine", "linear", "constant", "wsd"; anything else throws listing the valid names.
ScheduleSpec::Type parse_schedule_type(const std::string& s);
const char* schedule_type_name(ScheduleSpec::Type t);

// Throws attnlab::Error naming the offending field when the spec is inconsistent.
void validate(const ScheduleSpec& spec);

// Learning rate at 0-based optimizer step `step` (>= 0). Validates the spec.
float lr_at(const ScheduleSpec& spec, int step);

}  // namespace attnlab
