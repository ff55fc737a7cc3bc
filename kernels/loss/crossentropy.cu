// Softmax cross-entropy, fused forward + backward. One block per row, two passes:
//   A  one read of the row from global memory (16-byte loads, several in flight per thread) with
//      an online max and sum of exp(x - max) per thread (the sum is rescaled when a group of
//      loads raises the max), then one block-wide combination of the (max, sum) pairs -> lse,
//      loss; the row is kept in shared memory when it fits (bf16 GPT-2: 100 KB),
//   C  (backward only) dlogits = (softmax - onehot) * dloss, written once.
// C reads the shared-memory copy, so the logits cross HBM once and dlogits once; the forward alone
// is a single pass. Rows that do not fit (or unaligned rows: scalar path) re-read global memory
// (mostly L2) in C. Rows that fit twice (bf16 GPT-2 on sm_80+) take the streaming kernel instead:
// a persistent grid that copies the next row while it works on this one (see below). exp via exp2
// of a pre-scaled argument (one FFMA + one MUFU op per element and pass). dlogits may alias logits:
// every read of a row from global memory happens before the barrier that precedes its writes.
// Deterministic: fixed per-thread order and a fixed tree.
#include <type_traits>

#include "kernels/common/device.cuh"
#include "kernels/loss/crossentropy.cuh"

