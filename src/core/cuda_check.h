// Checked CUDA / cuBLAS calls: a failure names the call, file:line and the device.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

namespace attnlab {
[[noreturn]] void cuda_fail(cudaError_t err, const char* call, const char* file, int line);
[[noreturn]] void cublas_fail(cublasStatus_t st, const char* call, const char* file, int line);
// The CUDA devices this process sees (0, no throw, on machines without a driver/GPU).
int cuda_device_count();
// True when at least one CUDA device is usable (no throw on machines without a driver/GPU).
bool cuda_available();
}  // namespace attnlab

#define CUDA_CHECK(call)                                                            \
  do {                                                                              \
    cudaError_t err_ = (call);                                                      \
    if (err_ != cudaSuccess) ::attnlab::cuda_fail(err_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: checks the launch itself (not its completion).
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#define CUBLAS_CHECK(call)                                                                    \
  do {                                                                                        \
    cublasStatus_t st_ = (call);                                                              \
    if (st_ != CUBLAS_STATUS_SUCCESS) ::attnlab::cublas_fail(st_, #call, __FILE__, __LINE__); \
  } while (0)
