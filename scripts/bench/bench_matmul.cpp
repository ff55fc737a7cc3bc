// cuBLASLt algorithm benchmark for the GPT-2 124M training step's matmuls (bf16, fp32 accumulate,
// micro-batch 64 x 1024 = 65536 rows): for each product of the step (forward, dX, dW of the qkv,
// attention-projection, fc, mlp-projection and lm-head layers, with the epilogues the model uses:
// bias, residual (beta = 1), GELU_AUX_BIAS, DGELU, BGRADB) it asks cuBLASLt's heuristic for up to
// 8 algorithms and times each (median of 10 after 3 warm-ups, random inputs), and prints the time
// of the heuristic's first choice (what kernels/matmul/matmul.cu runs), the best time and the
// best's rank. The question it answers: how much the step would gain by timing the candidates
// instead of taking the first. Usage: bench_matmul [csv_out] [--rows=N]
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/cuda_check.h"
#include "core/tensor.h"

using namespace attnlab;
using bench::median_ms;

namespace {

constexpr int kMaxAlgos = 8;

struct Case {
  const char* name;
  bool ta, tb;
  int64_t m, n, k;
  cublasLtEpilogue_t epi;
  bool beta1;  // C = D (residual add / dW accumulation)
  bool aux;    // epilogue aux matrix (m x n, ld m)
  bool bias;   // bias vector (length m), or the BGRADB output (length n)
};

void fill(void* p, size_t n_bf16, uint64_t seed) {
  std::vector<bf16> h(n_bf16);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& v : h) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    v = bf16(float(int64_t(s >> 40) - (int64_t(1) << 23)) / float(1 << 24));  // [-0.5, 0.5)
  }
  CUDA_CHECK(cudaMemcpy(p, h.data(), n_bf16 * sizeof(bf16), cudaMemcpyHostToDevice));
}

}  // namespace

