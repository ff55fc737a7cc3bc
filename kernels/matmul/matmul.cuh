// Linear layer (PyTorch weight layout): y = x @ w^T + bias.
// x, dx: [N, in]; w, dw: [out, in]; bias, dbias: [out] (bias may be null); y, dy: [N, out].
// fwd: y written (=).
//      residual [N, out] (optional, must not alias y): y = x @ w^T + bias + residual (the residual
//      stream add fused into the GEMM epilogue).
//      gelu_pre [N, out] (optional): gelu_pre = x @ w^T + bias and y = gelu(gelu_pre) (tanh
//      approximation, as kernels/activation/gelu.cuh), both written; not with residual.
// bwd: dx written (=), or accumulated (+=) when accumulate_dx; dw += x^T-contraction; dbias += sum
//      dy. Any of dx / dw / dbias may be null: that product is skipped (frozen weights skip dw).
//      gelu_pre (optional, read): dx = (dy @ w) * gelu'(gelu_pre), the backward of a GELU that
//      produced x (written =; not with accumulate_dx).
// scale (default 1) multiplies the products only: fwd y = scale * (x @ w^T) (+ residual), bwd
//      dx = scale * (dy @ w), dw += scale * dy^T-contraction (LoRA's alpha / r); not with bias,
//      dbias or gelu_pre. accumulate_y (fwd): y += the product (cuBLASLt beta = 1 with C = y);
//      not with residual or gelu_pre.
// The CUDA path goes through cuBLASLt (workspace from the ExecContext); the fusions are cuBLASLt
// epilogues (beta = 1 with C = residual; bf16 GELU_AUX_BIAS and DGELU; BGRADB for dbias).
#pragma once
#include <cstddef>

#include "kernels/common/launch.h"

struct cublasLtContext;

namespace attnlab {

template <typename T>
struct MatmulParams {
  const T* x = nullptr;
  const T* w = nullptr;
  const T* bias = nullptr;
  T* y = nullptr;
  const T* dy = nullptr;
  T* dx = nullptr;
  T* dw = nullptr;
  T* dbias = nullptr;
  const T* residual = nullptr;
  T* gelu_pre = nullptr;
  int64_t N = 0;
  int in = 0;
  int out = 0;
  bool accumulate_dx = false;
  bool accumulate_y = false;
  float scale = 1.f;
  // CUDA only: the cuBLASLt handle and workspace.
  cublasLtContext* cublaslt = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

template <typename T>
void launch_matmul_fwd(const MatmulParams<T>& p, Stream s);
template <typename T>
void launch_matmul_bwd(const MatmulParams<T>& p, Stream s);

}  // namespace attnlab
