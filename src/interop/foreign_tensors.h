// Tensors of a checkpoint in a foreign format (Hugging Face GPT-2, llm.c), presented under their
// attnlab names and in attnlab's layout, and the one loader that puts them into a store with the
// rules of load_model_weights_by_role (docs/checkpoints.md): every check runs before anything is
// copied; a tensor of the file that the model lacks is refused, naming it, unless allow_extra.
// Also the host-side helpers the exporters use to read a store tensor as f32.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/parameters.h"
#include "train/checkpoint.h"

namespace attnlab {

struct ForeignTensor {
  std::string name;            // attnlab name ("h.0.attn.c_attn.weight")
  std::string origin;          // what it is in the source, for messages ("transformer.h.0...")
  std::vector<int64_t> shape;  // in attnlab's layout (already transposed)
  // The model's tensor may have more rows than the file (the vocabulary padding of wte and
  // lm_head): the file fills the first rows, the rest are zero. The file must still hold
  // min_rows of them (the vocabulary: fewer would leave real token ids without weights).
  bool pad_rows = false;
  int64_t min_rows = 0;
  // Writes the numel(shape) elements in attnlab's layout as f32.
  std::function<void(float* out)> read;
};

struct ForeignCheckpoint {
  std::string path;  // for messages
  std::vector<ForeignTensor> tensors;
  // Tensors of the file that map to no attnlab name (origin names): extras like any other.
  std::vector<std::string> unmapped;
};

// Loads `ckpt` into `store` (any device, f32 or bf16). Tensors of required roles must be in it;
// others missing keep their initialisation (report.initialised); tensors the model lacks (and
// ckpt.unmapped) are an error naming them all unless options.allow_extra (report.ignored).
WeightLoadReport load_foreign_checkpoint(const ForeignCheckpoint& ckpt, const ParameterStore& store,
                                         const WeightLoadOptions& options);

// The store's tensor as f32 on the host (from any device or dtype).
std::vector<float> tensor_to_host_f32(const Tensor& t);
// Writes f32 host data (numel(t) elements) into `t` (any device, f32 or bf16).
void host_f32_to_tensor(const float* data, const Tensor& t);

// Transposes a row-major [rows, cols] matrix into [cols, rows].
void transpose_into(const float* src, int64_t rows, int64_t cols, float* dst);

}  // namespace attnlab
