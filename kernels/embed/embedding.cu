// Token + position embedding, forward and deterministic backward.
//
// Backward without float atomics: the positions are sorted by token on the device (a stable radix
// sort, so equal tokens keep ascending position order), then one warp per (token run, 256-column
// chunk) sums the run's dout rows in that fixed order in fp32 and adds the sum into dwte once.
// dwpe: one thread per (t, column) sums over b in order. No host synchronisation: the sort's
// scratch memory is stream-ordered (cudaMallocAsync). Results are bitwise reproducible.
#include <cub/device/device_radix_sort.cuh>

#include "kernels/common/device.cuh"
#include "kernels/embed/embedding.cuh"

namespace attnlab {
namespace {

constexpr int kChunk = 256;  // columns per warp in the dwte reduction (8 per lane)

// kPositions false: no position table (RoPE models), out = the wte row.
template <typename T, bool kPositions>
__global__ void embedding_fwd_kernel(const int32_t* __restrict__ tokens, const T* __restrict__ wte,
                                     const T* __restrict__ wpe, T* __restrict__ out, int64_t BT,
                                     int T_, int C) {
  const int64_t row = blockIdx.x;
  if (row >= BT) return;
  const int t = int(row % T_);
  const T* we = wte + int64_t(tokens[row]) * C;
  if constexpr (kPositions) {
    const T* pe = wpe + int64_t(t) * C;
    T* o = out + row * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      o[c] = dev::from_f<T>(dev::to_f(we[c]) + dev::to_f(pe[c]));
    }
  } else {
    T* o = out + row * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) o[c] = we[c];
  }
}

template <typename T, bool kPositions>
__global__ void embedding_fwd_vec_kernel(const int32_t* __restrict__ tokens,
                                         const T* __restrict__ wte, const T* __restrict__ wpe,
                                         T* __restrict__ out, int64_t BT, int T_, int C) {
  constexpr int N = dev::Pack<T>::N;
  const int64_t row = blockIdx.x;
  if (row >= BT) return;
  const int t = int(row % T_);
  const T* we = wte + int64_t(tokens[row]) * C;
  if constexpr (kPositions) {
    const T* pe = wpe + int64_t(t) * C;
    T* o = out + row * C;
    for (int c = threadIdx.x * N; c < C; c += blockDim.x * N) {
      const dev::Pack<T> a = dev::load_pack(we + c), b = dev::load_pack(pe + c);
      dev::Pack<T> r;
#pragma unroll
      for (int j = 0; j < N; ++j) r.set(j, a.f(j) + b.f(j));
      dev::store_pack(o + c, r);
    }
  } else {
    T* o = out + row * C;
    for (int c = threadIdx.x * N; c < C; c += blockDim.x * N)
      dev::store_pack(o + c, dev::load_pack(we + c));
  }
}

__global__ void iota_kernel(int32_t* v, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) v[i] = int32_t(i);
}

// One warp per sorted index i that starts a run of equal tokens; blockIdx.y picks the column chunk.
template <typename T>
__global__ void dwte_runs_kernel(const int32_t* __restrict__ sorted_tok,
                                 const int32_t* __restrict__ sorted_pos, const T* __restrict__ dout,
                                 T* __restrict__ dwte, int64_t BT, int C) {
  const int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (i >= BT) return;
  const int32_t tok = sorted_tok[i];
  if (i > 0 && sorted_tok[i - 1] == tok) return;  // not the head of a run
  const int c0 = blockIdx.y * kChunk;
  float acc[kChunk / 32];
#pragma unroll
  for (int j = 0; j < kChunk / 32; ++j) acc[j] = 0.f;
  for (int64_t k = i; k < BT && sorted_tok[k] == tok; ++k) {
    const T* src = dout + int64_t(sorted_pos[k]) * C;
#pragma unroll
    for (int j = 0; j < kChunk / 32; ++j) {
      const int c = c0 + lane + 32 * j;
      if (c < C) acc[j] += dev::to_f(src[c]);
    }
  }
  T* dst = dwte + int64_t(tok) * C;
#pragma unroll
  for (int j = 0; j < kChunk / 32; ++j) {
    const int c = c0 + lane + 32 * j;
    if (c < C) dst[c] = dev::from_f<T>(dev::to_f(dst[c]) + acc[j]);
  }
}

