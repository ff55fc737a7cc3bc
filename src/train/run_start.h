// How a training run starts (src/train/trainer.cpp runs it): from a checkpoint (--resume) or
// anew (random weights, or train.init_from's), and the warnings about the run said at its start.
#pragma once

#include <string>

#include "config/recipe.h"
#include "io/logger.h"
#include "train/checkpoint.h"
#include "train/from_recipe.h"
#include "train/init_from.h"
#include "train/optimizer.h"
#include "train/session.h"

namespace attnlab::train_session {

// Where the run starts and what the resume found.
struct RunStart {
  TrainerState st;               // the resumed checkpoint's (step 0 for a new run)
  std::string resumed_from;      // the checkpoint directory ("" for a new run)
  std::string resume_changes;    // recipe keys changed from the checkpoint's
  std::string data_changed;      // the data or its window order changed since (a warning)
  std::string lr_change;         // the schedule changed at the resumed step (a warning)
  bool own_run = false;          // resuming a checkpoint of train.out_dir itself
  WeightLoadReport init_report;  // train.init_from's load (new runs)
};

// With `resume` (the --resume path) non-empty: the checkpoint's weights, optimizer state, data
// position and trainer state, after checking it against the run (its recipe, steps, the run
// directory, every rank the same checkpoint). Else a new run: train.init_from's weights where
// set, the same on every rank, the optimizer's master copy retaken from them. `resolved` is the
// recipe as the run resolved it; data_fp the training data's fingerprint; sched the run's
// schedule. Sets s.generation_config_json from the source model.
RunStart start_run(const Recipe& recipe, const Recipe& resolved, const std::string& resume,
                   const std::string& data_fp, const ScheduleSpec& sched, Session& s, AdamW& opt);

// The warnings a run's start gives about its setup: the attention's config warnings, data
// sources shorter than a window, fewer windows than a step reads, setup_data's warnings, and
// (gathers_optimizer_state: ZeRO-1 with checkpoints) a checkpoint's gather of the optimizer
// state into rank 0's host memory where the host has less free.
void warn_at_start(const Recipe& recipe, const Session& s, const AdamW& opt, const io::Logger& log,
                   bool gathers_optimizer_state);

}  // namespace attnlab::train_session
