// Persistent launches that may start beside the stream's previous kernel (programmatic dependent
// launch): the kernel must run griddepcontrol.wait before it reads that kernel's output, and the
// previous kernel lets it start with griddepcontrol.launch_dependents. Used by the hard-routed
// Focus forward's fused launches (focus_hard_fused.cu, focus_hard_ws.cu), the dependents of the
// index build.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "core/cuda_check.h"

namespace attnlab {

// The current device's SM count (a persistent grid's size).
inline int current_sm_count() {
  int dev = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}

// kernel<<<blocks, threads, smem, st>>>(args...) as the programmatic dependent of the stream's
// previous kernel.
template <typename... Params, typename... Args>
void launch_programmatic_dependent(void (*kernel)(Params...), unsigned blocks, unsigned threads,
                                   size_t smem, cudaStream_t st, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = st;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace attnlab
