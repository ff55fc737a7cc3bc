// One transformer block, configured by GPTConfig and used by training, evaluation and incremental
// decoding alike (pre-norm, GPT-2 order):
//   ln1  = norm_1(x)     qkv = ln1 @ W_qkv^T + b_qkv (q, k rotated by RoPE with position: rope)
//   res2 = x + attention(qkv) @ W_o^T + b_o
//   ln2  = norm_2(res2)  out  = res2 + act(ln2 @ W_fc^T + b_fc) @ W_p^T + b_p
// norm is LayerNorm or RMSNorm; act is GELU (fc [F, C]) or SwiGLU (fc [2F, C]: the gate
// projection's rows, then the up projection's; act = silu(gate) * up).
// Parameters of layer l (stable checkpoint names, docs/architecture.md), weights [out, in]:
//   h.<l>.ln_1.{weight,bias} [C]   h.<l>.attn.c_attn.{weight [W,C], bias [W]}, W = qkv width
//   h.<l>.attn.c_proj.{weight [C,H*D], bias [C]}   h.<l>.ln_2.{weight,bias} [C]
//   h.<l>.mlp.c_fc.{weight [F or 2F,C], bias}      h.<l>.mlp.c_proj.{weight [C,F], bias [C]}
// plus the attention variant's own (h.<l>.attn.<variant>.*). Without model.bias no bias exists;
// RMSNorm has none either.
// With cfg.lora (retrofit.lora) the q/k/v projection carries a LoRA (nn/lora.h):
//   h.<l>.attn.c_attn.{lora_a [r,C], lora_b [W,r]}: qkv = ln1 W^T + b + (alpha/r) (ln1 A^T) B^T.
// The weights are bound once per store (typed views, no lookups by name per call).
#pragma once
#include <memory>
#include <optional>

#include "core/carver.h"
#include "core/context.h"
#include "core/parameters.h"
#include "model/model_config.h"
#include "model/op_scope.h"
#include "nn/attention.h"
#include "nn/lora.h"

namespace attnlab {

struct Linear {
  Tensor w, b;  // b empty without bias
};
struct Norm {
  Tensor w, b;  // b empty without bias
};
// A block's weights, or their gradients (every tensor empty when frozen).
struct BlockTensors {
  Norm ln_1, ln_2;
  Linear qkv, attn_proj, fc, mlp_proj;
};

// One layer's activations for a [B, T] micro-batch: views into the model's activation buffer.
// fch is the fc product [B*T, F or 2F], fch_act the activation [B*T, F]; the means exist with
// LayerNorm only.
struct BlockActs {
  Tensor ln1, ln1_mean, ln1_rstd, qkv, atty, res2, ln2, ln2_mean, ln2_rstd, fch, fch_act, out;
  Tensor lora_u;  // [B*T, r] with a LoRA on c_attn
};
// Backward scratch, shared by every layer: dres carries the residual-stream gradient.
// dact [B*T, F] (SwiGLU only) holds d(act) between the projection's and SwiGLU's backward.
struct BlockScratch {
  Tensor dres, dln, datty, dqkv, dfch, dact;
  Tensor dlora_u;  // [B*T, r] with a LoRA on c_attn
};

// The configured norm: LayerNorm (mean, rstd) or RMSNorm (rstd; mean unused), y written; the
// backward accumulates dx (+=) and the weight's (and bias's) gradients (empty = frozen).
void norm_fwd(const ExecContext& ctx, const GPTConfig& cfg, const Tensor& y, const Tensor& mean,
              const Tensor& rstd, const Tensor& x, const Norm& w);
void norm_bwd(const ExecContext& ctx, const GPTConfig& cfg, const Tensor& dx, const Norm& dw,
              const Tensor& dy, const Tensor& x, const Norm& w, const Tensor& mean,
              const Tensor& rstd);
// The op-group name of the norm ("fwd.layernorm", "bwd.rmsnorm", ...).
const char* norm_scope(const GPTConfig& cfg, bool backward);

// What one forward call of the block is for.
struct BlockRun {
  AttentionMode mode = AttentionMode::train;
  int pos = 0;                       // position of token 0 (decoding)
  AttentionCache* cache = nullptr;   // decoding: this layer's cache
  GrowingBuffer* scratch = nullptr;  // decoding: the layers' shared attention scratch
  AuxLossSink aux;
  bool with_output = true;  // false stops before the MLP projection (block recompute)
};

class Block {
 public:
  Block(const GPTConfig& cfg, int layer);
  AttentionModule& attention() const { return *attn_; }

  void declare_params(ParameterStore& store) const;
  void bind(const ParameterStore& store);

  // Carves one layer's activations for [B, T]; keep_gelu / keep_out = false leave fch_act / out
  // to the caller (shared buffers of the recompute modes).
  static BlockActs carve(Carver& cv, const GPTConfig& cfg, int B, int T, DType dt, bool keep_gelu,
                         bool keep_out);
  static BlockScratch carve_scratch(Carver& cv, const GPTConfig& cfg, int B, int T, DType dt);

  // x [B*T, C] -> a.out (and every saved activation of a).
  void forward(const ExecContext& ctx, const Tensor& x, const BlockActs& a, const BlockRun& run,
               OpObserver* ob) const;
  // s.dres holds d(out) on entry and, with need_dx, d(x) on exit; gradients of trainable weights
  // accumulated. Without need_dx (nothing below this layer trains) the backward stops once the
  // lowest trainable tensor of the layer has its gradient: the data-gradient products below it
  // are skipped and s.dres is left undefined.
  void backward(const ExecContext& ctx, const Tensor& x, const BlockActs& a, const BlockScratch& s,
                const AuxLossSink& aux, OpObserver* ob, bool need_dx = true) const;
  // Whether any tensor of this layer (its weights or its attention variant's) is trainable in the
  // bound store.
  bool has_trainable() const { return lowest_trainable_ != Stage::none; }

 private:
  AttentionInputs attention_inputs(const BlockActs& a, const BlockRun& run) const;
  // fch = ln2 @ W_fc^T + b and its activation fch_act (GELU in the GEMM's epilogue, or SwiGLU).
  void mlp_forward(const ExecContext& ctx, const BlockActs& a, OpObserver* ob) const;
  std::string name(const char* what) const;  // "h.<layer>.<what>"

  // The backward's steps, top to bottom; lowest_trainable_ is the last one that owns a trainable
  // tensor (none: the layer is frozen).
  enum class Stage : uint8_t { none, mlp_proj, fc, ln_2, attn_proj, attention, qkv, ln_1 };

  GPTConfig cfg_;
  int layer_;
  Stage lowest_trainable_ = Stage::none;
  std::unique_ptr<AttentionModule> attn_;
  std::optional<LoraBranch> lora_;  // on c_attn, with cfg.lora
  BlockTensors w_, g_;
};

}  // namespace attnlab
