// CUDA kernels of kernels/focus/focus_attention.cuh: the straightforward, correct version. One
// thread per (batch, head, query row) walks its keys with an online softmax in fp32 registers
// (D <= 128); the gate is computed on the fly from the g rows (never a T x T tensor). The
// backward recomputes each row's weights from the saved lse, writes dq per row and adds dk, dv
// (fp32 scratch) and dg with atomics, so dk, dv, dg may differ in the last bits between runs (not
// deterministic). The flash-style tiled kernels (mma.sync / wgmma, g tiles beside K/V) are the
// next step (docs/focus.md).
#include "kernels/common/device.cuh"
#include "kernels/focus/focus_attention.cuh"

namespace attnlab {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxD = 128;

template <typename T>
struct Row {
  const FocusAttentionParams<T>& p;
  int b, h, hk, t, i;
  __device__ Row(const FocusAttentionParams<T>& p_, int64_t row) : p(p_) {
    t = int(row % p.seq_len);
    h = int((row / p.seq_len) % p.n_head);
    b = int(row / (int64_t(p.seq_len) * p.n_head));
    hk = h / (p.n_head / p.n_kv_head);
    i = p.pos + t;
  }
  __device__ const T* k(int j) const {
    return p.k + b * p.kv_batch_stride + j * p.kv_row_stride + hk * p.kv_head_stride;
  }
  __device__ const T* v(int j) const {
    return p.v + b * p.kv_batch_stride + j * p.kv_row_stride + hk * p.kv_head_stride;
  }
  __device__ int64_t q_off() const {
    return b * p.q_batch_stride + t * p.q_row_stride + int64_t(h) * p.D;
  }
  __device__ int64_t o_off() const {
    return b * p.o_batch_stride + t * p.o_row_stride + int64_t(h) * p.D;
  }
  __device__ float affinity(int j) const {
    const float* gi = p.g + b * p.g_batch_stride + int64_t(i) * p.K;
    const float* gj = p.g + b * p.g_batch_stride + int64_t(j) * p.K;
    float a = 0.f;
    for (int k = 0; k < p.K; ++k) a += gi[k] * gj[k];
    return a;
  }
  __device__ bool share(int j) const {
    const int32_t* gi = p.groups + b * p.groups_batch_stride + int64_t(i) * p.top_k;
    const int32_t* gj = p.groups + b * p.groups_batch_stride + int64_t(j) * p.top_k;
    for (int x = 0; x < p.top_k; ++x)
      for (int y = 0; y < p.top_k; ++y)
        if (gi[x] == gj[y]) return true;
    return false;
  }
  // The logit of pair (i, j) from its score; -inf: not attended.
  __device__ float logit(int j, float s) const {
    if (i - j <= p.gate.local_window) return s;
    switch (p.gate.kind) {
      case FocusGateKind::additive:
        return s + logf(affinity(j) + p.gate.eps);
      case FocusGateKind::multiplicative:
        return s / (1.f + expf(-(p.gate.scale * affinity(j) + p.gate.bias)));
      case FocusGateKind::hard:
        return share(j) ? s : -INFINITY;
    }
    return s;
  }
};

template <typename T>
__global__ void focus_attention_fwd_kernel(FocusAttentionParams<T> p) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= int64_t(p.B) * p.n_head * p.seq_len) return;
  const Row<T> r(p, row);
  const int D = p.D;
  float q[kMaxD], acc[kMaxD];
  const T* qp = p.q + r.q_off();
  for (int d = 0; d < D; ++d) q[d] = dev::to_f(qp[d]) * p.scale, acc[d] = 0.f;
  float m = -INFINITY, l = 0.f;
  for (int j = 0; j <= r.i; ++j) {
    const T* k = r.k(j);
    float s = 0.f;
    for (int d = 0; d < D; ++d) s += q[d] * dev::to_f(k[d]);
    const float x = r.logit(j, s);
    if (x == -INFINITY) continue;
    const float mn = fmaxf(m, x), corr = expf(m - mn), e = expf(x - mn);
    l = l * corr + e;
    const T* v = r.v(j);
    for (int d = 0; d < D; ++d) acc[d] = acc[d] * corr + e * dev::to_f(v[d]);
    m = mn;
  }
  T* o = p.o + r.o_off();
  for (int d = 0; d < D; ++d) o[d] = dev::from_f<T>(acc[d] / l);
  if (p.lse) p.lse[row] = m + logf(l);
}

