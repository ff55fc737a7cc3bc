// FNV-1a over bytes: the stable 64-bit hash of names, recipe values and data samples (the same on
// every platform and run; not for security).
#pragma once
#include <cstddef>
#include <cstdint>

namespace attnlab {

constexpr uint64_t kFnv1aOffset = 1469598103934665603ull;

inline uint64_t fnv1a(const void* data, size_t n, uint64_t h = kFnv1aOffset) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace attnlab
