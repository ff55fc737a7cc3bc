// Retrofit (docs/retrofit.md): a pretrained base model whose base tensors stay frozen while the
// roles of retrofit.train_roles train (Focus centroids: role attention; LoRA: role adapter).
//
// Adapters: the tensors a retrofit adds to its base (every tensor whose role is not `base`) in a
// small safetensors file, adapter.safetensors in each checkpoint of a retrofit run, with metadata:
//   format "attnlab-adapter", adapter_version "1", step, base (the path the run started from),
//   base_hash (16 hex digits, io::hash_hex) and base_hash_kind "fnv1a64-bf16-v2" (see
//   base_weights_hash; "-v1" adapters, made before 2026-12-06, are still read), attention (the
//   type), focus.{groups,d_g,tau,local_window,top_k,assign} for Focus, lora.{rank,alpha,targets}
//   with a LoRA, recipe (the run's resolved recipe).
// Applying one (attnlab eval/score/generate --adapter, convert --adapter) builds the model of the
// adapter's recipe on the base's weights, refusing a base whose hash differs.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "config/recipe.h"
#include "core/parameters.h"
#include "interop/model_source.h"

namespace attnlab {

inline constexpr const char* kAdapterFileName = "adapter.safetensors";
// The adapter file format (its metadata's adapter_version); a file of another version is refused.
inline constexpr const char* kAdapterVersion = "1";
inline constexpr const char* kBaseHashKind = "fnv1a64-bf16-v2";
inline constexpr const char* kBaseHashKindV1 = "fnv1a64-bf16-v1";

// Throws when a retrofit recipe leaves nothing to train in the model declared into `store`
// (e.g. dense attention with train_roles [attention]), naming the roles and the way out.
void require_trainable_parameters(const Recipe& r, const ParameterStore& store);
// Throws when a retrofit leaves frozen a parameter its base did not hold (`initialised`, as
// WeightLoadReport lists them): it would stay at its random initialisation (e.g. a dense base
// retrofitted with Focus and a LoRA, train_roles [adapter]: W_g and C random and frozen).
void require_new_parameters_train(const Recipe& r, const ParameterStore& store,
                                  const std::vector<std::string>& initialised);

// A 64-bit hash of the base tensors of `store` (role base), in name order: for each tensor its
// name, its shape and its values rounded to bf16 (so the f32 and the bf16 copy of one checkpoint
// hash alike), mixed 8 bytes at a time with FNV-1a's xor-multiply step (FNV-1a 64 offset basis
// and prime). Identifies a base; it is no cryptographic digest. Version 2 (kBaseHashKind) takes
// the tensors with a row per vocabulary entry (GPT::kVocabRowParams) as their first vocab_size
// rows, so a base and its Hugging Face or llm.c copy, whose vocabularies are padded to other
// multiples, hash alike (the padding rows are zero in both); version 1 hashed every row.
uint64_t base_weights_hash(const ParameterStore& store, int64_t vocab_size, int version = 2);

// The adapter's metadata for a run of recipe `r` (resolved) at `step`.
std::map<std::string, std::string> adapter_metadata(const Recipe& r, uint64_t base_hash,
                                                    int64_t step);
// Writes the non-base tensors of `store` with `metadata` to `path` atomically.
void save_adapter(const std::string& path, const ParameterStore& store,
                  const std::map<std::string, std::string>& metadata);

// `base` turned into the model of the adapter at `adapter_path` (its recipe's model, attention
// and retrofit.lora), to be loaded with load_model_source (which then checks the base hash and
// loads the adapter's tensors). Throws when the file is no attnlab adapter or the base is
// another architecture (naming the keys).
ModelSource with_adapter(const ModelSource& base, const std::string& adapter_path);
// inspect_model_source(path), with the adapter when adapter_path is not empty (the --adapter FILE
// of eval, score, generate and convert).
ModelSource inspect_model_source(const std::string& path, const std::string& adapter_path);
// Loads the adapter's tensors into `store` after its base tensors were loaded: the base hash must
// equal the adapter's, every non-base tensor of the store must be in the file and every tensor
// of the file must be a non-base tensor of the store.
void load_adapter_tensors(const std::string& adapter_path, const ParameterStore& store,
                          const std::string& base_path, int64_t vocab_size);

// The LoRA of the model `cfg` (on the host, f32 `store`) merged into its base weights:
// W += (alpha / r) B A on every target (in `store`), then `merged` (declared and finalized here,
// host f32, nothing trainable) gets the model without LoRA tensors; returns its config. What
// `attnlab convert --adapter` writes for a LoRA adapter.
GPTConfig merge_lora(const GPTConfig& cfg, const ParameterStore& store, ParameterStore& merged);

}  // namespace attnlab
