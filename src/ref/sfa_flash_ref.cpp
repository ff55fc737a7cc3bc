// CPU reference of FlashSFA (kernels/sfa/sfa_flash.cuh), in the overlap form: the oracle of the
// CUDA kernels and the CPU backend of attention.sfa.kernel flash.
#include <cmath>
#include <vector>

#include "core/error.h"
#include "ref/parallel.h"
#include "ref/sfa_ref.h"

namespace attnlab {
namespace {

// The dense q~ (or k~) of heads [B, T, heads, D] expanded from the sparse form (0 off the
// selection) and its selection mask.
struct Expanded {
  std::vector<float> val;
  std::vector<char> sel;
};
Expanded expand(const int32_t* idx, const float* val, int64_t B, int64_t T, int heads, int D,
                int k) {
  const int64_t vecs = B * T * heads;
  Expanded e{std::vector<float>(size_t(vecs * D), 0.f), std::vector<char>(size_t(vecs * D), 0)};
  for (int64_t v = 0; v < vecs; ++v)
    for (int i = 0; i < k; ++i) {
      const int64_t at = v * D + idx[v * k + i];
      e.val[size_t(at)] = val[v * k + i];
      e.sel[size_t(at)] = 1;
    }
  return e;
}

}  // namespace

void sfa_flash_fwd_ref(const SfaFlashParams<float>& p) {
  SfaAttentionParams<float> a;
  a.q_idx = p.q_idx;
  a.q_val = p.q_val;
  a.k_idx = p.k_idx;
  a.k_val = p.k_val;
  a.v = p.qkv + int64_t(p.n_head + p.n_kv_head) * p.D;
  a.o = p.o;
  a.lse = p.lse;
  a.q_head_stride = p.k;
  a.q_row_stride = int64_t(p.n_head) * p.k;
  a.q_batch_stride = p.T * a.q_row_stride;
  a.k_head_stride = p.k;
  a.k_row_stride = int64_t(p.n_kv_head) * p.k;
  a.k_batch_stride = p.T * a.k_row_stride;
  a.v_batch_stride = p.qkv_batch_stride;
  a.v_row_stride = p.qkv_row_stride;
  a.v_head_stride = p.D;
  a.o_batch_stride = p.o_batch_stride;
  a.o_row_stride = p.o_row_stride;
  a.B = p.B;
  a.Tq = p.T;
  a.pos = 0;
  a.n_head = p.n_head;
  a.n_kv_head = p.n_kv_head;
  a.D = p.D;
  a.k = p.k;
  a.scale = p.scale;
  sfa_attention_fwd_ref(a);
}

void sfa_flash_bwd_ref(const SfaFlashParams<float>& p) {
  ATTN_REQUIRE(p.n_kv_head > 0 && p.n_head % p.n_kv_head == 0,
               "sfa_flash: n_kv_head (%d) must divide n_head (%d)", p.n_kv_head, p.n_head);
  const int D = p.D, T = p.T, group = p.n_head / p.n_kv_head;
  const Expanded q = expand(p.q_idx, p.q_val, p.B, T, p.n_head, D, p.k);
  const Expanded kx = expand(p.k_idx, p.k_val, p.B, T, p.n_kv_head, D, p.k);
  auto qrow = [&](int b, int t, int h) { return (int64_t(b) * T + t) * p.n_head * D + h * D; };
  auto krow = [&](int b, int t, int g) { return (int64_t(b) * T + t) * p.n_kv_head * D + g * D; };
  const int64_t pairs = int64_t(p.B) * p.n_kv_head;
  const int64_t work = pairs * group * int64_t(T) * T * D;
#pragma omp parallel if (worth_parallel(work))
  {
    const size_t n_t = static_cast<size_t>(T), n_d = static_cast<size_t>(D);
    std::vector<double> dk(n_t * n_d), dv(n_t * n_d), dq(n_d), ds(n_t), pr(n_t);
#pragma omp for schedule(static)
    for (int64_t pair = 0; pair < pairs; ++pair) {
      const int b = int(pair / p.n_kv_head), g = int(pair % p.n_kv_head);
      std::fill(dk.begin(), dk.end(), 0.0);
      std::fill(dv.begin(), dv.end(), 0.0);
      const float* v = p.qkv + b * p.qkv_batch_stride + int64_t(p.n_head + p.n_kv_head + g) * D;
      for (int h = g * group; h < (g + 1) * group; ++h) {
        for (int i = 0; i < T; ++i) {
          const float* qi = q.val.data() + qrow(b, i, h);
          const float* o = p.o + b * p.o_batch_stride + int64_t(i) * p.o_row_stride + h * D;
          const float* dout = p.dout + b * p.o_batch_stride + int64_t(i) * p.o_row_stride + h * D;
          const double lse = p.lse[(int64_t(b) * p.n_head + h) * T + i];
          double delta = 0.0;
          for (int c = 0; c < D; ++c) delta += double(dout[c]) * o[c];
          for (int j = 0; j <= i; ++j) {
            const float* kj = kx.val.data() + krow(b, j, g);
            const float* vj = v + int64_t(j) * p.qkv_row_stride;
            double s = 0.0, dp = 0.0;
            for (int c = 0; c < D; ++c) s += double(qi[c]) * kj[c];
            for (int c = 0; c < D; ++c) dp += double(dout[c]) * vj[c];
            pr[size_t(j)] = std::exp(s * p.scale - lse);
            ds[size_t(j)] = pr[size_t(j)] * (dp - delta);
          }
          std::fill(dq.begin(), dq.end(), 0.0);
          for (int j = 0; j <= i; ++j) {
            const float* kj = kx.val.data() + krow(b, j, g);
            for (int c = 0; c < D; ++c) {
              dq[size_t(c)] += ds[size_t(j)] * kj[c];
              dk[size_t(j) * D + c] += ds[size_t(j)] * qi[c];
              dv[size_t(j) * D + c] += pr[size_t(j)] * dout[c];
            }
          }
          const char* sel = q.sel.data() + qrow(b, i, h);
          float* dqo = p.dqkv + b * p.qkv_batch_stride + int64_t(i) * p.qkv_row_stride + h * D;
          for (int c = 0; c < D; ++c) dqo[c] = sel[c] ? float(dq[size_t(c)] * p.scale) : 0.f;
        }
      }
      for (int j = 0; j < T; ++j) {
        const char* sel = kx.sel.data() + krow(b, j, g);
        float* row = p.dqkv + b * p.qkv_batch_stride + int64_t(j) * p.qkv_row_stride;
        float* dko = row + int64_t(p.n_head + g) * D;
        float* dvo = row + int64_t(p.n_head + p.n_kv_head + g) * D;
        for (int c = 0; c < D; ++c) {
          dko[c] = sel[c] ? float(dk[size_t(j) * D + c] * p.scale) : 0.f;
          dvo[c] = float(dv[size_t(j) * D + c]);
        }
      }
    }
  }
}

}  // namespace attnlab
