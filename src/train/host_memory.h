// The host memory a CPU run can have: MemAvailable plus free swap, capped by every memory limit
// of the process's cgroup and its ancestors (cgroup v2 memory.max - memory.current; cgroup v1
// memory.limit_in_bytes - memory.usage_in_bytes), so that a run inside a Slurm job, a
// `systemd-run -p MemoryMax=` scope or a container is compared with its own limit, not the
// host's.
#pragma once
#include <cstddef>
#include <string>

namespace attnlab {

// Bytes; 0 when /proc/meminfo cannot be read (not Linux: nothing to compare with).
size_t host_memory_available();

// The warning for a run whose checkpoints gather `need` bytes into this host's memory (ZeRO-1's
// optimizer state on rank 0) where `available` (host_memory_available) is less; "" otherwise,
// and where available is 0 (unknown).
std::string host_gather_warning(size_t need, size_t available);

// The least headroom (limit - usage) over the cgroups named by `proc_self_cgroup` (the text of
// /proc/self/cgroup) and their ancestors, under `v2_root` (cgroup v2, "0::/path" lines) and
// `v1_memory_root` (cgroup v1, the memory controller's "N:...memory...:/path" line); SIZE_MAX
// where no limit is set. Exposed for tests, which build a hierarchy in a temporary directory.
size_t cgroup_memory_headroom(const std::string& proc_self_cgroup, const std::string& v2_root,
                              const std::string& v1_memory_root);

}  // namespace attnlab
