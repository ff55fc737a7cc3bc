// GPT: the decoder-only model family (GPT-2 now; LLaMA-style choices land as config options of the
// same block). Composes host ops (src/ops/ops.h) so the same code runs on CPU (f32) and CUDA
// (f32 or bf16). Parameters live in a ParameterStore under stable names (docs/architecture.md):
//   wte.weight [Vp,C]  wpe.weight [block,C]  ln_f.{weight,bias} [C]
//   h.<l>.ln_1.{weight,bias}  h.<l>.attn.c_attn.{weight [3C,C], bias [3C]}
//   h.<l>.attn.c_proj.{weight [C,C], bias}  h.<l>.ln_2.{weight,bias}
//   h.<l>.mlp.c_fc.{weight [4C,C], bias [4C]}  h.<l>.mlp.c_proj.{weight [C,4C], bias [C]}
// The LM head is tied to wte. Weights use the PyTorch nn.Linear layout [out, in].
#pragma once
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/parameters.h"
#include "model/kv_cache.h"  // incremental decoding
#include "nn/attention.h"

namespace attnlab {

// Activation recomputation: trade backward compute for activation memory.
//   none   keep every activation of the forward
//   gelu   do not keep GELU(fch) per layer; recompute it from fch in backward (saves L-1 [B,T,4C])
//   block  keep only each layer's input residual; re-run the layer's forward inside backward
//          (one shared set of layer buffers instead of L; about one extra forward of the blocks)
// Each mode's recomputation runs the same ops on the same inputs as its forward, so it reproduces
// the forward bitwise. On the CPU the modes give bitwise identical gradients. On CUDA (bf16) none
// and block compute GELU in the c_fc GEMM's epilogue (on the fp32 accumulator) while gelu runs it
// as a separate kernel on the rounded pre-activation (what its backward recomputes), so gelu
// differs from the others within bf16 rounding.
enum class ActivationRecompute : uint8_t { none, gelu, block };
const char* recompute_name(ActivationRecompute r);

// Optional per-op-group observer for benchmarks: begin/end bracket each group of ops the model
// launches (e.g. "fwd.matmul.qkv", "bwd.attention"); a CUDA observer records events there.
class OpObserver {
 public:
  virtual ~OpObserver() = default;
  virtual void begin(const char* group) = 0;
  virtual void end(const char* group) = 0;
};

struct GPTConfig {
  int n_layer = 12, n_head = 12, n_kv_head = 0, n_embd = 768;
  int vocab_size = 50257;    // real vocabulary (loss and sampling ignore the padding)
  int padded_vocab = 50304;  // rows of wte
  int block_size = 1024;     // rows of wpe (maximum sequence length)
  float norm_eps = 1e-5f;
  float init_std = 0.02f;
  AttentionOptions attention;
  ActivationRecompute recompute = ActivationRecompute::none;
  int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int head_dim() const { return n_embd / n_head; }
};

struct ForwardResult {
  double aux_loss = 0.0;  // sum of the attention variants' auxiliary losses
};

// Cross-entropy totals of the forwards since the last GPT::take_loss.
struct LossTotals {
  double sum = 0.0;   // sum of the per-token losses over valid targets
  int64_t valid = 0;  // number of targets != ignore_index
  double mean() const { return valid ? sum / double(valid) : std::nan(""); }
};

class GPT {
 public:
  static constexpr int kIgnoreIndex = -1;

  explicit GPT(const GPTConfig& cfg);
  const GPTConfig& config() const { return cfg_; }

  // Declares every parameter (base weights and the attention variants') into `store`.
  void declare_params(ParameterStore& store) const;
  // GPT-2 initialisation (normal(0.02), residual projections scaled by 1/sqrt(2 n_layer),
  // LayerNorm ones/zeros, padded vocabulary rows zero).
  void init_params(ParameterStore& store, uint64_t seed) const;

  // Allocates activations for micro-batches of up to [B, T] on the context's device.
  void allocate(const ExecContext& ctx, int B, int T, DType dtype);

  // tokens, targets: [B, T] i32 on the context's device (targets may be empty: logits only).
  // With targets and dloss != 0, the fused loss kernel also writes dlogits (scaled by dloss),
  // ready for backward(). With targets, the micro-batch's loss sum and valid-target count are
  // added to the model's loss totals on the device (no host synchronisation): read them with
  // take_loss(), e.g. once per optimizer step.
  ForwardResult forward(const ExecContext& ctx, const ParameterStore& store, const Tensor& tokens,
                        const Tensor& targets, AttentionMode mode, float dloss = 0.f);
  // The loss totals of every forward with targets since the last call (or allocate()), then
  // resets them. Synchronises the context's stream (CUDA). Deterministic: each forward's
  // reduction runs in a fixed order and the forwards add up in call order.
  LossTotals take_loss(const ExecContext& ctx);
  // Accumulates parameter gradients (+=) into store's gradient buffer; frozen tensors are skipped.
  void backward(const ExecContext& ctx, const ParameterStore& store, const Tensor& tokens);

