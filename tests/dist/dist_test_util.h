// Helpers of the multi-rank tests, which run under `mpirun -np 2` (the ctest dist_mpi_np2, see
// CMakeLists.txt) and skip in a plain run.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

#include "dist/communicator.h"
#include "test_util.h"

namespace attnlab::test {

// The test's own mpi communicator, or nullptr outside a multi-rank mpirun launch.
inline std::unique_ptr<Communicator> mpi_or_null(double timeout_s = 120.0) {
  const LaunchInfo l = detect_launch();
  if (l.world_size < 2 || !l.under_mpi()) return nullptr;
  CommOptions o;
  o.backend = "mpi";
  o.launch = l;
  o.timeout_s = timeout_s;
  return make_communicator(o);
}

#define MPI_OR_SKIP(comm, ...)                           \
  auto comm = ::attnlab::test::mpi_or_null(__VA_ARGS__); \
  if (!comm) GTEST_SKIP() << "needs mpirun -np 2 (ctest dist_mpi_np2)"

// A directory every rank of the job sees: rank 0 makes it and broadcasts its path; rank 0
// removes it at scope exit (after a barrier, so no rank still reads it).
class SharedTempDir {
 public:
  SharedTempDir(Communicator& comm, const std::string& tag) : comm_(comm) {
    char path[512] = {};
    if (comm.rank() == 0) {
      dir_ = std::make_unique<TempDir>(tag);
      std::snprintf(path, sizeof(path), "%s", dir_->path().c_str());
    }
    comm.broadcast_host(path, sizeof(path), 0);
    path_ = path;
  }
  ~SharedTempDir() { comm_.barrier(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  Communicator& comm_;
  std::unique_ptr<TempDir> dir_;
  std::filesystem::path path_;
};

}  // namespace attnlab::test
