// Small helpers shared by the tests. Header-only.
//   random_vector / fill_random  deterministic uniform values from a fixed seed (never zeros)
//   cpu_tensor                   a Tensor view of a std::vector on the CPU
//   max_rel_error                max |a - b| relative to the largest |b| (b is the reference)
//   finite_difference            central-difference gradient of a scalar function, in double
//   thrown_message               the message of the attnlab::Error a call throws ("" if none)
//   EXPECT_HAS(text, part)       text contains part
//   expect_error                 a call must throw attnlab::Error whose message contains a needle
//   TempDir                      a fresh directory per process and test, removed at scope exit
//   ScopedOmpThreads             limits OpenMP to n threads until the end of the scope
//   source_dir / attnlab_binary  the source tree and the CLI the tests read
#pragma once
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <random>
#include <source_location>
#include <string>
#include <system_error>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

// EXPECT_HAS(text, part): `text` contains `part` (printed in full when it does not).
#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "message: " << (haystack)

namespace attnlab::test {

// The source tree (recipes, docs, test data) and the attnlab binary the tests read: the
// environment's ATTNLAB_SOURCE_DIR / ATTNLAB_BINARY where set (binaries built on one machine and
// run on another: scripts/pack_device_binaries.sh), else the paths of the build.
inline std::string source_dir() {
  const char* e = std::getenv("ATTNLAB_SOURCE_DIR");
  return e && *e ? e : ATTNLAB_SOURCE_DIR;
}
#ifdef ATTNLAB_BINARY
inline std::string attnlab_binary() {
  const char* e = std::getenv("ATTNLAB_BINARY");
  return e && *e ? e : ATTNLAB_BINARY;
}
#endif

// Uniform in [lo, hi) from std::mt19937(seed): the same values on every platform and run.
inline void fill_random(float* p, size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 gen(seed);
  for (size_t i = 0; i < n; ++i) {
    const double u = double(gen()) / 4294967296.0;  // [0, 1)
    p[i] = static_cast<float>(lo + (hi - lo) * u);
  }
}

inline std::vector<float> random_vector(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::vector<float> v(n);
  fill_random(v.data(), n, seed, lo, hi);
  return v;
}

// Random integers in [0, bound) (e.g. token ids).
inline std::vector<int32_t> random_ints(size_t n, uint32_t seed, int32_t bound) {
  std::mt19937 gen(seed);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = static_cast<int32_t>(gen() % uint32_t(bound));
  return v;
}

inline Tensor cpu_tensor(std::vector<float>& v, Shape s) {
  ATTN_ASSERT(size_t(s.numel()) == v.size());
  return Tensor(v.data(), DType::f32, Device::cpu, s);
}
inline Tensor cpu_tensor(std::vector<int32_t>& v, Shape s) {
  ATTN_ASSERT(size_t(s.numel()) == v.size());
  return Tensor(v.data(), DType::i32, Device::cpu, s);
}
inline Tensor cpu_tensor(std::vector<uint8_t>& v, Shape s) {
  ATTN_ASSERT(size_t(s.numel()) == v.size());
  return Tensor(v.data(), DType::u8, Device::cpu, s);
}

// max_i |a_i - b_i| / max_i |b_i|: the error relative to the scale of the reference b, so that
// entries near zero neither hide nor inflate the error. 0 when both are all zero.
template <typename A, typename B>
double max_rel_error(const A* a, const B* b, size_t n) {
  double err = 0.0, scale = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double d = std::fabs(double(a[i]) - double(b[i]));
    // std::max drops a NaN argument, so test for it explicitly: NaN or Inf anywhere (in either
    // input) fails every tolerance.
    if (!std::isfinite(d)) return INFINITY;
    err = std::max(err, d);
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return scale > 0.0 ? err / scale : err;
}
template <typename A, typename B>
double max_rel_error(const std::vector<A>& a, const std::vector<B>& b) {
  ATTN_ASSERT(a.size() == b.size());
  return max_rel_error(a.data(), b.data(), a.size());
}

// d f / d x_i by central differences (f(x + h) - f(x - h)) / 2h for each of the n inputs, which
// are perturbed in place and restored. f should compute in double (e.g. a weighted sum of the op's
// outputs) so the only float rounding is in the op itself.
inline std::vector<double> finite_difference(float* x, size_t n, const std::function<double()>& f,
                                             float h = 1e-2f) {
  std::vector<double> grad(n);
  for (size_t i = 0; i < n; ++i) {
    const float saved = x[i];
    x[i] = saved + h;
    const double fp = f();
    const double hp = double(x[i]) - saved;  // the step actually taken after float rounding
    x[i] = saved - h;
    const double fm = f();
    const double hm = saved - double(x[i]);
    x[i] = saved;
    grad[i] = (fp - fm) / (hp + hm);
  }
  return grad;
}

// sum_i w_i y_i in double: the scalar whose gradient w.r.t. y is w (w plays the role of dy).
inline double weighted_sum(const std::vector<float>& w, const std::vector<float>& y) {
  ATTN_ASSERT(w.size() == y.size());
  double s = 0.0;
  for (size_t i = 0; i < w.size(); ++i) s += double(w[i]) * y[i];
  return s;
}

// The message of the attnlab::Error thrown by f, or "" when f does not throw.
inline std::string thrown_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Expects f to throw attnlab::Error whose message contains every one of `needles`; otherwise adds
// a failure, reported at the caller's line, that shows the message (or says nothing was thrown).
inline void expect_error(const std::function<void()>& f, std::initializer_list<std::string> needles,
                         const std::source_location& where = std::source_location::current()) {
  std::string joined;
  for (const auto& n : needles) joined += (joined.empty() ? "'" : ", '") + n + "'";
  try {
    f();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& n : needles)
      if (msg.find(n) == std::string::npos)
        ADD_FAILURE_AT(where.file_name(), int(where.line()))
            << "message '" << msg << "' lacks '" << n << "'";
    return;
  }
  ADD_FAILURE_AT(where.file_name(), int(where.line()))
      << "expected an attnlab::Error containing " << joined << "; nothing was thrown";
}
inline void expect_error(const std::function<void()>& f, const std::string& needle,
                         const std::source_location& where = std::source_location::current()) {
  expect_error(f, {needle}, where);
}

