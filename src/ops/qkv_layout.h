// The packed q/k/v activation of one attention layer: [B, T, width()] in the activation dtype, each
// row [q heads (n_head x head_dim) | k heads (n_kv_head x head_dim) | v heads (n_kv_head x
// head_dim)]. n_kv_head divides n_head (grouped-query attention: query head h reads kv head h /
// (n_head / n_kv_head)); n_kv_head == n_head is multi-head attention (GPT-2's c_attn output).
#pragma once
#include <cstdint>

namespace attnlab {

struct QKVLayout {
  int n_head = 0, n_kv_head = 0, head_dim = 0;
  int64_t q_width() const { return int64_t(n_head) * head_dim; }
  int64_t kv_width() const { return int64_t(n_kv_head) * head_dim; }
  int64_t width() const { return q_width() + 2 * kv_width(); }
  int64_t k_offset() const { return q_width(); }
  int64_t v_offset() const { return q_width() + kv_width(); }
};

}  // namespace attnlab
