// The tolerance of a CUDA output against the CPU reference (run on the inputs rounded to T),
// taken from a same-precision reference rather than tuned per tensor: twice the error of the
// reference's own output rounded once to T (what an exact kernel that stores T would give), and
// at least kFp32Tolerance (fp32 rounding order; the rounding error is 0 for T = float).
// Header-only.
#pragma once
#include <algorithm>
#include <vector>

#include "cuda_test_util.h"

namespace attnlab::test {

constexpr double kFp32Tolerance = 1e-5;

template <typename T>
double same_precision_tolerance(const std::vector<float>& ref) {
  return std::max(kFp32Tolerance, 2 * max_rel_error(to_precision<T>(ref), ref));
}

}  // namespace attnlab::test
