// bench_train: training throughput of a recipe's model on one GPU with random data.
//
//   bench_train [--recipe recipes/gpt2-124m-dense.yaml] [--batch 64,32,16] [--seq 1024]
//               [--steps 10] [--warmup 3] [--set k=v ...] [--all]
//
// The recipe's trainable roles are honoured (retrofit.train_roles): recipes/lora-books.yaml times
// a LoRA step on the frozen base, recipes/retrofit-focus-books.yaml a Focus retrofit step (the
// weights are random: only the base checkpoint's shape matters, and it is not read).
//
// Tries the micro-batches in order and reports the first that fits (all of them with --all):
// tok/s, ms/step, MFU against the 989 TFLOP/s bf16 dense peak of an H100/H200 and against the
// measured cuBLASLt GEMM ceiling (8192^3 bf16), peak device memory (cudaMemGetInfo), and the
// per-op-group time of one step (cudaEvents around each group the model launches, summed over
// layers). A step is what the trainer does: zero grads, forward with the fused loss, backward,
// AdamW (global-norm clip included). One micro-batch per step (no accumulation).
// The last lines are machine-readable: "RESULT key=value ..." (scripts/gpu_step_check.sh).
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/cuda_check.h"
#include "ops/ops.h"
#include "train/from_recipe.h"

using namespace attnlab;

namespace {

constexpr double kPeakBf16 = 989e12;

// Records a pair of events around each op group; sums the times after a synchronize.
class EventObserver : public OpObserver {
 public:
  explicit EventObserver(cudaStream_t s) : stream_(s) {}
  ~EventObserver() override {
    for (auto e : pool_) cudaEventDestroy(e);
  }
  void begin(const char* group) override { open_.push_back({group, record()}); }
  void end(const char* /*group*/) override {
    closed_.push_back({open_.back().first, open_.back().second, record()});
    open_.pop_back();
  }
  // Sums the recorded intervals (ms) per group and resets.
  std::map<std::string, double> collect() {
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::map<std::string, double> ms;
    for (auto& c : closed_) {
      float t = 0.f;
      CUDA_CHECK(cudaEventElapsedTime(&t, c.a, c.b));
      ms[c.name] += t;
    }
    closed_.clear();
    used_ = 0;
    return ms;
  }

