// fp32 attention on CUDA: simple kernels without tensor cores (one warp per query row or key, the
// lanes splitting D <= 128), for tests and debugging; deterministic. Contract: attention.cuh
// (launch_attention_fwd/bwd<float>): o, lse and dq, dk, dv written (=); GQA and AttentionMask.
#include "kernels/attention/attention_impl.cuh"
#include "kernels/common/device.cuh"

namespace attnlab {
namespace {

constexpr int kMaxDPerLane = 4;  // D <= 128

// Keys [lo, hi) that query t sees.
__device__ __forceinline__ void key_range(const AttentionParams<float>& p, int t, int& lo,
                                          int& hi) {
  lo = p.mask.first_key(t);
  hi = p.mask.key_end(t, p.seq_len);
}

struct Heads {
  int b, h, hk;
};

__device__ __forceinline__ Heads row_heads(const AttentionParams<float>& p, int64_t row, int& t) {
  t = int(row % p.seq_len);
  const int h = int((row / p.seq_len) % p.n_head);
  return {int(row / (int64_t(p.seq_len) * p.n_head)), h, h / (p.n_head / p.n_kv_head)};
}

__global__ void attn_fwd_f32(const AttentionParams<float> p) {
  const int64_t row = int64_t(blockIdx.x) * 4 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32, D = p.D;
  if (row >= int64_t(p.B) * p.n_head * p.seq_len) return;
  int t;
  const Heads hd = row_heads(p, row, t);
  const float* q = p.q + hd.b * p.qkv_batch_stride + int64_t(t) * p.qkv_row_stride + hd.h * D;
  const float* kb = p.k + hd.b * p.qkv_batch_stride + hd.hk * D;
  const float* vb = p.v + hd.b * p.qkv_batch_stride + hd.hk * D;
  float qr[kMaxDPerLane], o[kMaxDPerLane];
#pragma unroll
  for (int j = 0; j < kMaxDPerLane; ++j) {
    const int d = lane + 32 * j;
    qr[j] = d < D ? q[d] : 0.f;
    o[j] = 0.f;
  }
  int lo, hi;
  key_range(p, t, lo, hi);
  float m = -INFINITY, l = 0.f;
  for (int s = lo; s < hi; ++s) {
    const float* k = kb + int64_t(s) * p.qkv_row_stride;
    const float* v = vb + int64_t(s) * p.qkv_row_stride;
    float dot = 0.f;
#pragma unroll
    for (int j = 0; j < kMaxDPerLane; ++j) {
      const int d = lane + 32 * j;
      if (d < D) dot += qr[j] * k[d];
    }
    const float sc = dev::warp_sum(dot) * p.scale;
    const float m_new = fmaxf(m, sc);
    const float corr = expf(m - m_new), e = expf(sc - m_new);
    l = l * corr + e;
#pragma unroll
    for (int j = 0; j < kMaxDPerLane; ++j) {
      const int d = lane + 32 * j;
      o[j] = o[j] * corr + (d < D ? e * v[d] : 0.f);
    }
    m = m_new;
  }
  float* out = p.o + hd.b * p.o_batch_stride + int64_t(t) * p.o_row_stride + hd.h * D;
#pragma unroll
  for (int j = 0; j < kMaxDPerLane; ++j) {
    const int d = lane + 32 * j;
    if (d < D) out[d] = o[j] / l;
  }
  if (lane == 0) p.lse[row] = m + logf(l);
}

__global__ void attn_bwd_dq_f32(const AttentionParams<float> p, const float* __restrict__ delta) {
  const int64_t row = int64_t(blockIdx.x) * 4 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32, D = p.D;
  if (row >= int64_t(p.B) * p.n_head * p.seq_len) return;
  int t;
  const Heads hd = row_heads(p, row, t);
  const int64_t qoff = hd.b * p.qkv_batch_stride + int64_t(t) * p.qkv_row_stride + hd.h * D;
  const float* q = p.q + qoff;
  const float* dout = p.dout + hd.b * p.o_batch_stride + int64_t(t) * p.o_row_stride + hd.h * D;
  const float* kb = p.k + hd.b * p.qkv_batch_stride + hd.hk * D;
  const float* vb = p.v + hd.b * p.qkv_batch_stride + hd.hk * D;
  float qr[kMaxDPerLane], dor[kMaxDPerLane], dq[kMaxDPerLane];
#pragma unroll
  for (int j = 0; j < kMaxDPerLane; ++j) {
    const int d = lane + 32 * j;
    qr[j] = d < D ? q[d] : 0.f;
    dor[j] = d < D ? dout[d] : 0.f;
    dq[j] = 0.f;
  }
  const float lse = p.lse[row], dl = delta[row];
  int lo, hi;
  key_range(p, t, lo, hi);
  for (int s = lo; s < hi; ++s) {
    const float* k = kb + int64_t(s) * p.qkv_row_stride;
    const float* v = vb + int64_t(s) * p.qkv_row_stride;
    float dot = 0.f, dpv = 0.f;
#pragma unroll
    for (int j = 0; j < kMaxDPerLane; ++j) {
      const int d = lane + 32 * j;
      if (d < D) {
        dot += qr[j] * k[d];
        dpv += dor[j] * v[d];
      }
    }
    const float pr = expf(dev::warp_sum(dot) * p.scale - lse);
    const float ds = pr * (dev::warp_sum(dpv) - dl);
#pragma unroll
    for (int j = 0; j < kMaxDPerLane; ++j) {
      const int d = lane + 32 * j;
      if (d < D) dq[j] += ds * k[d];
    }
  }
#pragma unroll
  for (int j = 0; j < kMaxDPerLane; ++j) {
    const int d = lane + 32 * j;
    if (d < D) p.dq[qoff + d] = dq[j] * p.scale;
  }
}

// One warp per (b, kv head, key s); loops over the group's query heads and the queries seeing s.
__global__ void attn_bwd_dkdv_f32(const AttentionParams<float> p, const float* __restrict__ delta) {
  const int64_t row = int64_t(blockIdx.x) * 4 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32, D = p.D, T = p.seq_len;
  if (row >= int64_t(p.B) * p.n_kv_head * T) return;
  const int s = int(row % T), hk = int((row / T) % p.n_kv_head);
  const int b = int(row / (int64_t(T) * p.n_kv_head));
  const int group = p.n_head / p.n_kv_head;
  const int64_t koff = b * p.qkv_batch_stride + int64_t(s) * p.qkv_row_stride + hk * D;
  float kr[kMaxDPerLane], vr[kMaxDPerLane], dk[kMaxDPerLane], dv[kMaxDPerLane];
#pragma unroll
  for (int j = 0; j < kMaxDPerLane; ++j) {
    const int d = lane + 32 * j;
    kr[j] = d < D ? p.k[koff + d] : 0.f;
    vr[j] = d < D ? p.v[koff + d] : 0.f;
    dk[j] = dv[j] = 0.f;
  }
  const int t_lo = p.mask.first_query(s), t_hi = p.mask.query_end(s, T);
  for (int h = hk * group; h < (hk + 1) * group; ++h) {
    const int64_t lrow = (int64_t(b) * p.n_head + h) * T;
    for (int t = t_lo; t < t_hi; ++t) {
      const float* q = p.q + b * p.qkv_batch_stride + int64_t(t) * p.qkv_row_stride + h * D;
      const float* dout = p.dout + b * p.o_batch_stride + int64_t(t) * p.o_row_stride + h * D;
      float dot = 0.f, dpv = 0.f;
#pragma unroll
      for (int j = 0; j < kMaxDPerLane; ++j) {
        const int d = lane + 32 * j;
        if (d < D) {
          dot += q[d] * kr[j];
          dpv += dout[d] * vr[j];
        }
      }
      const float pr = expf(dev::warp_sum(dot) * p.scale - p.lse[lrow + t]);
      const float ds = pr * (dev::warp_sum(dpv) - delta[lrow + t]);
#pragma unroll
      for (int j = 0; j < kMaxDPerLane; ++j) {
        const int d = lane + 32 * j;
        if (d < D) {
          dv[j] += pr * dout[d];
          dk[j] += ds * q[d];
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kMaxDPerLane; ++j) {
    const int d = lane + 32 * j;
    if (d < D) {
      p.dk[koff + d] = dk[j] * p.scale;
      p.dv[koff + d] = dv[j];
    }
  }
}
}  // namespace

namespace attention_impl {

void fwd_f32(const AttentionParams<float>& p, cudaStream_t st) {
  ATTN_ASSERT(p.D > 0 && p.D <= 32 * kMaxDPerLane);
  const int64_t rows = int64_t(p.B) * p.n_head * p.seq_len;
  attn_fwd_f32<<<div_up(rows, 4), 128, 0, st>>>(p);
  CUDA_CHECK_LAUNCH();
}

void bwd_f32(const AttentionParams<float>& p, Stream s) {
  ATTN_ASSERT(p.D > 0 && p.D <= 32 * kMaxDPerLane);
  auto st = reinterpret_cast<cudaStream_t>(s);
  const int64_t rows = int64_t(p.B) * p.n_head * p.seq_len;
  StreamScratch delta(sizeof(float) * rows, s);
  bwd_delta_f32(p, delta.as<float>(), st);
  attn_bwd_dq_f32<<<div_up(rows, 4), 128, 0, st>>>(p, delta.as<float>());
  CUDA_CHECK_LAUNCH();
  const int64_t krows = int64_t(p.B) * p.n_kv_head * p.seq_len;
  attn_bwd_dkdv_f32<<<div_up(krows, 4), 128, 0, st>>>(p, delta.as<float>());
  CUDA_CHECK_LAUNCH();
}

}  // namespace attention_impl
}  // namespace attnlab
