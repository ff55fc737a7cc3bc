#include "train/trainer.h"

#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "core/context.h"
#include "core/cuda_check.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "core/out_of_memory.h"
#include "data/loader.h"
#include "data/synthetic.h"
#include "dist/communicator.h"
#include "dist/consistency.h"
#include "dist/grad_sync.h"
#include "dist/launch.h"
#include "dist/shard_map.h"
#include "eval/validation.h"
#include "io/atomic_file.h"
#include "io/logger.h"
#include "io/metrics.h"
#include "model/gpt.h"
#include "model/memory_note.h"
#include "tokenizer/tokenizer.h"
#include "train/checkpoint.h"
#include "train/from_recipe.h"
#include "train/init_from.h"
#include "train/optimizer.h"
#include "train/retrofit.h"
#include "train/schedule.h"

namespace fs = std::filesystem;

namespace attnlab {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Everything a run (train or eval) needs, built from the recipe.
struct Session {
  std::unique_ptr<ExecContext> ctx;
  std::unique_ptr<Communicator> comm;
  DType dtype = DType::f32;
  std::unique_ptr<GPT> model;
  ParameterStore store;
  std::unique_ptr<DataLoader> train_loader, val_loader;
  std::unique_ptr<SyntheticProbe> val_probe;  // synthetic data: the retrieval metrics
  double unigram_baseline = std::nan("");
  std::string tokenizer_json;
  Buffer batch_dev;  // device copies of tokens and targets
  Tensor tokens_dev, targets_dev;
  TrainingMemoryEstimate memory;  // of `attnlab info`, for out-of-memory errors
};

// One process per GPU: the device is the rank's local rank (its index on its node).
void setup_device(const Recipe& r, Session& s, const LaunchInfo& launch) {
  if (r.train.threads > 0) omp_set_num_threads(r.train.threads);
  bool want_cuda = r.train.device == DeviceChoice::cuda ||
                   (r.train.device == DeviceChoice::auto_select && cuda_available());
  if (want_cuda) {
    s.ctx = ExecContext::make_cuda(launch.local_rank);
    s.ctx->deterministic = r.train.deterministic;
    s.dtype = r.train.precision == Precision::bf16 ? DType::bf16 : DType::f32;
  } else {
    s.ctx = ExecContext::make_cpu();
    s.dtype = DType::f32;  // the CPU reference path is fp32
  }
}

std::shared_ptr<const TokenSource> memory_source(std::vector<int32_t> tokens, const char* name) {
  return std::make_shared<MemoryTokens>(std::move(tokens), name);
}

// distributed.backend resolved for the device: auto is none for one process, else nccl on CUDA
// and mpi on the CPU.
std::unique_ptr<Communicator> setup_comm(const Recipe& r, const Session& s,
                                         const LaunchInfo& launch) {
  const bool cuda = s.ctx->device == Device::cuda;
  CommOptions o;
  o.launch = launch;
  o.timeout_s = r.distributed.timeout_s;
  o.rendezvous_file = r.distributed.rendezvous_file;
  o.compute_stream = s.ctx->stream;
  switch (r.distributed.backend) {
    case DistBackend::auto_select:
      o.backend = launch.world_size == 1 ? "none" : cuda ? "nccl" : "mpi";
      break;
    case DistBackend::none:
      o.backend = "none";
      break;
    case DistBackend::mpi:
      o.backend = "mpi";
      break;
    case DistBackend::nccl:
      o.backend = "nccl";
      break;
  }
  ATTN_REQUIRE(o.backend != "mpi" || !cuda,
               "distributed.backend 'mpi' reduces CPU tensors but the model is on cuda; use "
               "backend nccl (or auto), or train.device: cpu");
  ATTN_REQUIRE(o.backend != "nccl" || cuda,
               "distributed.backend 'nccl' needs the model on cuda (train.device resolved to "
               "cpu); use backend mpi (or auto) for the CPU path");
  return make_communicator(o);
}

// Validation over every rank's windows: the loss of all the scored targets.
ValidationResult global_validation(Communicator& comm, ValidationResult v) {
  double t[3] = {v.loss * double(v.tokens), double(v.tokens), double(v.windows)};
  comm.all_reduce_host(t, 3);
  v.tokens = int64_t(t[1]);
  v.windows = int64_t(t[2]);
  v.loss = t[0] / t[1];
  v.perplexity = std::exp(v.loss);
  if (v.synthetic) {  // every rank has the probe or none has (the same recipe)
    double sums[SyntheticScores::kValues];
    v.synthetic->to_values(sums);
    comm.all_reduce_host(sums, SyntheticScores::kValues);
    v.synthetic->from_values(sums);
  }
  return v;
}

void setup_data(const Recipe& r, Session& s, bool need_train) {
  DataLoaderOptions train_opts;
  train_opts.batch_size = r.train.micro_batch;
  train_opts.seq_len = r.train.seq_len;
  train_opts.shuffle = r.data.shuffle;
  train_opts.seed = uint64_t(r.data.seed);
  train_opts.rank = s.comm->rank();
  train_opts.world_size = s.comm->world_size();
  train_opts.vocab_size = r.model.vocab_size;
  DataLoaderOptions val_opts = train_opts;
  val_opts.shuffle = false;

  if (r.data.source == DataSource::synthetic) {
    ATTN_REQUIRE(r.data.synthetic.vocab_size <= r.model.vocab_size,
                 "data.synthetic.vocab_size (%d) exceeds model.vocab_size (%d)",
                 r.data.synthetic.vocab_size, r.model.vocab_size);
    SyntheticConfig sc;
    sc.vocab_size = r.data.synthetic.vocab_size;
    sc.train_tokens = need_train ? r.data.synthetic.train_tokens : r.train.seq_len + 1;
    sc.val_tokens = r.data.synthetic.val_tokens;
    sc.seed = uint64_t(r.data.synthetic.seed);
    SyntheticData d = generate_synthetic(sc);
    s.unigram_baseline = unigram_entropy(d.val, sc.vocab_size);
    s.train_loader =
        std::make_unique<DataLoader>(std::vector<std::shared_ptr<const TokenSource>>{memory_source(
                                         std::move(d.train), "synthetic/train")},
                                     train_opts);
    s.val_loader =
        std::make_unique<DataLoader>(std::vector<std::shared_ptr<const TokenSource>>{memory_source(
                                         std::move(d.val), "synthetic/val")},
                                     val_opts);
    s.val_probe = validation_probe(r, *s.val_loader);
    return;
  }
  ATTN_REQUIRE(!r.data.train.empty() || !need_train,
               "data.source is 'shards' but data.train is empty "
               "(expected a glob of token shard files, e.g. data/tiny/train_*.bin)");
  if (need_train)
    s.train_loader =
        std::make_unique<DataLoader>(DataLoader::from_files({r.data.train}, train_opts));
  if (!r.data.val.empty()) {
    s.val_loader = std::make_unique<DataLoader>(DataLoader::from_files({r.data.val}, val_opts));
    // Unigram baseline over (at most) the first 8M validation tokens.
    std::vector<int32_t> toks;
    for (const auto& src : s.val_loader->sources()) {
      int64_t n = std::min<int64_t>(src->size(), (int64_t(8) << 20) - int64_t(toks.size()));
      if (n <= 0) break;
      size_t at = toks.size();
      toks.resize(at + size_t(n));
      src->read(0, n, toks.data() + at);
    }
    s.unigram_baseline = unigram_entropy(toks, r.model.vocab_size);
  }
  try {
    s.tokenizer_json = make_tokenizer(r.data.tokenizer)->to_json();
  } catch (const Error&) {
    s.tokenizer_json.clear();  // the tokenizer is optional for training on prepared shards
  }
}

// The device-memory estimate of `attnlab info` for this run (ZeRO-1 keeps 1 / world of the
// optimizer state and fp32 master on each rank).
TrainingMemoryEstimate memory_estimate(const Recipe& r, const Session& s) {
  const auto trainable = r.retrofit.trainable_roles();
  int64_t n = 0, n_train = 0;
  for (const auto& e : s.store.entries()) {
    n += e.spec.shape.numel();
    if (trainable.count(e.spec.role)) n_train += e.spec.shape.numel();
  }
  const int shards = r.distributed.zero == 1 ? s.comm->world_size() : 1;
  return estimate_training_memory(*s.model, n, n_train, r.train.micro_batch, r.train.seq_len,
                                  s.dtype, shards);
}

// Start-up out-of-memory check: the estimate against the free device memory, before anything
// large is allocated (a clear message instead of a failed cudaMalloc later).
void check_device_memory(const Recipe& r, const Session& s, const TrainingMemoryEstimate& est) {
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  std::string shortfall =
      device_memory_shortfall(est, free_bytes, r.train.micro_batch, s.model->config().recompute);
  ATTN_REQUIRE(shortfall.empty(), "%s", shortfall.c_str());
}

// Test hook (docs/distributed.md, "Faults"): ATTNLAB_TEST_OOM=<rank>:<step> makes that rank, at
// the start of that (1-based) step, allocate more memory than its device has (the device's total
// plus the run's estimate; on the CPU 2^50 bytes), so the allocator's genuine failure path runs
// mid-run. Used by the ctest dist_mpi_rank_oom and scripts/dist_device_check.sh only.
void test_hook_out_of_memory(const Session& s, int64_t step, const TrainingMemoryEstimate& est) {
  const char* v = std::getenv("ATTNLAB_TEST_OOM");
  int rank = -1;
  long long at = -1;
  if (!v || std::sscanf(v, "%d:%lld", &rank, &at) != 2) return;
  if (rank != s.comm->rank() || at != step) return;
  size_t bytes = size_t(1) << 50;
  if (s.ctx->device == Device::cuda) {
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    bytes = total_bytes + est.total();
  }
  Buffer too_large(s.ctx->device, bytes);
}

void setup_model(const Recipe& r, Session& s) {
  s.model = std::make_unique<GPT>(gpt_config_of(r));
  s.model->declare_params(s.store);
  s.memory = memory_estimate(r, s);
  if (s.ctx->device == Device::cuda) check_device_memory(r, s, s.memory);
  // An allocation that fails later (on any rank, mid-run) reports the estimate and a hint.
  set_out_of_memory_note(
      out_of_memory_note(s.memory, r.train.micro_batch, s.model->config().recompute));
  // Shards for ZeRO-1 (the padding alone differs from one rank's layout; ZeRO 0 keeps it so
  // that both modes lay the state out alike).
  s.store.finalize(s.ctx->device, s.dtype, r.retrofit.trainable_roles(), s.comm->world_size());
  require_trainable_parameters(r, s.store);
  s.model->init_params(s.store, uint64_t(r.train.seed));
  s.model->allocate(*s.ctx, r.train.micro_batch, r.train.seq_len, s.dtype);
  const int64_t BT = int64_t(r.train.micro_batch) * r.train.seq_len;
  s.batch_dev = Buffer(s.ctx->device, size_t(2 * BT) * sizeof(int32_t));
  s.tokens_dev = s.batch_dev.as(DType::i32, Shape{r.train.micro_batch, r.train.seq_len});
  s.targets_dev =
      s.batch_dev.as(DType::i32, Shape{r.train.micro_batch, r.train.seq_len}, size_t(BT) * 4);
}

void upload(Session& s, const int32_t* inputs, const int32_t* targets) {
  const Shape sh = s.tokens_dev.shape;
  copy_tensor(s.tokens_dev, Tensor(const_cast<int32_t*>(inputs), DType::i32, Device::cpu, sh));
  copy_tensor(s.targets_dev, Tensor(const_cast<int32_t*>(targets), DType::i32, Device::cpu, sh));
}

// What the attention variants add to an evaluation: their metrics of the last validation batch
// into `record`, their health warnings, and the validation loss under their alternate eval mode
// (Focus: the routing eval does not use, so the train/inference gap shows). Returns the text for
// the eval line ("" when no variant has an alternate mode).
std::string attention_eval_report(Session& s, int batches, const io::Logger& log,
                                  nlohmann::json& record) {
  // Metrics and warnings are rank 0's (its share of the validation windows); the loss is global.
  const int L = s.model->config().n_layer;
  std::map<std::string, double> m;
  s.model->attention_metrics(m);
  for (const auto& [k, v] : m) record[k] = v;
  std::string summary = L > 0 ? s.model->attention(0).summarize(m) : "";
  if (!summary.empty()) summary = " | " + summary;
  std::string alternate;
  for (int l = 0; l < L; ++l) {
    const AttentionModule& a = s.model->attention(l);
    if (const std::string w = a.health_warning(); !w.empty()) log.warn("%s", w.c_str());
    if (alternate.empty()) alternate = a.alternate_eval();
  }
  if (alternate.empty()) return summary;
  for (int l = 0; l < L; ++l) s.model->attention(l).use_alternate_eval(true);
  const ValidationResult ev =
      global_validation(*s.comm, score_validation(*s.model, *s.ctx, s.store, *s.val_loader, batches,
                                                  s.tokens_dev, s.targets_dev));
  for (int l = 0; l < L; ++l) s.model->attention(l).use_alternate_eval(false);
  record["val_loss_" + alternate] = ev.loss;
  return strformat(" | %s %.4f%s", alternate.c_str(), ev.loss, summary.c_str());
}

std::string roles_text(const std::vector<std::string>& roles) {
  std::string t;
  for (const std::string& r : roles) t += (t.empty() ? "" : ", ") + r;
  return t;
}

}  // namespace

