// Device-side helpers shared by the .cu files (never included from host-only code):
// float <-> T conversion, 16-byte packs, cp.async, warp reductions (and, from
// kernels/common/stream_scratch.h, stream-ordered scratch memory).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/cuda_check.h"
#include "core/error.h"
#include "kernels/common/causal_grid.h"
#include "kernels/common/launch.h"
#include "kernels/common/stream_scratch.h"

// sm_80 features (cp.async, ldmatrix, bf16 mma): ATTN_HAVE_SM80 is 1 where the code being
// compiled may use them (host pass included); ATTN_SM80_OR_TRAP() traps in device code compiled
// for an older target.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define ATTN_SM80_OR_TRAP() __trap()
#else
#define ATTN_SM80_OR_TRAP()
#endif
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define ATTN_HAVE_SM80 1
#else
#define ATTN_HAVE_SM80 0
#endif

namespace attnlab::dev {

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(bf16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T from_f(float x);
template <>
__device__ __forceinline__ float from_f<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ bf16 from_f<bf16>(float x) {
  return __float2bfloat16(x);
}

// 16 bytes of T: 4 floats or 8 bf16, loaded and stored as one int4.
template <typename T>
struct alignas(16) Pack {
  static constexpr int N = 16 / sizeof(T);
  T v[N];
  __device__ __forceinline__ float f(int i) const { return to_f(v[i]); }
  __device__ __forceinline__ void set(int i, float x) { v[i] = from_f<T>(x); }
};
template <typename T>
__device__ __forceinline__ Pack<T> load_pack(const T* p) {
  Pack<T> r;
  *reinterpret_cast<int4*>(&r) = *reinterpret_cast<const int4*>(p);
  return r;
}
template <typename T>
__device__ __forceinline__ void store_pack(T* p, const Pack<T>& r) {
  *reinterpret_cast<int4*>(p) = *reinterpret_cast<const int4*>(&r);
}

// ---- cp.async (sm_80+) ------------------------------------------------------------------------
// A build for an older target (CMake's CMAKE_CUDA_ARCHITECTURES may name e.g. 75) still compiles:
// the wrappers trap there (ATTN_SM80_OR_TRAP), and launchers check the device before they use
// kernels that need sm_80 (a clear error, or a fallback kernel).
// 16 bytes global -> shared, asynchronous; valid = false zero-fills them.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int n = valid ? 16 : 0;  // 0: zero-fill the 16 bytes
#if ATTN_HAVE_SM80
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n)
               : "memory");
#else
  (void)s, (void)gmem, (void)n;
  ATTN_SM80_OR_TRAP();
#endif
}
// 4-byte variant (for per-row floats, whose rows need not be 16-byte aligned).
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int n = valid ? 4 : 0;
#if ATTN_HAVE_SM80
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem), "r"(n)
               : "memory");
#else
  (void)s, (void)gmem, (void)n;
  ATTN_SM80_OR_TRAP();
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if ATTN_HAVE_SM80
  asm volatile("cp.async.commit_group;\n");
#endif
}
__device__ __forceinline__ void cp_async_wait_all() {
#if ATTN_HAVE_SM80
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
#endif
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

}  // namespace attnlab::dev

namespace attnlab {

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

inline int div_up(int64_t a, int64_t b) { return int((a + b - 1) / b); }

// f() once per device (the caller's static `done`, a bit per device; devices >= 64 run it every
// time): for per-kernel attributes (cudaFuncSetAttribute), whose host calls per launch cost
// microseconds that short calls feel.
template <typename F>
void once_per_device(std::atomic<uint64_t>& done, F&& f) {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  const uint64_t bit = dev < 64 ? uint64_t(1) << dev : 0;
  if (bit != 0 && (done.load(std::memory_order_acquire) & bit) != 0) return;
  f();
  done.fetch_or(bit, std::memory_order_release);
}

// A kernel's dynamic shared-memory limit raised to `smem` bytes, with the largest shared-memory
// carveout, once per device (`done`: the caller's static per kernel, as for once_per_device).
inline void set_max_shared_once(std::atomic<uint64_t>& done, const void* kernel, size_t smem) {
  once_per_device(done, [&] {
    CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                    int(cudaSharedmemCarveoutMaxShared)));
  });
}

}  // namespace attnlab
