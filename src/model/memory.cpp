// The device-memory estimate of a training run and the start-up out-of-memory message.
#include <algorithm>

#include "core/error.h"
#include "model/gpt.h"
#include "model/memory_note.h"

namespace attnlab {

TrainingMemoryEstimate estimate_training_memory(const GPT& model, int64_t num_params,
                                                int64_t num_trainable, int B, int T, DType dtype,
                                                int optimizer_shards) {
  ATTN_REQUIRE(optimizer_shards >= 1, "optimizer_shards must be >= 1, got %d", optimizer_shards);
  TrainingMemoryEstimate e;
  const size_t es = dtype_size(dtype);
  e.weights = size_t(num_params) * es;
  e.grads = size_t(num_trainable) * es;
  const int64_t shard = (num_trainable + optimizer_shards - 1) / optimizer_shards;
  e.optimizer = size_t(shard) * 4 * (dtype == DType::bf16 ? 3 : 2);  // m, v (+ f32 master)
  e.activations = model.activation_bytes(B, T, dtype);
  e.workspace = size_t(32) << 20;  // cuBLASLt workspace
  return e;
}

namespace {
std::string gib(size_t b) { return strformat("%.2f GiB", double(b) / double(size_t(1) << 30)); }
}  // namespace

std::string device_memory_shortfall(const TrainingMemoryEstimate& e, size_t free_bytes,
                                    int micro_batch, ActivationRecompute recompute, bool host) {
  const size_t need = e.total() + e.total() / 20;  // 5% for allocator rounding and the context
  if (need <= free_bytes) return "";
  std::string hint;
  const size_t fixed = e.weights + e.grads + e.optimizer + e.workspace;
  if (fixed + fixed / 20 >= free_bytes) {
    hint =
        host ? "the weights, gradients and optimizer state alone do not fit: use a smaller "
               "model or a machine with more memory (or train on a GPU)"
             : "the weights, gradients and optimizer state alone do not fit: use a smaller model, "
               "a GPU with more memory, or distributed.zero: 1 over more ranks "
               "(docs/distributed.md)";
  } else {
    // Activations scale with the micro-batch: the largest that fits, keeping the recompute mode.
    const double room = double(free_bytes) / 1.05 - double(fixed) - double(1 << 20);
    int mb = int(double(micro_batch) * room / double(e.activations));
    hint = "lower train.micro_batch";
    if (mb >= 1) hint += strformat(" (about %d fits)", std::min(mb, micro_batch - 1));
    hint += " and raise train.batch_tokens / accumulation accordingly";
    if (recompute != ActivationRecompute::block)
      hint += ", or set train.recompute: block (keeps only each layer's input)";
  }
  return strformat("out of %s memory at start-up: %s but %s %s %s; %s", host ? "host" : "device",
                   memory_estimate_text(e, micro_batch, recompute).c_str(),
                   host ? "this machine has" : "the GPU has", gib(free_bytes).c_str(),
                   host ? "available" : "free", hint.c_str());
}

std::string memory_estimate_text(const TrainingMemoryEstimate& e, int micro_batch,
                                 ActivationRecompute recompute) {
  return strformat(
      "the run needs about %s (weights %s, gradients %s, optimizer %s, activations %s for "
      "micro-batch %d, recompute %s)",
      gib(e.total()).c_str(), gib(e.weights).c_str(), gib(e.grads).c_str(),
      gib(e.optimizer).c_str(), gib(e.activations).c_str(), micro_batch, recompute_name(recompute));
}

std::string out_of_memory_note(const TrainingMemoryEstimate& e, int micro_batch,
                               ActivationRecompute recompute) {
  std::string hint = "lower train.micro_batch (raise the accumulation to keep train.batch_tokens)";
  if (recompute != ActivationRecompute::block) hint += ", set train.recompute: block";
  hint += ", or use distributed.zero: 1 over more ranks (docs/distributed.md)";
  return memory_estimate_text(e, micro_batch, recompute) + "; hint: " + hint;
}

}  // namespace attnlab