namespace attnlab {
namespace {

constexpr int kThreads = 1024;
constexpr int kUnroll = 4;  // loads in flight per thread in pass A
constexpr float kLog2e = 1.4426950408889634f;

// V consecutive elements of T: one 16-byte pack, or one scalar (V = 1).
template <typename T, int V>
struct alignas(sizeof(T) * V) Chunk {
  T v[V];
  __device__ __forceinline__ float f(int j) const { return dev::to_f(v[j]); }
};
template <typename T, int V>
__device__ __forceinline__ Chunk<T, V> load_chunk(const T* p) {
  Chunk<T, V> r;
  if constexpr (sizeof(Chunk<T, V>) == 16) {
    *reinterpret_cast<int4*>(&r) = *reinterpret_cast<const int4*>(p);
  } else {
    r = *reinterpret_cast<const Chunk<T, V>*>(p);
  }
  return r;
}

// 2^x, flushing results below 2^-126 to 0 (one MUFU op; exp2f adds the denormal range).
__device__ __forceinline__ float ex2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// The largest of a 16-byte pack's values (bf16: three packed max instructions, exact).
template <typename T>
__device__ __forceinline__ float pack_max(const dev::Pack<T>& ch) {
#if __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, bf16>) {
    const auto* h = reinterpret_cast<const __nv_bfloat162*>(ch.v);
    const __nv_bfloat162 m = __hmax2(__hmax2(h[0], h[1]), __hmax2(h[2], h[3]));
    return fmaxf(__low2float(m), __high2float(m));
  }
#endif
  float m = ch.f(0);
#pragma unroll
  for (int j = 1; j < dev::Pack<T>::N; ++j) m = fmaxf(m, ch.f(j));
  return m;
}

// Merges two (max, sum of exp(x - max)) pairs; a pair with max = -inf holds no element.
__device__ __forceinline__ void merge_lse(float& m, float& s, float om, float os) {
  const float nm = fmaxf(m, om);
  if (nm == -INFINITY) return;  // both empty
  s = (m == -INFINITY ? 0.f : s * exp2f((m - nm) * kLog2e)) +
      (om == -INFINITY ? 0.f : os * exp2f((om - nm) * kLog2e));
  m = nm;
}

// Block-wide combination of every thread's (max, sum) in a fixed order; every thread gets the
// result. Two barriers (the first also publishes whatever the threads wrote before the call).
__device__ __forceinline__ void block_merge_lse(float& m, float& s, float* red_m, float* red_s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    merge_lse(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
  if (threadIdx.x % 32 == 0) red_m[threadIdx.x / 32] = m, red_s[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x < 32) {
    m = red_m[threadIdx.x], s = red_s[threadIdx.x];  // kThreads / 32 == 32 warps
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
      merge_lse(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
    if (threadIdx.x == 0) red_m[32] = m, red_s[32] = s;
  }
  __syncthreads();
  m = red_m[32], s = red_s[32];
}

// V: elements per chunk (Pack<T>::N, or 1 for the scalar path); kSmem: keep the row in shared
// memory (dynamic, Vp * sizeof(T) bytes).
template <typename T, int V, bool kSmem>
__global__ void __launch_bounds__(kThreads)
    crossentropy_kernel(const T* logits, const int32_t* __restrict__ targets,
                        float* __restrict__ losses, T* dlogits, int Vreal, int Vp, int ignore_index,
                        float dloss) {
  extern __shared__ float4 smem4[];
  T* row_sh = reinterpret_cast<T*>(smem4);
  static_assert(kThreads == 32 * 32, "block_merge_lse: one warp combines the 32 warps' pairs");
  __shared__ float red_m[33], red_s[33];
  __shared__ float sh_target;
  const int64_t row = blockIdx.x;
  const T* x = logits + row * Vp;
  T* dx = dlogits ? dlogits + row * Vp : nullptr;
  const int target = targets[row];
  if (target == ignore_index) {  // loss 0, gradient exactly zero (no softmax of this row)
    if (threadIdx.x == 0) losses[row] = 0.f;
    if (dx) {
      Chunk<T, V> zero;
#pragma unroll
      for (int j = 0; j < V; ++j) zero.v[j] = dev::from_f<T>(0.f);
      for (int c = threadIdx.x * V; c < Vp; c += kThreads * V)
        *reinterpret_cast<Chunk<T, V>*>(dx + c) = zero;
    }
    return;
  }
  constexpr int kStride = kThreads * V;
  const T* src = kSmem ? row_sh : x;  // what pass C reads

  // Pass A: online max and sum of exp(x - max) over the real columns; copy the row to shared
  // memory. The sum is rescaled once per group of kUnroll loads that raises the max.
  float mx = -INFINITY, sum = 0.f;
  for (int c0 = threadIdx.x * V; c0 < Vp; c0 += kUnroll * kStride) {
    Chunk<T, V> ch[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kStride;
      if (c < Vp) ch[u] = load_chunk<T, V>(x + c);
    }
    float gm = -INFINITY;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kStride;
      if (c >= Vp) break;
      if constexpr (kSmem) *reinterpret_cast<Chunk<T, V>*>(row_sh + c) = ch[u];
#pragma unroll
      for (int j = 0; j < V; ++j)
        if (c + j < Vreal) gm = fmaxf(gm, ch[u].f(j));
    }
    if (gm == -INFINITY) continue;  // only padding columns in this group
    if (gm > mx) {
      sum *= exp2f((mx - gm) * kLog2e);  // 0 while mx is -inf (sum is 0 then)
      mx = gm;
    }
    const float mx2 = mx * kLog2e;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kStride;
      if (c >= Vp) break;
#pragma unroll
      for (int j = 0; j < V; ++j)
        if (c + j < Vreal) sum += exp2f(fmaf(ch[u].f(j), kLog2e, -mx2));
    }
  }
  if (threadIdx.x == 0) sh_target = dev::to_f(x[target]);
  block_merge_lse(mx, sum, red_m, red_s);  // its barriers also publish row_sh and sh_target
  const float lse = mx + logf(sum);
  if (threadIdx.x == 0) losses[row] = lse - sh_target;
  if (!dx) return;

  // Pass C: dlogits = (softmax - onehot) * dloss; padding columns get 0.
  const float lse2 = lse * kLog2e;
  for (int c = threadIdx.x * V; c < Vp; c += kStride) {
    const Chunk<T, V> ch = load_chunk<T, V>(src + c);
    Chunk<T, V> out;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int cj = c + j;
      const float p = cj < Vreal ? exp2f(fmaf(ch.f(j), kLog2e, -lse2)) : 0.f;
      out.v[j] = dev::from_f<T>((p - (cj == target ? 1.f : 0.f)) * dloss);
    }
    *reinterpret_cast<Chunk<T, V>*>(dx + c) = out;
  }
}

