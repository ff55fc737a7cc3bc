// DataLoader: windows, determinism, shuffling per epoch, rank sharding, exact resume, eval mode.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

#include "core/error.h"
#include "data/loader.h"
#include "test_util.h"

namespace attnlab {
namespace {

// Sources whose token at global offset i is unique (base + i), so every window is identifiable
// from its first input token.
std::vector<std::shared_ptr<const TokenSource>> make_sources(const std::vector<int64_t>& sizes) {
  std::vector<std::shared_ptr<const TokenSource>> sources;
  int32_t base = 0;
  for (size_t s = 0; s < sizes.size(); ++s) {
    std::vector<int32_t> t(size_t(sizes[s]));
    for (auto& x : t) x = base++;
    sources.push_back(std::make_shared<MemoryTokens>(std::move(t), "src" + std::to_string(s)));
  }
  return sources;
}

DataLoaderOptions opts(int B, int T, bool shuffle, uint64_t seed = 7, int rank = 0, int world = 1) {
  DataLoaderOptions o;
  o.batch_size = B;
  o.seq_len = T;
  o.shuffle = shuffle;
  o.seed = seed;
  o.rank = rank;
  o.world_size = world;
  return o;
}

// The first input token of every window: window -> token.
std::map<int32_t, int64_t> window_starts(const std::vector<int64_t>& sizes, int T) {
  std::map<int32_t, int64_t> starts;
  int64_t base = 0, w = 0;
  for (int64_t n : sizes) {
    for (int64_t j = 0; j < (n - 1) / T; ++j) starts[int32_t(base + j * T)] = w++;
    base += n;
  }
  return starts;
}

const std::vector<int64_t> kSizes = {101, 57, 230, 9};  // T=8: 12 + 7 + 28 + 1 = 48 windows

TEST(DataLoader, WindowsAreNonOverlappingAndTargetsShifted) {
  DataLoader loader(make_sources(kSizes), opts(4, 8, /*shuffle=*/false));
  EXPECT_EQ(loader.num_windows(), 48);
  EXPECT_EQ(loader.batches_per_epoch(), 12);
  EXPECT_EQ(loader.num_tokens(), 397);
  auto b = loader.next();
  ASSERT_EQ(b.inputs.size(), 32u);
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(b.inputs[size_t(i)], i);  // sequential windows 0..3 of source 0, stride T
    EXPECT_EQ(b.targets[size_t(i)], i + 1);
  }
  // Window 12 is the first of source 1 (tokens 101..), not a window crossing the boundary.
  loader.set_state({0, 12});
  b = loader.next();
  EXPECT_EQ(b.inputs[0], 101);
  EXPECT_EQ(b.targets[7], 109);
}

TEST(DataLoader, EveryWindowOncePerEpochAndEpochsDiffer) {
  const int T = 8;
  const auto starts = window_starts(kSizes, T);
  DataLoader loader(make_sources(kSizes), opts(4, T, true, 99));
  std::vector<std::vector<int64_t>> orders;
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> order;
    for (int step = 0; step < 12; ++step) {
      const auto b = loader.next();
      for (int i = 0; i < 4; ++i) {
        ASSERT_TRUE(starts.count(b.inputs[size_t(i) * T])) << "not a window start";
        order.push_back(starts.at(b.inputs[size_t(i) * T]));
        for (int t = 0; t < T; ++t)  // contiguous tokens
          ASSERT_EQ(b.inputs[size_t(i) * T + t] + 1, b.targets[size_t(i) * T + t]);
      }
    }
    EXPECT_EQ(std::set<int64_t>(order.begin(), order.end()).size(), 48u) << "epoch " << epoch;
    orders.push_back(order);
  }
  EXPECT_EQ(loader.state(), (DataLoader::State{3, 0}));
  EXPECT_NE(orders[0], orders[1]);
  EXPECT_NE(orders[1], orders[2]);
  std::vector<int64_t> identity(48);
  for (int i = 0; i < 48; ++i) identity[size_t(i)] = i;
  EXPECT_NE(orders[0], identity);
}

