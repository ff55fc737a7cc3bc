// The nccl backend on one GPU (world size 1; skipped without a CUDA device or without NCCL in the
// build): every collective leaves device data as it was (the identities of one rank, through
// real NCCL calls, streams and events), and training through it equals training without a
// communicator bit for bit. Two ranks on one GPU: scripts/dist_device_check.sh.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "config/recipe.h"
#include "cuda/cuda_test_util.h"
#include "dist/communicator.h"
#include "io/safetensors.h"
#include "train/trainer.h"

namespace fs = std::filesystem;

namespace attnlab {
namespace {

#if ATTNLAB_HAVE_NCCL
#define NCCL_TEST_PREAMBLE() CUDA_TEST_PREAMBLE()
#else
#define NCCL_TEST_PREAMBLE() GTEST_SKIP() << "this build has no NCCL"
#endif

TEST(NcclCuda, WorldOfOneCollectivesKeepTheData) {
  NCCL_TEST_PREAMBLE();
  auto ctx = ExecContext::make_cuda(0);
  CommOptions o;
  o.backend = "nccl";
  o.timeout_s = 60;
  o.compute_stream = ctx->stream;
  auto comm = make_communicator(o);
  EXPECT_STREQ(comm->backend(), "nccl");
  EXPECT_EQ(comm->world_size(), 1);
  const int n = 4099;
  const std::vector<float> x = test::random_vector(n, 5);
  Buffer a(Device::cuda, n * sizeof(float)), b(Device::cuda, n * sizeof(float));
  const Tensor ta = a.as(DType::f32, {n}), tb = b.as(DType::f32, {n});
  std::vector<float> host = x;
  copy_tensor(ta, Tensor(host.data(), DType::f32, Device::cpu, {n}));
  comm->all_reduce(ta, ReduceOp::sum);
  comm->all_reduce(ta, ReduceOp::avg);
  comm->broadcast(ta, 0);
  comm->reduce_scatter(ta, tb, ReduceOp::sum);  // out of place: b = a
  comm->all_gather(tb, ta);
  comm->wait();
  ctx->synchronize();
  std::vector<float> got(n);
  copy_tensor(Tensor(got.data(), DType::f32, Device::cpu, {n}), tb);
  EXPECT_EQ(got, x);
  copy_tensor(Tensor(got.data(), DType::f32, Device::cpu, {n}), ta);
  EXPECT_EQ(got, x);
  double h[3] = {1.5, -2.0, 3.0};
  comm->all_reduce_host(h, 3);
  EXPECT_EQ(h[1], -2.0);
  char bytes[100000];
  for (size_t i = 0; i < sizeof(bytes); ++i) bytes[i] = char(i * 7);
  comm->broadcast_host(bytes, sizeof(bytes), 0);  // over the 64 KiB scratch: two pieces
  EXPECT_EQ(bytes[99999], char(99999 * 7));
  comm->barrier();
}

// The timeline by CUDA events (dist/communicator.h): one span per collective while it is on, in
// order and after the origin, and the marks on the compute stream; nothing once it is stopped.
TEST(NcclCuda, TimelineRecordsEachCollectiveAndTheMarks) {
  NCCL_TEST_PREAMBLE();
  auto ctx = ExecContext::make_cuda(0);
  CommOptions o;
  o.backend = "nccl";
  o.timeout_s = 60;
  o.compute_stream = ctx->stream;
  auto comm = make_communicator(o);
  const int64_t n = int64_t(1) << 22;
  Buffer a(Device::cuda, size_t(n) * sizeof(float));
  a.zero();
  const Tensor t = a.as(DType::f32, {n});
  for (int step = 0; step < 2; ++step) {  // the event pool is reused
    comm->begin_timeline();
    comm->all_reduce(t.slice0(0, n / 2), ReduceOp::sum);
    comm->all_reduce(t.slice0(n / 2, n), ReduceOp::sum);
    comm->mark_timeline();
    comm->wait();
    comm->mark_timeline();
    comm->stop_timeline();
    comm->all_reduce(t, ReduceOp::sum);  // not recorded
    comm->mark_timeline();               // not recorded
    comm->wait();
    ctx->synchronize();
    const CommTimeline tl = comm->read_timeline();
    EXPECT_FALSE(tl.blocking);
    ASSERT_EQ(tl.collectives.size(), 2u);
    ASSERT_EQ(tl.marks_ms.size(), 2u);
    double last = 0.0;
    for (const CommTimeline::Span& sp : tl.collectives) {
      EXPECT_GE(sp.start_ms, last);
      EXPECT_GE(sp.end_ms, sp.start_ms);
      last = sp.end_ms;
    }
    EXPECT_GE(tl.marks_ms[1], tl.collectives.back().end_ms);  // after wait(): every bucket done
  }
}

// A bf16 model on the GPU, deterministic kernels: backend nccl at world size 1 == backend none.
TEST(NcclCuda, TrainingThroughNcclAtWorldOneEqualsNoCommunicatorBitForBit) {
  NCCL_TEST_PREAMBLE();
  const char* recipe = R"(
model: {n_layer: 2, n_head: 2, n_embd: 128, vocab_size: 256, block_size: 64, vocab_multiple: 64}
data:
  source: synthetic
  synthetic: {vocab_size: 256, train_tokens: 60000, val_tokens: 8192, seed: 7}
optim: {lr: 3.0e-3}
schedule: {type: cosine, warmup_steps: 1}
train: {steps: 4, micro_batch: 4, seq_len: 64, batch_tokens: 512, device: cuda, precision: bf16,
        deterministic: true, seed: 3}
eval: {every: 0, at_end: false}
checkpoint: {every: 0, at_end: true}
)";
  test::TempDir tmp("nccl1");
  std::vector<std::vector<double>> losses;
  for (const char* backend : {"none", "nccl"}) {
    TrainOptions o;
    o.quiet = true;
    o.single_process = true;
    losses.push_back(train(parse_recipe(recipe, "nccl.yaml",
                                        {std::string("distributed.backend=") + backend,
                                         "train.out_dir=" + tmp.file(backend)}),
                           o)
                         .losses);
  }
  EXPECT_EQ(losses[0], losses[1]);
  for (const char* f : {"model.safetensors", "optimizer.safetensors"}) {
    io::SafetensorsFile a((fs::path(tmp.file("none")) / "checkpoints/step_00000004" / f).string());
    io::SafetensorsFile b((fs::path(tmp.file("nccl")) / "checkpoints/step_00000004" / f).string());
    ASSERT_EQ(a.names(), b.names());
    for (const auto& name : a.names()) {
      const auto x = a.raw(name), y = b.raw(name);
      EXPECT_TRUE(x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin()))
          << f << ": " << name;
    }
  }
}

}  // namespace
}  // namespace attnlab
