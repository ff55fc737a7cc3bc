// llm.c checkpoints (gpt2_124M.bin style), as written by llm.c's train_gpt2.py / train_gpt2.cu:
//   header: 256 int32: [0] 20240326 (magic), [1] version (3: fp32 parameters, 5: bf16),
//           [2] max_seq_len maxT, [3] vocab_size V, [4] num_layers L, [5] num_heads NH,
//           [6] channels C, [7] padded_vocab_size Vp; the rest zero
//   then the parameters, concatenated in this order (every weight [out, in], nn.Linear's layout,
//   which is attnlab's):
//     wte [Vp, C], wpe [maxT, C], ln1w [L, C], ln1b [L, C], qkvw [L, 3C, C], qkvb [L, 3C],
//     attprojw [L, C, C], attprojb [L, C], ln2w [L, C], ln2b [L, C], fcw [L, 4C, C], fcb [L, 4C],
//     fcprojw [L, C, 4C], fcprojb [L, C], lnfw [C], lnfb [C]
// The head is tied to wte; LayerNorm eps is 1e-5. Rows V..Vp-1 of wte are padding: attnlab loads
// the first V rows and keeps its own padding (round_up(V, 128)) zero.
#pragma once
#include <string>
#include <vector>

#include "core/parameters.h"
#include "interop/foreign_tensors.h"
#include "model/model_config.h"

namespace attnlab {

constexpr int kLlmcMagic = 20240326;

// True when `path` is a regular file that starts with the llm.c magic.
bool is_llmc_file(const std::string& path);
// The model of the header (checked: magic, version 3 or 5, positive sizes, Vp >= V, file size).
GPTConfig gpt_config_of_llmc(const std::string& path);
ForeignCheckpoint read_llmc(const std::string& path, const GPTConfig& cfg);

// Writes an llm.c checkpoint (version 3 fp32, or 5 bf16 with bf16 = true; Vp = round_up(V, 128)).
// Refuses what llm.c's GPT-2 cannot represent (untied head, no biases, grouped-query attention,
// a sliding window, another attention variant), naming the reason.
void write_llmc(const ParameterStore& store, const GPTConfig& cfg, const std::string& path,
                bool bf16 = false);

}  // namespace attnlab
