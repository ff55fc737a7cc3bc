// ExecContext: where ops run. CPU: OpenMP threads. CUDA: one device, one stream, a cuBLASLt
// handle and its workspace. Every op takes the context first and checks its tensors live there.
#pragma once
#include <cstdint>
#include <memory>

#include "core/dtype.h"

struct CUstream_st;
struct cublasLtContext;

namespace attnlab {

// Counts of the products the matmul backward ran (tests prove that frozen weights skip their
// weight-gradient products); attached to a context by the caller, nullptr = not counted.
struct MatmulCounts {
  int64_t weight_grad = 0;  // dW (and/or dbias) computed
  int64_t data_grad = 0;    // dX computed
};

struct ExecContext {
  Device device = Device::cpu;
  int device_index = 0;
  CUstream_st* stream = nullptr;        // cudaStream_t
  cublasLtContext* cublaslt = nullptr;  // cublasLtHandle_t
  void* workspace = nullptr;            // cuBLASLt workspace (device memory)
  size_t workspace_bytes = 0;
  // Ops with a faster nondeterministic CUDA variant (today: the attention backward's fp32-atomic
  // dQ, Focus's dq and dg) use their bitwise-reproducible variant when set (Focus: only its Hopper
  // wgmma backward has one; its other kernels warn). The CPU path is always deterministic. The
  // trainer sets it from train.deterministic.
  bool deterministic = false;
  MatmulCounts* matmul_counts = nullptr;

  ExecContext() = default;
  ~ExecContext();
  ExecContext(const ExecContext&) = delete;
  ExecContext& operator=(const ExecContext&) = delete;

  static std::unique_ptr<ExecContext> make_cpu();
  static std::unique_ptr<ExecContext> make_cuda(int device_index);
  void synchronize() const;  // no-op on CPU
};

}  // namespace attnlab