int main(int argc, char** argv) {
  const char* csv_path = nullptr;
  int64_t rows = 65536;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--rows=", 7) == 0) {
      rows = bench::parse_rows("bench_matmul", argv[i] + 7);
    } else if (argv[i][0] != '-') {
      csv_path = argv[i];
    } else {
      std::fprintf(stderr, "bench_matmul: unknown option %s (expected [csv] [--rows=N])\n",
                   argv[i]);
      return 2;
    }
  }
  const int64_t N = rows, C = 768, V = 50304;
  // Column-major, as kernels/matmul/matmul.cu: fwd D(out x N) = W^T X; dX(in x N) = W dY;
  // dW(in x out) += X dY^T.
  const Case cases[] = {
      {"qkv fwd", true, false, 3 * C, N, C, CUBLASLT_EPILOGUE_BIAS, false, false, true},
      {"qkv dX", false, false, C, N, 3 * C, CUBLASLT_EPILOGUE_DEFAULT, false, false, false},
      {"qkv dW", false, true, C, 3 * C, N, CUBLASLT_EPILOGUE_BGRADB, true, false, true},
      {"proj fwd", true, false, C, N, C, CUBLASLT_EPILOGUE_BIAS, true, false, true},
      {"proj dX", false, false, C, N, C, CUBLASLT_EPILOGUE_DEFAULT, false, false, false},
      {"proj dW", false, true, C, C, N, CUBLASLT_EPILOGUE_BGRADB, true, false, true},
      {"fc fwd", true, false, 4 * C, N, C, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, false, true, true},
      {"fc dX", false, false, C, N, 4 * C, CUBLASLT_EPILOGUE_DEFAULT, false, false, false},
      {"fc dW", false, true, C, 4 * C, N, CUBLASLT_EPILOGUE_BGRADB, true, false, true},
      {"mlp fwd", true, false, C, N, 4 * C, CUBLASLT_EPILOGUE_BIAS, true, false, true},
      {"mlp dX", false, false, 4 * C, N, C, CUBLASLT_EPILOGUE_DGELU, false, true, false},
      {"mlp dW", false, true, 4 * C, C, N, CUBLASLT_EPILOGUE_BGRADB, true, false, true},
      {"head fwd", true, false, V, N, C, CUBLASLT_EPILOGUE_DEFAULT, false, false, false},
      {"head dX", false, false, C, N, V, CUBLASLT_EPILOGUE_DEFAULT, false, false, false},
      {"head dW", false, true, C, V, N, CUBLASLT_EPILOGUE_DEFAULT, true, false, false},
  };
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "bench_matmul: no CUDA device\n");
    return 1;
  }
  cublasLtHandle_t handle;
  CUBLAS_CHECK(cublasLtCreate(&handle));
  const size_t ws_bytes = size_t(32) << 20;  // as ExecContext
  Buffer ws(Device::cuda, ws_bytes);
  FILE* csv = csv_path ? std::fopen(csv_path, "w") : nullptr;
  if (csv)
    std::fprintf(csv, "case,m,n,k,algos,first_ms,best_ms,best_rank,first_tflops,best_tflops\n");
  std::printf("%-9s %6s %6s %6s %5s %9s %9s %4s %8s %8s\n", "case", "m", "n", "k", "algos",
              "first ms", "best ms", "rank", "TF/s 1st", "TF/s best");
  double sum_first = 0, sum_best = 0;
  for (const Case& c : cases) {
    const int64_t lda = c.ta ? c.k : c.m, ldb = c.tb ? c.n : c.k;
    Buffer a(Device::cuda, size_t(c.m) * c.k * 2), b(Device::cuda, size_t(c.k) * c.n * 2),
        d(Device::cuda, size_t(c.m) * c.n * 2);
    Buffer aux(Device::cuda, c.aux ? size_t(c.m) * c.n * 2 : 0);
    Buffer bias(Device::cuda, size_t(std::max(c.m, c.n)) * 2);
    fill(a.data(), size_t(c.m) * c.k, 1);
    fill(b.data(), size_t(c.k) * c.n, 2);
    fill(d.data(), size_t(c.m) * c.n, 3);
    if (c.aux) fill(aux.data(), size_t(c.m) * c.n, 4);
    fill(bias.data(), size_t(std::max(c.m, c.n)), 5);
    cublasLtMatmulDesc_t desc;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = c.ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                            tb = c.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &c.epi, sizeof(c.epi)));
    if (c.bias) {
      void* bp = bias.data();
      CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof(bp)));
    }
    if (c.aux) {
      void* ap = aux.data();
      const int64_t ald = c.m;
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                  &ap, sizeof(ap)));
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ald,
                                                  sizeof(ald)));
    }
    cublasLtMatrixLayout_t la, lb, ld;
    CUBLAS_CHECK(
        cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, c.ta ? c.k : c.m, c.ta ? c.m : c.k, lda));
    CUBLAS_CHECK(
        cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, c.tb ? c.n : c.k, c.tb ? c.k : c.n, ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, c.m, c.n, c.m));
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes)));
    cublasLtMatmulHeuristicResult_t heur[kMaxAlgos];
    int found = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, desc, la, lb, ld, ld, pref, kMaxAlgos, heur,
                                                &found));
    const float alpha = 1.f, beta = c.beta1 ? 1.f : 0.f;
    double first = 0, best = 1e30;
    int best_rank = -1;
    for (int i = 0; i < found; ++i) {
      if (heur[i].state != CUBLAS_STATUS_SUCCESS) continue;
      const double ms = median_ms(
          [&] {
            CUBLAS_CHECK(cublasLtMatmul(handle, desc, &alpha, a.data(), la, b.data(), lb, &beta,
                                        d.data(), ld, d.data(), ld, &heur[i].algo, ws.data(),
                                        ws_bytes, nullptr));
          },
          10);
      if (i == 0) first = ms;
      if (ms < best) best = ms, best_rank = i;
    }
    const double flop = 2.0 * double(c.m) * double(c.n) * double(c.k);
    auto tf = [&](double ms) { return ms > 0 ? flop / (ms * 1e-3) / 1e12 : 0.0; };
    std::printf("%-9s %6lld %6lld %6lld %5d %9.3f %9.3f %4d %8.1f %8.1f\n", c.name, (long long)c.m,
                (long long)c.n, (long long)c.k, found, first, best, best_rank, tf(first), tf(best));
    if (csv)
      std::fprintf(csv, "%s,%lld,%lld,%lld,%d,%.4f,%.4f,%d,%.1f,%.1f\n", c.name, (long long)c.m,
                   (long long)c.n, (long long)c.k, found, first, best, best_rank, tf(first),
                   tf(best));
    // Per step: 12 layers of each transformer product, one lm head.
    const int times = std::strncmp(c.name, "head", 4) == 0 ? 1 : 12;
    sum_first += times * first;
    sum_best += times * best;
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(desc);
  }
  std::printf("per step (12 layers + head): first choice %.2f ms, best %.2f ms (%.1f%% less)\n",
              sum_first, sum_best, 100.0 * (1.0 - sum_best / sum_first));
  if (csv) std::fclose(csv);
  cublasLtDestroy(handle);
  return 0;
}
