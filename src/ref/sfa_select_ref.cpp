#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "ref/parallel.h"
#include "ref/sfa_ref.h"

namespace attnlab {

void sfa_select_coords(const float* x, int D, int k, int32_t* idx) {
  // The k smallest in the order (|x| descending, index ascending), then back to index order. A
  // stable partial sort on |x| alone would give the same set; this spells the rule out.
  std::vector<int32_t> order(static_cast<size_t>(D));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    const float fa = std::fabs(x[a]), fb = std::fabs(x[b]);
    return fa > fb || (fa == fb && a < b);
  });
  std::sort(order.begin(), order.begin() + k);
  std::copy(order.begin(), order.begin() + k, idx);
}

void sfa_select_ref(const SfaSelectParams<float>& p) {
  const int64_t W = int64_t(p.n_head + 2 * p.n_kv_head) * p.D, rows = int64_t(p.B) * p.T;
  const int heads = p.n_head + p.n_kv_head, D = p.D;
#pragma omp parallel if (worth_parallel(rows * heads * D * 8))
  {
    std::vector<int32_t> idx(static_cast<size_t>(p.k));
    std::vector<float> x(static_cast<size_t>(D)), keep(static_cast<size_t>(D));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t b = r / p.T, t = r % p.T;
      const float* row = p.qkv + r * W;
      for (int hv = 0; hv < heads; ++hv) {
        const bool is_q = hv < p.n_head;
        const int h = is_q ? hv : hv - p.n_head;
        const int64_t off = int64_t(hv) * D;  // q heads, then k heads, in a row
        std::memcpy(x.data(), row + off, sizeof(float) * size_t(D));
        sfa_select_coords(x.data(), D, p.k, idx.data());
        int32_t* oi = is_q ? p.q_idx : p.k_idx;
        float* ov = is_q ? p.q_val : p.k_val;
        const int64_t at = is_q ? b * p.q_batch_stride + t * p.q_row_stride + h * p.q_head_stride
                                : b * p.k_batch_stride + t * p.k_row_stride + h * p.k_head_stride;
        for (int i = 0; i < p.k; ++i) {
          if (oi) oi[at + i] = idx[size_t(i)];
          if (!is_q && p.k_idx8) p.k_idx8[at + i] = uint8_t(idx[size_t(i)]);  // D <= 256 (op)
          if (ov) ov[at + i] = x[size_t(idx[size_t(i)])];
        }
        if (p.mask_dst) {
          std::fill(keep.begin(), keep.end(), 0.f);
          const float* src = p.mask_src + r * W + off;
          for (int i = 0; i < p.k; ++i) keep[size_t(idx[size_t(i)])] = src[idx[size_t(i)]];
          std::memcpy(p.mask_dst + r * W + off, keep.data(), sizeof(float) * size_t(D));
        }
      }
      const int64_t voff = int64_t(p.n_head + p.n_kv_head) * D;
      if (p.mask_dst && p.mask_dst != p.mask_src)
        std::memcpy(p.mask_dst + r * W + voff, p.mask_src + r * W + voff,
                    sizeof(float) * size_t(p.n_kv_head) * size_t(D));
      if (p.v_out)
        for (int g = 0; g < p.n_kv_head; ++g)
          std::memcpy(p.v_out + b * p.v_batch_stride + t * p.v_row_stride + g * p.v_head_stride,
                      row + voff + int64_t(g) * D, sizeof(float) * size_t(D));
    }
  }
}

}  // namespace attnlab
