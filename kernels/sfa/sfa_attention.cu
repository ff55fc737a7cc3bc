// CUDA kernels of kernels/sfa/sfa_attention.cuh (decode from the sparse KV cache) and
// sfa_distill.cuh. Straightforward and deterministic: one block per query row (b, t, h); pass 1
// finds the row's max and sum (each thread an online softmax over a strided share of the keys,
// then a fixed-order combine); pass 2 walks the keys in tiles of kThreads, the weights in shared
// memory, thread d accumulating o_d in key order. Scores from the overlap of the ascending
// coordinate lists (a merge of two k-lists). The tiled FlashSFA kernel is a later step.
#include "kernels/common/device.cuh"
#include "kernels/sfa/sfa_attention.cuh"
#include "kernels/sfa/sfa_distill.cuh"

namespace attnlab {
namespace {

constexpr int kThreads = 128;  // >= D (D <= 128)
constexpr int kMaxK = 128;

cudaStream_t st(Stream s) { return reinterpret_cast<cudaStream_t>(s); }

template <typename T>
__device__ float overlap(const int32_t* qi, const float* qv, const uint8_t* ki, const T* kv,
                         int K) {
  float d = 0.f;
  for (int a = 0, c = 0; a < K && c < K;) {
    const int x = qi[a], y = ki[c];
    if (x == y)
      d += qv[a++] * dev::to_f(kv[c++]);
    else if (x < y)
      ++a;
    else
      ++c;
  }
  return d;
}

template <typename T>
__global__ void sfa_attention_fwd_kernel(SfaAttentionParams<T> p) {
  __shared__ int32_t qi[kMaxK];
  __shared__ float qv[kMaxK];
  __shared__ float red_m[kThreads], red_s[kThreads];
  __shared__ float w[kThreads];
  const int h = blockIdx.x % p.n_head;
  const int t = (blockIdx.x / p.n_head) % p.Tq;
  const int b = blockIdx.x / (p.n_head * p.Tq);
  const int g = h / (p.n_head / p.n_kv_head), K = p.k, len = p.pos + t + 1;
  const int64_t qa = b * p.q_batch_stride + t * p.q_row_stride + h * p.q_head_stride;
  for (int i = threadIdx.x; i < K; i += blockDim.x) {
    qi[i] = p.q_idx[qa + i];
    qv[i] = dev::to_f(p.q_val[qa + i]);
  }
  __syncthreads();
  const uint8_t* kib = p.k_idx8 + b * p.k_batch_stride + g * p.k_head_stride;
  const T* kvb = p.k_val + b * p.k_batch_stride + g * p.k_head_stride;
  const T* vb = p.v + b * p.v_batch_stride + g * p.v_head_stride;
  float m = -INFINITY, s = 0.f;
  for (int j = threadIdx.x; j < len; j += blockDim.x) {
    const float x =
        p.scale * overlap(qi, qv, kib + j * p.k_row_stride, kvb + j * p.k_row_stride, K);
    const float mn = fmaxf(m, x);
    s = s * __expf(m - mn) + __expf(x - mn);
    m = mn;
  }
  red_m[threadIdx.x] = m;
  red_s[threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float M = -INFINITY, S = 0.f;
    for (int i = 0; i < kThreads; ++i) {
      if (red_s[i] == 0.f) continue;
      const float mn = fmaxf(M, red_m[i]);
      S = S * __expf(M - mn) + red_s[i] * __expf(red_m[i] - mn);
      M = mn;
    }
    red_m[0] = M;
    red_s[0] = S;
  }
  __syncthreads();
  const float M = red_m[0], S = red_s[0];
  float acc = 0.f;
  for (int j0 = 0; j0 < len; j0 += kThreads) {
    const int j = j0 + threadIdx.x;
    if (j < len)
      w[threadIdx.x] = __expf(
          p.scale * overlap(qi, qv, kib + j * p.k_row_stride, kvb + j * p.k_row_stride, K) - M);
    __syncthreads();
    const int n = min(kThreads, len - j0);
    if (threadIdx.x < p.D)
      for (int i = 0; i < n; ++i)
        acc += w[i] * dev::to_f(vb[int64_t(j0 + i) * p.v_row_stride + threadIdx.x]);
    __syncthreads();
  }
  if (threadIdx.x < p.D)
    p.o[b * p.o_batch_stride + t * p.o_row_stride + int64_t(h) * p.D + threadIdx.x] =
        dev::from_f<T>(acc / S);
  if (p.lse && threadIdx.x == 0) p.lse[(int64_t(b) * p.n_head + h) * p.Tq + t] = M + logf(S);
}

constexpr int kReduceThreads = 1024;

template <typename T>
__global__ void sfa_distill_fwd_kernel(SfaDistillParams<T> p) {
  __shared__ double part[kReduceThreads];
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < p.n; i += kReduceThreads) {
    const double d = double(dev::to_f(p.student[i])) - dev::to_f(p.teacher[i]);
    sum += d * d;
  }
  part[threadIdx.x] = sum;
  __syncthreads();
  for (int o = kReduceThreads / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) part[threadIdx.x] += part[threadIdx.x + o];
    __syncthreads();
  }
  if (threadIdx.x == 0) *p.total += double(p.weight) * part[0] / double(p.n);
}

template <typename T>
__global__ void sfa_distill_bwd_kernel(SfaDistillParams<T> p) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= p.n) return;
  const float c = 2.f * p.weight / float(p.n);
  p.dstudent[i] = dev::from_f<T>(dev::to_f(p.dout[i]) +
                                 c * (dev::to_f(p.student[i]) - dev::to_f(p.teacher[i])));
}

}  // namespace

template <typename T>
void launch_sfa_attention_fwd(const SfaAttentionParams<T>& p, Stream s) {
  ATTN_REQUIRE(p.D <= kThreads && p.k <= kMaxK,
               "sfa_attention: head dim must be <= %d on CUDA, got %d", kThreads, p.D);
  ATTN_REQUIRE(p.k_idx8 != nullptr && p.k_idx == nullptr,
               "sfa_attention: CUDA reads the decode cache's one-byte key indices (k_idx8)");
  const int64_t rows = int64_t(p.B) * p.Tq * p.n_head;
  if (rows == 0) return;
  ATTN_REQUIRE(rows <= INT32_MAX, "sfa_attention: %lld query rows exceed one grid",
               (long long)rows);
  sfa_attention_fwd_kernel<T><<<unsigned(rows), kThreads, 0, st(s)>>>(p);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_sfa_distill_fwd(const SfaDistillParams<T>& p, Stream s) {
  if (p.n == 0) return;
  sfa_distill_fwd_kernel<T><<<1, kReduceThreads, 0, st(s)>>>(p);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_sfa_distill_bwd(const SfaDistillParams<T>& p, Stream s) {
  if (p.n == 0) return;
  sfa_distill_bwd_kernel<T><<<div_up(p.n, 256), 256, 0, st(s)>>>(p);
  CUDA_CHECK_LAUNCH();
}

template void launch_sfa_attention_fwd<float>(const SfaAttentionParams<float>&, Stream);
template void launch_sfa_attention_fwd<bf16>(const SfaAttentionParams<bf16>&, Stream);
template void launch_sfa_distill_fwd<float>(const SfaDistillParams<float>&, Stream);
template void launch_sfa_distill_fwd<bf16>(const SfaDistillParams<bf16>&, Stream);
template void launch_sfa_distill_bwd<float>(const SfaDistillParams<float>&, Stream);
template void launch_sfa_distill_bwd<bf16>(const SfaDistillParams<bf16>&, Stream);

}  // namespace attnlab
