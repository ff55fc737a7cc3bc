// Linear layer through cuBLASLt. Row-major y[N,out] = x[N,in] w[out,in]^T is, in cuBLAS's
// column-major terms, Y(out x N) = W(in x out)^T X(in x N); the transposes below follow from that.
// bf16: bf16 operands, fp32 accumulation (CUBLAS_COMPUTE_32F). fp32: plain fp32 (no TF32), so the
// CUDA path matches the CPU reference to fp32 rounding. Bias goes through the BIAS epilogue, the
// residual through beta = 1 with C = residual, GELU through GELU_AUX(_BIAS) / DGELU for bf16 (the
// rounding into bf16 happens once, after the epilogue). fp32, unaligned shapes or no aux algorithm:
// the GELU runs as the separate kernel of kernels/activation/gelu.cu.
// dbias += column sums of dy: with dw, from the dw GEMM's BGRADB epilogue (written to scratch, as
// the epilogue overwrites, then added); without dw (frozen weight) or without a BGRADB algorithm,
// a deterministic two-stage reduction kernel.
#include <cublasLt.h>

#include "kernels/activation/gelu.cuh"
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

// What cuBLASLt applies after the product: bias (BIAS), GELU with the pre-activation written to
// aux (GELU_AUX_BIAS), or the GELU derivative at aux (DGELU).
struct Epilogue {
  cublasLtEpilogue_t kind = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  void* aux = nullptr;
  int64_t aux_ld = 0;
};

// D(m x n, ld m) = epilogue(alpha op(A) op(B) + beta C), alpha = p.scale, C (ld m) = D when C is
// null; column-major. Returns false when cuBLASLt has no algorithm for an aux or bias-gradient
// epilogue (the caller falls back to separate kernels); a plain product without an algorithm is an
// error.
template <typename T>
bool lt_matmul(const MatmulParams<T>& p, bool trans_a, bool trans_b, int64_t m, int64_t n,
               int64_t k, const T* A, int64_t lda, const T* B, int64_t ldb, const T* C, float beta,
               T* D, int64_t ldd, const Epilogue& e, Stream s) {
  auto handle = reinterpret_cast<cublasLtHandle_t>(p.cublaslt);
  ATTN_ASSERT(handle != nullptr);
  const cudaDataType_t dt = cuda_type<T>();
  cublasLtMatmulDesc_t desc = nullptr;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  if (e.kind != CUBLASLT_EPILOGUE_DEFAULT) {
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e.kind,
                                                sizeof(e.kind)));
  }
  if (e.bias) {
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &e.bias,
                                                sizeof(e.bias)));
  }
  if (e.aux) {
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                &e.aux, sizeof(e.aux)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                &e.aux_ld, sizeof(e.aux_ld)));
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
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(handle, desc, la, lb, ld, ld, pref, 1, &heur, &found);
  const bool ok = st == CUBLAS_STATUS_SUCCESS && found > 0;
  if (ok) {
    const float alpha = p.scale;
    CUBLAS_CHECK(cublasLtMatmul(handle, desc, &alpha, A, la, B, lb, &beta, C ? C : D, ld, D, ld,
                                &heur.algo, p.workspace, ws, reinterpret_cast<cudaStream_t>(s)));
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(desc);
  const bool optional = e.aux != nullptr || e.kind == CUBLASLT_EPILOGUE_BGRADB;
  ATTN_REQUIRE(ok || optional,
               "cuBLASLt found no algorithm for a %lldx%lldx%lld matmul (status %d)", (long long)m,
               (long long)n, (long long)k, int(st));
  return ok;
}

// The GELU epilogues run for bf16 with 16-byte aligned rows of the aux matrix. fp32 keeps the
// separate GELU kernel, so the fp32 path stays within fp32 rounding of the reference whatever
// tanh the epilogue evaluates (the difference is far below bf16 rounding).
template <typename T>
bool aux_epilogue_ok(const T* aux, int64_t ld) {
  return std::is_same_v<T, bf16> && aligned16(aux) && (ld * int64_t(sizeof(T))) % 16 == 0;
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

// out[i] += add[i].
template <typename T>
__global__ void add_kernel(T* __restrict__ out, const T* __restrict__ add, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = dev::from_f<T>(dev::to_f(out[i]) + dev::to_f(add[i]));
}

}  // namespace