// The fused forward + backward for rows that fit twice in shared memory (bf16 GPT-2: 2 x 100 KB,
// one block per SM), sm_80+. A persistent grid: block b takes rows b, b + gridDim.x, ...; thread t
// copies its own 16-byte chunks (t, t + kThreads, ...) of the block's next row into the other
// buffer with cp.async as soon as this row's chunks have landed, so the read of a row overlaps the
// exp, the writes and the barriers of the previous one (the one-row kernel reads, then works, then
// writes, with 2 blocks per SM at most). A thread reads back only the chunks it copied, so program
// order orders the buffer's reuse; the target's logit goes through sh_target[buf] (written by the
// chunk's owner in pass A, read by thread 0 after the lse barriers; two slots, as the owner may be
// one row ahead, and never two: every row, ignored ones too, has a barrier). Pass A reads the
// thread's chunks once (an online max and sum), pass C once more, both from shared memory; exp2 is
// the flush-to-zero MUFU op and the dloss scale is folded into its argument. Same results as the
// one-row kernel up to the order and the rescaling of the per-thread sums and the rounding of the
// exp. Measured on the H200 (bench_crossentropy, GPT-2 124M shape, 65536 x 50304 bf16, same run):
// 4.26 ms (3.10 TB/s of logits read and dlogits written) against 5.83 ms for the previous version
// (two reads in pass A, exp2f, the column and target checks on every element); Nsight Compute had
// the previous one issue-bound (75% of the issue slots busy, DRAM 52% of peak).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    crossentropy_stream_kernel(const T* logits, const int32_t* __restrict__ targets,
                               float* __restrict__ losses, T* dlogits, int64_t N, int Vreal, int Vp,
                               int ignore_index, float dloss) {
  constexpr int V = dev::Pack<T>::N, kStride = kThreads * V;
  extern __shared__ float4 smem4[];
  T* rows_sh = reinterpret_cast<T*>(smem4);  // [2][Vp]
  __shared__ float red_m[33], red_s[33], sh_target[2];
  auto prefetch = [&](int64_t row, int buf) {
    const T* x = logits + row * Vp;
    T* dst = rows_sh + buf * Vp;
    for (int c = threadIdx.x * V; c < Vp; c += kStride) dev::cp_async16(dst + c, x + c, true);
    dev::cp_async_commit();
  };
  auto chunk = [](const T* p) {  // 16 bytes from shared memory
    dev::Pack<T> r;
    *reinterpret_cast<int4*>(&r) = *reinterpret_cast<const int4*>(p);
    return r;
  };
  int buf = 0;
  if (blockIdx.x < N) prefetch(blockIdx.x, 0);
  for (int64_t row = blockIdx.x; row < N; row += gridDim.x, buf ^= 1) {
    dev::cp_async_wait_all();  // this thread's chunks of `row` (the only group in flight)
    if (row + gridDim.x < N) prefetch(row + gridDim.x, buf ^ 1);
    const T* xs = rows_sh + int64_t(buf) * Vp;
    T* dx = dlogits + row * Vp;
    const int target = targets[row];
    if (target == ignore_index) {  // loss 0, gradient exactly zero (uniform in the block)
      if (threadIdx.x == 0) losses[row] = 0.f;
      dev::Pack<T> zero;
#pragma unroll
      for (int j = 0; j < V; ++j) zero.set(j, 0.f);
      for (int c = threadIdx.x * V; c < Vp; c += kStride) dev::store_pack(dx + c, zero);
      // A barrier here too: without one, a thread could run through this row into the next and
      // rewrite sh_target[buf] of the row before, which thread 0 reads after that row's barriers.
      __syncthreads();
      continue;
    }
    // Pass A in one read of the thread's chunks: max and sum of exp(x - max) online, the sum
    // rescaled when a chunk raises the max; the column checks only on chunks that reach the
    // padding. The target's logit is read by the thread that copied its chunk.
    float mx = -INFINITY, sum = 0.f;
    for (int c = threadIdx.x * V; c < Vp; c += kStride) {
      const auto ch = chunk(xs + c);
      const bool full = c + V <= Vreal;
      float cm = -INFINITY;
      if (full) {
        cm = pack_max<T>(ch);
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j)
          if (c + j < Vreal) cm = fmaxf(cm, ch.f(j));
      }
      if (cm > mx) {
        sum *= ex2_ftz((mx - cm) * kLog2e);  // 0 while mx is -inf (sum is 0 then)
        mx = cm;
      }
      if (mx == -INFINITY) continue;  // nothing but padding (or -inf logits) so far
      const float mx2 = mx * kLog2e;
#pragma unroll
      for (int j = 0; j < V; ++j)
        if (full || c + j < Vreal) sum += ex2_ftz(fmaf(ch.f(j), kLog2e, -mx2));
    }
    if (int(threadIdx.x) == (target / V) % kThreads) sh_target[buf] = dev::to_f(xs[target]);
    block_merge_lse(mx, sum, red_m, red_s);  // its barriers also publish sh_target[buf]
    const float lse = mx + logf(sum);
    if (threadIdx.x == 0) losses[row] = lse - sh_target[buf];
    // Pass C: dlogits = (softmax - onehot) * dloss; padding columns get 0.
    const float lse2 = lse * kLog2e;
    const int target_chunk = target - target % V;
    // p dloss = 2^(x log2 e - lse log2 e + log2 dloss): one FFMA and one MUFU op per column off
    // the target's chunk and the padding (dloss > 0; else the plain product).
    const bool fold = dloss > 0.f;
    const float off = fold ? log2f(dloss) - lse2 : 0.f;
    for (int c = threadIdx.x * V; c < Vp; c += kStride) {
      const auto ch = chunk(xs + c);
      dev::Pack<T> out;
      if (fold && c + V <= Vreal && c != target_chunk) {  // no column checks
#pragma unroll
        for (int j = 0; j < V; ++j) out.set(j, ex2_ftz(fmaf(ch.f(j), kLog2e, off)));
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const int cj = c + j;
          const float p = cj < Vreal ? exp2f(fmaf(ch.f(j), kLog2e, -lse2)) : 0.f;
          out.set(j, (p - (cj == target ? 1.f : 0.f)) * dloss);
        }
      }
      dev::store_pack(dx + c, out);
    }
  }
}