  // Logits of the last forward: [B, T, Vp] (columns >= vocab_size are padding).
  Tensor logits() const { return logits_.view(Shape{B_, T_, cfg_.padded_vocab}); }

  // Parameter count (excluding vocabulary padding) and FLOPs per token of a training step.
  int64_t num_params_unpadded(const ParameterStore& store) const;
  double flops_per_token(int T) const;
  // Bytes of activations (forward saved state + backward scratch) for a [B, T] micro-batch under
  // the config's recompute mode (attention variants' saved state excluded: see saved_bytes).
  size_t activation_bytes(int B, int T, DType dtype) const;

  // Observer of op groups (nullptr = none); not owned, must outlive its use.
  void set_observer(OpObserver* o) { observer_ = o; }

 private:
  struct Layer {
    Tensor ln1, ln1_mean, ln1_rstd, qkv, atty, res2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu, res3;
  };
  std::string p(int l, const char* name) const;  // "h.<l>.<name>"
  Tensor layer_input(int l) const;
  void bind_activations(int B, int T);
  // The layer's forward; with_output = false stops before the MLP projection (recompute: res3 is
  // already saved and backward does not read it).
  void layer_forward(const ExecContext& ctx, const ParameterStore& store, int l, AttentionMode mode,
                     bool with_output, ForwardResult* result);
  void layer_backward(const ExecContext& ctx, const ParameterStore& store, int l);

  GPTConfig cfg_;
  std::vector<std::unique_ptr<AttentionModule>> attn_;
  int B_ = 0, T_ = 0, maxB_ = 0, maxT_ = 0;
  DType dtype_ = DType::f32;
  Buffer acts_;
  Tensor encoded_, lnf_, lnf_mean_, lnf_rstd_, logits_, losses_;
  std::vector<Layer> layers_;
  // Backward scratch, reused by every layer.
  Tensor dres_, dln_, datty_, dqkv_, dfch_;
  bool has_dlogits_ = false;
  OpObserver* observer_ = nullptr;
  Buffer loss_totals_;  // 2 doubles on the device: {sum, valid} (see take_loss)

  // ==== Incremental decoding with a KV cache (implemented in model/gpt_decode.cpp) ====
 public:
  // A cache for B sequences of up to max_T <= block_size tokens, with the decoding activations
  // for chunks of up to max_T tokens; on ctx's device, in `dtype` (the parameters' dtype).
  KVCache make_kv_cache(const ExecContext& ctx, int B, int max_T, DType dtype) const;
  // Resets the cache and runs tokens [B, T] (i32, ctx's device) from position 0. Returns the
  // logits of the last position, [B, Vp] (a view into the cache, valid until its next call).
  Tensor prefill(const ExecContext& ctx, const ParameterStore& store, const Tensor& tokens,
                 KVCache& cache);
  // Runs tokens [B, 1] at position cache.length() (which must be < max_T) and appends them.
  Tensor decode_step(const ExecContext& ctx, const ParameterStore& store, const Tensor& tokens,
                     KVCache& cache);

 private:
  Tensor decode_chunk(const ExecContext& ctx, const ParameterStore& store, const Tensor& tokens,
                      KVCache& cache);
  // ==== end of incremental decoding ====
};

// Device-memory estimate of a training run on one rank (what `attnlab info` prints) and the
// start-up check against the free memory of the device.
struct TrainingMemoryEstimate {
  size_t weights = 0, grads = 0, optimizer = 0, activations = 0, workspace = 0;
  size_t total() const { return weights + grads + optimizer + activations + workspace; }
};
// num_params counts the whole store (padding included), num_trainable its trainable range; the
// optimizer holds f32 m and v, plus an f32 master copy for bf16 weights.
TrainingMemoryEstimate estimate_training_memory(const GPT& model, int64_t num_params,
                                                int64_t num_trainable, int B, int T, DType dtype);
// "" when the estimate fits into free_bytes (with a 5% margin for the allocator and the CUDA
// context); otherwise the message of the start-up out-of-memory error, with a hint.
std::string device_memory_shortfall(const TrainingMemoryEstimate& e, size_t free_bytes,
                                    int micro_batch, ActivationRecompute recompute);

}  // namespace attnlab
