// train.init_from: a new run (fresh optimizer, step 0, new data order) that starts from the
// weights of an attnlab, Hugging Face GPT-2 or llm.c checkpoint (interop/model_source.h).
//
// The model: the checkpoint's architecture keys (model.family, n_layer, n_head, n_kv_head,
// n_embd, vocab_size, block_size, vocab_multiple, norm, mlp, position, bias, tied_embeddings,
// norm_eps) replace the recipe's defaults. A key the recipe gives (in the file, by --set or
// through model.preset) must equal the checkpoint's: otherwise the run is refused, naming every
// such key with both values. model.init_std and the attention.* keys stay the recipe's, so a
// dense checkpoint can seed a Focus model; where they change the function the checkpoint was
// trained with, the run warns (init_attention_note) and a retrofit is refused.
//
// The weights: every base tensor of the model from the checkpoint; tensors of other roles that it
// lacks (a variant's, e.g. Focus centroids) keep their initialisation and are listed in the log;
// tensors the checkpoint has and the model lacks are an error naming them unless
// train.init_allow_extra.
//
// A retrofit (retrofit.enabled) starts from retrofit.checkpoint with the same rules; its frozen
// roles are set by retrofit.train_roles (docs/retrofit.md).
#pragma once
#include "config/recipe.h"
#include "core/parameters.h"
#include "train/checkpoint.h"

namespace attnlab {

// The model a new run starts from: retrofit.checkpoint for a retrofit, else train.init_from; ""
// when neither. init_source_key names the recipe key it came from (for messages).
const std::string& init_source(const Recipe& r);
const char* init_source_key(const Recipe& r);

// `r` with its model.* keys resolved from init_source(r) (unchanged when it is empty). With
// `resume` (a --resume argument) they come from that checkpoint's recipe instead: it holds every
// tensor, so the init source is not read (and need not exist any more).
Recipe resolve_init_from(const Recipe& r, const std::string& resume = "");

// For train.init_from: the attention keys this run changes from the checkpoint's model (a
// warning: the new run may mean to), "" when none or for a retrofit, which refuses them in
// resolve_init_from instead (attention_changes_from in config/model_keys.h).
std::string init_attention_note(const Recipe& r);

// Loads init_source(r) into `store` (declared from gpt_config_of(resolve_init_from(r)) and
// initialised), with the rules above. With `exact`: also the store's trainable range as f32 on
// the host with the finest values the source holds, its f32 tensors where a bf16 store rounded
// them (Hugging Face, llm.c v3, an attnlab fp32 run) and an attnlab bf16 run's fp32 master copy
// (optimizer.safetensors, `adamw.master` by its param_layout) where its model file holds bf16;
// empty when nothing in the source is finer than the store. A bf16 run's optimizer takes it as
// its master (AdamW::set_master), an f32 store as its trainable weights.
WeightLoadReport load_init_from(const Recipe& r, const ParameterStore& store,
                                std::vector<float>* exact = nullptr);

}  // namespace attnlab
