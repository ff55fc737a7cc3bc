#include "core/cuda_check.h"

#include "core/error.h"
#include "core/out_of_memory.h"

namespace attnlab {

void cuda_fail(cudaError_t err, const char* call, const char* file, int line) {
  int dev = -1;
  cudaGetDevice(&dev);
  if (err == cudaErrorMemoryAllocation)
    ATTN_FAIL("out of GPU memory in %s at %s:%d on device %d%s", call, file, line, dev,
              gpu_out_of_memory_detail().c_str());
  ATTN_FAIL("CUDA error %s (%s) in %s at %s:%d on device %d", cudaGetErrorName(err),
            cudaGetErrorString(err), call, file, line, dev);
}

void cublas_fail(cublasStatus_t st, const char* call, const char* file, int line) {
  int dev = -1;
  cudaGetDevice(&dev);
  ATTN_FAIL("cuBLAS error %d in %s at %s:%d on device %d", int(st), call, file, line, dev);
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

bool cuda_available() { return cuda_device_count() > 0; }

}  // namespace attnlab
