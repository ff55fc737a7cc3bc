// The configuration of a decoder-only model: one block structure, many configurations. Each
// choice below is a config value of the same block (model/block.h): GPT-2 (LayerNorm, GELU,
// learned positions, biases, tied head) and the LLaMA family (RMSNorm, SwiGLU, RoPE, GQA, no
// biases, untied head) are two settings of it (docs/architecture.md, docs/llama.md).
#pragma once
#include <cstdint>
#include <string>

#include "kernels/position/rope_scaling.h"
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

enum class NormType : uint8_t { layernorm, rmsnorm };  // LLaMA: rmsnorm
enum class MlpType : uint8_t { gelu, swiglu };         // LLaMA: swiglu
enum class PositionType : uint8_t { learned, rope };   // LLaMA: rope
const char* norm_name(NormType n);
const char* mlp_name(MlpType m);
const char* position_name(PositionType p);
// "llama3 (factor 8, low_freq_factor 1, high_freq_factor 4, original_context 8192)",
// "linear (factor 2)", "none".
std::string rope_scaling_name(const RopeScaling& s);

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
  int mlp_hidden_size = 0;     // MLP hidden width F; 0: 4 C (GELU) or LLaMA's rule (SwiGLU)
  float rope_theta = 10000.f;  // RoPE base (position == rope)
  RopeScaling rope_scaling;    // RoPE frequency scaling (LLaMA 3.1+: llama3)
  AttentionOptions attention;
  LoraOptions lora;  // retrofit.lora: a LoRA on every layer's c_attn when rank > 0 (nn/lora.h)
  ActivationRecompute recompute = ActivationRecompute::none;

  int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int head_dim() const { return n_embd / n_head; }
  // F: the width of the MLP's activation (mlp.c_proj's input). SwiGLU's default is LLaMA's
  // rule: 2/3 of 4 C rounded up to a multiple of 256 (4096 -> 11008).
  int mlp_hidden() const {
    if (mlp_hidden_size > 0) return mlp_hidden_size;
    return mlp == MlpType::swiglu ? (8 * n_embd / 3 + 255) / 256 * 256 : 4 * n_embd;
  }
  // Rows of mlp.c_fc: F, or 2 F for SwiGLU (the gate projection's F rows, then the up one's).
  int mlp_fc_rows() const { return mlp == MlpType::swiglu ? 2 * mlp_hidden() : mlp_hidden(); }
  // Whether the norms carry a bias (LayerNorm with model.bias; RMSNorm never).
  bool norm_bias() const { return bias && norm == NormType::layernorm; }
  QKVLayout qkv_layout() const { return {n_head, kv_heads(), head_dim()}; }
  // Throws naming the model.* key of the first invalid or unimplemented choice.
  void validate() const;
};

}  // namespace attnlab
