// A second stream for work that may run beside the caller's stream inside one op, forked and
// joined by events (no host synchronisation; legal under stream capture, where it becomes a fork
// and a join of the graph). Plain host code.
#pragma once
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "core/error.h"
#include "kernels/common/launch.h"

namespace attnlab {

// SideStream side(main): what is queued on side.get() from now on runs after what main holds so
// far, and may run beside what is queued on main after it; side.join() makes main's later work
// wait for everything queued on the side stream. One non-blocking stream and two events per host
// thread and device, created on first use and kept for the process (a host thread's ops run one
// after another, so its calls never share them at once).
class SideStream {
 public:
  explicit SideStream(Stream main) : main_(reinterpret_cast<cudaStream_t>(main)) {
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    ATTN_REQUIRE(dev >= 0 && dev < kMaxDevices, "SideStream: device %d beyond %d", dev,
                 kMaxDevices);
    thread_local Slot slots[kMaxDevices];
    slot_ = &slots[dev];
    if (slot_->stream == nullptr) {
      CUDA_CHECK(cudaStreamCreateWithFlags(&slot_->stream, cudaStreamNonBlocking));
      CUDA_CHECK(cudaEventCreateWithFlags(&slot_->fork, cudaEventDisableTiming));
      CUDA_CHECK(cudaEventCreateWithFlags(&slot_->join, cudaEventDisableTiming));
    }
    CUDA_CHECK(cudaEventRecord(slot_->fork, main_));
    CUDA_CHECK(cudaStreamWaitEvent(slot_->stream, slot_->fork, 0));
  }
  SideStream(const SideStream&) = delete;
  SideStream& operator=(const SideStream&) = delete;
  Stream get() const { return reinterpret_cast<Stream>(slot_->stream); }
  void join() const {
    CUDA_CHECK(cudaEventRecord(slot_->join, slot_->stream));
    CUDA_CHECK(cudaStreamWaitEvent(main_, slot_->join, 0));
  }

 private:
  static constexpr int kMaxDevices = 64;
  struct Slot {
    cudaStream_t stream = nullptr;
    cudaEvent_t fork = nullptr, join = nullptr;
  };
  cudaStream_t main_;
  Slot* slot_ = nullptr;
};

}  // namespace attnlab
