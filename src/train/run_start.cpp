#include "train/run_start.h"

#include <filesystem>
#include <optional>

#include "config/suggest.h"
#include "core/error.h"
#include "dist/consistency.h"
#include "interop/foreign_tensors.h"
#include "interop/model_source.h"
#include "train/host_memory.h"
#include "train/retrofit.h"

namespace fs = std::filesystem;

namespace attnlab::train_session {

RunStart start_run(const Recipe& recipe, const Recipe& resolved, const std::string& resume,
                   const std::string& data_fp, const ScheduleSpec& sched, Session& s, AdamW& opt) {
  RunStart r;
  TrainerState& st = r.st;
  std::string &resumed_from = r.resumed_from, &resume_changes = r.resume_changes,
              &data_changed = r.data_changed, &resume_lr_change = r.lr_change;
  bool& resume_own_run = r.own_run;
  WeightLoadReport& init_report = r.init_report;
  const int world = s.comm->world_size();
  const std::string& run_dir = recipe.train.out_dir;
  if (!resume.empty()) {
    std::string dir = resolve_checkpoint_dir(resume);
    // Without a trailing separator (its parent is the checkpoints directory, its name the step).
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    // The run directory receives recipe.yaml, the metrics (cut back to the resumed step) and new
    // checkpoints (pruned by keep_last): it must be the checkpoint's own run or a new one, never
    // another run (a forgotten --set train.out_dir wrote into the recipe's default run).
    const fs::path own = fs::weakly_canonical(fs::path(dir).parent_path());
    resume_own_run = own == fs::weakly_canonical(fs::path(run_dir) / "checkpoints");
    ATTN_REQUIRE(!run_has_checkpoints(run_dir) || resume_own_run,
                 "--resume %s: train.out_dir '%s' holds another run (its own checkpoints), which "
                 "the resume would overwrite; resume into the checkpoint's run (--set "
                 "train.out_dir=%s) or into a new directory",
                 resume.c_str(), run_dir.c_str(), own.parent_path().c_str());
    resume_changes = check_resume_recipe(resolved, dir);
    st = load_trainer_state(dir);
    check_checkpoint_steps(dir, st.step);  // before any load: files of two checkpoints mixed
    // An f32 checkpoint resumed in bf16 (a CPU or fp32 run): the master starts from the file's
    // f32 values, not from their bf16 rounding (a bf16 checkpoint's own master loads as it is).
    std::vector<float> exact;
    load_model_weights(dir, s.store, &exact);
    if (!load_optimizer_state(dir, opt) && !exact.empty()) opt.set_master(exact);
    if (const std::optional<Recipe> was = read_checkpoint_recipe(dir)) {
      resume_lr_change =
          schedule_change_note(schedule_of(*was, int(was->train.steps)), sched, int(st.step));
      // Another window order in the middle of an epoch: the position counts windows of the old
      // order, so this epoch reads some windows twice and others never (listed among the
      // changed keys only, it read as harmless).
      // (The seed orders windows only where both shuffle.)
      const bool seed =
          was->data.seed != recipe.data.seed && was->data.shuffle && recipe.data.shuffle;
      const char* order = seed                                         ? "data.seed"
                          : was->data.shuffle != recipe.data.shuffle   ? "data.shuffle"
                          : was->train.seq_len != recipe.train.seq_len ? "train.seq_len"
                                                                       : nullptr;
      if (order && st.data_position > 0)
        data_changed = strformat(
            "%s differs from the checkpoint's: the resumed epoch %lld continues at window "
            "%lld of another window order, so it reads some windows twice and others not at "
            "all (every window once again from the next epoch)",
            order, (long long)st.data_epoch, (long long)st.data_position);
    }
    // Every rank resumed the same checkpoint (its own copy of it: a node with a stale out_dir
    // trained on silently with other weights): its step, data position and sampled weights.
    if (world > 1)
      check_same_run(*s.comm,
                     {{"resume: checkpoint step", std::to_string(st.step)},
                      {"resume: data position",
                       strformat("epoch %lld, position %lld", (long long)st.data_epoch,
                                 (long long)st.data_position)},
                      {"resume: weights", params_fingerprint(s.store.all_params())}},
                     "checkpoint to resume",
                     "resume every rank from the same checkpoint, on a file system every node "
                     "sees");
    ATTN_REQUIRE(st.step < recipe.train.steps,
                 "--resume %s: the checkpoint is at step %lld and train.steps is %lld: nothing to "
                 "train (raise train.steps)",
                 resume.c_str(), (long long)st.step, (long long)recipe.train.steps);
    s.train_loader->set_state(DataLoader::State{st.data_epoch, st.data_position});
    // The data under the glob changed since (shards added, replaced, regenerated): the position
    // now indexes other data, so the run is not the one it would have been. Said, not refused.
    if (!st.data_fingerprint.empty() && st.data_fingerprint != data_fp)
      data_changed += std::string(data_changed.empty() ? "" : "; ") +
                      strformat(
                          "the training data differs from the checkpoint's (%s, now %s): "
                          "the resumed run continues at its data position in other data",
                          st.data_fingerprint.c_str(), data_fp.c_str());
    resumed_from = dir;
    s.generation_config_json = generation_config_of(inspect_model_source(dir));
  } else {
    std::vector<float> exact;  // the source's values finer than the store's (load_init_from)
    if (!init_source(recipe).empty()) {
      init_report = load_init_from(recipe, s.store, &exact);
      // An Instruct model's stop ids go on with its fine-tune (generate reads them).
      s.generation_config_json = generation_config_of(inspect_model_source(init_source(recipe)));
    }
    require_new_parameters_train(recipe, s.store, init_report.initialised);
    ATTN_REQUIRE(!run_has_checkpoints(run_dir),
                 "train.out_dir '%s' already holds a run with checkpoints; "
                 "continue it with --resume %s, or choose another train.out_dir",
                 run_dir.c_str(), run_dir.c_str());
    // Every rank starts from rank 0's weights (they agree already: the same seed and files).
    if (world > 1) {
      s.comm->broadcast(s.store.all_params(), 0);
      s.comm->wait();
    }
    // The bf16 master copy was taken at construction: retake it from the weights as loaded by
    // train.init_from (a fine-tune would otherwise update the random initialisation), and from
    // the source's finer values where it has them (its f32 weights, a bf16 run's master).
    opt.sync_master_from_params();
    if (!exact.empty() && s.store.dtype() == DType::f32)
      host_f32_to_tensor(exact.data(), s.store.trainable_params());
    else if (!exact.empty())
      opt.set_master(exact);
  }
  return r;
}

void warn_at_start(const Recipe& recipe, const Session& s, const AdamW& opt, const io::Logger& log,
                   bool gathers_optimizer_state) {
  const int accum = recipe.train.grad_accum_steps(s.comm->world_size());
  if (s.model->config().n_layer > 0)
    for (const std::string& w : s.model->attention(0).config_warnings(recipe.train.seq_len))
      log.warn("%s", w.c_str());
  for (const auto& [key, loader] :
       {std::pair{"data.train", s.train_loader.get()}, std::pair{"data.val", s.val_loader.get()}})
    if (loader && !loader->short_sources().empty())
      log.warn(
          "%s: %zu source(s) shorter than one window (seq_len + 1 = %d tokens) hold no "
          "window and are not read: %s",
          key, loader->short_sources().size(), recipe.train.seq_len + 1,
          join_names(loader->short_sources()).c_str());
  // Fewer windows than one step reads: a step holds some window twice (weighted double).
  if (const int64_t per_step =
          int64_t(recipe.train.micro_batch) * accum * int64_t(s.comm->world_size());
      s.train_loader->num_windows() < per_step)
    log.warn(
        "data.train holds %lld window(s) of seq_len %d, fewer than one step reads (%lld = "
        "micro_batch %d x %d accumulation x %d rank(s)): every step repeats windows, some "
        "twice in the same step; use more data or a smaller batch",
        (long long)s.train_loader->num_windows(), recipe.train.seq_len, (long long)per_step,
        recipe.train.micro_batch, accum, s.comm->world_size());
  for (const std::string& w : s.data_warnings) log.warn("%s", w.c_str());
  // Under ZeRO-1 a checkpoint gathers the whole optimizer state into rank 0's host memory
  // (AdamW::gathered_state): said at the start where this host has less free now.
  if (s.comm->rank() == 0 && gathers_optimizer_state) {
    const size_t need = opt.state_tensors().size() * size_t(s.store.trainable_buffer_numel()) * 4;
    const std::string w = host_gather_warning(need, host_memory_available());
    if (!w.empty()) log.warn("%s", w.c_str());
  }
}

}  // namespace attnlab::train_session
