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

std::string rope_scaling_name(const RopeScaling& s) {
  switch (s.type) {
    case RopeScalingType::none:
      return "none";
    case RopeScalingType::linear:
      return strformat("linear (factor %g)", double(s.factor));
    case RopeScalingType::llama3:
      return strformat(
          "llama3 (factor %g, low_freq_factor %g, high_freq_factor %g, original_context %d)",
          double(s.factor), double(s.low_freq_factor), double(s.high_freq_factor),
          s.original_context);
  }
  return "?";
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
  const RopeScaling& rs = rope_scaling;
  ATTN_REQUIRE(rs.type == RopeScalingType::none || (std::isfinite(rs.factor) && rs.factor > 0.f),
               "model.rope_scaling.factor must be > 0, got %g", double(rs.factor));
  ATTN_REQUIRE(rs.type != RopeScalingType::llama3 ||
                   (rs.original_context > 0 && rs.low_freq_factor > 0.f &&
                    rs.high_freq_factor > rs.low_freq_factor && std::isfinite(rs.high_freq_factor)),
               "model.rope_scaling (llama3) needs original_context > 0 and 0 < low_freq_factor < "
               "high_freq_factor, got %d, %g, %g",
               rs.original_context, double(rs.low_freq_factor), double(rs.high_freq_factor));
}

}  // namespace attnlab
