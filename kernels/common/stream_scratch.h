// Stream-ordered scratch device memory for launchers and host ops (plain host code: included by
// kernels/common/device.cuh and by src/ops/*.cpp).
#pragma once
#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/cuda_check.h"
#include "kernels/common/launch.h"

namespace attnlab {

// Makes the current device's default memory pool keep memory freed with cudaFreeAsync instead of
// returning it to the driver at every synchronisation (the default release threshold is 0), so a
// StreamScratch of the same size in the next step reuses the pages rather than mapping them again
// (the attention backward's delta and dQ scratch is 268 MB at 32K tokens, D = 128). The effect was
// not measured in isolation. Once per device per process.
inline void retain_default_pool_memory() {
  constexpr int kMaxDevices = 64;
  static std::atomic<bool> done[kMaxDevices];
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= kMaxDevices || done[dev].exchange(true)) return;
  cudaMemPool_t pool;
  CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, dev));
  uint64_t threshold = UINT64_MAX;
  CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
}

// For tests: while set, every StreamScratch is filled with 0xFF bytes when allocated (NaN as fp32
// and bf16, -1 as int32), so a kernel that reads scratch no kernel of its call wrote gets NaN
// instead of what an earlier call left in the reused pool memory. Off by default (a memset per
// scratch); tests/cuda/cuda_test_util.h's PoisonScratch sets it for a scope.
inline std::atomic<bool>& stream_scratch_poison() {
  static std::atomic<bool> on{false};
  return on;
}

// Scratch device memory ordered on a stream (no host synchronisation): freed on the stream after
// the kernels that use it, so a launcher can use temporaries and stay asynchronous. The pool keeps
// the memory between uses (retain_default_pool_memory).
class StreamScratch {
 public:
  StreamScratch(size_t bytes, Stream s) : stream_(s) {
    if (!bytes) return;
    retain_default_pool_memory();
    const auto st = reinterpret_cast<cudaStream_t>(s);
    CUDA_CHECK(cudaMallocAsync(&ptr_, bytes, st));
    if (stream_scratch_poison().load(std::memory_order_relaxed))
      CUDA_CHECK(cudaMemsetAsync(ptr_, 0xFF, bytes, st));
  }
  ~StreamScratch() {
    if (ptr_) cudaFreeAsync(ptr_, reinterpret_cast<cudaStream_t>(stream_));
  }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  template <typename U>
  U* as() const {
    return static_cast<U*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  Stream stream_;
};

}  // namespace attnlab
