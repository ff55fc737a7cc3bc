// SwiGLU CUDA kernels vs the CPU reference (fp32 and bf16): y and dpre written (poisoned before,
// so an unwritten element fails); the 16-byte path (F a multiple of the pack, aligned pointers)
// and the scalar path (odd F, or a pointer off 16-byte alignment); saturated gates.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "kernels/activation/swiglu.cuh"
#include "ref/swiglu_ref.h"

namespace attnlab {
namespace {

using namespace test;

// misalign: the tensors start one element into their allocations (the scalar path).
template <typename T>
void check_swiglu(int64_t rows, int64_t F, uint32_t seed, bool misalign = false) {
  auto pre_v = random_vector(size_t(rows * 2 * F), seed, -5.f, 5.f);
  // A saturated gate: silu -> 0, no NaN. Not in the 1 x 1 case, whose only output would be
  // silu(-100) up = -3.7e-42 up in the double reference and 0 in fp32 (expf(100) overflows):
  // a relative error of 1 against a largest value of ~1e-42 (the H100 run of 2026-12-07).
  if (rows * F > 1) pre_v[0] = -100.f;
  const auto pre = to_precision<T>(pre_v);
  const auto dy = to_precision<T>(random_vector(size_t(rows * F), seed + 1));
  std::vector<float> y_ref(size_t(rows * F)), dpre_ref(pre.size());
  SwiGluParams<float> r;
  r.pre = pre.data(), r.y = y_ref.data(), r.dy = dy.data(), r.dpre = dpre_ref.data();
  r.rows = rows, r.f = F;
  swiglu_fwd_ref(r);
  swiglu_bwd_ref(r);

  const size_t off = misalign ? 1 : 0;
  auto padded = [&](const std::vector<float>& v) {
    std::vector<float> out(off, 0.f);
    out.insert(out.end(), v.begin(), v.end());
    return out;
  };
  DeviceArray<T> dpre_in(padded(pre)), ddy(padded(dy)), y(off + y_ref.size()),
      dpre(off + pre.size());
  y.poison();
  dpre.poison();
  SwiGluParams<T> p;
  p.pre = dpre_in.ptr() + off, p.y = y.ptr() + off, p.dy = ddy.ptr() + off;
  p.dpre = dpre.ptr() + off, p.rows = rows, p.f = F;
  launch_swiglu_fwd<T>(p, nullptr);
  launch_swiglu_bwd<T>(p, nullptr);
  auto unpadded = [&](const std::vector<float>& v) {
    return std::vector<float>(v.begin() + off, v.end());
  };
  const auto name = strformat("swiglu %s %lldx%lld%s", type_name<T>(), (long long)rows,
                              (long long)F, misalign ? " misaligned" : "");
  EXPECT_LT(report((name + " y").c_str(), max_rel_error(unpadded(y.download()), y_ref)),
            same_precision_tolerance<T>(y_ref));
  EXPECT_LT(report((name + " dpre").c_str(), max_rel_error(unpadded(dpre.download()), dpre_ref)),
            same_precision_tolerance<T>(dpre_ref));
}

TEST(SwiGluCuda, MatchesReferenceF32) {
  CUDA_TEST_PREAMBLE();
  check_swiglu<float>(1, 1, 1);
  check_swiglu<float>(3, 7, 2);
  check_swiglu<float>(1, 8, 3);
  check_swiglu<float>(5, 4097, 4);
  check_swiglu<float>(64, 1024, 5);
  check_swiglu<float>(4, 256, 6, true);
  check_swiglu<float>(2048, 2816, 7);
}

TEST(SwiGluCuda, MatchesReferenceBF16) {
  CUDA_TEST_PREAMBLE();
  check_swiglu<bf16>(1, 1, 11);
  check_swiglu<bf16>(3, 7, 12);
  check_swiglu<bf16>(1, 8, 13);
  check_swiglu<bf16>(5, 4097, 14);
  check_swiglu<bf16>(64, 1024, 15);
  check_swiglu<bf16>(4, 256, 16, true);
  check_swiglu<bf16>(2048, 2816, 17);
  check_swiglu<bf16>(4100, 4097, 18);  // more items than one pass of the grid (65536 x 256)
}

}  // namespace
}  // namespace attnlab
