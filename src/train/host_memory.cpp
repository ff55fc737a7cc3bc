#include "train/host_memory.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace attnlab {

namespace {

namespace fs = std::filesystem;

// A limit file's value; SIZE_MAX for "max" (v2), a v1 "unlimited" (near 2^63) or no file.
size_t read_limit(const fs::path& p) {
  std::ifstream f(p);
  std::string v;
  if (!(f >> v) || v == "max") return SIZE_MAX;
  try {
    const unsigned long long x = std::stoull(v);
    return x >= (1ull << 60) ? SIZE_MAX : size_t(x);
  } catch (...) {
    return SIZE_MAX;
  }
}

size_t read_usage(const fs::path& p) {
  std::ifstream f(p);
  unsigned long long x = 0;
  return f >> x ? size_t(x) : 0;
}

// The least limit - usage from dir up to root (both included).
size_t headroom_up(const fs::path& root, const std::string& rel, const char* limit_name,
                   const char* usage_name) {
  size_t best = SIZE_MAX;
  const size_t root_length = root.string().size();
  for (fs::path dir = root / fs::path(rel).relative_path();; dir = dir.parent_path()) {
    const size_t limit = read_limit(dir / limit_name);
    if (limit != SIZE_MAX) {
      const size_t used = read_usage(dir / usage_name);
      best = std::min(best, limit > used ? limit - used : 0);
    }
    if (dir.string().size() <= root_length) break;  // root itself was the last
  }
  return best;
}

}  // namespace

size_t cgroup_memory_headroom(const std::string& proc_self_cgroup, const std::string& v2_root,
                              const std::string& v1_memory_root) {
  size_t best = SIZE_MAX;
  std::istringstream lines(proc_self_cgroup);
  for (std::string line; std::getline(lines, line);) {
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {  // v2
      best = std::min(best, headroom_up(v2_root, path, "memory.max", "memory.current"));
    } else {
      std::istringstream names(controllers);
      for (std::string n; std::getline(names, n, ',');)
        if (n == "memory")
          best = std::min(best, headroom_up(v1_memory_root, path, "memory.limit_in_bytes",
                                            "memory.usage_in_bytes"));
    }
  }
  return best;
}

std::string host_gather_warning(size_t need, size_t available) {
  if (available == 0 || available >= need) return "";
  const double gib = double(size_t(1) << 30);
  return strformat(
      "checkpoints gather the optimizer state (%.1f GiB under distributed.zero: 1) into rank 0's "
      "host memory, and this host has %.1f GiB available now: a checkpoint may run out of "
      "memory (free host memory, or run rank 0 on a host with more)",
      double(need) / gib, double(available) / gib);
}

size_t host_memory_available() {
  std::ifstream meminfo("/proc/meminfo");
  size_t available = 0;
  for (std::string key; meminfo >> key;) {
    size_t kib = 0;
    meminfo >> kib;
    if (key == "MemAvailable:" || key == "SwapFree:") available += kib * 1024;
    meminfo.ignore(1 << 10, '\n');
  }
  if (available == 0) return 0;
  std::ifstream cg("/proc/self/cgroup");
  std::stringstream text;
  text << cg.rdbuf();
  return std::min(available,
                  cgroup_memory_headroom(text.str(), "/sys/fs/cgroup", "/sys/fs/cgroup/memory"));
}

}  // namespace attnlab
