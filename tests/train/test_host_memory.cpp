// The CPU run's memory limit: every cgroup limit above the process (v2 and v1), not only the
// root's memory.max (a Slurm job's or a systemd scope's limit was not seen).
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "test_util.h"
#include "train/host_memory.h"

namespace attnlab {
namespace {

namespace fs = std::filesystem;

void put(const fs::path& p, const std::string& v) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << v << "\n";
}

TEST(HostMemory, CgroupHeadroomIsTheLeastOverTheHierarchy) {
  test::TempDir dir("cg");
  const fs::path v2 = dir.path() / "v2", v1 = dir.path() / "v1";
  fs::create_directories(v2);
  fs::create_directories(v1);
  // No limit anywhere (a container's root without memory.max, or "max").
  EXPECT_EQ(cgroup_memory_headroom("0::/\n", v2.string(), v1.string()), SIZE_MAX);
  put(v2 / "memory.max", "max");
  EXPECT_EQ(cgroup_memory_headroom("0::/\n", v2.string(), v1.string()), SIZE_MAX);
  // v2: a job's limit two levels up binds, the unlimited leaf does not.
  put(v2 / "job" / "memory.max", "1000");
  put(v2 / "job" / "memory.current", "400");
  put(v2 / "job" / "step" / "memory.max", "max");
  put(v2 / "job" / "step" / "memory.current", "100");
  EXPECT_EQ(cgroup_memory_headroom("0::/job/step\n", v2.string(), v1.string()), 600u);
  // A tighter leaf binds instead; a limit already exceeded leaves nothing.
  put(v2 / "job" / "step" / "memory.max", "150");
  EXPECT_EQ(cgroup_memory_headroom("0::/job/step\n", v2.string(), v1.string()), 50u);
  put(v2 / "job" / "step" / "memory.current", "200");
  EXPECT_EQ(cgroup_memory_headroom("0::/job/step\n", v2.string(), v1.string()), 0u);
  // v1: the memory controller's line (among others); "unlimited" is near 2^63.
  put(v1 / "slurm" / "memory.limit_in_bytes", "5000");
  put(v1 / "slurm" / "memory.usage_in_bytes", "1000");
  put(v1 / "slurm" / "job" / "memory.limit_in_bytes", "9223372036854771712");
  put(v1 / "slurm" / "job" / "memory.usage_in_bytes", "500");
  const std::string v1_text = "4:cpu,cpuacct:/slurm/job\n7:memory:/slurm/job\n";
  EXPECT_EQ(cgroup_memory_headroom(v1_text, v2.string(), v1.string()), 4000u);
  // Both kinds present (a hybrid hierarchy): the least.
  put(v2 / "job" / "step" / "memory.current", "100");
  EXPECT_EQ(cgroup_memory_headroom(v1_text + "0::/job/step\n", v2.string(), v1.string()), 50u);
  // The process's own reading is some positive number on Linux.
  EXPECT_GT(host_memory_available(), 0u);
}

// ZeRO-1's checkpoint gather into rank 0's host memory: warned where the host has less available.
TEST(HostMemory, GatherWarningOnlyWhereTheHostHasLess) {
  const size_t gib = size_t(1) << 30;
  EXPECT_EQ(host_gather_warning(87 * gib, 0), "");  // unknown
  EXPECT_EQ(host_gather_warning(87 * gib, 100 * gib), "");
  EXPECT_EQ(host_gather_warning(87 * gib, 60 * gib),
            "checkpoints gather the optimizer state (87.0 GiB under distributed.zero: 1) into "
            "rank 0's host memory, and this host has 60.0 GiB available now: a checkpoint may run "
            "out of memory (free host memory, or run rank 0 on a host with more)");
}

}  // namespace
}  // namespace attnlab