 private:
  cudaEvent_t record() {
    if (used_ == pool_.size()) {
      cudaEvent_t e;
      CUDA_CHECK(cudaEventCreate(&e));
      pool_.push_back(e);
    }
    cudaEvent_t e = pool_[used_++];
    CUDA_CHECK(cudaEventRecord(e, stream_));
    return e;
  }
  struct Closed {
    std::string name;
    cudaEvent_t a, b;
  };
  cudaStream_t stream_;
  std::vector<cudaEvent_t> pool_;
  size_t used_ = 0;
  std::vector<std::pair<std::string, cudaEvent_t>> open_;
  std::vector<Closed> closed_;
};

// cuBLASLt bf16 GEMM ceiling: y[M,N] = x[M,K] w[N,K]^T at 8192^3 through the matmul op.
double gemm_ceiling(const ExecContext& ctx) {
  const int64_t n = 8192;
  Buffer x(Device::cuda, size_t(n * n) * 2), w(Device::cuda, size_t(n * n) * 2),
      y(Device::cuda, size_t(n * n) * 2);
  std::vector<bf16> h(size_t(n * n));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (auto& v : h) v = __float2bfloat16(u(rng));
  Tensor tx = x.as(DType::bf16, Shape{n, n}), tw = w.as(DType::bf16, Shape{n, n}),
         ty = y.as(DType::bf16, Shape{n, n});
  copy_tensor(tx, Tensor(h.data(), DType::bf16, Device::cpu, tx.shape));
  copy_tensor(tw, Tensor(h.data(), DType::bf16, Device::cpu, tw.shape));
  for (int i = 0; i < 3; ++i) ops::matmul_fwd(ctx, ty, tx, tw, Tensor());
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  const int reps = 10;
  CUDA_CHECK(cudaEventRecord(a, ctx.stream));
  for (int i = 0; i < reps; ++i) ops::matmul_fwd(ctx, ty, tx, tw, Tensor());
  CUDA_CHECK(cudaEventRecord(b, ctx.stream));
  CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0.f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return 2.0 * double(n) * n * n * reps / (double(ms) * 1e-3);
}

struct Result {
  int B = 0;
  double tok_s = 0, ms = 0, mfu = 0, mfu_ceiling = 0, peak_gib = 0, est_gib = 0;
  std::map<std::string, double> ops_ms;
  double opt_ms = 0;
};

bool run_one(const Recipe& r, int B, int T, int steps, int warmup, double ceiling, Result& out) {
  auto ctx = ExecContext::make_cuda(0);
  ctx->deterministic = r.train.deterministic;
  GPT model(gpt_config_of(r));
  ParameterStore store;
  model.declare_params(store);
  // The recipe's trainable roles: a retrofit (Focus centroids, LoRA adapters) freezes the base.
  const std::set<ParamRole> trainable = r.retrofit.trainable_roles();
  int64_t n = 0, n_train = 0;
  for (const auto& e : store.entries()) {
    n += e.spec.shape.numel();
    if (trainable.count(e.spec.role)) n_train += e.spec.shape.numel();
  }
  TrainingMemoryEstimate est = estimate_training_memory(model, n, n_train, B, T, DType::bf16);
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  std::string shortfall = device_memory_shortfall(est, free_b, B, model.config().recompute);
  if (!shortfall.empty()) {
    std::printf("micro-batch %d does not fit: %s\n", B, shortfall.c_str());
    return false;
  }
  store.finalize(Device::cuda, DType::bf16, trainable);
  model.init_params(store, 1337);
  model.allocate(*ctx, B, T, DType::bf16);
  AdamW opt(*ctx, store, adamw_config_of(r));
  Buffer batch(Device::cuda, size_t(2 * B * T) * 4);
  Tensor tok = batch.as(DType::i32, Shape{B, T}),
         tgt = batch.as(DType::i32, Shape{B, T}, size_t(B * T) * 4);
  std::vector<int32_t> h(size_t(B) * T);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> v(0, r.model.vocab_size - 1);
  for (auto& x : h) x = v(rng);
  copy_tensor(tok, Tensor(h.data(), DType::i32, Device::cpu, tok.shape));
  for (auto& x : h) x = v(rng);
  copy_tensor(tgt, Tensor(h.data(), DType::i32, Device::cpu, tgt.shape));
  const float dloss = float(1.0 / double(B * T));
  const double lr = r.optim.lr;
  auto step = [&](int s) {
    store.zero_grads();
    model.forward(*ctx, store, tok, tgt, AttentionMode::train, dloss);
    model.backward(*ctx, store, tok);
    opt.step(float(lr), s);
    model.take_loss(*ctx);  // as the trainer: the step's loss, read once after the optimizer
  };
  for (int s = 1; s <= warmup; ++s) step(s);
  ctx->synchronize();
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  CUDA_CHECK(cudaEventRecord(a, ctx->stream));
  for (int s = 1; s <= steps; ++s) step(warmup + s);
  CUDA_CHECK(cudaEventRecord(b, ctx->stream));
  CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0.f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  size_t free_after = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_after, &total_b));

  // One instrumented step for the breakdown (events perturb the timing slightly; reported apart).
  EventObserver obs(ctx->stream);
  model.set_observer(&obs);
  store.zero_grads();
  model.forward(*ctx, store, tok, tgt, AttentionMode::train, dloss);
  model.backward(*ctx, store, tok);
  obs.begin("optimizer");
  opt.step(float(lr), warmup + steps + 1);
  obs.end("optimizer");
  model.take_loss(*ctx);
  out.ops_ms = obs.collect();
  model.set_observer(nullptr);

  out.B = B;
  out.ms = double(ms) / steps;
  out.tok_s = double(B) * T / (out.ms * 1e-3);
  const double flops = model.flops_per_token(T, store, trainable) * out.tok_s;
  out.mfu = flops / kPeakBf16;
  out.mfu_ceiling = ceiling > 0 ? flops / ceiling : 0;
  out.peak_gib = double(total_b - free_after) / double(1 << 30);
  out.est_gib = double(est.total()) / double(1 << 30);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return true;
}

