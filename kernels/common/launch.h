// Shared by every kernel header: the stream type without pulling CUDA headers into host code.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

struct CUstream_st;
namespace attnlab {
using bf16 = __nv_bfloat16;
using Stream = CUstream_st*;  // cudaStream_t
}  // namespace attnlab