template <typename T>
__global__ void dwpe_kernel(const T* __restrict__ dout, T* __restrict__ dwpe, int64_t B, int T_,
                            int C) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= int64_t(T_) * C) return;
  float acc = 0.f;
  for (int64_t b = 0; b < B; ++b) acc += dev::to_f(dout[b * T_ * C + idx]);
  dwpe[idx] = dev::from_f<T>(dev::to_f(dwpe[idx]) + acc);
}

}  // namespace

template <typename T>
void launch_embedding_fwd(const EmbeddingParams<T>& p, Stream s) {
  const int64_t BT = p.B * p.T_;
  if (BT == 0 || p.C == 0) return;
  auto st = reinterpret_cast<cudaStream_t>(s);
  const bool vec =
      p.C % dev::Pack<T>::N == 0 && aligned16(p.wte) && aligned16(p.wpe) && aligned16(p.out);
  const int threads =
      std::min(256, std::max(32, (p.C / (vec ? dev::Pack<T>::N : 1) + 31) / 32 * 32));
  ATTN_ASSERT(BT < (int64_t(1) << 31));
  auto launch = [&](auto kernel) {
    kernel<<<unsigned(BT), threads, 0, st>>>(p.tokens, p.wte, p.wpe, p.out, BT, p.T_, p.C);
  };
  if (vec) {
    p.wpe ? launch(embedding_fwd_vec_kernel<T, true>) : launch(embedding_fwd_vec_kernel<T, false>);
  } else {
    p.wpe ? launch(embedding_fwd_kernel<T, true>) : launch(embedding_fwd_kernel<T, false>);
  }
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_embedding_bwd(const EmbeddingParams<T>& p, Stream s) {
  const int64_t BT = p.B * p.T_;
  if (BT == 0 || p.C == 0) return;
  auto st = reinterpret_cast<cudaStream_t>(s);
  if (p.dwpe) {
    const int64_t n = int64_t(p.T_) * p.C;
    dwpe_kernel<T><<<div_up(n, 256), 256, 0, st>>>(p.dout, p.dwpe, p.B, p.T_, p.C);
    CUDA_CHECK_LAUNCH();
  }
  if (!p.dwte) return;
  ATTN_ASSERT(BT < (int64_t(1) << 31) && p.vocab > 0);
  const int n = int(BT);
  int end_bit = 1;
  while (end_bit < 31 && (int64_t(1) << end_bit) < p.vocab) ++end_bit;
  size_t sort_bytes = 0;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, p.tokens, (int32_t*)nullptr,
                                             (const int32_t*)nullptr, (int32_t*)nullptr, n, 0,
                                             end_bit, st));
  const size_t arr = (size_t(n) * sizeof(int32_t) + 255) / 256 * 256;
  StreamScratch scratch(3 * arr + sort_bytes, s);
  char* base = scratch.as<char>();
  auto* pos_in = reinterpret_cast<int32_t*>(base);
  auto* tok_out = reinterpret_cast<int32_t*>(base + arr);
  auto* pos_out = reinterpret_cast<int32_t*>(base + 2 * arr);
  void* sort_tmp = base + 3 * arr;
  iota_kernel<<<div_up(n, 256), 256, 0, st>>>(pos_in, n);
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(sort_tmp, sort_bytes, p.tokens, tok_out, pos_in,
                                             pos_out, n, 0, end_bit, st));
  constexpr int kWarps = 8;
  const dim3 grid(div_up(n, kWarps), div_up(p.C, kChunk));
  dwte_runs_kernel<T><<<grid, kWarps * 32, 0, st>>>(tok_out, pos_out, p.dout, p.dwte, BT, p.C);
  CUDA_CHECK_LAUNCH();
}

template void launch_embedding_fwd<float>(const EmbeddingParams<float>&, Stream);
template void launch_embedding_fwd<bf16>(const EmbeddingParams<bf16>&, Stream);
template void launch_embedding_bwd<float>(const EmbeddingParams<float>&, Stream);
template void launch_embedding_bwd<bf16>(const EmbeddingParams<bf16>&, Stream);

}  // namespace attnlab
