// Linear layer through cuBLASLt. Row-major y[N,out] = x[N,in] w[out,in]^T is, in cuBLAS's
// column-major terms, Y(out x N) = W(in x out)^T X(in x N); the transposes below follow from that.
// bf16: bf16 operands, fp32 accumulation (CUBLAS_COMPUTE_32F). fp32: plain fp32 (no TF32), so the
// CUDA path matches the CPU reference to fp32 rounding. Bias goes through the BIAS epilogue.
// dbias += column sums of dy: a deterministic two-stage reduction kernel (the BGRADB epilogue
// overwrites instead of accumulating, and would tie dbias to the dw product).
#include <cublasLt.h>

#include "kernels/common/device.cuh"
#include "kernels/matmul/matmul.cuh"

namespace attnlab {
namespace {

template <typename T>
constexpr cudaDataType_t cuda_type();
template <>
constexpr cudaDataType_t cuda_type<float>() {
  return CUDA_R_32F;
}
template <>
constexpr cudaDataType_t cuda_type<bf16>() {
  return CUDA_R_16BF;
}

// D(m x n, ld m) = alpha op(A) op(B) + beta D (+ bias[m] when bias != nullptr); column-major.
template <typename T>
void lt_matmul(const MatmulParams<T>& p, bool trans_a, bool trans_b, int64_t m, int64_t n,
               int64_t k, const T* A, int64_t lda, const T* B, int64_t ldb, T* D, int64_t ldd,
               float beta, const T* bias, Stream s) {
  auto handle = reinterpret_cast<cublasLtHandle_t>(p.cublaslt);
  ATTN_ASSERT(handle != nullptr);
  const cudaDataType_t dt = cuda_type<T>();
  cublasLtMatmulDesc_t desc = nullptr;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  if (bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                sizeof(bias)));
  }
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, dt, trans_a ? k : m, trans_a ? m : k, lda));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, dt, trans_b ? n : k, trans_b ? k : n, ldb));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, dt, m, n, ldd));
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = p.workspace ? p.workspace_bytes : 0;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &ws, sizeof(ws)));
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  CUBLAS_CHECK(
      cublasLtMatmulAlgoGetHeuristic(handle, desc, la, lb, ld, ld, pref, 1, &heur, &found));
  ATTN_REQUIRE(found > 0, "cuBLASLt found no algorithm for a %lldx%lldx%lld matmul", (long long)m,
               (long long)n, (long long)k);
  const float alpha = 1.f;
  CUBLAS_CHECK(cublasLtMatmul(handle, desc, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &heur.algo,
                              p.workspace, ws, reinterpret_cast<cudaStream_t>(s)));
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(desc);
}

// Stage 1 of dbias: block (32 columns x 8 row lanes), blockIdx.y = row group; partial[groups][C].
template <typename T>
__global__ void colsum_partial_kernel(const T* __restrict__ dy, float* __restrict__ partial,
                                      int64_t rows, int C) {
  __shared__ float sh[8][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  float acc = 0.f;
  if (c < C) {
    for (int64_t r = int64_t(blockIdx.y) * 8 + threadIdx.y; r < rows; r += int64_t(gridDim.y) * 8)
      acc += dev::to_f(dy[r * C + c]);
  }
  sh[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int k = 1; k < 8; ++k) acc += sh[k][threadIdx.x];
    partial[int64_t(blockIdx.y) * C + c] = acc;
  }
}

template <typename T>
__global__ void colsum_final_kernel(const float* __restrict__ partial, T* __restrict__ out,
                                    int groups, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float acc = 0.f;
  for (int g = 0; g < groups; ++g) acc += partial[int64_t(g) * C + c];
  out[c] = dev::from_f<T>(dev::to_f(out[c]) + acc);
}

}  // namespace

template <typename T>
void launch_matmul_fwd(const MatmulParams<T>& p, Stream s) {
  if (p.N == 0 || p.out == 0) return;
  // Y(out x N) = W^T X: A = W stored (in x out, ld in) transposed; B = X (in x N, ld in).
  lt_matmul<T>(p, true, false, p.out, p.N, p.in, p.w, p.in, p.x, p.in, p.y, p.out, 0.f, p.bias, s);
}

template <typename T>
void launch_matmul_bwd(const MatmulParams<T>& p, Stream s) {
  if (p.N == 0) return;
  if (p.dx) {
    // dX(in x N) = W(in x out) dY(out x N).
    lt_matmul<T>(p, false, false, p.in, p.N, p.out, p.w, p.in, p.dy, p.out, p.dx, p.in,
                 p.accumulate_dx ? 1.f : 0.f, nullptr, s);
  }
  if (p.dw) {
    // dW(in x out) += X(in x N) dY(out x N)^T.
    lt_matmul<T>(p, false, true, p.in, p.out, p.N, p.x, p.in, p.dy, p.out, p.dw, p.in, 1.f, nullptr,
                 s);
  }
  if (p.dbias) {
    auto st = reinterpret_cast<cudaStream_t>(s);
    const int groups = int(std::min<int64_t>(div_up(p.N, 64), 128));
    StreamScratch partial(sizeof(float) * size_t(groups) * p.out, s);
    colsum_partial_kernel<T><<<dim3(div_up(p.out, 32), groups), dim3(32, 8), 0, st>>>(
        p.dy, partial.as<float>(), p.N, p.out);
    CUDA_CHECK_LAUNCH();
    colsum_final_kernel<T>
        <<<div_up(p.out, 256), 256, 0, st>>>(partial.as<float>(), p.dbias, groups, p.out);
    CUDA_CHECK_LAUNCH();
  }
}

template void launch_matmul_fwd<float>(const MatmulParams<float>&, Stream);
template void launch_matmul_fwd<bf16>(const MatmulParams<bf16>&, Stream);
template void launch_matmul_bwd<float>(const MatmulParams<float>&, Stream);
template void launch_matmul_bwd<bf16>(const MatmulParams<bf16>&, Stream);

}  // namespace attnlab
