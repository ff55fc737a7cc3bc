// Shared by the attention CUDA tests: a test case, the packed qkv [B, T, (H + 2 Hkv) D] layout of
// AttentionParams, and the CPU reference run on the same (already rounded) inputs.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/attention/attention.cuh"
#include "ref/attention_ref.h"

namespace attnlab::test {

struct AttnCase {
  int B, T, H, Hkv, D, window;
  bool causal = true;
};

template <typename P, typename U>
void set_layout(P& p, const AttnCase& c, U* qkv, U* o, U* dout, U* dqkv) {
  const int64_t row = int64_t(c.H + 2 * c.Hkv) * c.D;
  p.q = qkv, p.k = qkv + int64_t(c.H) * c.D, p.v = qkv + int64_t(c.H + c.Hkv) * c.D;
  p.o = o, p.dout = dout;
  p.dq = dqkv, p.dk = dqkv + int64_t(c.H) * c.D, p.dv = dqkv + int64_t(c.H + c.Hkv) * c.D;
  p.qkv_row_stride = row, p.qkv_batch_stride = row * c.T;
  p.o_row_stride = int64_t(c.H) * c.D, p.o_batch_stride = int64_t(c.H) * c.D * c.T;
  p.B = c.B, p.seq_len = c.T, p.n_head = c.H, p.n_kv_head = c.Hkv, p.D = c.D;
  p.scale = 1.f / std::sqrt(float(c.D));
  p.mask.causal = c.causal, p.mask.window = c.window;
}

// The CPU reference forward and backward of a case; its output o feeds its own backward.
struct AttnReference {
  std::vector<float> o, lse, dqkv;
  AttnReference(const AttnCase& c, std::vector<float> qkv, std::vector<float> dout)
      : o(size_t(c.B) * c.T * c.H * c.D),
        lse(size_t(c.B) * c.H * c.T),
        dqkv(qkv.size(), 0.f),
        qkv_(std::move(qkv)),
        dout_(std::move(dout)) {
    AttentionParams<float> r;
    set_layout(r, c, qkv_.data(), o.data(), dout_.data(), dqkv.data());
    r.lse = lse.data();
    attention_fwd_ref(r);
    attention_bwd_ref(r);
  }

 private:
  std::vector<float> qkv_, dout_;
};

}  // namespace attnlab::test