TEST(DataLoader, SameSeedSameBatchesDifferentSeedDifferent) {
  DataLoader a(make_sources(kSizes), opts(3, 8, true, 5));
  DataLoader b(make_sources(kSizes), opts(3, 8, true, 5));
  DataLoader c(make_sources(kSizes), opts(3, 8, true, 6));
  bool differs = false;
  for (int step = 0; step < 40; ++step) {  // spans several epochs; 48 % 3 == 0 is not needed
    const auto ba = a.next(), bb = b.next(), bc = c.next();
    ASSERT_EQ(ba.inputs, bb.inputs);
    ASSERT_EQ(ba.targets, bb.targets);
    differs = differs || ba.inputs != bc.inputs;
  }
  EXPECT_TRUE(differs);
}

TEST(DataLoader, PermutationIsUniformEnough) {
  // Over many seeds, the window at position 0 should hit every window of a 10-window epoch.
  DataLoader loader(make_sources({81}), opts(1, 8, true));
  std::map<int64_t, int> hits;
  for (uint64_t epoch = 0; epoch < 2000; ++epoch) ++hits[loader.window_at(epoch, 0)];
  ASSERT_EQ(hits.size(), 10u);
  for (const auto& [w, n] : hits) {
    EXPECT_GT(n, 120) << "window " << w;  // expected 200
    EXPECT_LT(n, 280) << "window " << w;
  }
}

TEST(DataLoader, RanksAreDisjointAndComplete) {
  const int T = 8, B = 2;
  const auto starts = window_starts(kSizes, T);
  for (int world : {2, 3, 5}) {  // 48 windows: 5 does not divide, batches straddle epochs
    std::vector<DataLoader> ranks;
    for (int r = 0; r < world; ++r)
      ranks.emplace_back(make_sources(kSizes), opts(B, T, true, 3, r, world));
    std::vector<int64_t> seen;  // windows of epoch 0 in stream order
    std::multiset<int64_t> all;
    for (int step = 0; step < 60; ++step) {
      const auto s0 = ranks[0].state();
      for (int r = 0; r < world; ++r) {
        ASSERT_EQ(ranks[size_t(r)].state(), s0) << "ranks share one state";
        const auto b = ranks[size_t(r)].next();
        for (int i = 0; i < B; ++i) {
          // stream offset of this entry: position + i*world + r
          const uint64_t off = s0.position + uint64_t(i) * world + uint64_t(r);
          const int64_t w = starts.at(b.inputs[size_t(i) * T]);
          if (s0.epoch == 0 && off < 48) all.insert(w);
        }
      }
    }
    ASSERT_EQ(all.size(), 48u) << "world " << world;
    EXPECT_EQ(std::set<int64_t>(all.begin(), all.end()).size(), 48u) << "world " << world;
  }
}

TEST(DataLoader, ResumeFromStateIsExact) {
  DataLoader a(make_sources(kSizes), opts(5, 8, true, 11, 1, 2));
  for (int i = 0; i < 7; ++i) a.next();
  const auto saved = a.state();
  std::vector<DataLoader::Batch> expected;
  for (int i = 0; i < 9; ++i) expected.push_back(a.next());  // crosses epoch boundaries
  EXPECT_GT(a.state().epoch, saved.epoch);

  DataLoader b(make_sources(kSizes), opts(5, 8, true, 11, 1, 2));
  b.set_state(saved);
  for (int i = 0; i < 9; ++i) {
    const auto got = b.next();
    ASSERT_EQ(got.inputs, expected[size_t(i)].inputs) << "batch " << i;
    ASSERT_EQ(got.targets, expected[size_t(i)].targets) << "batch " << i;
  }
  EXPECT_EQ(a.state(), b.state());
  EXPECT_THROW(b.set_state({0, 48}), Error);
}

TEST(DataLoader, EvalModeIsSequentialAndResettable) {
  DataLoader loader(make_sources(kSizes), opts(4, 8, false));
  const auto first = loader.next();
  loader.next();
  loader.reset();
  EXPECT_EQ(loader.next().inputs, first.inputs);
}