namespace {

TrainResult run_training(const Recipe& recipe, const TrainOptions& options, Session& s) {
  const bool rank0 = s.comm->rank() == 0;
  const int world = s.comm->world_size();
  setup_data(recipe, s, /*need_train=*/true);
  check_same_run(*s.comm, run_facts(recipe, {s.train_loader.get(), s.val_loader.get()}));
  setup_model(recipe, s);

  const int zero = world > 1 ? recipe.distributed.zero : 0;
  const int64_t bucket_elems =
      int64_t(recipe.distributed.bucket_mb * double(1 << 20)) / int64_t(dtype_size(s.dtype));
  // The gradient buckets, and under ZeRO-1 this rank's slice of each (its optimizer shard).
  const ZeroShardMap shards(s.store.trainable_buffer_numel(), world, s.comm->rank(), bucket_elems);
  AdamW opt(*s.ctx, s.store, adamw_config_of(recipe), zero == 1 ? s.comm.get() : nullptr, &shards);
  GradientSync grad_sync(*s.comm, s.store, shards, zero);
  if (world > 1) s.model->set_backward_hook([&](int layer) { grad_sync.layer_done(layer); });
  // Validation windows in all: eval.batches x micro_batch, split over the ranks.
  const int val_batches = (recipe.eval.batches + world - 1) / world;
  const ScheduleSpec sched = schedule_of(recipe, int(recipe.train.steps));

  const int accum = recipe.train.grad_accum_steps(s.comm->world_size());
  const int64_t step_tokens = recipe.train.tokens_per_step();
  const std::string run_dir = recipe.train.out_dir;
  const std::string recipe_yaml = recipe_to_yaml(recipe);

  // ---- run directory and resume --------------------------------------------------------------
  TrainerState st;
  std::string resumed_from;
  WeightLoadReport init_report;
  if (rank0) io::ensure_dir(run_dir);
  if (!options.resume.empty()) {
    std::string dir = resolve_checkpoint_dir(options.resume);
    load_model_weights(dir, s.store);
    load_optimizer_state(dir, opt);
    st = load_trainer_state(dir);
    s.train_loader->set_state(DataLoader::State{st.data_epoch, st.data_position});
    resumed_from = dir;
  } else {
    if (!init_source(recipe).empty()) init_report = load_init_from(recipe, s.store);
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
    // train.init_from (a fine-tune would otherwise update the random initialisation).
    opt.sync_master_from_params();
  }
  if (rank0) io::write_file_atomic((fs::path(run_dir) / "recipe.yaml").string(), recipe_yaml);
  std::optional<bool> color;
  if (recipe.log.color != ColorMode::auto_detect) color = recipe.log.color == ColorMode::always;
  io::Logger log(s.comm->rank(), options.quiet ? nullptr : stderr, color);
  if (!recipe.log.metrics_file.empty())
    log.open_metrics(
        (fs::path(run_dir) / recipe.log.metrics_file).string(),
        options.resume.empty() ? std::optional<int64_t>() : std::optional<int64_t>(st.step));

  const int64_t n_params = s.model->num_params_unpadded(s.store);
  const double flops_tok = s.model->flops_per_token(recipe.train.seq_len);
  if (!resumed_from.empty())
    log.info("resumed from %s at step %lld", resumed_from.c_str(), (long long)st.step);
  if (resumed_from.empty() && !init_source(recipe).empty())
    log.info("initialised from %s (%zu tensors)%s%s", init_source(recipe).c_str(),
             init_report.loaded.size(), init_report.summary().empty() ? "" : "; ",
             init_report.summary().c_str());
  // A retrofit writes its adapter with every checkpoint; the base is frozen, so its hash is
  // computed once.
  const bool write_adapter = recipe.retrofit.enabled && !s.store.entry("wte.weight").trainable;
  const uint64_t base_hash = write_adapter ? base_weights_hash(s.store) : 0;
  if (recipe.retrofit.enabled)
    log.info("retrofit of %s: %s of %s parameters train (roles %s), the rest is frozen%s",
             recipe.retrofit.checkpoint.c_str(),
             io::format_count(double(s.store.num_trainable())).c_str(),
             io::format_count(double(s.store.num_params())).c_str(),
             roles_text(recipe.retrofit.train_roles).c_str(),
             write_adapter ? strformat("; base hash %s", hash_hex(base_hash).c_str()).c_str() : "");
  {
    log.info(
        "attnlab train %s | %s | %s params (%s trainable) | device %s (%s) | %s tok/step "
        "(%d x %d x %d accum%s) | %lld steps",
        recipe.train.name.c_str(), run_dir.c_str(), io::format_count(double(n_params)).c_str(),
        io::format_count(double(s.store.num_trainable())).c_str(), device_name(s.ctx->device),
        dtype_name(s.dtype), io::format_count(double(step_tokens)).c_str(),
        recipe.train.micro_batch, recipe.train.seq_len, accum,
        world > 1 ? strformat(" x %d ranks, %s, ZeRO %d", world, s.comm->backend(), zero).c_str()
                  : "",
        (long long)recipe.train.steps);
    if (!std::isnan(s.unigram_baseline))
      log.info("unigram baseline (validation): %.4f nats", s.unigram_baseline);
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
      s.comm->barrier();  // the checkpoint is complete when every rank goes on
      return;
    }
    CheckpointContents c;
    c.store = &s.store;
    c.optimizer_state = std::move(state);
    c.state = st;
    c.state.elapsed_seconds = elapsed_before + seconds_since(t_start);
    c.recipe_yaml = recipe_yaml;
    c.tokenizer_json = s.tokenizer_json;
    if (write_adapter)
      c.write_extra = [&](const std::string& dir) {
        save_adapter((fs::path(dir) / kAdapterFileName).string(), s.store,
                     adapter_metadata(recipe, base_hash, st.step));
      };
    std::string dir = save_checkpoint(run_dir, c, recipe.checkpoint.keep_last);
    log.info("checkpoint: %s", dir.c_str());
    if (world > 1) s.comm->barrier();
  };

