// io::DirLock: one holder of a directory at a time, the second refused naming the first's pid;
// released with its object.
#include <gtest/gtest.h>
#include <unistd.h>

#include <optional>
#include <string>

#include "io/dir_lock.h"
#include "test_util.h"
#include "train/trainer.h"

namespace attnlab {
namespace {

TEST(DirLock, SecondHolderIsRefusedUntilTheFirstIsGone) {
  const test::TempDir tmp("lock");
  std::optional<io::DirLock> first;
  first.emplace(tmp.path().string(), ".l", "train.out_dir");
  test::expect_error([&] { io::DirLock second(tmp.path().string(), ".l", "train.out_dir"); },
                     {"is in use by another attnlab process (pid " + std::to_string(::getpid()),
                      "choose another train.out_dir"});
  first.reset();
  EXPECT_NO_THROW(io::DirLock again(tmp.path().string(), ".l", "train.out_dir"));
}

// A training run holds its out_dir: a second run into it while the first writes is refused.
TEST(DirLock, TrainingHoldsItsOutDir) {
  const test::TempDir tmp("lock");
  const std::string dir = tmp.file("run");
  std::filesystem::create_directories(dir);
  io::DirLock held(dir, ".attnlab-train.lock", "elsewhere");
  const Recipe r = parse_recipe(
      "model: {n_layer: 1, n_head: 2, n_embd: 16, vocab_size: 64, block_size: 16}\n"
      "data: {source: synthetic, synthetic: {vocab_size: 64, train_tokens: 4096, val_tokens: "
      "1024}}\ntrain: {steps: 1, micro_batch: 2, seq_len: 16, device: cpu}\n",
      "r.yaml", {"train.out_dir=" + dir});
  TrainOptions o;
  o.quiet = true;
  test::expect_error([&] { train(r, o); }, {"train.out_dir '" + dir + "' is in use"});
}

}  // namespace
}  // namespace attnlab
