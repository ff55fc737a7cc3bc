// The single-process communicator and the backend registry.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dist/communicator.h"
#include "test_util.h"

namespace attnlab {
namespace {

using test::expect_error;

TEST(Communicator, LocalIsWorldOfOneAndLeavesDataAlone) {
  auto comm = make_communicator("none");
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->world_size(), 1);
  EXPECT_TRUE(comm->is_root());
  EXPECT_STREQ(comm->backend(), "none");
  std::vector<float> x{1.5f, -2.f, 3.25f};
  const std::vector<float> before = x;
  const Tensor t(x.data(), DType::f32, Device::cpu, Shape{3});
  comm->all_reduce_sum(t);
  EXPECT_EQ(x, before);
  comm->broadcast(t, 0);
  EXPECT_EQ(x, before);
  comm->barrier();
  expect_error([&] { comm->broadcast(t, 1); }, "root rank 1 out of range (world size 1)");
  expect_error([&] { comm->all_reduce_sum(Tensor(nullptr, DType::f32, Device::cpu, Shape{3})); },
               "has no data");
}

TEST(Communicator, BackendNames) {
  expect_error([] { make_communicator("nccl"); }, "'nccl' is not supported yet");
  expect_error([] { make_communicator("mpi"); }, "'mpi' is not supported yet");
  expect_error([] { make_communicator("gloo"); },
               "unknown distributed backend 'gloo' (valid: none");
}

}  // namespace
}  // namespace attnlab
