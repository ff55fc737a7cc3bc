#include "core/context.h"

#include "core/cuda_check.h"
#include "core/error.h"

namespace attnlab {

ExecContext::~ExecContext() {
  if (device != Device::cuda) return;
  if (cublaslt) cublasLtDestroy(reinterpret_cast<cublasLtHandle_t>(cublaslt));
  if (workspace) cudaFree(workspace);
  if (stream) cudaStreamDestroy(reinterpret_cast<cudaStream_t>(stream));
}

std::unique_ptr<ExecContext> ExecContext::make_cpu() {
  auto ctx = std::make_unique<ExecContext>();
  ctx->device = Device::cpu;
  return ctx;
}

std::unique_ptr<ExecContext> ExecContext::make_cuda(int device_index) {
  ATTN_REQUIRE(cuda_available(),
               "CUDA was asked for (train.device: cuda, or --device cuda) but no CUDA device is "
               "available");
  int n = 0;
  CUDA_CHECK(cudaGetDeviceCount(&n));
  ATTN_REQUIRE(device_index >= 0 && device_index < n, "CUDA device %d requested, %d present",
               device_index, n);
  auto ctx = std::make_unique<ExecContext>();
  ctx->device = Device::cuda;
  ctx->device_index = device_index;
  CUDA_CHECK(cudaSetDevice(device_index));
  // A blocking stream: it synchronises with the legacy default stream, so plain cudaMemcpy /
  // cudaMemset (copy_tensor, Buffer::zero) are ordered with the kernels launched on it.
  // A communication stream must not rely on that: the nccl communicator's stream is created
  // non-blocking (a legacy-stream copy neither waits for an in-flight all-reduce nor blocks it,
  // which would serialise the overlap) and is ordered with this one by events only: each
  // collective waits for an event recorded here, and Communicator::wait() makes this stream
  // wait for the collectives (dist/nccl_communicator.cpp). Legacy-stream copies issued after
  // wait() are then ordered after the collectives through this stream.
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreate(&s));
  ctx->stream = s;
  cublasLtHandle_t h;
  CUBLAS_CHECK(cublasLtCreate(&h));
  ctx->cublaslt = h;
  ctx->workspace_bytes = size_t(32) << 20;
  CUDA_CHECK(cudaMalloc(&ctx->workspace, ctx->workspace_bytes));
  return ctx;
}

void ExecContext::synchronize() const {
  if (device == Device::cuda)
    CUDA_CHECK(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream)));
}

}  // namespace attnlab
