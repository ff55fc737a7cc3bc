// Host emulation of the warp-level operations the wgmma Focus kernels use beside wgmma
// (kernels/focus/focus_wgmma_layout.h): the mma.sync m16n8k16 fragments written out from the PTX
// ISA tables (not from the header under test), mma.sync, ldmatrix.x4.trans, movmatrix.trans, and
// the split g tile in shared memory. Shared by tests/ops/test_focus_wgmma_layout.cpp and
// test_focus_wgmma_fused_layout.cpp.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "kernels/focus/focus_wgmma_layout.h"

namespace attnlab::focus_wgmma_emulate {

using focus_wgmma::g_ld;
using focus_wgmma::padded_groups;

constexpr int kWarps = 4, kLanes = 32;

// PTX ISA m16n8k16 (.bf16) fragments, written out from the table, not from the header.
struct Rc {
  int row, col;
};
inline Rc ptx_a(int x, int h, int lane) {  // a0..a7: reg x holds a(2x), a(2x+1)
  const int gid = lane / 4, t = lane % 4, idx = 2 * x + h;
  const int row = gid + ((idx == 2 || idx == 3 || idx == 6 || idx == 7) ? 8 : 0);
  const int col = t * 2 + (idx & 1) + (idx >= 4 ? 8 : 0);
  return {row, col};
}
inline Rc ptx_b(int x, int h, int lane) {  // b0..b3: k row, n col
  const int idx = 2 * x + h;
  return {(lane % 4) * 2 + (idx & 1) + (idx >= 2 ? 8 : 0), lane / 4};
}
inline Rc ptx_c(int c, int lane) { return {lane / 4 + (c >= 2 ? 8 : 0), (lane % 4) * 2 + (c & 1)}; }

inline float bf16_round(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// The fp16 affinity operand of g = hi + lo (split_g / affinity_f16x2): fp16 of kAffinityScale
// (hi + lo), as a float.
inline float affinity_operand(float hi, float lo) {
  return __half2float(__float2half_rn((hi + lo) * focus_wgmma::kAffinityScale));
}
inline float affinity_operand_of(float x) {
  const float hi = bf16_round(x);
  return affinity_operand(hi, bf16_round(x - hi));
}

// The warp-level mma.sync: C (16 x 8) += A B from the 32 lanes' fragments (PTX layout).
inline void emulate_mma(float (*c)[4], const float (*a)[4][2], const float (*b)[2][2]) {
  float A[16][16], B[16][8];
  for (int lane = 0; lane < kLanes; ++lane) {
    for (int x = 0; x < 4; ++x)
      for (int h = 0; h < 2; ++h) A[ptx_a(x, h, lane).row][ptx_a(x, h, lane).col] = a[lane][x][h];
    for (int x = 0; x < 2; ++x)
      for (int h = 0; h < 2; ++h) B[ptx_b(x, h, lane).row][ptx_b(x, h, lane).col] = b[lane][x][h];
  }
  for (int lane = 0; lane < kLanes; ++lane) {
    for (int v = 0; v < 4; ++v) {
      const Rc rc = ptx_c(v, lane);
      double s = 0;
      for (int k = 0; k < 16; ++k) s += double(A[rc.row][k]) * B[k][rc.col];
      c[lane][v] += float(s);
    }
  }
}

struct GTile {
  int KP, ld;
  std::vector<float> tile;  // [rows][ld] as the kernels' shared tile: hi, lo (, fp16 operands)
};
// The backward's g tile of rows row0 ..: the keys' ([rows][g_ld]: hi, lo) or, with `queries`, the
// queries' ([rows][gq_ld]: hi, lo and, where gq_has_f16, the fp16 operands as floats at 2 KP).
// Padding columns are zero (the kernels never read them: check_backward_chunk makes them NaN).
inline GTile split_rows(const std::vector<float>& g, int row0, int rows, int K, int T,
                        bool queries = false) {
  const int KP = padded_groups(K);
  GTile t{KP, queries ? focus_wgmma::gq_ld(KP) : g_ld(KP), {}};
  const bool f16 = queries && focus_wgmma::gq_has_f16(KP);
  t.tile.assign(size_t(rows) * t.ld, 0.f);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < K; ++c) {
      const float x = row0 + r < T ? g[size_t(row0 + r) * K + c] : 0.f;
      const float hi = bf16_round(x), lo = bf16_round(x - hi);
      t.tile[size_t(r) * t.ld + c] = hi;
      t.tile[size_t(r) * t.ld + KP + c] = lo;
      if (f16) t.tile[size_t(r) * t.ld + 2 * KP + c] = affinity_operand(hi, lo);
    }
  }
  return t;
}

// ldmatrix.x4.trans (PTX ISA): lanes 8 i .. 8 i + 7 give the row addresses of 8 x 8 matrix i;
// with .trans, lane t receives in register i the elements (2 (t % 4) + h, t / 4) of matrix i.
inline void emulate_ldsm_t(float (*r)[4][2], const std::vector<float>& tile, const int* offsets) {
  for (int t = 0; t < kLanes; ++t)
    for (int i = 0; i < 4; ++i)
      for (int h = 0; h < 2; ++h)
        r[t][i][h] = tile[size_t(offsets[8 * i + 2 * (t % 4) + h] + t / 4)];
}
// movmatrix.m8n8.trans.b16: lane t holds row t / 4, columns 2 (t % 4) + h; after, of the
// transpose.
inline void emulate_movmatrix(float (*out)[2], const float (*in)[2]) {
  float x[8][8];
  for (int t = 0; t < kLanes; ++t)
    for (int h = 0; h < 2; ++h) x[t / 4][2 * (t % 4) + h] = in[t][h];
  for (int t = 0; t < kLanes; ++t)
    for (int h = 0; h < 2; ++h) out[t][h] = x[2 * (t % 4) + h][t / 4];
}

}  // namespace attnlab::focus_wgmma_emulate
