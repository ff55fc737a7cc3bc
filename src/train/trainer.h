// The training loop: builds the model, optimizer and data from a Recipe, then runs steps with
// gradient accumulation, logging, evaluation and checkpoints. Resume is bit-exact on CPU.
// Several ranks (docs/distributed.md): the launcher's environment gives the rank, world size and
// device; distributed.* picks the backend and ZeRO stage.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "config/recipe.h"

namespace attnlab {

struct TrainOptions {
  std::string resume;     // run or checkpoint directory; "" = fresh run
  int profile_steps = 0;  // > 0: run this many steps (for nsys/ncu), no checkpoints
  bool quiet = false;     // no progress lines (tests)
  // One process even under a launcher (mpirun, srun, RANK/WORLD_SIZE): the launch environment
  // is ignored (tests: the one-rank reference inside an mpirun job).
  bool single_process = false;
};

struct TrainResult {
  int64_t steps = 0;  // optimizer steps completed in total
  double final_train_loss = 0.0;
  std::vector<double> losses;     // training loss of every step run by this call
  double final_val_loss = 0.0;    // the last evaluation's (NaN when evaluation is off)
  double unigram_baseline = 0.0;  // loss of the best token-frequency model on validation data
  std::string run_dir;
  int interrupted_by = 0;  // the signal that stopped the run early (train/interrupt.h), else 0
};

TrainResult train(const Recipe& recipe, const TrainOptions& options);

}  // namespace attnlab
