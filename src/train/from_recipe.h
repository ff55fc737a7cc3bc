// The one mapping from a Recipe to the settings of the model, optimizer and LR schedule, shared by
// the trainer, `attnlab info`, generation and the benchmarks.
#pragma once
#include "config/recipe.h"
#include "model/gpt.h"
#include "train/optimizer.h"
#include "train/schedule.h"

namespace attnlab {

GPTConfig gpt_config_of(const Recipe& r);
// The inverse for the model: sets r.model.* and r.attention.{type, window} so that
// gpt_config_of(r) describes the model of `c` (model.preset cleared; vocab_multiple the largest
// power of two <= 128 that gives c.padded_vocab). Used for models from other formats.
void set_model_config(const GPTConfig& c, Recipe& r);
// The largest power of two <= 128 that pads vocab_size to padded_vocab (model.vocab_multiple);
// throws when there is none.
int vocab_multiple_of(int vocab_size, int padded_vocab);
FocusOptions focus_options_of(const FocusConfig& f);
// model.rope_scaling <-> the model's RopeScaling (type none: the factors are not read).
RopeScaling rope_scaling_of(const RopeScalingConfig& r);
RopeScalingConfig rope_scaling_config_of(const RopeScaling& s);
AdamWConfig adamw_config_of(const Recipe& r);
ScheduleSpec schedule_of(const Recipe& r, int total_steps);
// For a resume whose recipe changes the schedule (train.steps, optim.lr, schedule.*): "" when
// 0-based step next_step runs at the lr the checkpoint's schedule `was` gives it, else a note
// with both (the schedule is recomputed over the new values, so the lr can jump).
std::string schedule_change_note(const ScheduleSpec& was, const ScheduleSpec& now, int next_step);

}  // namespace attnlab