TEST(DataLoader, ErrorsNameTheProblem) {
  // Sources shorter than T+1 everywhere: no window at all.
  test::expect_error([] { DataLoader(make_sources({8}), opts(1, 8, false)); },
                     {"'src0' has 8 tokens", "fewer than seq_len + 1 = 9"});
  test::expect_error(
      [] {
        DataLoader(make_sources({3, 8, 5}), opts(1, 8, false));
      },
      {"the largest of 3 sources, 'src1', has 8 tokens", "seq_len + 1 = 9"});
  EXPECT_THROW(DataLoader(make_sources({100}), opts(1, 8, false, 0, 2, 2)), Error);
  EXPECT_THROW(DataLoader(make_sources({100}), opts(0, 8, false)), Error);
  auto o = opts(1, 8, false);
  o.vocab_size = 50;  // tokens reach 99
  DataLoader loader(make_sources({100}), o);
  loader.next();  // tokens 0..8 fit
  loader.set_state({0, 6});
  EXPECT_THROW(loader.next(), Error);
}

TEST(DataLoader, ShortSourcesHoldNoWindowAndAreNamed) {
  // prepare's last shard can be a few tokens: it holds no window (as every source's remainder)
  // and the loader names it; the windows of the others are those without it.
  const std::vector<int64_t> sizes = {101, 6, 57, 8};  // T=8: 12 + 0 + 7 + 0 windows
  DataLoader loader(make_sources(sizes), opts(1, 8, /*shuffle=*/false));
  EXPECT_EQ(loader.num_windows(), 19);
  EXPECT_EQ(loader.short_sources(), (std::vector<std::string>{"src1", "src3"}));
  const auto starts = window_starts(sizes, 8);
  ASSERT_EQ(starts.size(), 19u);
  std::set<int32_t> seen;
  for (int64_t w = 0; w < 19; ++w) {
    const auto b = loader.next();
    EXPECT_TRUE(starts.count(b.inputs[0])) << w << ": " << b.inputs[0];
    for (int i = 0; i < 8; ++i) EXPECT_EQ(b.targets[size_t(i)], b.inputs[size_t(i)] + 1);
    seen.insert(b.inputs[0]);
  }
  EXPECT_EQ(seen.size(), 19u);
  EXPECT_EQ(*seen.rbegin(), 101 + 6 + 6 * 8);  // the last window of src2, after the short src1
  EXPECT_TRUE(DataLoader(make_sources({100}), opts(1, 8, false)).short_sources().empty());
}

TEST(DataLoader, ReadsShardFiles) {
  const test::TempDir tmp("loader");
  const auto& dir = tmp.path();
  std::vector<int32_t> a(300), b(500);
  for (size_t i = 0; i < a.size(); ++i) a[i] = int32_t(i * 7 % 65000);
  for (size_t i = 0; i < b.size(); ++i) b[i] = int32_t(70000 + i);  // needs uint32
  write_shard((dir / "train_000000.bin").string(), a, 65000);
  write_shard((dir / "train_000001.bin").string(), b, 80000);
  auto o = opts(2, 16, false);
  o.vocab_size = 80000;
  DataLoader loader = DataLoader::from_files({(dir / "train_*.bin").string()}, o);
  EXPECT_EQ(loader.num_windows(), 299 / 16 + 499 / 16);
  auto batch = loader.next();
  EXPECT_EQ(batch.inputs[16], a[16]);
  loader.set_state({0, uint64_t(299 / 16)});
  batch = loader.next();
  EXPECT_EQ(batch.inputs[0], b[0]);
  EXPECT_EQ(batch.targets[31], b[32]);
  // A vocabulary too small for one id anywhere in a shard: refused when the files are opened,
  // naming the file, not when (or if) a batch draws that token.
  o.vocab_size = 70400;  // the second shard's last ids reach 70499
  test::expect_error([&] { DataLoader::from_files({(dir / "train_*.bin").string()}, o); },
                     {"train_000001.bin", "token id 70499 is out of range for vocab_size 70400"});
}

}  // namespace
}  // namespace attnlab
