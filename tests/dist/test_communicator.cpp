// The single-process communicator and the backend registry.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dist/communicator.h"
#include "test_util.h"

namespace attnlab {
namespace {

using test::expect_error;

std::unique_ptr<Communicator> local() {
  CommOptions o;
  o.backend = "none";
  return make_communicator(o);
}

TEST(Communicator, LocalIsWorldOfOneAndLeavesDataAlone) {
  auto comm = local();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->world_size(), 1);
  EXPECT_TRUE(comm->is_root());
  EXPECT_STREQ(comm->backend(), "none");
  std::vector<float> x{1.5f, -2.f, 3.25f};
  const std::vector<float> before = x;
  const Tensor t(x.data(), DType::f32, Device::cpu, Shape{3});
  comm->all_reduce(t, ReduceOp::sum);
  comm->all_reduce(t, ReduceOp::avg);
  EXPECT_EQ(x, before);
  comm->broadcast(t, 0);
  EXPECT_EQ(x, before);
  std::vector<float> y(3, 0.f);
  const Tensor u(y.data(), DType::f32, Device::cpu, Shape{3});
  comm->reduce_scatter(t, u, ReduceOp::sum);
  EXPECT_EQ(y, before);
  y.assign(3, 0.f);
  comm->all_gather(t, u);
  EXPECT_EQ(y, before);
  double h[2] = {1.0, 2.0};
  comm->all_reduce_host(h, 2);
  EXPECT_EQ(h[1], 2.0);
  comm->barrier();
  comm->wait();
  expect_error([&] { comm->broadcast(t, 1); }, "root rank 1 out of range (world size 1)");
  expect_error([&] { comm->all_reduce_sum(Tensor(nullptr, DType::f32, Device::cpu, Shape{3})); },
               "has no data");
  std::vector<float> z(2);
  expect_error([&] { comm->reduce_scatter(t, test::cpu_tensor(z, {2}), ReduceOp::sum); },
               "reduce_scatter: f32[3] on cpu must hold world size (1) x f32[2] on cpu");
}

TEST(Communicator, OneProcessIsAloneOnItsHost) {
  auto comm = make_communicator("none");
  EXPECT_EQ(ranks_on_this_host(*comm), 1);
}

TEST(Communicator, BackendNames) {
  CommOptions o;
  o.backend = "gloo";
  expect_error([&] { make_communicator(o); },
               "unknown distributed backend 'gloo' (valid: none, mpi, nccl; this build has none");
  o.backend = "none";
  o.launch.world_size = 2;
  o.launch.rank = 1;
  o.launch.launcher = Launcher::env;
  expect_error([&] { make_communicator(o); },
               "distributed.backend is 'none' but the launcher (env) started 2 ranks");
  o.launch.launcher = Launcher::srun;  // an sbatch script's variables: says so
  expect_error([&] { make_communicator(o); },
               "SLURM_NTASKS is the allocation's: a single process inside an sbatch script");
  // A Hydra mpiexec's ranks (PMI_*) cannot join this build's MPI (OpenMPI's): refused before
  // MPI starts, whether or not the build has MPI.
  o.launch.launcher = Launcher::pmi;
  o.backend = "mpi";
  expect_error([&] { make_communicator(o); },
               {"distributed.backend 'mpi' under a PMI launch", "launch with OpenMPI's mpirun"});
  o.backend = "none";
  o.launch.launcher = Launcher::env;
#if !ATTNLAB_HAVE_MPI
  o.backend = "mpi";
  expect_error([&] { make_communicator(o); }, "this build has no MPI");
#endif
#if !ATTNLAB_HAVE_NCCL
  o.backend = "nccl";
  expect_error([&] { make_communicator(o); }, "this build has no NCCL");
#endif
}

}  // namespace
}  // namespace attnlab
