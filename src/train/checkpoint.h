// Checkpoint directories. A run directory holds
//   recipe.yaml                 the resolved recipe of the run
//   metrics.jsonl               every logged value (JSON lines)
//   checkpoints/step_00000100/  one checkpoint:
//       model.safetensors       parameters under their stable names; metadata: step, recipe, format
//       optimizer.safetensors   AdamW state (adamw.m, adamw.v[, adamw.master]) over the trainable
//       range trainer_state.json      step, data-loader position, tokens seen, elapsed time
//       tokenizer.json          the tokenizer of the data (when known)
//   checkpoints/latest          the name of the newest complete checkpoint
// A checkpoint is written into a temporary directory, fsynced and renamed into place, then
// `latest` is replaced atomically: a crash at any point leaves the previous checkpoint intact.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/parameters.h"

namespace attnlab {

struct TrainerState {
  int64_t step = 0;         // optimizer steps completed
  uint64_t data_epoch = 0;  // train loader position
  uint64_t data_position = 0;
  int64_t tokens_seen = 0;
  double elapsed_seconds = 0.0;
};

struct CheckpointContents {
  const ParameterStore* store = nullptr;
  std::vector<std::pair<std::string, Tensor>> optimizer_state;
  TrainerState state;
  std::string recipe_yaml;
  std::string tokenizer_json;  // may be empty
};

// Writes <run_dir>/checkpoints/step_<step>/ atomically, updates `latest`, and deletes periodic
// checkpoints beyond the newest keep_last. Returns the checkpoint directory.
std::string save_checkpoint(const std::string& run_dir, const CheckpointContents& c, int keep_last);

// Resolves a --resume / --checkpoint argument: a checkpoint directory itself, or a run directory
// (its `latest`). Throws naming what was looked for.
std::string resolve_checkpoint_dir(const std::string& path);
// True when run_dir already holds at least one checkpoint.
bool run_has_checkpoints(const std::string& run_dir);

// Loads parameters by name into the store (shape-checked; f32 <-> bf16 converted), every tensor
// of the store must be present.
void load_model_weights(const std::string& ckpt_dir, const ParameterStore& store);
// Opens optimizer.safetensors and hands its tensors (host views, valid during the call) to `use`.
void load_optimizer_state(
    const std::string& ckpt_dir,
    const std::function<void(const std::vector<std::pair<std::string, Tensor>>&)>& use);
TrainerState load_trainer_state(const std::string& ckpt_dir);

}  // namespace attnlab