// dk_acc, dv_acc: [B, T, n_kv_head, D] fp32, zeroed; dg (fp32 [B, T, K]) zeroed.
template <typename T>
__global__ void focus_attention_bwd_kernel(FocusAttentionParams<T> p, float* dk_acc,
                                           float* dv_acc) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= int64_t(p.B) * p.n_head * p.seq_len) return;
  const Row<T> r(p, row);
  const int D = p.D, T_ = p.seq_len;
  float q[kMaxD], dout[kMaxD], dq[kMaxD];
  const T* qp = p.q + r.q_off();
  const T* dp = p.dout + r.o_off();
  const T* op = p.o + r.o_off();
  float delta = 0.f;
  for (int d = 0; d < D; ++d) {
    q[d] = dev::to_f(qp[d]);
    dout[d] = dev::to_f(dp[d]);
    dq[d] = 0.f;
    delta += dout[d] * dev::to_f(op[d]);
  }
  const float lse = p.lse[row];
  const bool want_dg = p.dg != nullptr && p.g != nullptr;
  for (int j = 0; j <= r.i; ++j) {
    const T* k = r.k(j);
    const T* v = r.v(j);
    float s = 0.f, dP = 0.f;
    for (int d = 0; d < D; ++d) {
      s += q[d] * dev::to_f(k[d]);
      dP += dout[d] * dev::to_f(v[d]);
    }
    s *= p.scale;
    const float x = r.logit(j, s);
    const float P = x == -INFINITY ? 0.f : expf(x - lse);
    const float dl = P * (dP - delta);
    float ds = dl, da = 0.f;
    if (r.i - j > p.gate.local_window) {
      if (p.gate.kind == FocusGateKind::multiplicative) {
        const float sg = 1.f / (1.f + expf(-(p.gate.scale * r.affinity(j) + p.gate.bias)));
        ds = dl * sg;
        da = dl * s * p.gate.scale * sg * (1.f - sg);
      } else if (p.gate.kind == FocusGateKind::hard) {
        da = hard_straight_through_weight(expf(s - lse)) * (dP - delta);
      } else {
        da = expf(s - lse) * (dP - delta);
      }
    }
    if (want_dg && da != 0.f) {
      const float* gi = p.g + r.b * p.g_batch_stride + int64_t(r.i) * p.K;
      const float* gj = p.g + r.b * p.g_batch_stride + int64_t(j) * p.K;
      float* dgi = p.dg + (int64_t(r.b) * T_ + r.i) * p.K;
      float* dgj = p.dg + (int64_t(r.b) * T_ + j) * p.K;
      for (int c = 0; c < p.K; ++c) {
        atomicAdd(dgi + c, da * gj[c]);
        atomicAdd(dgj + c, da * gi[c]);
      }
    }
    ds *= p.scale;
    float* dk = dk_acc + ((int64_t(r.b) * T_ + j) * p.n_kv_head + r.hk) * D;
    float* dv = dv_acc + ((int64_t(r.b) * T_ + j) * p.n_kv_head + r.hk) * D;
    for (int d = 0; d < D; ++d) {
      dq[d] += ds * dev::to_f(k[d]);
      atomicAdd(dk + d, ds * q[d]);
      atomicAdd(dv + d, P * dout[d]);
    }
  }
  T* dqp = p.dq + r.q_off();
  for (int d = 0; d < D; ++d) dqp[d] = dev::from_f<T>(dq[d]);
}

// dk, dv (packed, strided) = the fp32 accumulators.
template <typename T>
__global__ void focus_store_dkv_kernel(FocusAttentionParams<T> p, const float* dk_acc,
                                       const float* dv_acc) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int D = p.D;
  if (e >= int64_t(p.B) * p.seq_len * p.n_kv_head * D) return;
  const int d = int(e % D), hk = int((e / D) % p.n_kv_head);
  const int64_t bt = e / (int64_t(D) * p.n_kv_head);
  const int b = int(bt / p.seq_len), j = int(bt % p.seq_len);
  const int64_t off = b * p.kv_batch_stride + j * p.kv_row_stride + hk * p.kv_head_stride + d;
  p.dk[off] = dev::from_f<T>(dk_acc[e]);
  p.dv[off] = dev::from_f<T>(dv_acc[e]);
}

cudaStream_t st(Stream s) { return reinterpret_cast<cudaStream_t>(s); }

}  // namespace

template <typename T>
void launch_focus_attention_fwd(const FocusAttentionParams<T>& p, Stream s) {
  ATTN_REQUIRE(p.D <= kMaxD, "focus attention: head dim must be <= %d on CUDA, got %d", kMaxD, p.D);
  const int64_t rows = int64_t(p.B) * p.n_head * p.seq_len;
  if (rows == 0) return;
  focus_attention_fwd_kernel<T><<<div_up(rows, kThreads), kThreads, 0, st(s)>>>(p);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_focus_attention_bwd(const FocusAttentionParams<T>& p, Stream s) {
  ATTN_REQUIRE(p.D <= kMaxD, "focus attention: head dim must be <= %d on CUDA, got %d", kMaxD, p.D);
  ATTN_REQUIRE(p.pos == 0, "focus attention: the backward runs from position 0");
  const int64_t rows = int64_t(p.B) * p.n_head * p.seq_len;
  if (rows == 0) return;
  const int64_t kv = int64_t(p.B) * p.seq_len * p.n_kv_head * p.D;
  StreamScratch acc(size_t(2 * kv) * sizeof(float), s);
  float* dk_acc = acc.as<float>();
  float* dv_acc = dk_acc + kv;
  CUDA_CHECK(cudaMemsetAsync(dk_acc, 0, size_t(2 * kv) * sizeof(float), st(s)));
  if (p.dg)
    CUDA_CHECK(cudaMemsetAsync(p.dg, 0, size_t(p.B) * p.seq_len * p.K * sizeof(float), st(s)));
  focus_attention_bwd_kernel<T><<<div_up(rows, kThreads), kThreads, 0, st(s)>>>(p, dk_acc, dv_acc);
  CUDA_CHECK_LAUNCH();
  focus_store_dkv_kernel<T><<<div_up(kv, 256), 256, 0, st(s)>>>(p, dk_acc, dv_acc);
  CUDA_CHECK_LAUNCH();
}

template void launch_focus_attention_fwd<float>(const FocusAttentionParams<float>&, Stream);
template void launch_focus_attention_fwd<bf16>(const FocusAttentionParams<bf16>&, Stream);
template void launch_focus_attention_bwd<float>(const FocusAttentionParams<float>&, Stream);
template void launch_focus_attention_bwd<bf16>(const FocusAttentionParams<bf16>&, Stream);

}  // namespace attnlab
