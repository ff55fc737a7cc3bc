// Shared by the CPU references: when an OpenMP region is worth starting. Waking the thread team
// costs microseconds (far more when the cores are shared), so small ops run on the calling
// thread. This never changes results: every output is owned by one thread either way.
#pragma once
#include <cstdint>

namespace attnlab {

// Roughly the number of floating-point operations below which a loop stays serial.
constexpr int64_t kMinParallelWork = int64_t(1) << 15;

inline bool worth_parallel(int64_t work) { return work >= kMinParallelWork; }

}  // namespace attnlab
