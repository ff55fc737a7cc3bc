// The mpi backend's collectives (tests/dist/dist_test_util.h: under mpirun -np 2, else skipped).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "dist/communicator.h"
#include "dist/dist_test_util.h"
#include "test_util.h"

namespace attnlab {
namespace {

using test::expect_error;

// Rank r's values: random, different per rank (never zeros).
std::vector<float> values_of(int rank, size_t n) { return test::random_vector(n, 100u + rank); }

// mpirun -np 2 on one machine: both ranks share its memory (the CPU memory check divides it).
TEST(DistMpiCollectives, RanksOnThisHostCountsBoth) {
  MPI_OR_SKIP(comm);
  EXPECT_EQ(ranks_on_this_host(*comm), 2);
}

TEST(DistMpiCollectives, AllReduceSumAndAvg) {
  MPI_OR_SKIP(comm);
  const int W = comm->world_size(), n = 1000;
  std::vector<double> sum(n, 0.0);
  for (int r = 0; r < W; ++r) {
    const auto v = values_of(r, n);
    for (int i = 0; i < n; ++i) sum[size_t(i)] += v[size_t(i)];
  }
  std::vector<float> x = values_of(comm->rank(), n);
  comm->all_reduce(test::cpu_tensor(x, {n}), ReduceOp::sum);
  for (int i = 0; i < n; ++i) ASSERT_NEAR(x[size_t(i)], sum[size_t(i)], 1e-5) << i;
  x = values_of(comm->rank(), n);
  comm->all_reduce(test::cpu_tensor(x, {n}), ReduceOp::avg);
  for (int i = 0; i < n; ++i) ASSERT_NEAR(x[size_t(i)], sum[size_t(i)] / W, 1e-5) << i;
  std::vector<int32_t> k{comm->rank() + 1, 7};
  comm->all_reduce(test::cpu_tensor(k, {2}), ReduceOp::sum);
  EXPECT_EQ(k[0], W * (W + 1) / 2);
  EXPECT_EQ(k[1], 7 * W);
  double h[2] = {double(comm->rank()), 0.5};
  comm->all_reduce_host(h, 2);
  EXPECT_EQ(h[0], W * (W - 1) / 2.0);
  EXPECT_EQ(h[1], 0.5 * W);
}

TEST(DistMpiCollectives, ReduceScatterAndAllGatherInAndOutOfPlace) {
  MPI_OR_SKIP(comm);
  const int W = comm->world_size(), R = comm->rank(), n = 96;  // per-rank shard
  std::vector<double> sum(size_t(n) * W, 0.0);
  for (int r = 0; r < W; ++r) {
    const auto v = values_of(r, size_t(n) * W);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += v[i];
  }
  for (bool in_place : {false, true}) {
    std::vector<float> send = values_of(R, size_t(n) * W), out(static_cast<size_t>(n));
    const Tensor whole = test::cpu_tensor(send, {int64_t(n) * W});
    const Tensor part =
        in_place ? whole.slice0(int64_t(R) * n, int64_t(R + 1) * n) : test::cpu_tensor(out, {n});
    comm->reduce_scatter(whole, part, ReduceOp::sum);
    const float* p = part.ptr<float>();
    for (int i = 0; i < n; ++i) ASSERT_NEAR(p[i], sum[size_t(R) * n + i], 1e-5) << in_place;
    // Gather the shards back: every rank ends with the whole reduced vector.
    std::vector<float> gathered(size_t(n) * W, -1.f);
    const Tensor g = test::cpu_tensor(gathered, {int64_t(n) * W});
    if (in_place) {
      copy_tensor(g.slice0(int64_t(R) * n, int64_t(R + 1) * n), part);
      comm->all_gather(g.slice0(int64_t(R) * n, int64_t(R + 1) * n), g);
    } else {
      comm->all_gather(part, g);
    }
    for (size_t i = 0; i < gathered.size(); ++i) ASSERT_NEAR(gathered[i], sum[i], 1e-5) << i;
  }
  std::vector<float> bad(3), whole(size_t(n) * W);
  expect_error(
      [&] {
        comm->reduce_scatter(test::cpu_tensor(whole, {int64_t(n) * W}), test::cpu_tensor(bad, {3}),
                             ReduceOp::sum);
      },
      "must hold world size (2) x f32[3]");
}

TEST(DistMpiCollectives, BroadcastAndBarrier) {
  MPI_OR_SKIP(comm);
  const int W = comm->world_size();
  for (int root = 0; root < W; ++root) {
    std::vector<float> x = values_of(comm->rank(), 17);
    comm->broadcast(test::cpu_tensor(x, {17}), root);
    EXPECT_EQ(x, values_of(root, 17));
    char text[8] = "rank x";
    text[5] = char('0' + comm->rank());
    comm->broadcast_host(text, sizeof(text), root);
    EXPECT_EQ(text[5], char('0' + root));
  }
  comm->barrier();
  expect_error([&] { comm->broadcast_host(nullptr, 0, W); }, "root rank 2 out of range");
}

// A rank that does not arrive: the waiting rank throws naming itself and the collective within
// the timeout. The late rank then joins the same all-reduce, which rank 0's communicator lets
// complete before it is freed (its buffer is static so that it outlives the test).
TEST(DistMpiCollectives, TimeoutNamesTheWaitingRankAndCollective) {
  // Rank 0 waits 1 s (and 1 s more at destruction); rank 1 joins after 1.5 s.
  MPI_OR_SKIP(comm, detect_launch().rank == 0 ? 1.0 : 60.0);
  static std::vector<float> x = values_of(comm->rank(), 8);
  if (comm->rank() == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    comm->all_reduce(test::cpu_tensor(x, {8}), ReduceOp::sum);
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg =
      test::thrown_message([&] { comm->all_reduce(test::cpu_tensor(x, {8}), ReduceOp::sum); });
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(msg.find("rank 0 of 2: MPI all_reduce #1 (8 elements) did not complete within "
                     "distributed.timeout_s = 1 s"),
            std::string::npos)
      << msg;
  EXPECT_GE(waited, 1.0);
  EXPECT_LT(waited, 1.45);
}

// A barrier with its own bound (the one around rank 0's checkpoint write) waits past
// distributed.timeout_s: rank 1 (timeout 0.5 s) waits 1.2 s for rank 0 in barrier(10), which
// completes; its plain barrier() would have thrown after 0.5 s.
TEST(DistMpiCollectives, BarrierWithItsOwnBoundWaitsPastTheTimeout) {
  MPI_OR_SKIP(comm, detect_launch().rank == 1 ? 0.5 : 60.0);
  if (comm->rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_NO_THROW(comm->barrier(10.0));
  if (comm->rank() == 1) {
    EXPECT_GE(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  }
  comm->barrier(10.0);
}

}  // namespace
}  // namespace attnlab
