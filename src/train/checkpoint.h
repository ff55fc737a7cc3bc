// Checkpoint directories. A run directory holds
//   recipe.yaml                 the resolved recipe of the run
//   metrics.jsonl               every logged value (JSON lines)
//   checkpoints/step_00000100/  one checkpoint:
//       model.safetensors       parameters under their stable names; metadata: step, recipe, format
//       optimizer.safetensors   AdamW state (adamw.m, adamw.v[, adamw.master]) over the trainable
//                               range; metadata: step, param_layout (ParamLayout::to_json)
//       trainer_state.json      step, data-loader position, tokens seen, elapsed time, data
//                               fingerprint
//       tokenizer.json          the tokenizer of the data (when known)
//       adapter.safetensors     retrofit runs: the tensors added to the base (train/retrofit.h)
//   checkpoints/latest          the name of the newest complete checkpoint
// A checkpoint is written into a temporary directory, fsynced and renamed into place, then
// `latest` is replaced atomically: a crash at any point leaves the previous checkpoint intact.
// docs/checkpoints.md describes the files and the rules of loading them.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "config/recipe.h"
#include "core/parameters.h"
#include "data/shard.h"
#include "train/optimizer.h"

namespace attnlab {

struct TrainerState {
  int64_t step = 0;         // optimizer steps completed
  uint64_t data_epoch = 0;  // train loader position
  uint64_t data_position = 0;
  int64_t tokens_seen = 0;
  double elapsed_seconds = 0.0;
  // The training data the position indexes (data_fingerprint); "" in older checkpoints.
  std::string data_fingerprint;
  // What the run computed in ("cpu" / "cuda", "f32" / "bf16"): the recipe's train.precision is
  // an intent the CPU path does not follow (it is f32); "" in older checkpoints.
  std::string device, precision;
};

// "3 sources, 1234567 tokens, <hash>": the training data's sources (file names without their
// directory, sizes and sampled tokens: token_sample_hash), so a resume can tell that the data
// under its glob changed.
std::string data_fingerprint(const std::vector<std::shared_ptr<const TokenSource>>& sources);

struct CheckpointContents {
  const ParameterStore* store = nullptr;
  std::vector<std::pair<std::string, Tensor>> optimizer_state;
  TrainerState state;
  std::string recipe_yaml;
  std::string tokenizer_json;  // may be empty
  // generation_config.json (generate's stop ids) of the model the run started from: the
  // train.init_from / retrofit.checkpoint source's, or the resumed checkpoint's; may be empty.
  std::string generation_config_json;
  // Further files (a retrofit's adapter.safetensors): called with the checkpoint's temporary
  // directory before it is renamed into place, so they are part of the atomic checkpoint.
  std::function<void(const std::string& dir)> write_extra;
};

// Writes <run_dir>/checkpoints/step_<step>/ atomically, updates `latest`, and deletes periodic
// checkpoints beyond the newest keep_last. Returns the checkpoint directory.
std::string save_checkpoint(const std::string& run_dir, const CheckpointContents& c, int keep_last);

// Resolves a --resume / --checkpoint argument: a checkpoint directory itself, or a run directory
// (its `latest`). Throws naming what was looked for.
std::string resolve_checkpoint_dir(const std::string& path);

// A resume continues the model of checkpoint `dir`: every architecture and attention key that
// fixes its function (config/model_keys.h, model_function_conflicts) must resolve in `recipe` as
// in the checkpoint's recipe.yaml, else an error lists them. Training keys (optimizer, schedule,
// steps, data, eval, route_training) may change. The checkpoint's recipe is its recipe.yaml, else
// the one in its model.safetensors metadata; with neither the resume is refused. Returns the keys
// the recipe changes ("optim.lr 0.0006 -> 0.0003, ..."; "" for none), for the resume's log.
std::string check_resume_recipe(const Recipe& recipe, const std::string& dir);
// The resolved recipe of checkpoint directory `dir`: its recipe.yaml, else the "recipe" metadata
// of its model.safetensors; none when it has neither.
std::optional<Recipe> read_checkpoint_recipe(const std::string& dir);
// True when run_dir already holds at least one checkpoint.
bool run_has_checkpoints(const std::string& run_dir);
// The checkpoint directories of run_dir (checkpoints/step_<digits>), by step number.
std::vector<std::pair<int64_t, std::string>> checkpoint_steps(const std::string& run_dir);

// Loads parameters by name into the store (shape-checked; f32 <-> bf16 converted) for resume,
// eval and generate: every tensor of the store must be in the file and every tensor of the file
// must be in the store (else refused, naming the missing or the extra tensors). The checks of
// names, shapes and dtypes run before anything is copied; the NaN / infinity scan runs on each
// tensor as it is copied (a refused load may leave earlier tensors loaded: every caller stops).
// exact (non-null, a bf16 store): receives the trainable tensors' values as the file holds them
// in f32, before their rounding to bf16 (TrainableF32Values: empty when the file holds none).
void load_model_weights(const std::string& ckpt_dir, const ParameterStore& store,
                        std::vector<float>* exact = nullptr);

// Gathers the f32 values a load hands over (WeightLoadOptions::on_f32_values, or
// for_each_master_tensor) for the store's trainable tensors, at their offsets in the trainable
// range; finish() fills the trainable tensors that got none from the store (their values as
// loaded) and returns the whole range, or nothing when no tensor got f32 values. For
// AdamW::set_master: a bf16 run's master starts from the finest values its source holds.
class TrainableF32Values {
 public:
  explicit TrainableF32Values(const ParameterStore& store);
  void take(const std::string& name, const float* values, int64_t n);
  std::function<void(const std::string&, const float*, int64_t)> taker() {
    return [this](const std::string& name, const float* x, int64_t n) { take(name, x, n); };
  }
  std::vector<float> finish();