  // --profile N: the N steps form the capture range of `nsys --capture-range=cudaProfilerApi`
  // (each step, micro-step and the optimizer are NVTX ranges; every op and layer has its own).
  const bool profiling = options.profile_steps > 0 && s.ctx->device == Device::cuda;
  if (profiling) CUDA_CHECK(cudaProfilerStart());
  // Validation on the recipe's windows, logged with the variants' extra reports.
  auto evaluate = [&] {
    if (!s.val_loader) return;
    const ValidationResult ev = global_validation(
        *s.comm, score_validation(*s.model, *s.ctx, s.store, *s.val_loader, val_batches,
                                  s.tokens_dev, s.targets_dev, s.val_probe.get()));
    result.final_val_loss = ev.loss;
    nlohmann::json record = {{"step", st.step}, {"val_loss", ev.loss}, {"val_ppl", ev.perplexity}};
    std::string retrieval;
    if (ev.synthetic) {
      record["val_synthetic"] = ev.synthetic->to_json();
      retrieval = " | " + ev.synthetic->summary();
    }
    const std::string variants = attention_eval_report(s, val_batches, log, record);
    log.metrics(record);
    log.info("step %lld | val loss %.4f | val ppl %.2f | %s tokens in %lld windows%s%s",
             (long long)st.step, ev.loss, ev.perplexity,
             io::format_count(double(ev.tokens)).c_str(), (long long)ev.windows, retrieval.c_str(),
             variants.c_str());
  };
  if (recipe.eval.at_start && st.step == 0) evaluate();
  while (st.step < last_step) {
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
    if (world > 1) {  // the step's loss over every rank
      double t[3] = {totals.sum, double(totals.valid), totals.aux};
      s.comm->all_reduce_host(t, 3);
      totals.sum = t[0];
      totals.valid = int64_t(t[1]);
      totals.aux = t[2];
    }
    const double loss = totals.mean();
    if (totals.aux != 0.0) log.metrics({{"step", st.step + 1}, {"aux_loss", totals.aux}});
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
    if (overlap.valid) {
      record["comm_ms"] = overlap.comm_ms;
      record["exposed_comm_ms"] = overlap.exposed_ms;
      record["comm_bucket_ms"] = overlap.bucket_ms;
    }
    log.metrics(record);
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
      if (overlap.valid) {
        ps.extra.emplace_back("comm", strformat("%.1f ms", overlap.comm_ms));
        ps.extra.emplace_back("exposed", strformat("%.1f ms", overlap.exposed_ms));
      }
      log.progress(ps);
    }

