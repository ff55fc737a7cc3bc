#include "model/model_config.h"

#include <cmath>

#include "core/error.h"

namespace attnlab {

const char* recompute_name(ActivationRecompute r) {
  switch (r) {
    case ActivationRecompute::none:
      return "none";
    case ActivationRecompute::gelu:
      return "gelu";
    case ActivationRecompute::block:
      return "block";
  }
  return "?";
}

const char* norm_name(NormType n) { return n == NormType::layernorm ? "layernorm" : "rmsnorm"; }
const char* mlp_name(MlpType m) { return m == MlpType::gelu ? "gelu" : "swiglu"; }
const char* position_name(PositionType p) {
  return p == PositionType::learned ? "learned" : "rope";
}

void GPTConfig::validate() const {
  ATTN_REQUIRE(n_layer >= 1 && n_head >= 1 && n_embd >= 1,
               "model: n_layer, n_head and n_embd must be >= 1 (got %d, %d, %d)", n_layer, n_head,
               n_embd);
  ATTN_REQUIRE(n_embd % n_head == 0, "model.n_embd (%d) must be a multiple of model.n_head (%d)",
               n_embd, n_head);
  ATTN_REQUIRE(n_kv_head >= 0 && kv_heads() <= n_head && n_head % kv_heads() == 0,
               "model.n_kv_head (%d) must divide model.n_head (%d); 0 means n_head", n_kv_head,
               n_head);
  ATTN_REQUIRE(padded_vocab >= vocab_size && vocab_size >= 1, "model: padded vocab %d < vocab %d",
               padded_vocab, vocab_size);
  ATTN_REQUIRE(block_size >= 1, "model.block_size must be >= 1, got %d", block_size);
  ATTN_REQUIRE(mlp_hidden_size >= 0, "model.mlp_hidden must be >= 0 (0: the default), got %d",
               mlp_hidden_size);
  ATTN_REQUIRE(position != PositionType::rope || head_dim() % 2 == 0,
               "model.position: rope needs an even head dim, got %d (n_embd %d / n_head %d)",
               head_dim(), n_embd, n_head);
  ATTN_REQUIRE(position != PositionType::rope || (std::isfinite(rope_theta) && rope_theta > 0.f),
               "model.rope_theta must be > 0, got %g", double(rope_theta));
}

}  // namespace attnlab