 private:
  const ParameterStore& store_;
  std::vector<float> values_;
  std::set<std::string> taken_;
};

// Loading a model from a checkpoint of a related model (train.init_from, retrofit): a dense
// checkpoint seeds a model that adds tensors (Focus centroids) or lacks some.
struct WeightLoadOptions {
  // Tensors of these roles must come from the file; tensors of other roles that the file lacks
  // keep their initialisation.
  std::set<ParamRole> required_roles = {ParamRole::base};
  // Tensors in the file that the model lacks are skipped (listed in `ignored`); else an error.
  bool allow_extra = false;
  // The recipe key that sets allow_extra, named by that error (null: none).
  const char* allow_extra_key = nullptr;
  // Called for each loaded tensor whose values the source holds in f32 (an f32 safetensors
  // tensor; every tensor of the foreign readers), before they are rounded to the store's dtype:
  // name, values, count (the store tensor's numel). Empty: not called.
  std::function<void(const std::string&, const float*, int64_t)> on_f32_values;
};

// Loading a model to run it as trained (eval, score, generate, convert): every tensor, a
// variant's and an adapter's too, must come from the file (a missing Focus centroid would
// otherwise keep its zero initialisation).
inline WeightLoadOptions whole_model_load() {
  WeightLoadOptions o;
  o.required_roles = {ParamRole::base, ParamRole::attention, ParamRole::adapter};
  return o;
}

// " ; set K: true to load the others and skip these" when options name the key, else "".
std::string allow_extra_hint(const WeightLoadOptions& options);
struct WeightLoadReport {
  std::vector<std::string> loaded;       // from the file, in store order
  std::vector<std::string> initialised;  // not in the file: kept their initialisation
  std::vector<std::string> ignored;      // in the file, not in the model (allow_extra)
  // "initialised (not in checkpoint): a, b" and/or "ignored (not in the model): c"; "" if none.
  std::string summary() const;
};
// Every check of names, shapes and dtypes (missing required tensor, unexpected tensor, shape or
// dtype that cannot load) runs before anything is copied, so such a refusal leaves the store as it
// was; a NaN or infinity is found as its tensor is copied (earlier tensors are then loaded; every
// caller stops on the error). Errors name the file,
// the tensor and, for a mismatch, both shapes or dtypes.
WeightLoadReport load_model_weights_by_role(const std::string& ckpt_dir,
                                            const ParameterStore& store,
                                            const WeightLoadOptions& options);

// Loads optimizer.safetensors into `opt`, checking the saved parameter layout against the
// optimizer's (AdamW::load_state). A file without a layout (written before layouts were saved)
// is read as packed state: AdamW::load_packed_state.
// Returns whether the file holds a master copy (adamw.master: a bf16 run's).
bool load_optimizer_state(const std::string& ckpt_dir, AdamW& opt);
TrainerState load_trainer_state(const std::string& ckpt_dir);
// Refuses a checkpoint whose model.safetensors or optimizer.safetensors says (metadata "step")
// another step than `step` (its trainer_state.json's): files of two checkpoints mixed.
void check_checkpoint_steps(const std::string& ckpt_dir, int64_t step);

// The fp32 master values of a bf16 run's trainable tensors (optimizer.safetensors' adamw.master,
// cut by its param_layout): take(name, values, numel) for each; nothing when the checkpoint has
// no such file, master or layout (an fp32 run's weights are exact in model.safetensors).
void for_each_master_tensor(
    const std::string& ckpt_dir,
    const std::function<void(const std::string&, const float*, int64_t)>& take);

}  // namespace attnlab