// The streaming kernel where the device (sm_80+) and shared memory (two rows) allow; false if not.
template <typename T>
bool launch_stream(const CrossEntropyParams<T>& p, T* dlogits, size_t row_bytes, int optin,
                   int dev_id, cudaStream_t st) {
  int major = 0, sms = 0, per_sm = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev_id));
  const size_t smem = 2 * row_bytes;
  if (major < 8 || smem + 512 > size_t(optin)) return false;  // 512: the static reductions
  auto kernel = crossentropy_stream_kernel<T>;
  if (smem > 48 * 1024) {
    CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  }
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev_id));
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
  const int64_t grid = std::min<int64_t>(p.N, int64_t(std::max(per_sm, 1)) * sms);
  kernel<<<unsigned(grid), kThreads, smem, st>>>(p.logits, p.targets, p.losses, dlogits, p.N, p.V,
                                                 p.Vp, p.ignore_index, p.dloss);
  CUDA_CHECK_LAUNCH();
  return true;
}

template <typename T, int V, bool kSmem>
void launch_kernel(const CrossEntropyParams<T>& p, T* dlogits, size_t smem, cudaStream_t st) {
  auto kernel = crossentropy_kernel<T, V, kSmem>;
  if (smem > 48 * 1024) {
    CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  }
  kernel<<<unsigned(p.N), kThreads, smem, st>>>(p.logits, p.targets, p.losses, dlogits, p.V, p.Vp,
                                                p.ignore_index, p.dloss);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_ce(const CrossEntropyParams<T>& p, T* dlogits, Stream s) {
  if (p.N == 0) return;
  ATTN_ASSERT(p.N < (int64_t(1) << 31) && p.V > 0 && p.V <= p.Vp);
  auto st = reinterpret_cast<cudaStream_t>(s);
  constexpr int N = dev::Pack<T>::N;
  const bool vec =
      p.Vp % N == 0 && aligned16(p.logits) && (dlogits == nullptr || aligned16(dlogits));
  if (!vec) return launch_kernel<T, 1, false>(p, dlogits, 0, st);
  int optin = 0, dev_id = 0;
  CUDA_CHECK(cudaGetDevice(&dev_id));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev_id));
  const size_t row_bytes = size_t(p.Vp) * sizeof(T);
  // The forward alone reads the row once and needs no copy. Static shared memory of the kernel
  // (reductions) comes on top of the dynamic row.
  if (dlogits && launch_stream(p, dlogits, row_bytes, optin, dev_id, st)) return;
  if (dlogits && row_bytes + 512 <= size_t(optin))
    return launch_kernel<T, N, true>(p, dlogits, row_bytes, st);
  launch_kernel<T, N, false>(p, dlogits, 0, st);
}