// A fresh, empty directory under the system temp dir named after the tag, the process id, the
// running test and a per-process counter (so parallel runs, tests and several TempDirs of one test
// never share one). Destruction removes it with its contents, first restoring owner permissions
// that a test may have taken away.
class TempDir {
 public:
  explicit TempDir(const std::string& tag = "tmp") {
    static std::atomic<int> counter{0};
    std::string test = "no_test";
    if (const auto* info = ::testing::UnitTest::GetInstance()->current_test_info())
      test = std::string(info->test_suite_name()) + "." + info->name();
    for (char& c : test)
      if (c == '/' || c == '\\' || c == ' ') c = '_';  // parameterized names contain '/'
    path_ = std::filesystem::temp_directory_path() /
            ("attnlab_" + tag + "_" + std::to_string(::getpid()) + "_" + test + "_" +
             std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    namespace fs = std::filesystem;
    std::error_code ec, ignored;  // a destructor must not throw; leftovers are only litter
    fs::permissions(path_, fs::perms::owner_all, fs::perm_options::add, ignored);
    for (auto it = fs::recursive_directory_iterator(path_, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
      fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, ignored);
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // The path of `name` (which may contain '/') inside the directory; nothing is created.
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// For determinism checks: the CPU references must give the same bits for any thread count.
class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int threads) : saved_(omp_get_max_threads()) {
    omp_set_num_threads(threads);
  }
  ~ScopedOmpThreads() { omp_set_num_threads(saved_); }
  ScopedOmpThreads(const ScopedOmpThreads&) = delete;
  ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;

 private:
  int saved_;
};

}  // namespace attnlab::test
