// Focus decoding with a gate over every cached key (the rows of focus_attention_fwd at positions
// pos .. pos + Tq - 1; ops::focus_attention_decode: soft eval routing in generate, and any gate
// kind): the shape of dense decoding (attention_decode.cu, the steps of decode_steps.cuh): one
// block of 4 warps per (split, head, b * Tq + t), warp w taking keys w, w + 4, ... of its split
// kKeyBatch at a time, each lane holding head dims lane, lane + 32, ... and groups lane,
// lane + 32, ... of the g rows. Per key: the score and, for a distant key (i - j > w), the
// affinity g_i . g_j as warp reductions (the loads of all the batch's k, v and g rows issued
// first), the gate (additive: + log2(a + eps); multiplicative: x sigmoid(lambda a + b); hard:
// -inf unless the tokens share a group), then the online softmax of the gated logits in the
// log2 domain. The splits merge in split order (deterministic). Grid: (B x Tq rows, heads,
// splits), so no limit on the rows below 2^31 (soft routing prefills through here where the
// forward's kernels are not tensor-core ones: prefill_on_forward, src/nn/attention.h). It
// replaces the one-thread-per-row
// kernel of focus_attention.cu for decoding, whose B x n_head x Tq threads walked the whole cache
// each (12 threads for one token of 12 heads).
#include <cuda_bf16.h>

#include "kernels/attention/attention_decode.cuh"
#include "kernels/attention/decode_steps.cuh"
#include "kernels/common/device.cuh"
#include "kernels/common/stream_scratch.h"
#include "kernels/focus/focus_attention.cuh"

