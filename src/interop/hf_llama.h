// Hugging Face LLaMA and Mistral (LlamaForCausalLM, MistralForCausalLM) checkpoints: config.json
// and model.safetensors (or its shards), read into and written from attnlab's LLaMA block
// (RMSNorm, SwiGLU, RoPE with transformers' rotate_half convention, so q_proj and k_proj need no
// permutation).
//
// Names (docs/checkpoints.md has the table): model.embed_tokens -> wte, model.norm -> ln_f,
// lm_head -> lm_head; per layer model.layers.<l>.{input_layernorm -> ln_1,
// post_attention_layernorm -> ln_2, self_attn.o_proj -> attn.c_proj, mlp.down_proj ->
// mlp.c_proj}; self_attn.{q,k,v}_proj are the row blocks of attn.c_attn (q, then k, then v, the
// packed layout of ops/qkv_layout.h) and mlp.{gate,up}_proj those of mlp.c_fc. Every weight keeps
// the [out, in] layout of nn.Linear.
#pragma once
#include <string>
#include <vector>

#include "core/parameters.h"
#include "interop/foreign_tensors.h"
#include "interop/hf_files.h"
#include "model/model_config.h"
#include "tokenizer/tokenizer.h"

namespace attnlab {

// The model of a config.json whose model_type is "llama" or "mistral". What attnlab does not
// compute (a rope_scaling other than linear and llama3, another activation, a head_dim other than
// hidden_size / heads, biases on only some layers, pretraining_tp > 1) is refused by name;
// Mistral's sliding_window becomes attention.window, rope_scaling model.rope_scaling.
GPTConfig gpt_config_of_hf_llama(const HfConfig& config, std::vector<std::string>* notes);

// The weights of the directory under attnlab names (the rotary inv_freq buffers of older
// files are skipped).
ForeignCheckpoint read_hf_llama(const std::string& dir, const GPTConfig& cfg);

// Writes dir/config.json (model_type "mistral" with a sliding window, else "llama") and
// model.safetensors (f32, the vocabulary padding cut off), and with a BPE tokenizer vocab.json,
// merges.txt and a tokenizer_config.json naming GPT2Tokenizer. Refuses what the LLaMA classes
// cannot represent.
void write_hf_llama(const ParameterStore& store, const GPTConfig& cfg, const Tokenizer* tokenizer,
                    const std::string& dir, std::vector<std::string>* notes);

}  // namespace attnlab
