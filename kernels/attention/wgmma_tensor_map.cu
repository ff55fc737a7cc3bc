// Host side of the wgmma attention kernels' TMA loads: tile_map (declared and described in
// wgmma_common.cuh), the tensor map of a bf16 [B][T][width] matrix in the kernels' 128-byte
// swizzled tile layout. Host code only: compiled with the other kernels for every architecture.
#include <cudaTypedefs.h>

#include "kernels/attention/wgmma_common.cuh"

namespace attnlab {
namespace wgmma {

// cuTensorMapEncodeTiled from the driver, found once through the runtime (no libcuda link).
static PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000,
                                                cudaEnableDefault, &found));
    ATTN_REQUIRE(found == cudaDriverEntryPointSuccess && f != nullptr,
                 "wgmma attention: the driver has no cuTensorMapEncodeTiled (needs a "
                 "CUDA 12 driver or newer)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// Declared and described in wgmma_common.cuh.
CUtensorMap tile_map(const void* base, int width, int T, int B, int64_t row_stride,
                     int64_t batch_stride, int rows) {
  // B == 1: the batch stride is unused; TMA wants one below 2^40 bytes all the same.
  const int64_t map_batch_stride = B == 1 ? int64_t(T) * row_stride : batch_stride;
  CUtensorMap map;
  const cuuint64_t dims[3] = {cuuint64_t(width), cuuint64_t(T), cuuint64_t(B)};
  const cuuint64_t strides[2] = {cuuint64_t(row_stride) * 2, cuuint64_t(map_batch_stride) * 2};
  const cuuint32_t box[3] = {64, cuuint32_t(rows), 1}, elem_strides[3] = {1, 1, 1};
  const CUresult r = tensor_map_encoder()(
      &map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(base), dims, strides, box,
      elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  ATTN_REQUIRE(r == CUDA_SUCCESS,
               "wgmma attention: cuTensorMapEncodeTiled failed (error %d; width %d, T %d, "
               "B %d, row stride %lld, batch stride %lld)",
               int(r), width, T, B, (long long)row_stride, (long long)batch_stride);
  return map;
}

}  // namespace wgmma
}  // namespace attnlab