constexpr int kSumThreads = 1024;
constexpr int kSumUnroll = 8;

__global__ void __launch_bounds__(kSumThreads)
    loss_sum_kernel(const float* __restrict__ losses, const int32_t* __restrict__ targets,
                    int64_t N, int ignore_index, double* totals) {
  __shared__ double sh_sum[kSumThreads / 32], sh_cnt[kSumThreads / 32];
  // Thread t adds rows t, t + kSumThreads, ... in increasing order; kSumUnroll rows' loads are
  // issued before they are added (one block: latency, not bandwidth, is the cost).
  double sum = 0.0, cnt = 0.0;
  for (int64_t base = threadIdx.x; base < N; base += int64_t(kSumUnroll) * kSumThreads) {
    float l[kSumUnroll];
    int32_t t[kSumUnroll];
#pragma unroll
    for (int u = 0; u < kSumUnroll; ++u) {
      const int64_t i = base + int64_t(u) * kSumThreads;
      t[u] = i < N ? targets[i] : ignore_index;
      l[u] = i < N ? losses[i] : 0.f;
    }
#pragma unroll
    for (int u = 0; u < kSumUnroll; ++u) {
      if (t[u] != ignore_index) {
        sum += double(l[u]);
        cnt += 1.0;
      }
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    sum += __shfl_xor_sync(0xffffffffu, sum, o);
    cnt += __shfl_xor_sync(0xffffffffu, cnt, o);
  }
  if (threadIdx.x % 32 == 0) sh_sum[threadIdx.x / 32] = sum, sh_cnt[threadIdx.x / 32] = cnt;
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = 0.0, c = 0.0;
    for (int w = 0; w < kSumThreads / 32; ++w) s += sh_sum[w], c += sh_cnt[w];
    totals[0] += s;
    totals[1] += c;
  }
}

}  // namespace

void launch_crossentropy_loss_sum(const float* losses, const int32_t* targets, int64_t N,
                                  int ignore_index, double* totals, Stream s) {
  if (N == 0) return;
  loss_sum_kernel<<<1, kSumThreads, 0, reinterpret_cast<cudaStream_t>(s)>>>(losses, targets, N,
                                                                            ignore_index, totals);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_crossentropy_fwd(const CrossEntropyParams<T>& p, Stream s) {
  launch_ce<T>(p, nullptr, s);
}
template <typename T>
void launch_crossentropy_fwd_bwd(const CrossEntropyParams<T>& p, Stream s) {
  launch_ce<T>(p, p.dlogits, s);
}

template void launch_crossentropy_fwd<float>(const CrossEntropyParams<float>&, Stream);
template void launch_crossentropy_fwd<bf16>(const CrossEntropyParams<bf16>&, Stream);
template void launch_crossentropy_fwd_bwd<float>(const CrossEntropyParams<float>&, Stream);
template void launch_crossentropy_fwd_bwd<bf16>(const CrossEntropyParams<bf16>&, Stream);

}  // namespace attnlab