namespace attnlab {
namespace {

using decode::kLog2e;
using decode::kMaxDimsPerLane;  // D <= 128
constexpr int kWarps = decode::kDecodeWarps;
constexpr int kKeyBatch = 2;  // keys per online-softmax step (as Focus's group decoding)

// The gated logit (log2 units) of key j for query position i from its score s2 (log2 units) and
// affinity a; -inf: not attended.
__device__ __forceinline__ float gated_logit(const FocusGateParams& gate, float s2, float a,
                                             bool distant, bool share) {
  if (!distant) return s2;
  switch (gate.kind) {
    case FocusGateKind::additive:
      return s2 + log2f(a + gate.eps);
    case FocusGateKind::multiplicative:
      return s2 / (1.f + expf(-(gate.scale * a + gate.bias)));
    case FocusGateKind::hard:
      return share ? s2 : -INFINITY;
  }
  return s2;
}

// partial layout: [row = (b * Tq + t) * n_head + h][split][D + 2] = (o[0..D), m, l); m in log2
// units.
template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    soft_decode_kernel(FocusAttentionParams<T> p, int chunk, int n_splits, float* partial) {
  const int split = blockIdx.z, h = blockIdx.y;
  const int b = int(blockIdx.x / unsigned(p.seq_len)), t = int(blockIdx.x % unsigned(p.seq_len));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int hk = h / (p.n_head / p.n_kv_head);
  const int i = p.pos + t;  // the query's position: keys 0 .. i
  const int s0 = split * chunk, s1 = min(i + 1, s0 + chunk);
  const T* q = p.q + b * p.q_batch_stride + t * p.q_row_stride + int64_t(h) * p.D;
  const T* kc = p.k + b * p.kv_batch_stride + hk * p.kv_head_stride;
  const T* vc = p.v + b * p.kv_batch_stride + hk * p.kv_head_stride;
  const float* gc = p.g ? p.g + b * p.g_batch_stride : nullptr;
  const int32_t* grc = p.groups ? p.groups + b * p.groups_batch_stride : nullptr;
  const bool needs_g = p.gate.kind != FocusGateKind::hard;
  const int kg = (p.K + 31) / 32;  // groups per lane (a loop from 33 groups on)
  // The query's g entries of this lane (groups lane, lane + 32), read once; more groups are read
  // per key.
  float gi[2] = {0.f, 0.f};
  if (needs_g && lane < p.K) gi[0] = gc[int64_t(i) * p.K + lane];
  if (needs_g && lane + 32 < p.K) gi[1] = gc[int64_t(i) * p.K + lane + 32];

  float qr[kMaxDimsPerLane], acc[kMaxDimsPerLane];
  decode::load_query(qr, acc, q, p.D, p.scale * kLog2e, lane);
  float m = -INFINITY, l = 0.f;
  for (int s = s0 + warp; s < s1; s += kWarps * kKeyBatch) {
    int j[kKeyBatch];
    float kr[kKeyBatch][kMaxDimsPerLane], vr[kKeyBatch][kMaxDimsPerLane], dot[kKeyBatch],
        aff[kKeyBatch];
    bool distant[kKeyBatch], share[kKeyBatch];
#pragma unroll
    for (int n = 0; n < kKeyBatch; ++n) {
      j[n] = s + kWarps * n < s1 ? s + kWarps * n : -1;
      distant[n] = j[n] >= 0 && i - j[n] > p.gate.local_window;
#pragma unroll
      for (int d = 0; d < kMaxDimsPerLane; ++d) {
        const int c = lane + 32 * d;
        const bool ok = j[n] >= 0 && c < p.D;
        kr[n][d] = ok ? dev::to_f(kc[int64_t(j[n]) * p.kv_row_stride + c]) : 0.f;
        vr[n][d] = ok ? dev::to_f(vc[int64_t(j[n]) * p.kv_row_stride + c]) : 0.f;
      }
      aff[n] = 0.f;
      if (needs_g && distant[n]) {  // this lane's share of g_i . g_j
        const float* gj = gc + int64_t(j[n]) * p.K;
        if (lane < p.K) aff[n] = gi[0] * gj[lane];
        if (lane + 32 < p.K) aff[n] += gi[1] * gj[lane + 32];
        for (int x = 2; x < kg; ++x) {
          const int c = lane + 32 * x;
          if (c < p.K) aff[n] += gc[int64_t(i) * p.K + c] * gj[c];
        }
      }
      share[n] = false;
      if (!needs_g && distant[n]) {  // hard: any of i's groups among j's (every lane alike)
        for (int x = 0; x < p.top_k; ++x)
          for (int y = 0; y < p.top_k; ++y)
            share[n] |= grc[int64_t(i) * p.top_k + x] == grc[int64_t(j[n]) * p.top_k + y];
      }
    }
#pragma unroll
    for (int n = 0; n < kKeyBatch; ++n) {
      dot[n] = 0.f;
#pragma unroll
      for (int d = 0; d < kMaxDimsPerLane; ++d) dot[n] += qr[d] * kr[n][d];
      dot[n] = dev::warp_sum(dot[n]);
      if (needs_g) aff[n] = dev::warp_sum(aff[n]);  // (uniform: p's gate)
    }
    float x[kKeyBatch], m_new = m;
#pragma unroll
    for (int n = 0; n < kKeyBatch; ++n) {
      x[n] = j[n] >= 0 ? gated_logit(p.gate, dot[n], aff[n], distant[n], share[n]) : -INFINITY;
      m_new = fmaxf(m_new, x[n]);
    }
    if (m_new == -INFINITY) continue;     // nothing attended yet (hard, distant keys of no group)
    const float corr = exp2f(m - m_new);  // 0 while m = -inf
    l *= corr;
#pragma unroll
    for (int d = 0; d < kMaxDimsPerLane; ++d) acc[d] *= corr;
#pragma unroll
    for (int n = 0; n < kKeyBatch; ++n) {
      const float w = x[n] == -INFINITY ? 0.f : exp2f(x[n] - m_new);
      l += w;
#pragma unroll
      for (int d = 0; d < kMaxDimsPerLane; ++d) acc[d] = fmaf(w, vr[n][d], acc[d]);
    }
    m = m_new;
  }
  const int64_t row = (int64_t(b) * p.seq_len + t) * p.n_head + h;
  decode::finish_row(
      acc, m, l, p.D, warp, lane, partial != nullptr,
      [&] { return p.o + b * p.o_batch_stride + t * p.o_row_stride + int64_t(h) * p.D; },
      [&] { return partial + (row * n_splits + split) * (p.D + 2); });
}

template <typename T>
__global__ void combine_kernel(FocusAttentionParams<T> p, int n_splits, const float* partial) {
  const int64_t row = blockIdx.x;
  const int h = int(row % p.n_head);
  const int t = int((row / p.n_head) % p.seq_len);
  const int b = int(row / (int64_t(p.n_head) * p.seq_len));
  decode::combine_row(partial + row * n_splits * (p.D + 2), n_splits, p.D, [&] {
    return p.o + b * p.o_batch_stride + t * p.o_row_stride + int64_t(h) * p.D;
  });
}

}  // namespace

template <typename T>
void launch_focus_attention_decode(const FocusAttentionParams<T>& p, Stream s) {
  ATTN_REQUIRE(p.D >= 1 && p.D <= 32 * kMaxDimsPerLane,
               "focus attention decode: head dim must be 1 .. %d on CUDA, got %d",
               32 * kMaxDimsPerLane, p.D);
  ATTN_REQUIRE(p.gate.local_window >= 0,
               "focus attention decode: local_window must be >= 0, got %d", p.gate.local_window);
  ATTN_ASSERT(p.n_head % p.n_kv_head == 0 && p.n_head <= 65535);
  ATTN_ASSERT(p.gate.kind == FocusGateKind::hard ? p.groups != nullptr : p.g != nullptr);
  const int64_t rows = int64_t(p.B) * p.seq_len * p.n_head;
  if (rows == 0) return;
  const int keys = p.pos + p.seq_len;  // the last row's
  int n_splits = attention_decode_splits(rows, keys);
  const int chunk = div_up(keys, n_splits);
  n_splits = div_up(keys, chunk);  // no empty trailing split
  const auto st = reinterpret_cast<cudaStream_t>(s);
  ATTN_REQUIRE(int64_t(p.B) * p.seq_len < (int64_t(1) << 31),
               "focus attention decode: B x Tq = %lld query rows exceed 2^31 - 1",
               (long long)(int64_t(p.B) * p.seq_len));
  const dim3 grid(unsigned(int64_t(p.B) * p.seq_len), p.n_head, n_splits);
  if (n_splits == 1) {
    soft_decode_kernel<T><<<grid, kWarps * 32, 0, st>>>(p, chunk, 1, nullptr);
    CUDA_CHECK_LAUNCH();
    return;
  }
  StreamScratch scratch(size_t(rows) * n_splits * (p.D + 2) * sizeof(float), s);
  soft_decode_kernel<T><<<grid, kWarps * 32, 0, st>>>(p, chunk, n_splits, scratch.as<float>());
  CUDA_CHECK_LAUNCH();
  combine_kernel<T><<<unsigned(rows), 128, 0, st>>>(p, n_splits, scratch.as<float>());
  CUDA_CHECK_LAUNCH();
}

template void launch_focus_attention_decode<float>(const FocusAttentionParams<float>&, Stream);
template void launch_focus_attention_decode<bf16>(const FocusAttentionParams<bf16>&, Stream);

}  // namespace attnlab
