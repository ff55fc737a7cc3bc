// The configuration of a decoder-only model: one block structure, many configurations. Each
// choice below is a config value of the same block (model/block.h); a choice the block does not
// implement is refused by name in validate(). docs/architecture.md lists where the LLaMA-family
// choices (RMSNorm, SwiGLU, RoPE) go.
#pragma once
#include <cstdint>

#include "nn/attention.h"
#include "nn/lora.h"
#include "ops/qkv_layout.h"

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

enum class NormType : uint8_t { layernorm };    // LLaMA: rmsnorm
enum class MlpType : uint8_t { gelu };          // LLaMA: swiglu
enum class PositionType : uint8_t { learned };  // LLaMA: rope
const char* norm_name(NormType n);
const char* mlp_name(MlpType m);
const char* position_name(PositionType p);

struct GPTConfig {
  int n_layer = 12, n_head = 12, n_kv_head = 0, n_embd = 768;
  int vocab_size = 50257;    // real vocabulary (loss and sampling ignore the padding)
  int padded_vocab = 50304;  // rows of wte (and of lm_head when untied)
  int block_size = 1024;     // maximum sequence length (rows of wpe)
  NormType norm = NormType::layernorm;
  MlpType mlp = MlpType::gelu;
  PositionType position = PositionType::learned;
  bool bias = true;             // biases of every linear layer and norm (GPT-2: true)
  bool tied_embeddings = true;  // LM head = wte (else its own lm_head.weight)
  float norm_eps = 1e-5f;
  float init_std = 0.02f;
  AttentionOptions attention;
  LoraOptions lora;  // retrofit.lora: a LoRA on every layer's c_attn when rank > 0 (nn/lora.h)
  ActivationRecompute recompute = ActivationRecompute::none;

  int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int head_dim() const { return n_embd / n_head; }
  int mlp_hidden() const { return 4 * n_embd; }
  QKVLayout qkv_layout() const { return {n_head, kv_heads(), head_dim()}; }
  // Throws naming the model.* key of the first invalid or unimplemented choice.
  void validate() const;
};

}  // namespace attnlab