void print_result(const Result& r, int T) {
  std::printf(
      "\nmicro-batch %d x %d: %.0f tok/s | %.2f ms/step | MFU %.1f%% of 989 TFLOP/s "
      "(%.1f%% of the measured GEMM ceiling) | device memory in use %.2f GiB (estimate %.2f GiB)\n",
      r.B, T, r.tok_s, r.ms, 100 * r.mfu, 100 * r.mfu_ceiling, r.peak_gib, r.est_gib);
  double total = 0;
  for (auto& [k, v] : r.ops_ms) total += v;
  std::vector<std::pair<std::string, double>> sorted(r.ops_ms.begin(), r.ops_ms.end());
  std::sort(sorted.begin(), sorted.end(), [](auto& x, auto& y) { return x.second > y.second; });
  std::printf("  %-26s %9s %7s\n", "op group (one step)", "ms", "share");
  for (auto& [k, v] : sorted) std::printf("  %-26s %9.3f %6.1f%%\n", k.c_str(), v, 100 * v / total);
  std::printf("  %-26s %9.3f (instrumented step; untimed step %.3f ms)\n", "sum", total, r.ms);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"training throughput of a recipe (random data, one GPU)"};
  std::string recipe_path = std::string(ATTNLAB_SOURCE_DIR) + "/recipes/gpt2-124m-dense.yaml";
  std::string batches = "64,32,16";
  std::vector<std::string> overrides;
  int T = 1024, steps = 10, warmup = 3;
  bool all = false;
  app.add_option("--recipe", recipe_path);
  app.add_option("--batch", batches, "micro-batches to try, in order");
  app.add_option("--seq", T);
  app.add_option("--steps", steps);
  app.add_option("--warmup", warmup);
  app.add_option("--set", overrides);
  app.add_flag("--all", all, "run every micro-batch, not only the first that fits");
  CLI11_PARSE(app, argc, argv);
  try {
    if (!cuda_available()) {
      std::fprintf(stderr, "bench_train: no CUDA device\n");
      return 1;
    }
    Recipe r = load_recipe(recipe_path, overrides);
    auto ctx = ExecContext::make_cuda(0);
    const double ceiling = gemm_ceiling(*ctx);
    std::string roles;
    for (const std::string& x : r.retrofit.train_roles) roles += (roles.empty() ? "" : ",") + x;
    if (!r.retrofit.enabled) roles = "all";
    std::printf(
        "bench_train | %s | %d layers, n_embd %d, T %d | trainable roles %s | "
        "recompute %s | bf16 | %s\n",
        recipe_path.c_str(), r.model.n_layer, r.model.n_embd, T, roles.c_str(),
        std::string(enum_name(r.train.recompute)).c_str(),
        r.train.deterministic ? "deterministic" : "nondeterministic dQ");
    std::printf("measured bf16 GEMM ceiling (8192^3, cuBLASLt): %.0f TFLOP/s\n", ceiling / 1e12);
    std::stringstream ss(batches);
    std::string item;
    std::vector<Result> results;
    while (std::getline(ss, item, ',')) {
      Result res;
      if (run_one(r, std::stoi(item), T, steps, warmup, ceiling, res)) {
        print_result(res, T);
        results.push_back(res);
        if (!all) break;
      }
    }
    for (auto& res : results)
      std::printf(
          "RESULT bench_train mb=%d tok_s=%.0f ms=%.3f mfu=%.4f mem_gib=%.2f ceiling_tflops=%.0f\n",
          res.B, res.tok_s, res.ms, res.mfu, res.peak_gib, ceiling / 1e12);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_train: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
