#include "train/session.h"

#include <cuda_runtime.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include "core/cuda_check.h"
#include "core/error.h"
#include "core/out_of_memory.h"
#include "data/shard.h"
#include "data/synthetic.h"
#include "model/memory_note.h"
#include "tokenizer/tokenizer.h"
#include "train/from_recipe.h"
#include "train/host_memory.h"
#include "train/retrofit.h"

namespace fs = std::filesystem;

namespace attnlab::train_session {
namespace {

std::shared_ptr<const TokenSource> memory_source(std::vector<int32_t> tokens, const char* name) {
  return std::make_shared<MemoryTokens>(std::move(tokens), name);
}

}  // namespace

// One process per GPU: the device is the rank's local rank (its index on its node), or the one
// device CUDA_VISIBLE_DEVICES leaves it (dist/launch.h, local_device).
void setup_device(const Recipe& r, Session& s, const LaunchInfo& launch) {
  if (r.train.threads > 0) omp_set_num_threads(r.train.threads);
  bool want_cuda = r.train.device == DeviceChoice::cuda ||
                   (r.train.device == DeviceChoice::auto_select && cuda_available());
  if (want_cuda) {
    const int n_devices = cuda_device_count();  // none: make_cuda's error below
    const int device =
        n_devices > 0
            ? local_device(launch, n_devices,
                           [](const char* name) -> const char* { return std::getenv(name); })
            : launch.local_rank;
    s.ctx = ExecContext::make_cuda(device);
    s.ctx->deterministic = r.train.deterministic;
    s.dtype = r.train.precision == Precision::bf16 ? DType::bf16 : DType::f32;
  } else {
    s.ctx = ExecContext::make_cpu();
    s.dtype = DType::f32;  // the CPU reference path is fp32
  }
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
  // (A rank with no window scored holds loss NaN: it adds nothing, not NaN x 0.)
  double t[3] = {v.tokens > 0 ? v.loss * double(v.tokens) : 0.0, double(v.tokens),
                 double(v.windows)};
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
    const SyntheticConfig sc =
        synthetic_config(r, need_train ? r.data.synthetic.train_tokens : r.train.seq_len + 1);
    SyntheticData d = generate_synthetic(sc);
    s.unigram_baseline = unigram_entropy(d.val, sc.vocab_size);
    s.unigram_tokens = int64_t(d.val.size());
    s.train_loader =
        std::make_unique<DataLoader>(std::vector<std::shared_ptr<const TokenSource>>{memory_source(
                                         std::move(d.train), "synthetic/train")},
                                     train_opts);
    s.val_loader =
        std::make_unique<DataLoader>(std::vector<std::shared_ptr<const TokenSource>>{memory_source(
                                         std::move(d.val), "synthetic/val")},
                                     val_opts);
    s.val_probe = validation_probe(r, *s.val_loader);
    // Shard globs with the synthetic source: a recipe that names shards but leaves data.source
    // at its default trained on the embedded data without a word.
    for (const auto& [key, glob] :
         {std::pair{"data.train", r.data.train}, std::pair{"data.val", r.data.val}})
      if (!glob.empty())
        s.data_warnings.push_back(
            strformat("%s ('%s') is not read: data.source is synthetic (the embedded data); set "
                      "data.source: shards to train on the shards",
                      key, glob.c_str()));
    return;
  }
  ATTN_REQUIRE(!r.data.train.empty() || !need_train,
               "data.source is 'shards' but data.train is empty "
               "(expected a glob of token shard files, e.g. data/tiny/train_*.bin)");
  // Shard errors (no match, a bad file) name the recipe key they came from.
  auto load = [&](const char* key, const std::string& glob, const DataLoaderOptions& o) {
    try {
      return std::make_unique<DataLoader>(DataLoader::from_files({glob}, o));
    } catch (const Error& e) {
      throw_error(strformat("%s: %s", key, e.what()));
    }
  };
  if (need_train) s.train_loader = load("data.train", r.data.train, train_opts);
  if (!r.data.val.empty()) {
    s.val_loader = load("data.val", r.data.val, val_opts);
    // Validation on training data reads as generalisation: refused.
    if (s.train_loader) {
      std::set<std::string> train_files;
      for (const auto& src : s.train_loader->sources())
        train_files.insert(fs::weakly_canonical(src->name()).string());
      for (const auto& src : s.val_loader->sources())
        ATTN_REQUIRE(!train_files.count(fs::weakly_canonical(src->name()).string()),
                     "data.train ('%s') and data.val ('%s') both match '%s': the validation "
                     "loss would be taken on training data",
                     r.data.train.c_str(), r.data.val.c_str(), src->name().c_str());
    }
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
    s.unigram_tokens = int64_t(toks.size());
  }
  // The checkpoints carry the tokenizer for generate and eval's text tasks: the one the recipe
  // names (it must load: a typo would otherwise surface only there), else the one `prepare` wrote
  // beside the train shards (tokenizer.json); without either, none (the default `byte` would be
  // a guess: a byte tokenizer with a GPT-2 model made eval's text scores garbage, silently).
  std::string spec = r.data.tokenizer;
  // The tokenizer.json beside the matched train shards: their directories, since the glob's
  // directory part may hold wildcards (data/*/train_*.bin: its literal parent was never found,
  // so no check ran, and datasets of two tokenizers trained together without a word).
  std::set<fs::path> dirs;
  if (s.train_loader)
    for (const auto& src : s.train_loader->sources())
      dirs.insert(fs::path(src->name()).parent_path());
  else if (!r.data.train.empty())
    dirs.insert(fs::path(r.data.train).parent_path());
  std::vector<fs::path> beside;
  for (const fs::path& d : dirs)
    if (fs::exists(d / "tokenizer.json")) beside.push_back(d / "tokenizer.json");
  const bool has_prepared = !beside.empty();
  const fs::path prepared = has_prepared ? beside.front() : fs::path();
  // Each loaded once; one that cannot load is said (the checkpoints then carry none of it).
  // Directories without one (shards of llm.c's scripts) are not compared.
  std::vector<std::unique_ptr<Tokenizer>> loaded;
  for (const fs::path& f : beside) {
    try {
      loaded.push_back(make_tokenizer(f.string()));
    } catch (const Error& e) {
      loaded.emplace_back();
      s.data_warnings.push_back(
          strformat("the tokenizer.json beside data.train (%s) cannot be loaded: %s; it is "
                    "neither compared nor saved with the checkpoints (name the tokenizer with "
                    "data.tokenizer)",
                    f.c_str(), e.what()));
    }
  }
  for (size_t i = 1; has_prepared && loaded[0] && i < beside.size(); ++i) {
    if (!loaded[i]) continue;
    const std::string diff = tokenizer_difference(*loaded[i], *loaded[0]);
    ATTN_REQUIRE(diff.empty(),
                 "data.train ('%s') holds shards prepared with different tokenizers: %s and %s "
                 "(%s); their ids mean different text",
                 r.data.train.c_str(), prepared.c_str(), beside[i].c_str(), diff.c_str());
  }
  const bool given = r.given.contains("data.tokenizer");
  std::unique_ptr<Tokenizer> tok;
  if (!given) {
    if (!has_prepared || !loaded[0]) return;
    spec = prepared.string();
    tok = std::move(loaded[0]);
  } else {
    try {
      tok = make_tokenizer(spec);
    } catch (const Error& e) {
      ATTN_FAIL(
          "%s: data.tokenizer '%s' cannot be loaded: %s\n(the checkpoints carry it for "
          "generate and eval's text tasks: name the tokenizer the shards were prepared "
          "with)",
          r.given.where.at("data.tokenizer").c_str(), r.data.tokenizer.c_str(), e.what());
    }
  }
  const std::string source =
      given ? strformat("%s: data.tokenizer '%s'", r.given.where.at("data.tokenizer").c_str(),
                        r.data.tokenizer.c_str())
            : strformat("the tokenizer.json beside data.train (%s)", prepared.string().c_str());
  ATTN_REQUIRE(tok->vocab_size() <= r.model.vocab_size,
               "%s has %d ids, more than model.vocab_size (%d)", source.c_str(), tok->vocab_size(),
               r.model.vocab_size);
  // A named tokenizer against the one `prepare` wrote beside the shards: another one (another
  // vocabulary, or the same size with other ids) would go into every checkpoint, and generate
  // and eval's text tasks would decode and encode with it.
  if (given && has_prepared && loaded[0]) {
    const std::string diff = tokenizer_difference(*tok, *loaded[0]);
    ATTN_REQUIRE(diff.empty(),
                 "%s is not the tokenizer the shards were prepared with (%s): %s; name that "
                 "tokenizer, or leave data.tokenizer out to take it",
                 source.c_str(), prepared.string().c_str(), diff.c_str());
  }
  s.tokenizer_json = tok->to_json();
  s.tokenizer_spec = spec;
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

// The CPU path's: the estimate against the memory the process can have (host_memory.h: free
// memory and swap, below every cgroup limit of the process), so that a model too large for it is
// refused at once instead of paging until the kernel's out-of-memory killer ends the run without
// a word. CPU ranks sharing a host share its memory: each compares with its share (they each
// saw the whole host, and together could need several times it).
void check_host_memory(const Recipe& r, const Session& s, const TrainingMemoryEstimate& est) {
  const int sharing = ranks_on_this_host(*s.comm);  // a collective: before any return
  const size_t available = host_memory_available();
  if (available == 0) return;  // not Linux's /proc: nothing to compare with
  std::string shortfall =
      device_memory_shortfall(est, available / size_t(sharing), r.train.micro_batch,
                              s.model->config().recompute, /*host=*/true);
  if (!shortfall.empty() && sharing > 1)
    shortfall +=
        strformat(" (%d ranks share this host's memory: each has 1/%d of it)", sharing, sharing);
  ATTN_REQUIRE(shortfall.empty(), "%s", shortfall.c_str());
}

// Test hook (docs/distributed.md, "Faults"): ATTNLAB_TEST_OOM=<rank>:<step> makes that rank, at
// the start of that (1-based) step, allocate more memory than its device has (the device's total
// plus the run's estimate; on the CPU 2^50 bytes), so the allocator's genuine failure path runs
// mid-run. Used by the ctest dist_mpi_rank_oom, scripts/dist_device_check.sh and
// TrainIntegration.AResumedEarlierCheckpointTakesOverTheRunAtItsFirstRecord only.
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
  if (s.ctx->device == Device::cuda)
    check_device_memory(r, s, s.memory);
  else
    check_host_memory(r, s, s.memory);
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

// What the attention variants add to an evaluation: their telemetry of every scored validation
// token (all ranks) into `record`, their health warnings, and the validation loss under their
// alternate eval mode (Focus: the routing eval does not use, so the train/inference gap shows).
// Returns the text for the eval line ("" when no variant has an alternate mode).
std::string attention_eval_report(Session& s, int batches, const io::Logger& log,
                                  nlohmann::json& record) {
  const int L = s.model->config().n_layer;
  for (int l = 0; l < L; ++l)  // every rank, in layer order (the same recipe on each)
    if (std::vector<double>* sums = s.model->attention(l).telemetry_sums())
      s.comm->all_reduce_host(sums->data(), int(sums->size()));
  std::map<std::string, double> m;
  s.model->attention_metrics(m);
  for (const auto& [k, v] : m) record[k] = v;
  std::string summary = L > 0 ? s.model->attention(0).summarize(m) : "";
  if (!summary.empty()) summary = " | " + summary;
  // How val_loss was evaluated (Focus: "focus hard routing, top_k 2"): the record and the line
  // name it, since eval-time keys may change at a resume.
  const std::string mode = L > 0 ? s.model->attention(0).eval_mode() : "";
  if (!mode.empty()) record["attention_eval"] = mode;
  std::string alternate;
  for (int l = 0; l < L; ++l) {
    const AttentionModule& a = s.model->attention(l);
    if (const std::string w = a.health_warning(); !w.empty()) log.warn("%s", w.c_str());
    if (alternate.empty()) alternate = a.alternate_eval();
  }
  if (alternate.empty()) return (mode.empty() ? "" : " | " + mode) + summary;
  for (int l = 0; l < L; ++l) s.model->attention(l).use_alternate_eval(true);
  // The alternate mode named in full on the eval line (Focus: "hard routing, top_k 1"), and in
  // the record beside its loss.
  const std::string alternate_mode = s.model->attention(0).eval_mode();
  record["attention_eval_" + alternate] = alternate_mode;
  const ValidationResult ev =
      global_validation(*s.comm, score_validation(*s.model, *s.ctx, s.store, *s.val_loader, batches,
                                                  s.tokens_dev, s.targets_dev, nullptr, false));
  for (int l = 0; l < L; ++l) s.model->attention(l).use_alternate_eval(false);
  record["val_loss_" + alternate] = ev.loss;
  return strformat("%s | %s%s %.4f%s", mode.empty() ? "" : (" | " + mode).c_str(),
                   (alternate_mode.empty() ? alternate : alternate_mode).c_str(),
                   alternate_mode.empty() ? "" : ": val loss", ev.loss, summary.c_str());
}

std::string roles_text(const std::vector<std::string>& roles) {
  std::string t;
  for (const std::string& r : roles) t += (t.empty() ? "" : ", ") + r;
  return t;
}

}  // namespace attnlab::train_session
