// Small device queries shared by the host code (kept in a .cu so the kernels library is never
// empty).
#include <cuda_runtime.h>

namespace attnlab {

// Number of streaming multiprocessors of the current device (0 when no device).
int cuda_sm_count() {
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return 0;
  return n;
}

}  // namespace attnlab
