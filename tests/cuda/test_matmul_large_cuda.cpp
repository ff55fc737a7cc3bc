// The LM head's three products past 2^31 elements (skipped without a GPU): logits [BT, Vp] for
// LLaMA 3's vocabulary (128,256) at BT >= 16,744 tokens, e.g. one 32K sequence, hold more
// elements than a 32-bit index reaches. y = x w^T, dx = dy w and dw = dy^T x with y and dy of
// 2.15e9 elements, against double sums on rows and columns on both sides of element 2^31
// (cuBLASLt takes 64-bit sizes; BLAS libraries have had bugs exactly there). The other tests stay
// below 2^31.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"
#include "cuda/cuda_test_util.h"
#include "ops/ops.h"

namespace attnlab {
namespace {

// A value in [-1, 1) from an index, the same on every call.
float hashed(uint64_t i) {
  i ^= i >> 33;
  i *= 0xff51afd7ed558ccdULL;
  i ^= i >> 33;
  i *= 0xc4ceb9fe1a85ec53ULL;
  i ^= i >> 33;
  return float(i >> 40) / float(1 << 23) - 1.f;
}

std::vector<bf16> hashed_bf16(int64_t n, uint64_t salt) {
  std::vector<bf16> v(static_cast<size_t>(n));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    v[size_t(i)] = __float2bfloat16(hashed(uint64_t(i) * 7919 + salt));
  return v;
}

Tensor upload(Buffer& b, const std::vector<bf16>& h, const Shape& s) {
  b = Buffer(Device::cuda, h.size() * sizeof(bf16));
  Tensor t = b.as(DType::bf16, s);
  copy_tensor(t, Tensor(const_cast<bf16*>(h.data()), DType::bf16, Device::cpu, s));
  return t;
}

std::vector<float> row_of(const Tensor& t, int64_t r) {
  const int64_t n = t.dim(1);
  std::vector<bf16> h(static_cast<size_t>(n));
  copy_tensor(Tensor(h.data(), DType::bf16, Device::cpu, Shape{1, n}), t.slice0(r, r + 1));
  std::vector<float> f(h.size());
  for (size_t i = 0; i < h.size(); ++i) f[i] = __bfloat162float(h[i]);
  return f;
}

TEST(MatmulLargeCuda, LmHeadProductsPast2To31Elements) {
  CUDA_TEST_PREAMBLE();
  const int64_t N = 16800, in = 64, out = 128256;  // N x out = 2,154,700,800 > 2^31
  ASSERT_GT(N * out, int64_t(1) << 31);
  auto ctx = ExecContext::make_cuda(0);
  const std::vector<bf16> hx = hashed_bf16(N * in, 1), hw = hashed_bf16(out * in, 2),
                          hdy = hashed_bf16(N * out, 3);
  Buffer bx, bw, bdy;
  const Tensor x = upload(bx, hx, Shape{N, in}), w = upload(bw, hw, Shape{out, in}),
               dy = upload(bdy, hdy, Shape{N, out});
  Buffer by(Device::cuda, size_t(N * out) * sizeof(bf16)), bdx(Device::cuda, hx.size() * 2),
      bdw(Device::cuda, hw.size() * 2);
  const Tensor y = by.as(DType::bf16, Shape{N, out}), dx = bdx.as(DType::bf16, Shape{N, in}),
               dw = bdw.as(DType::bf16, Shape{out, in});
  zero_tensor(dw);  // (accumulated)
  ops::matmul_fwd(*ctx, y, x, w, Tensor());
  ops::matmul_bwd(*ctx, dx, dw, Tensor(), dy, x, w);
  ctx->synchronize();

  auto f = [](bf16 v) { return double(__bfloat162float(v)); };
  // Rows of y and dx around element 2^31 of y / dy (row 16743 holds it), and the first and last.
  const int64_t boundary = (int64_t(1) << 31) / out;
  for (int64_t r : {int64_t(0), boundary, boundary + 1, N - 1}) {
    std::vector<double> y_ref(static_cast<size_t>(out)), dx_ref(static_cast<size_t>(in), 0.0);
    for (int64_t n = 0; n < out; ++n) {
      double s = 0.0;
      for (int64_t k = 0; k < in; ++k) s += f(hx[size_t(r * in + k)]) * f(hw[size_t(n * in + k)]);
      y_ref[size_t(n)] = s;
      const double g = f(hdy[size_t(r * out + n)]);
      for (int64_t k = 0; k < in; ++k) dx_ref[size_t(k)] += g * f(hw[size_t(n * in + k)]);
    }
    const std::vector<float> yr = row_of(y, r), dxr = row_of(dx, r);
    EXPECT_LT(
        test::report("lm head y row", test::max_rel_error(yr.data(), y_ref.data(), yr.size())),
        1e-2)
        << "row " << r;
    EXPECT_LT(
        test::report("lm head dx row", test::max_rel_error(dxr.data(), dx_ref.data(), dxr.size())),
        1e-2)
        << "row " << r;
  }
  // Rows of dw: sums over every token row, those past element 2^31 included.
  for (int64_t n : {int64_t(0), int64_t(77777), out - 1}) {
    std::vector<double> dw_ref(static_cast<size_t>(in), 0.0);
    for (int64_t r = 0; r < N; ++r)
      for (int64_t k = 0; k < in; ++k)
        dw_ref[size_t(k)] += f(hdy[size_t(r * out + n)]) * f(hx[size_t(r * in + k)]);
    const std::vector<float> dwr = row_of(dw, n);
    EXPECT_LT(
        test::report("lm head dw row", test::max_rel_error(dwr.data(), dw_ref.data(), dwr.size())),
        1e-2)
        << "column " << n;
  }
}

}  // namespace
}  // namespace attnlab
