// GPT: the decoder-only model family (GPT-2 now; LLaMA-style choices land as config options of the
// same block, model/block.h). Composes host ops (src/ops/ops.h) so the same code runs on CPU (f32)
// and CUDA (f32 or bf16). Parameters live in a ParameterStore under stable names
// (docs/architecture.md): the blocks' (model/block.h) and
//   wte.weight [Vp,C]  wpe.weight [block,C]  ln_f.{weight,bias} [C]  lm_head.weight [Vp,C]
// where lm_head exists only with untied embeddings (else the head is wte) and the biases only with
// model.bias. Weights use the PyTorch nn.Linear layout [out, in].
#pragma once
#include <array>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/context.h"
#include "core/parameters.h"
#include "model/block.h"
#include "model/kv_cache.h"  // incremental decoding
#include "model/model_config.h"
#include "model/op_scope.h"
#include "nn/attention.h"

namespace attnlab {

// Cross-entropy totals of the forwards since the last GPT::take_loss.
struct LossTotals {
  double sum = 0.0;   // sum of the per-token losses over valid targets
  int64_t valid = 0;  // number of targets != ignore_index
  double aux = 0.0;   // sum of aux_scale * (auxiliary losses of the attention variants)
  double mean() const { return valid ? sum / double(valid) : std::nan(""); }
};

class GPT {
 public:
  static constexpr int kIgnoreIndex = -1;
  // The tensors with one row per vocabulary entry: padded_vocab rows, those from vocab_size on
  // zero (init_params) and never trained.
  static constexpr std::array<std::string_view, 2> kVocabRowParams = {"wte.weight",
                                                                      "lm_head.weight"};

  explicit GPT(const GPTConfig& cfg);
  const GPTConfig& config() const { return cfg_; }

  // Declares every parameter (base weights and the attention variants') into `store`.
  void declare_params(ParameterStore& store) const;
  // GPT-2 initialisation (normal(init_std = 0.02); wpe normal(init_std / 2 = 0.01) as GPT-2's own
  // code, where HF and nanoGPT draw 0.02; residual projections scaled by 1/sqrt(2 n_layer);
  // LayerNorm ones/zeros; padded vocabulary rows zero).
  void init_params(ParameterStore& store, uint64_t seed) const;

  // Allocates activations for micro-batches of up to [B, T] on the context's device.
  void allocate(const ExecContext& ctx, int B, int T, DType dtype);

  // tokens, targets: [B, T] i32 on the context's device (targets may be empty: logits only).
  // With targets and dloss != 0, the fused loss kernel also writes dlogits (scaled by dloss),
  // ready for backward(). With targets, the micro-batch's loss sum and valid-target count are
  // added to the model's loss totals on the device (no host synchronisation): read them with
  // take_loss(), e.g. once per optimizer step. aux_scale weighs the attention variants'
  // auxiliary losses, in the totals and in the objective backward() differentiates
  // (objective = dloss * sum of token losses + aux_scale * auxiliary losses).
  void forward(const ExecContext& ctx, const ParameterStore& store, const Tensor& tokens,
               const Tensor& targets, AttentionMode mode, float dloss = 0.f, float aux_scale = 1.f);
  // The loss totals of every forward with targets since the last call (or allocate()), then
  // resets them. Synchronises the context's stream (CUDA). Deterministic: each forward's
  // reduction runs in a fixed order and the forwards add up in call order.
  LossTotals take_loss(const ExecContext& ctx);
  // Accumulates parameter gradients (+=) into store's gradient buffer; frozen tensors are skipped
  // (their weight-gradient products are not run), and so is every data-gradient product that no
  // trainable tensor needs: below the lowest layer with a trainable tensor nothing runs, and the
  // embedding backward runs only when the embeddings train.
  void backward(const ExecContext& ctx, const ParameterStore& store, const Tensor& tokens);

  // Logits of the last forward: [B, T, Vp] (columns >= vocab_size are padding). After a forward
  // with targets and dloss != 0 (training) the buffer holds dlogits instead (the fused loss
  // writes them in place).
  Tensor logits() const { return logits_.view(Shape{B_, T_, cfg_.padded_vocab}); }
  // Per-token losses -log p(target) of the last forward with targets: [B, T] f32 (rows whose
  // target is kIgnoreIndex hold no meaningful value). Evaluation reads them (src/eval/).
  Tensor token_losses() const { return losses_.view(Shape{B_, T_}); }

  // Parameter counts (excluding vocabulary padding: the trainable count leaves out the padding
  // rows of a trainable wte / lm_head) and FLOPs per token of a training step.
  int64_t num_params_unpadded(const ParameterStore& store) const;
  int64_t num_trainable_unpadded(const ParameterStore& store) const;
  int64_t vocab_padding() const;  // elements of the padded vocabulary rows (wte, lm_head)
  // FLOPs: PaLM's 6 per matmul weight (forward, input gradient, weight gradient) plus the causal
  // attention scores, counted over the store's matrices (every 2-D tensor but the position
  // embedding; the token embedding only as the tied output layer, unpadded), so a variant's and an
  // adapter's matrices count, and a frozen matrix (role outside trainable_roles: no weight
  // gradient) counts 4.
  double flops_per_token(int T, const ParameterStore& store,
                         const std::set<ParamRole>& trainable_roles) const;
  // Bytes of activations (forward saved state + backward scratch) for a [B, T] micro-batch under
  // the config's recompute mode, attention variants' saved state included.
  size_t activation_bytes(int B, int T, DType dtype) const;

