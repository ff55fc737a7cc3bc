// Group-indexed Focus decoding on the CPU (ops/focus_decode_ops.h): the per-group index is the
// sorted list of each group's positions whatever the chunking, and survives a rewind; decoding a
// chunk at a time over the window plus the query's groups' lists equals the rows of the full
// forward with hard routing (K 4 and 8, top_k 1 and 2, windows shorter than the sequence, GQA,
// B = 2, unbalanced and empty groups); argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "ops/focus_decode_case.h"

namespace attnlab {
namespace {

using test::cpu_tensor;
using test::FocusDecodeCase;

// Appending in chunks of 1 .. 9 tokens gives the lists of one append, which are the sorted
// positions of each group; re-appending from a rewound position leaves them as they were.
TEST(FocusGroupIndex, ListsEachGroupsPositionsInOrder) {
  for (int top_k : {1, 2}) {
    FocusDecodeCase c(2, 61, 2, 2, 4, 5, top_k, 3, 7);
    std::vector<int32_t> want, want_counts;
    c.index_of(c.Tn, want, want_counts);
    for (int b = 0; b < c.B; ++b)
      for (int k = 0; k < c.K; ++k) {
        std::vector<int32_t> expect;
        for (int j = 0; j < c.Tn; ++j) {
          const int32_t* gj = c.groups.data() + (size_t(b) * c.Tn + j) * top_k;
          if (std::find(gj, gj + top_k, k) != gj + top_k) expect.push_back(j);
        }
        ASSERT_EQ(want_counts[size_t(b * c.K + k)], int(expect.size()));
        EXPECT_TRUE(
            std::equal(expect.begin(), expect.end(), want.begin() + (size_t(b) * c.K + k) * c.Tn));
      }
    EXPECT_EQ(want_counts[size_t(c.K - 1)], 0);  // the empty group
    std::vector<int32_t> index(want.size(), -1), counts(want_counts.size(), 0);
    auto append = [&](int pos, int n) {
      ops::focus_group_index_append(*c.cpu, cpu_tensor(index, {c.B, c.K, c.Tn}),
                                    cpu_tensor(counts, {c.B, c.K}),
                                    cpu_tensor(c.groups, {c.B, c.Tn, top_k}), pos, n);
    };
    for (int t0 = 0; t0 < c.Tn;) {
      const int n = std::min(1 + t0 % 9, c.Tn - t0);
      append(t0, n);
      t0 += n;
    }
    EXPECT_EQ(counts, want_counts);
    auto same_lists = [&] {
      for (size_t l = 0; l < counts.size(); ++l)
        EXPECT_TRUE(std::equal(want.begin() + l * c.Tn, want.begin() + l * c.Tn + want_counts[l],
                               index.begin() + l * c.Tn));
    };
    same_lists();
    append(20, c.Tn - 20);  // a rewind to 20 tokens, then the same tokens again
    EXPECT_EQ(counts, want_counts);
    same_lists();
    append(0, 4);  // a new prefill of 4 tokens drops every later entry
    for (int b = 0; b < c.B; ++b)
      for (int k = 0; k < c.K; ++k) {
        int n = 0;
        for (int j = 0; j < 4; ++j) {
          const int32_t* gj = c.groups.data() + (size_t(b) * c.Tn + j) * top_k;
          n += std::find(gj, gj + top_k, k) != gj + top_k;
        }
        EXPECT_EQ(counts[size_t(b * c.K + k)], n);
      }
  }
}

// The cache filled and decoded chunk by chunk (a prefill, single tokens, a chunk of 7), as
// generation does: every row equals the full forward with hard routing.
void expect_decode_equals_forward(FocusDecodeCase& c) {
  const std::vector<float> full = c.full_forward();
  const int B = c.B, Tn = c.Tn, K = c.K;
  const int64_t W = c.layout.width(), Q = c.layout.q_width();
  std::vector<float> kc(size_t(B) * c.Hkv * Tn * c.D), vc(kc.size()), decoded(full.size());
  std::vector<int32_t> index(size_t(B) * K * Tn, -1), counts(size_t(B) * K, 0);
  Tensor kt = cpu_tensor(kc, c.kv_shape()), vt = cpu_tensor(vc, c.kv_shape());
  Tensor it = cpu_tensor(index, {B, K, Tn}), ct = cpu_tensor(counts, {B, K});
  Tensor gt = cpu_tensor(c.groups, {B, Tn, c.top_k});
  for (int t0 = 0; t0 < Tn;) {
    const int n = std::min(t0 == 0 ? 5 : (t0 % 4 == 0 ? 7 : 1), Tn - t0);
    std::vector<float> chunk = c.rows(c.qkv, W, t0, n), o(size_t(B) * n * Q);
    ops::kv_cache_write(*c.cpu, kt, vt, cpu_tensor(chunk, c.qkv_shape(n)), t0, c.layout);
    ops::focus_group_index_append(*c.cpu, it, ct, gt, t0, n);
    ops::focus_group_decode(*c.cpu, cpu_tensor(o, c.out_shape(n)),
                            cpu_tensor(chunk, c.qkv_shape(n)), kt, vt, gt, it, ct, t0, c.layout,
                            c.window);
    for (int b = 0; b < B; ++b)
      std::copy_n(o.data() + size_t(b) * n * Q, size_t(n) * Q,
                  decoded.data() + (size_t(b) * Tn + t0) * Q);
    t0 += n;
  }
  EXPECT_LT(test::max_rel_error(decoded, full), 1e-5);
}

TEST(FocusGroupDecode, EqualsTheFullForwardWithHardRouting) {
  for (int K : {4, 8})
    for (int top_k : {1, 2})
      for (int window : {0, 3, 16}) {
        SCOPED_TRACE("K " + std::to_string(K) + " top_k " + std::to_string(top_k) + " window " +
                     std::to_string(window));
        FocusDecodeCase c(2, 45, 4, 2, 8, K, top_k, window, uint32_t(K * 10 + top_k + window));
        expect_decode_equals_forward(c);
      }
}

TEST(FocusGroupDecode, ArgumentChecks) {
  FocusDecodeCase c(1, 8, 2, 1, 4, 3, 1, 2, 1);
  std::vector<float> kc, vc, o(size_t(c.layout.q_width()));
  c.cache_all(kc, vc);
  std::vector<int32_t> index, counts;
  c.index_of(c.Tn, index, counts);
  std::vector<float> q = c.rows(c.qkv, c.layout.width(), 7, 1);
  auto decode = [&](int pos, const Shape& index_shape) {
    ops::focus_group_decode(*c.cpu, cpu_tensor(o, c.out_shape(1)), cpu_tensor(q, c.qkv_shape(1)),
                            cpu_tensor(kc, c.kv_shape()), cpu_tensor(vc, c.kv_shape()),
                            cpu_tensor(c.groups, {1, c.Tn, 1}), cpu_tensor(index, index_shape),
                            cpu_tensor(counts, {1, c.K}), pos, c.layout, c.window);
  };
  test::expect_error(
      [&] {
        decode(8, {1, c.K, c.Tn});
      },
      {"focus_group_decode", "1 new tokens at position 8", "8 positions"});
  test::expect_error(
      [&] {
        decode(7, {1, c.Tn, c.K});
      },
      {"focus_group_decode: index must be i32[1, 3, 8]"});
  test::expect_error(
      [&] {
        ops::focus_group_index_append(*c.cpu, cpu_tensor(index, {1, c.K, c.Tn}),
                                      cpu_tensor(counts, {1, c.K}),
                                      cpu_tensor(c.groups, {1, c.Tn, 1}), 5, 4);
      },
      {"focus_group_index_append", "4 new tokens at position 5"});
}

}  // namespace
}  // namespace attnlab
