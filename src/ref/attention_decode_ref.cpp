#include "ref/attention_decode_ref.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "ref/parallel.h"

namespace attnlab {

void kv_cache_write_ref(const KVCacheWriteParams<float>& p) {
  for (int b = 0; b < p.B; ++b)
    for (int t = 0; t < p.Tq; ++t)
      for (int g = 0; g < p.n_kv_head; ++g) {
        const int64_t src = b * p.src_batch_stride + t * p.src_row_stride + int64_t(g) * p.D;
        const int64_t dst = ((int64_t(b) * p.n_kv_head + g) * p.max_T + p.pos + t) * p.D;
        std::memcpy(p.k_cache + dst, p.k + src, sizeof(float) * size_t(p.D));
        std::memcpy(p.v_cache + dst, p.v + src, sizeof(float) * size_t(p.D));
      }
}

void attention_decode_ref(const AttentionDecodeParams<float>& p) {
  ATTN_REQUIRE(p.n_kv_head > 0 && p.n_head % p.n_kv_head == 0,
               "attention_decode: n_kv_head (%d) must divide n_head (%d)", p.n_kv_head, p.n_head);
  ATTN_REQUIRE(p.mask.causal, "attention_decode: decoding attends causally (mask.causal)");
  const int group = p.n_head / p.n_kv_head;
  const int64_t rows = int64_t(p.B) * p.Tq * p.n_head;
  const int64_t work = rows * int64_t(p.pos + p.Tq) * p.D * 2;
#pragma omp parallel if (worth_parallel(work))
  {
    std::vector<double> score, acc(size_t(p.D));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int h = int(r % p.n_head);
      const int i = int((r / p.n_head) % p.Tq);
      const int b = int(r / (int64_t(p.n_head) * p.Tq));
      const int g = h / group;
      const int t = p.pos + i;  // the query's position; it sees cache positions lo .. t
      const int lo = p.mask.first_key(t), len = p.mask.key_end(t, p.pos + p.Tq);
      const float* q = p.q + b * p.q_batch_stride + i * p.q_row_stride + int64_t(h) * p.D;
      const float* kc = p.k_cache + (int64_t(b) * p.n_kv_head + g) * p.max_T * p.D;
      const float* vc = p.v_cache + (int64_t(b) * p.n_kv_head + g) * p.max_T * p.D;
      score.resize(size_t(len));
      double mx = -INFINITY;
      for (int s = lo; s < len; ++s) {
        double d = 0.0;
        for (int c = 0; c < p.D; ++c) d += double(q[c]) * kc[int64_t(s) * p.D + c];
        score[s] = d * p.scale;
        mx = std::max(mx, score[s]);
      }
      double sum = 0.0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int s = lo; s < len; ++s) {
        const double w = std::exp(score[s] - mx);
        sum += w;
        for (int c = 0; c < p.D; ++c) acc[c] += w * vc[int64_t(s) * p.D + c];
      }
      float* o = p.o + b * p.o_batch_stride + i * p.o_row_stride + int64_t(h) * p.D;
      for (int c = 0; c < p.D; ++c) o[c] = float(acc[c] / sum);
    }
  }
}

}  // namespace attnlab