template <typename T>
void launch_matmul_fwd(const MatmulParams<T>& p, Stream s) {
  if (p.N == 0 || p.out == 0) return;
  // Y(out x N) = W^T X: A = W stored (in x out, ld in) transposed; B = X (in x N, ld in).
  Epilogue e;
  if (p.bias) {
    e.kind = CUBLASLT_EPILOGUE_BIAS;
    e.bias = p.bias;
  }
  ATTN_ASSERT(!(p.gelu_pre && p.residual));
  if (p.gelu_pre) {
    const int64_t n = p.N * p.out;
    if (aux_epilogue_ok(p.gelu_pre, p.out)) {
      e.kind = p.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
      e.aux = p.gelu_pre;
      e.aux_ld = p.out;
      if (lt_matmul<T>(p, true, false, p.out, p.N, p.in, p.w, p.in, p.x, p.in, nullptr, 0.f, p.y,
                       p.out, e, s))
        return;
      e.kind = p.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
      e.aux = nullptr;
    }
    // Fallback: the product into gelu_pre, then the elementwise GELU.
    lt_matmul<T>(p, true, false, p.out, p.N, p.in, p.w, p.in, p.x, p.in, nullptr, 0.f, p.gelu_pre,
                 p.out, e, s);
    GeluParams<T> g;
    g.x = p.gelu_pre;
    g.y = p.y;
    g.n = n;
    launch_gelu_fwd<T>(g, s);
    return;
  }
  // accumulate_y: C = D = y (cuBLASLt's in-place form, one layout for both).
  const T* c = p.accumulate_y ? p.y : p.residual;
  lt_matmul<T>(p, true, false, p.out, p.N, p.in, p.w, p.in, p.x, p.in, c, c ? 1.f : 0.f, p.y, p.out,
               e, s);
}

template <typename T>
void launch_matmul_bwd(const MatmulParams<T>& p, Stream s) {
  if (p.N == 0) return;
  if (p.dx) {
    // dX(in x N) = W(in x out) dY(out x N), times gelu'(gelu_pre) with the DGELU epilogue.
    Epilogue e;
    bool done = false;
    if (p.gelu_pre && aux_epilogue_ok(p.gelu_pre, p.in)) {
      e.kind = CUBLASLT_EPILOGUE_DGELU;
      e.aux = p.gelu_pre;
      e.aux_ld = p.in;
      done = lt_matmul<T>(p, false, false, p.in, p.N, p.out, p.w, p.in, p.dy, p.out, nullptr, 0.f,
                          p.dx, p.in, e, s);
    }
    if (!done) {
      lt_matmul<T>(p, false, false, p.in, p.N, p.out, p.w, p.in, p.dy, p.out, nullptr,
                   p.accumulate_dx ? 1.f : 0.f, p.dx, p.in, Epilogue{}, s);
      if (p.gelu_pre) {
        GeluParams<T> g;
        g.x = p.gelu_pre;
        g.dy = p.dx;
        g.dx = p.dx;
        g.n = p.N * p.in;
        launch_gelu_bwd<T>(g, s);
      }
    }
  }
  bool dbias_done = false;
  if (p.dw) {
    // dW(in x out) += X(in x N) dY(out x N)^T. dbias comes from the same GEMM (BGRADB: the sums of
    // dY over N, its k dimension) into scratch, since the epilogue overwrites; then dbias += it.
    StreamScratch bgrad(p.dbias ? sizeof(T) * size_t(p.out) : 0, s);
    Epilogue e;
    if (p.dbias) {
      e.kind = CUBLASLT_EPILOGUE_BGRADB;
      e.bias = bgrad.as<T>();
      dbias_done = lt_matmul<T>(p, false, true, p.in, p.out, p.N, p.x, p.in, p.dy, p.out, nullptr,
                                1.f, p.dw, p.in, e, s);
    }
    if (dbias_done) {
      add_kernel<T><<<div_up(p.out, 256), 256, 0, reinterpret_cast<cudaStream_t>(s)>>>(
          p.dbias, bgrad.as<T>(), p.out);
      CUDA_CHECK_LAUNCH();
    } else {
      lt_matmul<T>(p, false, true, p.in, p.out, p.N, p.x, p.in, p.dy, p.out, nullptr, 1.f, p.dw,
                   p.in, Epilogue{}, s);
    }
  }
  if (p.dbias && !dbias_done) {
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
