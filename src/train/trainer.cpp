#include "train/trainer.h"

#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <optional>

#include "config/suggest.h"
#include "core/context.h"
#include "core/cuda_check.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "core/out_of_memory.h"
#include "data/loader.h"
#include "dist/communicator.h"
#include "dist/consistency.h"
#include "dist/grad_sync.h"
#include "dist/launch.h"
#include "dist/shard_map.h"
#include "eval/validation.h"
#include "interop/foreign_tensors.h"
#include "interop/model_source.h"
#include "io/atomic_file.h"
#include "io/data_hash.h"
#include "io/dir_lock.h"
#include "io/logger.h"
#include "io/metrics.h"
#include "model/gpt.h"
#include "train/checkpoint.h"
#include "train/from_recipe.h"
#include "train/host_memory.h"
#include "train/init_from.h"
#include "train/interrupt.h"
#include "train/optimizer.h"
#include "train/retrofit.h"
#include "train/run_start.h"
#include "train/schedule.h"
#include "train/session.h"

namespace fs = std::filesystem;

namespace attnlab {
using namespace train_session;

namespace {

// In train.out_dir, held by rank 0 while it trains (io/dir_lock.h).
constexpr const char* kRunDirLockName = ".attnlab-train.lock";

using Clock = std::chrono::steady_clock;

// The least bound of the barrier around rank 0's checkpoint write (seconds).
constexpr double kCheckpointBarrierS = 3600.0;

// Ctrl-C or SIGTERM over several ranks: a rank's signal as two sums of an all-reduce (whether
// any rank got one, whether any got SIGINT), and from them the signal every rank stops by (its
// own, else SIGINT where any rank got it, else SIGTERM; 0: none).
void put_signal(int mine, double* t) {
  t[0] = mine != 0 ? 1.0 : 0.0;
  t[1] = mine == SIGINT ? 1.0 : 0.0;
}
int agreed_signal(int mine, const double* t) {
  if (t[0] == 0) return 0;
  return mine != 0 ? mine : t[1] > 0 ? SIGINT : SIGTERM;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

TrainResult run_training(const Recipe& recipe, const TrainOptions& options, Session& s) {
  const bool rank0 = s.comm->rank() == 0;
  const int world = s.comm->world_size();
  setup_data(recipe, s, /*need_train=*/true);
  RunFacts facts = run_facts(recipe, {s.train_loader.get(), s.val_loader.get()});
  // --profile changes the number of steps (and skips checkpoints): a rank given another value
  // would leave its collectives unmatched.
  facts.emplace_back("--profile (steps)", std::to_string(options.profile_steps));
  // A rank that resumes calls collectives the others do not (the path may differ by node).
  facts.emplace_back("--resume (given)", options.resume.empty() ? "no" : "yes");
  check_same_run(*s.comm, facts);
  setup_model(recipe, s);

  const int zero = world > 1 ? recipe.distributed.zero : 0;
  const int64_t bucket_elems =
      int64_t(recipe.distributed.bucket_mb * double(1 << 20)) / int64_t(dtype_size(s.dtype));
  // The gradient buckets, and under ZeRO-1 this rank's slice of each (its optimizer shard).
  const ZeroShardMap shards(s.store.trainable_buffer_numel(), world, s.comm->rank(), bucket_elems);
  AdamW opt(*s.ctx, s.store, adamw_config_of(recipe), zero == 1 ? s.comm.get() : nullptr, &shards);
  GradientSync grad_sync(*s.comm, s.store, shards, zero);
  if (world > 1) s.model->set_backward_hook([&](int layer) { grad_sync.layer_done(layer); });
  const ScheduleSpec sched = schedule_of(recipe, int(recipe.train.steps));

  const int accum = recipe.train.grad_accum_steps(s.comm->world_size());
  const int64_t step_tokens = recipe.train.tokens_per_step();
  const std::string run_dir = recipe.train.out_dir;
  // The recipe as the run resolved it, for its recipe.yaml files and the resume's comparison:
  // data.tokenizer left out is the tokenizer.json beside the shards it took (recipe.yaml said
  // the default `byte`, which a rerun or a resume from that file then gave, and was refused).
  Recipe resolved = recipe;
  if (!recipe.given.contains("data.tokenizer") && !s.tokenizer_spec.empty())
    resolved.data.tokenizer = s.tokenizer_spec;
  const std::string recipe_yaml = recipe_to_yaml(resolved);

  // ---- run directory and resume --------------------------------------------------------------
  const std::string data_fp = data_fingerprint(s.train_loader->sources());
  if (rank0) io::ensure_dir(run_dir);
  // Where checkpoints go must be writable now, not found read-only after the last step (the
  // metrics and recipe.yaml were rewritten by then).
  const bool writes_checkpoints =
      options.profile_steps == 0 && (recipe.checkpoint.every > 0 || recipe.checkpoint.at_end);
  if (rank0 && writes_checkpoints && fs::exists(fs::path(run_dir) / "checkpoints"))
    io::ensure_dir((fs::path(run_dir) / "checkpoints").string());
  // One run writes a directory at a time (two processes that each took themselves for rank 0 of
  // a misread launch wrote every step's metrics twice and raced on the checkpoints).
  std::optional<io::DirLock> run_dir_lock;
  if (rank0) run_dir_lock.emplace(run_dir, kRunDirLockName, "train.out_dir");
  // Resuming an earlier checkpoint of this run with later ones on disk (the continuation this run
  // replaces): `latest` is pointed at the resumed checkpoint when this run records its first
  // step (the metrics are cut back then), so that a crash before this run's first save leaves
  // --resume RUN and eval RUN at the step the metrics end at, not at the replaced continuation's
  // last checkpoint with its records gone.
  std::string repoint_latest;
  RunStart start = start_run(recipe, resolved, options.resume, data_fp, sched, s, opt);
  TrainerState& st = start.st;
  const std::string &resumed_from = start.resumed_from, &resume_changes = start.resume_changes,
                    &data_changed = start.data_changed, &resume_lr_change = start.lr_change;
  const bool resume_own_run = start.own_run;
  const WeightLoadReport& init_report = start.init_report;
  if (rank0) {
    // The run's resolved recipe replaces one that a run wrote; a recipe.yaml attnlab did not write
    // (the user's own, e.g. the recipe being trained, with train.out_dir its directory) is not
    // overwritten.
    const fs::path recipe_path = fs::path(run_dir) / "recipe.yaml";
    if (fs::exists(recipe_path)) {
      const std::string old = io::read_file(recipe_path.string());
      ATTN_REQUIRE(old.rfind(kResolvedRecipeHeader, 0) == 0,
                   "train.out_dir '%s' holds a recipe.yaml that attnlab did not write (your "
                   "recipe?); a run writes its resolved recipe there: move that file or choose "
                   "another train.out_dir",
                   run_dir.c_str());
    }
    io::write_file_atomic(recipe_path.string(), recipe_yaml);
  }
  std::optional<bool> color;
  if (recipe.log.color != ColorMode::auto_detect) color = recipe.log.color == ColorMode::always;
  io::Logger log(s.comm->rank(), options.quiet ? nullptr : stderr, color);
  // The metrics: a resume of this run's own checkpoint keeps its records up to the resumed step;
  // a new run, or a resume of another run's checkpoint into this directory, starts the file anew
  // (records there were another run's: kept, they mixed two runs in one file).
  if (!recipe.log.metrics_file.empty()) {
    const fs::path metrics = fs::path(run_dir) / recipe.log.metrics_file;
    const bool foreign = !options.resume.empty() && !resume_own_run;
    std::error_code ec;
    if (foreign && rank0 && fs::is_regular_file(metrics, ec) && fs::file_size(metrics, ec) > 0)
      log.warn(
          "%s holds records of another run (this directory has no checkpoint of it): they "
          "are replaced by this run's at its first record; the resumed checkpoint's earlier "
          "steps are in its own run's %s",
          metrics.c_str(), recipe.log.metrics_file.c_str());
    // A resume keeps the records up to its step and cuts the rest at its first record (so a
    // resume that fails before one leaves the file as it was); another run's keeps none.
    log.open_metrics(metrics.string(), options.resume.empty()
                                           ? std::optional<int64_t>()
                                           : std::optional<int64_t>(foreign ? -1 : st.step));
  }

  const int64_t n_params = s.model->num_params_unpadded(s.store);
  const double flops_tok =
      s.model->flops_per_token(recipe.train.seq_len, s.store, recipe.retrofit.trainable_roles());
  warn_at_start(recipe, s, opt, log, zero == 1 && writes_checkpoints);
  st.data_fingerprint = data_fp;
  st.device = device_name(s.ctx->device);
  st.precision = dtype_name(s.dtype);
  if (!data_changed.empty()) log.warn("%s", data_changed.c_str());
  if (!resume_lr_change.empty()) log.warn("%s", resume_lr_change.c_str());
  if (!resumed_from.empty()) {
    log.info(
        "resumed from %s at step %lld%s%s", resumed_from.c_str(), (long long)st.step,
        resume_changes.empty() ? "" : "; keys changed from its recipe: ", resume_changes.c_str());
    // Checkpoints past the resumed step in this run directory are an earlier continuation's:
    // they stay (keep_last prunes this run's history only) until this run saves those steps.
    std::string later;
    for (const auto& [step, name] : checkpoint_steps(run_dir))
      if (step > st.step) later += (later.empty() ? "" : ", ") + name;
    if (rank0 && !later.empty() && resume_own_run) {
      log.warn(
          "%s/checkpoints holds checkpoints past the resumed step %lld, of the run this one "
          "replaces: %s; they stay (keep_last does not count them) until this run saves their "
          "steps; `latest` names the resumed step from this run's first record on",
          run_dir.c_str(), (long long)st.step, later.c_str());
      repoint_latest = fs::path(resumed_from).filename().string();
      if (repoint_latest.ends_with(".old")) repoint_latest.resize(repoint_latest.size() - 4);
    }
  }
  auto record_metrics = [&](const nlohmann::json& record) {
    if (!repoint_latest.empty()) {
      io::write_file_atomic((fs::path(run_dir) / "checkpoints" / "latest").string(),
                            repoint_latest + "\n");
      repoint_latest.clear();
    }
    log.metrics(record);
  };
  if (s.model->config().n_layer > 0) {
    if (const std::string c = s.model->attention(0).eval_caveat(); !c.empty())
      log.warn("%s", c.c_str());
  }
  // A decaying schedule that leaves no step to decay (a warm-up reaching the last step, or wsd's
  // round(decay_frac x steps) = 0) ends at the peak lr, not at final_lr_frac x lr: said, not
  // refused (a short test run may mean it).
  if (sched.type != ScheduleSpec::constant && sched.final_lr_frac != 1.f) {
    const float last = lr_at(sched, sched.total_steps - 1), lr_min = sched.lr * sched.final_lr_frac;
    if (std::fabs(last - lr_min) > 1e-6f * sched.lr)
      log.warn(
          "schedule.%s: the last step runs at lr %g, not final_lr_frac x lr = %g (no step "
          "is left to decay: %d steps, warmup_steps %d%s)",
          schedule_type_name(sched.type), double(last), double(lr_min), sched.total_steps,
          sched.warmup_steps,
          sched.type == ScheduleSpec::wsd ? ", round(decay_frac x steps) decay steps" : "");
  }
  if (resumed_from.empty() && !init_source(recipe).empty()) {
    log.info("initialised from %s (%zu tensors)%s%s", init_source(recipe).c_str(),
             init_report.loaded.size(), init_report.summary().empty() ? "" : "; ",
             init_report.summary().c_str());
    if (const std::string note = init_attention_note(recipe); !note.empty())
      log.warn("%s", note.c_str());
  }
  // A retrofit writes its adapter with every checkpoint; the base is frozen, so its hash is
  // computed once.
  const bool write_adapter = recipe.retrofit.enabled && !s.store.entry("wte.weight").trainable;
  const uint64_t base_hash =
      write_adapter ? base_weights_hash(s.store, s.model->config().vocab_size) : 0;
  if (recipe.retrofit.enabled)
    log.info(
        "retrofit of %s: %s of %s parameters train (roles %s)%s%s",
        recipe.retrofit.checkpoint.c_str(),
        // (the vocabulary's padding rows not counted, as in the run header and `info`)
        io::format_count(double(s.model->num_trainable_unpadded(s.store))).c_str(),
        io::format_count(double(s.model->num_params_unpadded(s.store))).c_str(),
        roles_text(recipe.retrofit.train_roles).c_str(),
        s.store.num_trainable() < s.store.num_params() ? ", the rest is frozen"
                                                       : ": nothing is frozen",
        write_adapter ? strformat("; base hash %s", io::hash_hex(base_hash).c_str()).c_str() : "");
  {
    log.info(
        "attnlab train %s | %s | %s params (%s trainable) | device %s (%s) | %s tok/step "
        "(%d x %d x %d accum%s) | %lld steps | attention %s",
        recipe.train.name.c_str(), run_dir.c_str(), io::format_count(double(n_params)).c_str(),
        io::format_count(double(s.model->num_trainable_unpadded(s.store))).c_str(),
        device_name(s.ctx->device), dtype_name(s.dtype),
        io::format_count(double(step_tokens)).c_str(), recipe.train.micro_batch,
        recipe.train.seq_len, accum,
        world > 1 ? strformat(" x %d ranks, %s, ZeRO %d", world, s.comm->backend(), zero).c_str()
                  : "",
        (long long)recipe.train.steps, recipe.attention.type.c_str());
    // A variant's keys given for another attention type are carried, not used: say so (a
    // forgotten attention.type would otherwise train dense without a word).
    for (const auto& [key, where] : recipe.given.where) {
      const bool variant_key =
          key.rfind("attention.focus.", 0) == 0 || key.rfind("attention.sfa.", 0) == 0;
      if (variant_key && key.rfind("attention." + recipe.attention.type + ".", 0) != 0)
        log.warn("%s (%s) is not used: attention.type is %s", key.c_str(), where.c_str(),
                 recipe.attention.type.c_str());
      else if (recipe.attention.type == "focus")
        if (const std::string why = recipe.attention.focus.unused_key_reason(key); !why.empty())
          log.warn("%s (%s) is not used: %s", key.c_str(), where.c_str(), why.c_str());
    }
    // Synthetic tokens have no text: no tokenizer goes with the run (generate and text tasks
    // then ask for one).
    if (recipe.data.source == DataSource::synthetic && recipe.given.contains("data.tokenizer"))
      log.warn(
          "data.tokenizer (%s) is not used: data.source is synthetic (its tokens have no "
          "text), so the checkpoints carry no tokenizer",
          recipe.given.where.at("data.tokenizer").c_str());
    // The CPU path is the fp32 reference: a precision the recipe asks for is not what runs.
    if (s.ctx->device == Device::cpu && recipe.train.precision == Precision::bf16 &&
        recipe.given.contains("train.precision"))
      log.warn("train.precision bf16 (%s) is not used: the CPU path computes in fp32",
               recipe.given.where.at("train.precision").c_str());
    if (!std::isnan(s.unigram_baseline))
      log.info(
          "unigram baseline (validation): %.4f nats (the token frequencies of the first %lld "
          "validation tokens, which the validation windows sample)",
          s.unigram_baseline, (long long)s.unigram_tokens);
  }

  // ---- the loop ------------------------------------------------------------------------------
  const int64_t BT = s.tokens_dev.numel();
  std::vector<int32_t> inputs(size_t(BT) * accum), targets(size_t(BT) * accum);
  const int64_t last_step =
      options.profile_steps > 0
          ? std::min<int64_t>(recipe.train.steps, st.step + options.profile_steps)
          : recipe.train.steps;
  TrainResult result;
  result.run_dir = run_dir;
  result.unigram_baseline = s.unigram_baseline;
  result.final_val_loss = std::nan("");
  double last_loss = std::nan("");
  const int64_t first_step = st.step;  // steps done before this session (a resume)
  auto t_start = Clock::now();
  double elapsed_before = st.elapsed_seconds;
  double ema_step_s = 0.0;

  auto checkpoint = [&]() {
    if (options.profile_steps > 0) return;
    // Rank 0 writes the whole optimizer state (ZeRO-1: gathered from every rank first), so a
    // checkpoint is the same whatever the number of ranks that wrote it.
    std::vector<Buffer> gathered;
    auto state = opt.gathered_state(gathered);
    if (!rank0) {
      // The checkpoint is complete when every rank goes on. Rank 0's write (a large model on
      // slow shared storage) may take longer than any collective: bounded by an hour or
      // distributed.timeout_s, the longer (it was timeout_s: the job ended, the checkpoint
      // lost).
      s.comm->barrier(std::max(recipe.distributed.timeout_s, kCheckpointBarrierS));
      return;
    }
    CheckpointContents c;
    c.store = &s.store;
    c.optimizer_state = std::move(state);
    c.state = st;
    c.state.elapsed_seconds = elapsed_before + seconds_since(t_start);
    c.recipe_yaml = recipe_yaml;
    c.tokenizer_json = s.tokenizer_json;
    c.generation_config_json = s.generation_config_json;
    if (write_adapter)
      c.write_extra = [&](const std::string& dir) {
        save_adapter((fs::path(dir) / kAdapterFileName).string(), s.store,
                     adapter_metadata(recipe, base_hash, st.step));
      };
    std::string dir = save_checkpoint(run_dir, c, recipe.checkpoint.keep_last);
    log.info("checkpoint: %s", dir.c_str());
    if (world > 1) s.comm->barrier(std::max(recipe.distributed.timeout_s, kCheckpointBarrierS));
  };

  // --profile N: the N steps form the capture range of `nsys --capture-range=cudaProfilerApi`
  // (each step, micro-step and the optimizer are NVTX ranges; every op and layer has its own).
  const bool profiling = options.profile_steps > 0 && s.ctx->device == Device::cuda;
  if (profiling) CUDA_CHECK(cudaProfilerStart());
  // Validation on the recipe's windows, logged with the variants' extra reports.
  int64_t val_step = -1;  // the step of the last evaluation
  auto evaluate = [&] {
    // --profile: no evaluation (its forwards would fall inside the capture range of the steps).
    if (!s.val_loader || options.profile_steps > 0) return;
    const ValidationResult ev = global_validation(
        *s.comm, score_validation(*s.model, *s.ctx, s.store, *s.val_loader, recipe.eval.batches,
                                  s.tokens_dev, s.targets_dev, s.val_probe.get()));
    result.final_val_loss = ev.loss;
    val_step = st.step;
    // What was scored goes with the loss: it depends on eval.batches and train.micro_batch.
    nlohmann::json record = {{"step", st.step},
                             {"val_loss", ev.loss},
                             {"val_ppl", ev.perplexity},
                             {"val_tokens", ev.tokens},
                             {"val_windows", ev.windows}};
    std::string retrieval;
    if (ev.synthetic) {
      record["val_synthetic"] = ev.synthetic->to_json();
      retrieval = " | " + ev.synthetic->summary();
    }
    const std::string variants = attention_eval_report(s, recipe.eval.batches, log, record);
    record_metrics(record);
    log.info("step %lld | val loss %.4f | val ppl %.2f | %s tokens in %lld windows%s%s",
             (long long)st.step, ev.loss, ev.perplexity,
             io::format_count(double(ev.tokens)).c_str(), (long long)ev.windows, retrieval.c_str(),
             variants.c_str());
  };
  if (recipe.eval.at_start && st.step == 0) evaluate();
  // Ctrl-C or SIGTERM (interrupt.h). Several ranks may get it in different steps, or one rank
  // alone: the step's loss all-reduce carries it, so that every rank stops after the same step.
  const InterruptGuard interrupt;
  while (st.step < last_step) {
    InterruptGuard::test_hook(st.step + 1);
    NvtxRange step_range("train.step");
    test_hook_out_of_memory(s, st.step + 1, s.memory);
    auto t0 = Clock::now();
    const float lr = lr_at(sched, int(st.step));
    // Fetch every micro-batch first so the loss scale is exact: 1 / (valid targets in the step).
    int64_t valid = 0;
    for (int m = 0; m < accum; ++m) {
      s.train_loader->next(inputs.data() + size_t(m) * BT, targets.data() + size_t(m) * BT);
    }
    for (size_t i = 0; i < targets.size(); ++i) valid += targets[i] != GPT::kIgnoreIndex;
    // The loss scale counts the valid targets of the whole step, over every rank.
    double valid_global = double(valid);
    s.comm->all_reduce_host(&valid_global, 1);
    ATTN_REQUIRE(valid_global > 0, "step %lld: every target of the batch is ignored",
                 (long long)st.step);
    const float dloss = float(1.0 / valid_global);
    const float aux_scale = 1.f / float(accum * world);
    s.store.zero_grads();
    for (int m = 0; m < accum; ++m) {
      NvtxRange micro_range("train.micro_step");
      if (m == accum - 1) grad_sync.begin_last_backward();
      upload(s, inputs.data() + size_t(m) * BT, targets.data() + size_t(m) * BT);
      // The step's objective: the mean LM loss over its targets plus the mean over micro-batches
      // of the attention variants' auxiliary losses (none for dense).
      s.model->forward(*s.ctx, s.store, s.tokens_dev, s.targets_dev, AttentionMode::train, dloss,
                       aux_scale);
      s.model->backward(*s.ctx, s.store, s.tokens_dev);
    }
    grad_sync.finish();
    StepStats ss;
    {
      NvtxRange opt_range("optimizer.step");
      ss = opt.step(lr, int(st.step) + 1);
    }
    // The gradient communication of the step (several ranks): rank 0's timeline.
    const OverlapReport overlap = grad_sync.overlap();
    // Read after the optimizer (it synchronises for the gradient norm anyway): the micro-steps
    // run without a host synchronisation. A non-finite loss gives a non-finite gradient norm, so
    // the weights were not updated when this throws.
    LossTotals totals = s.model->take_loss(*s.ctx);
    ATTN_ASSERT(totals.valid == valid);
    int stop_signal = 0;  // several ranks: the signal they agree to stop by after this step
    if (world > 1) {      // the step's loss over every rank, and whether any rank got a signal
      const int mine = interrupt.signal();
      double t[5] = {totals.sum, double(totals.valid), totals.aux};
      put_signal(mine, t + 3);
      s.comm->all_reduce_host(t, 5);
      totals.sum = t[0];
      totals.valid = int64_t(t[1]);
      totals.aux = t[2];
      stop_signal = agreed_signal(mine, t + 3);
    }
    const double loss = totals.mean();
    ATTN_REQUIRE(std::isfinite(loss),
                 "loss is %f at step %lld (lr %.3e): training diverged; the last "
                 "checkpoint (if any) is intact — lower optim.lr or raise schedule.warmup_steps",
                 loss, (long long)st.step + 1, lr);
    ATTN_REQUIRE(ss.finite,
                 "gradient norm is not finite at step %lld: training diverged; the last "
                 "checkpoint (if any) is intact",
                 (long long)st.step + 1);
    s.ctx->synchronize();
    st.step += 1;
    st.tokens_seen += step_tokens;
    auto ls = s.train_loader->state();
    st.data_epoch = ls.epoch;
    st.data_position = ls.position;
    last_loss = loss;
    result.losses.push_back(loss);

    const double step_s = seconds_since(t0);
    ema_step_s = ema_step_s == 0.0 ? step_s : 0.9 * ema_step_s + 0.1 * step_s;
    const double tok_s = double(step_tokens) / step_s;
    nlohmann::json record = {
        {"step", st.step},    {"run", recipe.train.name},    {"loss", loss},
        {"lr", lr},           {"grad_norm", ss.grad_norm},   {"tokens", st.tokens_seen},
        {"tok_per_s", tok_s}, {"ms_per_step", step_s * 1e3}, {"flops_per_s", flops_tok * tok_s}};
    // The attention variants' auxiliary terms (SFA's distillation), added to the gradients but
    // not to `loss` (the cross-entropy): their own field, and on the progress line.
    if (totals.aux != 0.0) record["aux_loss"] = totals.aux;
    if (overlap.valid) {
      record["comm_ms"] = overlap.comm_ms;
      record["exposed_comm_ms"] = overlap.exposed_ms;
      record["comm_bucket_ms"] = overlap.bucket_ms;
    }
    record_metrics(record);
    if (st.step % recipe.log.every == 0 || st.step == last_step || st.step == 1) {
      io::ProgressStats ps;
      ps.step = st.step;
      ps.total_steps = last_step;
      ps.loss = loss;
      ps.lr = lr;
      ps.grad_norm = ss.grad_norm;
      ps.tokens_per_s = tok_s;
      ps.step_ms = step_s * 1e3;
      ps.eta_s = ema_step_s * double(last_step - st.step);
      if (totals.aux != 0.0) ps.extra.emplace_back("aux", strformat("%.4g", totals.aux));
      if (overlap.valid) {
        ps.extra.emplace_back("comm", strformat("%.1f ms", overlap.comm_ms));
        ps.extra.emplace_back("exposed", strformat("%.1f ms", overlap.exposed_ms));
      }
      log.progress(ps);
    }

    InterruptGuard::test_hook(st.step, /*late=*/true);
    const bool last = st.step == last_step;
    if ((recipe.eval.every > 0 && st.step % recipe.eval.every == 0) || (last && recipe.eval.at_end))
      evaluate();
    const bool periodic = recipe.checkpoint.every > 0 && st.step % recipe.checkpoint.every == 0;
    if (periodic || (last && recipe.checkpoint.at_end)) checkpoint();
    // Ctrl-C or SIGTERM: stop after this step with a checkpoint (where the run writes any). In
    // the last step the run has just finished; the signal is still reported (the CLI then ends
    // by it, so a shell loop of runs stops as it would at any other step). One process reads
    // its signal now (one during the evaluation or the checkpoint counts); several ranks take
    // the one they agreed on (a later one stops them after the next step), and in the last
    // step, where a signal during the evaluation or the checkpoint came after the step's
    // all-reduce, agree once more (every rank is here).
    if (world > 1 && last && stop_signal == 0) {
      const int mine = interrupt.signal();
      double t[2];
      put_signal(mine, t);
      s.comm->all_reduce_host(t, 2);
      stop_signal = agreed_signal(mine, t);
    }
    if (const int sig = world == 1 ? interrupt.signal() : stop_signal; sig != 0 && last) {
      log.warn("%s received during the last step (%lld): the run finished",
               sig == SIGINT ? "SIGINT" : "SIGTERM", (long long)st.step);
      result.interrupted_by = sig;
    } else if (sig != 0) {
      const bool saves =
          options.profile_steps == 0 && (recipe.checkpoint.every > 0 || recipe.checkpoint.at_end);
      if (saves && !periodic) checkpoint();
      log.warn(
          "%s received: stopped after step %lld of %lld; %s", sig == SIGINT ? "SIGINT" : "SIGTERM",
          (long long)st.step, (long long)last_step,
          saves
              ? strformat("checkpoint written: continue with --resume %s", run_dir.c_str()).c_str()
              : "no checkpoint written (--profile, or checkpoint.every 0 and "
                "checkpoint.at_end false)");
      result.interrupted_by = sig;
      break;
    }
  }

  if (profiling) CUDA_CHECK(cudaProfilerStop());
  result.steps = st.step;
  result.final_train_loss = last_loss;
  // The closing line: this session's steps and time (a resume, which has at least one step left:
  // which steps), the last train loss, and the last validation loss where the run evaluated.
  std::string done = first_step > 0 ? strformat("done: steps %lld-%lld (%lld this session)",
                                                (long long)first_step + 1, (long long)st.step,
                                                (long long)(st.step - first_step))
                                    : strformat("done: %lld steps", (long long)st.step);
  done += strformat(" in %.1f s", seconds_since(t_start));
  if (!std::isnan(last_loss)) done += strformat(" | train loss %.4f", last_loss);
  if (!std::isnan(result.final_val_loss)) {
    std::string vs;
    if (!std::isnan(s.unigram_baseline)) {
      const double pct = 100.0 * (1.0 - result.final_val_loss / s.unigram_baseline);
      vs = strformat(" vs unigram baseline %.4f (%.1f%% %s)", s.unigram_baseline, std::fabs(pct),
                     pct >= 0 ? "lower" : "higher: not yet better than unigram frequencies");
    }
    // "final" only when the last evaluation scored the final weights (eval.at_end, or an
    // interval ending there); else the step it scored.
    const std::string which = val_step == st.step
                                  ? "final val loss"
                                  : strformat("val loss at step %lld", (long long)val_step);
    done += strformat(" | %s %.4f%s", which.c_str(), result.final_val_loss, vs.c_str());
  }
  log.info("%s", done.c_str());
  return result;
}

}  // namespace

TrainResult train(const Recipe& given_recipe, const TrainOptions& options) {
  // model.* from train.init_from or retrofit.checkpoint (or, resuming, from the checkpoint)
  const Recipe recipe = resolve_init_from(given_recipe, options.resume);
  // A scaling factor given for a model whose type (perhaps its checkpoint's) does not read it.
  if (const std::string p = rope_scaling_key_problem(recipe, false); !p.empty()) throw Error(p);
  recipe.validate();
  const LaunchInfo launch = options.single_process ? LaunchInfo{} : detect_launch();
  Session s;
  setup_device(recipe, s, launch);
  s.comm = setup_comm(recipe, s, launch);
  if (s.comm->world_size() == 1) return run_training(recipe, options, s);
  // Several ranks: an error on one (out of memory with its estimate, a bad shard, a diverged
  // loss) ends the whole job naming the rank, instead of leaving the others in a collective.
  try {
    return run_training(recipe, options, s);
  } catch (const RunMismatchError&) {
    throw;  // raised by every rank together: each reports it and exits
  } catch (const std::exception& e) {
    s.comm->abort(e.what());
    throw;  // not reached: abort() ends the process
  }
}

}  // namespace attnlab
