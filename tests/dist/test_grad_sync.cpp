// GradientSync under `mpirun -np 2` (skipped in a plain run): buckets launched from the model's
// backward hook give exactly the sum of the ranks' gradients (each rank its own tokens), some of
// them before the backward ends; under ZeRO 1 the buckets' reduce-scatters, also launched during
// the backward, give each rank its slices (dist/shard_map.h) of that sum. The step's timeline
// (wall clock on the mpi backend) has one span per bucket.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "dist/dist_test_util.h"
#include "dist/grad_sync.h"
#include "dist/shard_map.h"
#include "model/gpt.h"

namespace attnlab {
namespace {

struct RankModel {
  std::unique_ptr<ExecContext> ctx = ExecContext::make_cpu();
  GPT model;
  ParameterStore store;
  std::vector<int32_t> tokens, targets;
  static constexpr int B = 2, T = 8;

  RankModel(const GPTConfig& c, int rank, int world) : model(c) {
    model.declare_params(store);
    store.finalize(Device::cpu, DType::f32, {ParamRole::base, ParamRole::attention}, world);
    model.init_params(store, 42);
    model.allocate(*ctx, B, T, DType::f32);
    std::mt19937 rng(100u + uint32_t(rank));  // each rank its own batch
    std::uniform_int_distribution<int> tok(0, c.vocab_size - 1);
    for (int i = 0; i < B * T; ++i) tokens.push_back(tok(rng)), targets.push_back(tok(rng));
  }
  Tensor t(std::vector<int32_t>& v) { return Tensor(v.data(), DType::i32, Device::cpu, {B, T}); }
  void backward() {
    store.zero_grads();
    model.forward(*ctx, store, t(tokens), t(targets), AttentionMode::train, 1.f / (B * T));
    model.backward(*ctx, store, t(tokens));
    model.take_loss(*ctx);
  }
  std::vector<float> grads() const {
    const Tensor g = store.grads();
    return std::vector<float>(g.ptr<float>(), g.ptr<float>() + g.numel());
  }
};

GPTConfig config() {
  GPTConfig c;
  c.n_layer = 4;
  c.n_head = 2;
  c.n_embd = 16;
  c.vocab_size = 29;
  c.padded_vocab = 32;
  c.block_size = 8;
  return c;
}

TEST(DistMpiGradSync, BucketsDuringBackwardSumTheRanksGradients) {
  MPI_OR_SKIP(comm);
  RankModel m(config(), comm->rank(), comm->world_size());
  m.backward();
  std::vector<float> expected = m.grads();
  comm->all_reduce(test::cpu_tensor(expected, {int64_t(expected.size())}), ReduceOp::sum);

  const ZeroShardMap map(m.store.trainable_buffer_numel(), comm->world_size(), comm->rank(),
                         /*bucket_elems=*/512);
  GradientSync sync(*comm, m.store, map, /*zero=*/0);
  ASSERT_GT(sync.num_buckets(), 4);
  m.model.set_backward_hook([&](int layer) { sync.layer_done(layer); });
  sync.begin_last_backward();
  m.backward();
  const int early = sync.buckets_launched_early();
  sync.finish();
  // Layers 3..1 finish before the embeddings: the buckets above h.1 go early, the one holding
  // wte (offset 0) only at finish().
  EXPECT_GT(early, 0);
  EXPECT_LT(early, sync.num_buckets());
  EXPECT_EQ(m.grads(), expected);  // the same two terms per element: bit for bit
  const OverlapReport o = sync.overlap();
  ASSERT_TRUE(o.valid);
  EXPECT_EQ(int(o.bucket_ms.size()), sync.num_buckets());
  EXPECT_GE(o.comm_ms, 0.0);
  EXPECT_DOUBLE_EQ(o.exposed_ms, o.comm_ms);  // blocking collectives: nothing is hidden
  EXPECT_LE(o.backward_end_ms, o.optimizer_ready_ms);

  // ZeRO 1: this rank's slices of the same sum, reduce-scattered bucket by bucket, early too.
  GradientSync zero1(*comm, m.store, map, /*zero=*/1);
  m.model.set_backward_hook([&](int layer) { zero1.layer_done(layer); });
  zero1.begin_last_backward();
  m.backward();
  const int early1 = zero1.buckets_launched_early();
  zero1.finish();
  EXPECT_EQ(early1, early);
  const std::vector<float> g = m.grads();
  int64_t owned = 0;
  for (const ZeroShardMap::Piece& p : map.pieces()) {
    owned += p.numel;
    for (int64_t i = p.flat; i < p.flat + p.numel; ++i)
      ASSERT_EQ(g[size_t(i)], expected[size_t(i)]) << "element " << i;
  }
  EXPECT_EQ(owned, map.shard_numel());
  EXPECT_EQ(owned * comm->world_size(), m.store.trainable_buffer_numel());
  EXPECT_EQ(int(zero1.overlap().bucket_ms.size()), zero1.num_buckets());
}

}  // namespace
}  // namespace attnlab
