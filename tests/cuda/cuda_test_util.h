// Helpers for the CUDA-vs-CPU-reference tests (tests/cuda/). Header-only.
//   CUDA_TEST_PREAMBLE()  skips the test when no CUDA device is usable
//   DeviceArray<T>        device memory holding T, filled from / read back as float vectors
//   to_precision<T>(v)    v rounded to T (identity for float; bf16 round-to-nearest-even)
//   report()              prints a measured error so device logs carry the numbers
//   PoisonScratch         for a scope, NaN in every launcher scratch (unwritten reads show)
// Tolerances used by these tests (max |cuda - ref| / max |ref|, ref = CPU reference run on the
// inputs rounded to T): fp32 ~1e-5 (rounding order only); bf16 1e-2 for values rounded once into
// bf16 (half-ulp of bf16 is 2^-9 = 2e-3 relative; measured errors are 1e-3 to 5.5e-3, so the
// bound is about 2x the observed error).
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/context.h"
#include "core/cuda_check.h"
#include "core/tensor.h"
#include "kernels/common/stream_scratch.h"
#include "test_util.h"

#define CUDA_TEST_PREAMBLE()                                            \
  do {                                                                  \
    if (!::attnlab::cuda_available()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

namespace attnlab::test {

inline float round_to_bf16(float x) { return __bfloat162float(__float2bfloat16(x)); }

template <typename T>
std::vector<float> to_precision(std::vector<float> v) {
  if constexpr (std::is_same_v<T, bf16>) {
    for (auto& x : v) x = round_to_bf16(x);
  }
  return v;
}

template <typename T>
constexpr const char* type_name() {
  return std::is_same_v<T, bf16> ? "bf16" : "f32";
}

template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : buf_(Device::cuda, std::max<size_t>(n, 1) * sizeof(T)), n_(n) {}
  explicit DeviceArray(const std::vector<float>& v) : DeviceArray(v.size()) { upload(v); }
  T* ptr() const { return static_cast<T*>(buf_.data()); }
  size_t size() const { return n_; }
  void upload(const std::vector<float>& v) {
    ATTN_ASSERT(v.size() == n_);
    std::vector<T> h(n_);
    for (size_t i = 0; i < n_; ++i) h[i] = T(v[i]);
    CUDA_CHECK(cudaMemcpy(ptr(), h.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<float> download() const {
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> h(n_);
    CUDA_CHECK(cudaMemcpy(h.data(), ptr(), n_ * sizeof(T), cudaMemcpyDeviceToHost));
    std::vector<float> r(n_);
    for (size_t i = 0; i < n_; ++i) r[i] = float(h[i]);
    return r;
  }
  std::vector<T> raw() const {
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> h(n_);
    CUDA_CHECK(cudaMemcpy(h.data(), ptr(), n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  // NaN in both f32 and bf16: an output the kernel fails to write shows up as NaN.
  void poison() { CUDA_CHECK(cudaMemset(ptr(), 0xff, n_ * sizeof(T))); }

 private:
  Buffer buf_;
  size_t n_;
};

class DeviceInts {
 public:
  explicit DeviceInts(const std::vector<int32_t>& v)
      : buf_(Device::cuda, std::max<size_t>(v.size(), 1) * 4) {
    CUDA_CHECK(cudaMemcpy(buf_.data(), v.data(), v.size() * 4, cudaMemcpyHostToDevice));
  }
  int32_t* ptr() const { return static_cast<int32_t*>(buf_.data()); }

 private:
  Buffer buf_;
};

// Tensor views of device arrays (f32 / bf16 by the element type; i32 for DeviceInts).
template <typename T>
Tensor dev_tensor(const DeviceArray<T>& a, Shape s) {
  return Tensor(a.ptr(), std::is_same_v<T, bf16> ? DType::bf16 : DType::f32, Device::cuda, s);
}
inline Tensor dev_ints(const DeviceInts& a, Shape s) {
  return Tensor(a.ptr(), DType::i32, Device::cuda, s);
}

// For a scope: every StreamScratch a kernel launcher allocates is filled with NaN first
// (stream_scratch_poison), so a read of scratch that no kernel of the call wrote fails the test
// instead of seeing an earlier call's values.
class PoisonScratch {
 public:
  PoisonScratch() { stream_scratch_poison().store(true); }
  ~PoisonScratch() { stream_scratch_poison().store(false); }
  PoisonScratch(const PoisonScratch&) = delete;
  PoisonScratch& operator=(const PoisonScratch&) = delete;
};

inline double report(const char* what, double err) {
  std::printf("[cuda-err] %-48s %.3e\n", what, err);
  return err;
}

template <typename T>
bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// The tolerance of a CUDA output against the CPU reference (run on the inputs rounded to T),
// taken from a same-precision reference rather than tuned per tensor: twice the error of the
// reference's own output rounded once to T (what an exact kernel that stores T would give), and
// at least kFp32Tolerance (fp32 rounding order; the rounding error is 0 for T = float).
constexpr double kFp32Tolerance = 1e-5;

template <typename T>
double same_precision_tolerance(const std::vector<float>& ref) {
  return std::max(kFp32Tolerance, 2 * max_rel_error(to_precision<T>(ref), ref));
}

}  // namespace attnlab::test
