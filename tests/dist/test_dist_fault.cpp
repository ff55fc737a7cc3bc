// A dead, hung or out-of-memory rank ends the job with a clear error within
// distributed.timeout_s. These run only as the ctests dist_mpi_rank_hangs / dist_mpi_rank_exits /
// dist_mpi_rank_oom (CMakeLists.txt: mpirun -np 2, ATTNLAB_DIST_FAULT_TEST=1), which check the
// job's output and its bounded time; they end the job on purpose, so a plain run skips them.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "config/recipe.h"
#include "dist/dist_test_util.h"
#include "train/trainer.h"

namespace attnlab {
namespace {

const char* kRecipe = R"(
model: {n_layer: 1, n_head: 2, n_embd: 32, vocab_size: 64, block_size: 16, vocab_multiple: 32}
data:
  source: synthetic
  synthetic: {vocab_size: 64, train_tokens: 4000, val_tokens: 1024, seed: 7}
train: {steps: 50, micro_batch: 2, seq_len: 16, device: cpu, seed: 1}
eval: {every: 0, at_end: false}
checkpoint: {every: 0, at_end: false}
distributed: {timeout_s: 2}
)";

bool fault_test_enabled() {
  const char* v = std::getenv("ATTNLAB_DIST_FAULT_TEST");
  return v && std::string(v) == "1";
}

void train_tiny() {
  test::TempDir dir("fault");  // per rank: each rank's own run directory is enough here
  TrainOptions o;
  o.quiet = true;
  train(parse_recipe(kRecipe, "fault.yaml", {"train.out_dir=" + dir.file("run")}), o);
}

// Rank 1 hangs (sleeps past the timeout, never reaching a collective): rank 0's first collective
// in the trainer times out after 2 s and the trainer ends the job (MPI_Abort) with
// "rank 0 of 2: MPI ... did not complete within distributed.timeout_s = 2 s".
TEST(DistFault, RankHangs) {
  if (!fault_test_enabled()) GTEST_SKIP() << "run by the ctest dist_mpi_rank_hangs";
  const LaunchInfo l = detect_launch();
  ASSERT_EQ(l.world_size, 2);
  if (l.rank == 1) {
    // Join MPI's start-up (MPI_Init and the communicator's MPI_Comm_dup are collective and
    // bounded by the launcher, not by timeout_s), then never reach a collective.
    auto comm = test::mpi_or_null();
    std::this_thread::sleep_for(std::chrono::seconds(60));
    std::_Exit(0);
  }
  train_tiny();
  FAIL() << "rank 0 finished training while rank 1 hung";
}

// Rank 1 dies (exits with code 3 without finalising MPI) after start-up: the launcher ends the job,
// or rank 0's timeout does.
TEST(DistFault, RankExits) {
  if (!fault_test_enabled()) GTEST_SKIP() << "run by the ctest dist_mpi_rank_exits";
  const LaunchInfo l = detect_launch();
  ASSERT_EQ(l.world_size, 2);
  if (l.rank == 1) {
    auto comm = test::mpi_or_null();  // started, as in the trainer, then dies
    std::_Exit(3);
  }
  train_tiny();
  FAIL() << "rank 0 finished training while rank 1 was dead";
}

// Rank 1 runs out of memory at step 3 (the trainer's test hook ATTNLAB_TEST_OOM=1:3, set by the
// ctest, allocates more than the machine has): rank 1 reports "rank 1 of 2: out of host memory
// allocating ... the run needs about ... hint: ..." and ends the job (MPI_Abort, non-zero exit);
// rank 0 is ended with it (or by its own timeout) instead of waiting forever.
TEST(DistFault, RankOutOfMemory) {
  if (!fault_test_enabled()) GTEST_SKIP() << "run by the ctest dist_mpi_rank_oom";
  ASSERT_EQ(detect_launch().world_size, 2);
  // One run directory for both ranks (the start-up check compares train.out_dir), relative to the
  // ctest's working directory: the job is ended, so nothing would remove a temporary one.
  TrainOptions o;
  o.quiet = true;
  train(
      parse_recipe(kRecipe, "fault.yaml", {"train.out_dir=dist_oom_run", "train.batch_tokens=64"}),
      o);
  FAIL() << "training finished although rank 1 ran out of memory";
}

}  // namespace
}  // namespace attnlab
