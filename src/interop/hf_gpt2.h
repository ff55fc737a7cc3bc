// Hugging Face GPT-2 (GPT2LMHeadModel) checkpoints: a directory with config.json and
// model.safetensors (or shards listed in model.safetensors.index.json), and the tokenizer files
// that travel with it (tokenizer.json, or vocab.json + merges.txt).
//
// Names: save_pretrained writes `transformer.<name>` (and `lm_head.weight` only when untied); the
// hub's older files use `<name>` without the prefix and carry the causal-mask buffers
// `h.<l>.attn.bias` / `h.<l>.attn.masked_bias`, which hold no parameters and are skipped. The
// four Conv1D weights (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) are stored [in, out] and
// transposed to attnlab's [out, in]; every other tensor keeps its layout. docs/checkpoints.md has
// the table.
#pragma once
#include <string>
#include <vector>

#include "core/parameters.h"
#include "interop/foreign_tensors.h"
#include "model/model_config.h"
#include "tokenizer/tokenizer.h"

namespace attnlab {

// The model a config.json describes. Keys that would change the computation beyond what attnlab
// computes are refused by name; training-only and metadata keys are accepted; keys this reader
// does not know are accepted and listed in `notes` (the caller prints them).
GPTConfig gpt_config_of_hf(const std::string& config_json, const std::string& path,
                           std::vector<std::string>* notes);

// The weights of the directory, under attnlab names. `cfg` says whether the head is tied (a tied
// config with an lm_head.weight that differs from wte.weight is refused).
ForeignCheckpoint read_hf_gpt2(const std::string& dir, const GPTConfig& cfg);

// make_tokenizer() spec of the directory's tokenizer ("hf:<dir>/tokenizer.json", "gpt2:<dir>" for
// vocab.json + merges.txt), or "" when it has none.
std::string hf_tokenizer_spec(const std::string& dir);

// Writes `dir`/config.json and model.safetensors (f32, `transformer.` names, Conv1D layout, the
// vocabulary padding cut off) so that GPT2LMHeadModel.from_pretrained(dir) loads it, and with a
// BPE tokenizer vocab.json + merges.txt. Refuses, naming the reason, what GPT-2 cannot represent
// (grouped-query attention, no biases, a sliding window, another attention variant).
void write_hf_gpt2(const ParameterStore& store, const GPTConfig& cfg, const Tokenizer* tokenizer,
                   const std::string& dir, std::vector<std::string>* notes);

}  // namespace attnlab