    const bool last = st.step == last_step;
    if ((recipe.eval.every > 0 && st.step % recipe.eval.every == 0) || (last && recipe.eval.at_end))
      evaluate();
    if ((recipe.checkpoint.every > 0 && st.step % recipe.checkpoint.every == 0) ||
        (last && recipe.checkpoint.at_end))
      checkpoint();
  }

  if (profiling) CUDA_CHECK(cudaProfilerStop());
  result.steps = st.step;
  result.final_train_loss = last_loss;
  if (!std::isnan(result.final_val_loss)) {
    std::string vs;
    if (!std::isnan(s.unigram_baseline)) {
      const double pct = 100.0 * (1.0 - result.final_val_loss / s.unigram_baseline);
      vs = strformat(" vs unigram baseline %.4f (%.1f%% %s)", s.unigram_baseline, std::fabs(pct),
                     pct >= 0 ? "lower" : "higher: not yet better than unigram frequencies");
    }
    log.info("done: %lld steps in %.1f s | final val loss %.4f%s", (long long)st.step,
             seconds_since(t_start), result.final_val_loss, vs.c_str());
  }
  return result;
}

}  // namespace

TrainResult train(const Recipe& given_recipe, const TrainOptions& options) {
  // model.* from train.init_from or retrofit.checkpoint
  const Recipe recipe = resolve_init_from(given_recipe);
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