  // Layer l's attention module (telemetry; variant settings such as Focus's eval routing).
  AttentionModule& attention(int l) const { return blocks_[size_t(l)].attention(); }
  // Every layer's AttentionModule telemetry: reset, count after an eval forward (scored[b]:
  // sequence b is scored), and the metrics of the tokens counted.
  void reset_attention_telemetry() {
    for (Block& b : blocks_) b.attention().reset_telemetry();
  }
  void count_attention_telemetry(const std::vector<uint8_t>& scored) {
    for (Block& b : blocks_) b.attention().count_telemetry(scored);
  }
  void attention_metrics(std::map<std::string, double>& out) const {
    for (const Block& b : blocks_) b.attention().metrics(out);
  }

  // Observer of op groups (nullptr = none); not owned, must outlive its use.
  void set_observer(OpObserver* o) { observer_ = o; }
  // Called by backward() after layer l's backward, l from n_layer - 1 down: data parallelism
  // starts reducing the gradients that are final then (dist/grad_sync.h). Empty = none.
  void set_backward_hook(std::function<void(int layer)> hook) { backward_hook_ = std::move(hook); }

  // ==== Incremental decoding with a KV cache (implemented in model/gpt_decode.cpp) ====
  // A cache for B sequences of up to max_T <= block_size tokens, on ctx's device, in `dtype` (the
  // parameters' dtype). The decoding activations are allocated by the chunks run (or reserved).
  KVCache make_kv_cache(const ExecContext& ctx, int B, int max_T, DType dtype) const;
  // Allocates the decoding activations for prefills of up to T tokens and the decode steps after
  // them now (the model's and every attention module's chunk scratch,
  // AttentionModule::decode_reserve_bytes), so that such a run allocates nothing more:
  // generate reserves its context slide's before the first token, so that memory runs out before
  // any text, not in the middle of it.
  void reserve_decode(const ExecContext& ctx, KVCache& cache, int T) const;
  // Resets the cache and runs tokens [B, T] (i32, ctx's device) from position 0. Returns the
  // logits of the last position, [B, Vp] (a view into the cache, valid until its next call).
  Tensor prefill(const ExecContext& ctx, const ParameterStore& store, const Tensor& tokens,
                 KVCache& cache);
  // Runs tokens [B, 1] at position cache.length() (which must be < max_T) and appends them.
  Tensor decode_step(const ExecContext& ctx, const ParameterStore& store, const Tensor& tokens,
                     KVCache& cache);

 private:
  // Views of the activation buffer for a [B, T] micro-batch; with a counting carver, its size.
  struct Acts {
    std::vector<BlockActs> layers;
    BlockScratch scratch;
    Tensor encoded, lnf, lnf_mean, lnf_rstd, logits, losses;
  };
  Acts carve(Carver& cv, int B, int T, DType dt) const;
  // Typed views of the non-block weights and gradients, and every block's, for `store`.
  void bind(const ParameterStore& store);
  Tensor head_weight(bool grad) const;
  Tensor layer_input(int l) const { return l == 0 ? encoded_ : layers_[l - 1].out; }
  double* aux_total() const;
  Tensor decode_chunk(const ExecContext& ctx, const ParameterStore& store, const Tensor& tokens,
                      KVCache& cache);

  GPTConfig cfg_;
  std::vector<Block> blocks_;
  // Bindings of the last store (rebound when the store or its buffers change).
  const void *bound_params_ = nullptr, *bound_grads_ = nullptr;
  const ParameterStore* bound_store_ = nullptr;
  Tensor wte_, wpe_, lnf_w_, lnf_b_, lm_head_, dwte_, dwpe_, dlnf_w_, dlnf_b_, dlm_head_;

  int B_ = 0, T_ = 0, maxB_ = 0, maxT_ = 0;
  DType dtype_ = DType::f32;
  Buffer acts_;
  Tensor encoded_, lnf_, lnf_mean_, lnf_rstd_, logits_, losses_;
  std::vector<BlockActs> layers_;
  BlockScratch scratch_;
  bool has_dlogits_ = false;
  float aux_scale_ = 1.f;
  OpObserver* observer_ = nullptr;
  std::function<void(int layer)> backward_hook_;
  Buffer loss_totals_;  // 3 doubles on the device: {sum, valid, aux} (see take_loss)
};

// Device-memory estimate of a training run on one rank (what `attnlab info` prints) and the
// start-up check against the free memory of the device (model/memory.cpp).
struct TrainingMemoryEstimate {
  size_t weights = 0, grads = 0, optimizer = 0, activations = 0, workspace = 0;
  size_t total() const { return weights + grads + optimizer + activations + workspace; }
};
// num_params counts the whole store (padding included), num_trainable its trainable range; the
// optimizer holds f32 m and v, plus an f32 master copy for bf16 weights, divided over
// optimizer_shards ranks (ZeRO-1: the world size; 1 otherwise).
TrainingMemoryEstimate estimate_training_memory(const GPT& model, int64_t num_params,
                                                int64_t num_trainable, int B, int T, DType dtype,
                                                int optimizer_shards = 1);
// "" when the estimate fits into free_bytes (with a 5% margin for the allocator and the CUDA
// context); otherwise the message of the start-up out-of-memory error, with a hint. host: the
// CPU path's memory (free_bytes: what the machine has available).
std::string device_memory_shortfall(const TrainingMemoryEstimate& e, size_t free_bytes,
                                    int micro_batch, ActivationRecompute recompute,
                                    bool host = false);

}  // namespace attnlab
