// ParameterStore layout: aligned offsets in every dtype, real counts without padding, zero
// padding, equal aligned shards of the trainable range, and the saved layout (ParamLayout) with
// the differences that refuse optimizer state.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/hash.h"
#include "core/parameters.h"
#include "test_util.h"

namespace attnlab {
namespace {

using test::expect_error;

// Odd sizes (every one misaligns the next when packed), an empty tensor, a frozen role between
// trainable ones in declaration order.
void declare_odd(ParameterStore& s) {
  s.declare({"w", Shape{3, 5}, ParamRole::base, ParamInit::normal, 0.02f, true});
  s.declare({"centroids", Shape{7}, ParamRole::attention, ParamInit::normal, 0.02f, false});
  s.declare({"b", Shape{65}, ParamRole::base, ParamInit::ones, 0.f, false});
  s.declare({"empty", Shape{0}, ParamRole::base, ParamInit::zeros, 0.f, false});
  s.declare({"full", Shape{2, 64}, ParamRole::base, ParamInit::normal, 0.02f, true});
  s.declare({"lora", Shape{9}, ParamRole::adapter, ParamInit::zeros, 0.f, false});
}

int64_t real_count(const ParameterStore& s, bool trainable_only) {
  int64_t n = 0;
  for (const auto& e : s.entries())
    if (e.trainable || !trainable_only) n += e.spec.shape.numel();
  return n;
}

TEST(ParameterStore, OffsetsAreAlignedInEveryDtypeAndCountsAreReal) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    ParameterStore s;
    declare_odd(s);
    s.finalize(Device::cpu, dtype, {ParamRole::base});
    s.initialize(3);
    EXPECT_EQ(s.num_params(), 15 + 7 + 65 + 0 + 128 + 9);  // what `attnlab info` reports
    EXPECT_EQ(s.num_trainable(), 15 + 65 + 0 + 128);
    EXPECT_EQ(s.num_params(), real_count(s, false));
    EXPECT_EQ(s.num_trainable(), real_count(s, true));
    const auto* base = static_cast<const char*>(s.all_params().data);
    int64_t end = 0;
    for (const auto& e : s.entries()) {
      const std::string& n = e.spec.name;
      EXPECT_EQ(e.offset % kParamAlignElements, 0) << n;
      EXPECT_GE(e.offset, end) << n << " overlaps the previous tensor";
      end = e.offset + e.spec.shape.numel();
      // 128 bytes in bf16 and for the fp32 state at the same element offsets.
      const auto bytes = static_cast<const char*>(s.param(n).data) - base;
      EXPECT_EQ(bytes % 128, 0) << n << " " << dtype_name(dtype);
      EXPECT_EQ((e.offset * 4) % 128, 0) << n;
    }
    EXPECT_LE(end, s.param_buffer_numel());
    EXPECT_EQ(s.all_params().numel(), s.param_buffer_numel());
    EXPECT_EQ(s.trainable_params().numel(), s.trainable_buffer_numel());
    EXPECT_EQ(s.grads().numel(), s.trainable_buffer_numel());
    // w [0, 15), b [64, 129), empty at 192, full [192, 320); then the frozen tensors.
    EXPECT_EQ(s.entry("b").offset, 64);
    EXPECT_EQ(s.entry("full").offset, 192);
    EXPECT_EQ(s.trainable_buffer_numel(), 320);
    EXPECT_EQ(s.entry("centroids").offset, 320);
    EXPECT_EQ(s.entry("lora").offset, 384);
    EXPECT_EQ(s.param_buffer_numel(), 448);

    // The padding is zero after initialize (ones and normal tensors around it).
    std::vector<float> all(size_t(s.param_buffer_numel()));
    if (dtype == DType::f32) {
      copy_tensor(Tensor(all.data(), DType::f32, Device::cpu, s.all_params().shape),
                  s.all_params());
    } else {
      const bf16* p = s.all_params().ptr<bf16>();
      for (size_t i = 0; i < all.size(); ++i) all[i] = __bfloat162float(p[i]);
    }
    std::vector<bool> covered(all.size(), false);
    for (const auto& e : s.entries())
      for (int64_t i = 0; i < e.spec.shape.numel(); ++i) covered[size_t(e.offset + i)] = true;
    for (size_t i = 0; i < all.size(); ++i)
      if (!covered[i]) {
        ASSERT_EQ(all[i], 0.f) << "padding element " << i;
      }
  }
}

TEST(ParameterStore, InitialisationDoesNotDependOnTheLayout) {
  // Same tensors, trainable roles that reorder the buffer: every tensor gets the same values.
  ParameterStore a, b;
  declare_odd(a);
  declare_odd(b);
  a.finalize(Device::cpu, DType::f32, {ParamRole::base});
  b.finalize(Device::cpu, DType::f32, {ParamRole::attention, ParamRole::adapter}, 3);
  a.initialize(5);
  b.initialize(5);
  for (const auto& e : a.entries()) {
    const Tensor ta = a.param(e.spec.name), tb = b.param(e.spec.name);
    for (int64_t i = 0; i < ta.numel(); ++i)
      ASSERT_EQ(ta.ptr<float>()[i], tb.ptr<float>()[i]) << e.spec.name << "[" << i << "]";
  }
}

// Each tensor is its own generator's draws (seeded by the seed and the tensor's name), whatever
// the number of threads drawing the tensors at once (since 2026-12-07 they are drawn in
// parallel): a run's initial weights do not change with the machine.
TEST(ParameterStore, InitialisationIsEachNamesDrawsOnAnyThreadCount) {
  for (int threads : {1, 2, 5}) {
    test::ScopedOmpThreads omp(threads);
    ParameterStore s;
    declare_odd(s);
    s.finalize(Device::cpu, DType::f32, {ParamRole::base});
    s.initialize(0x123456789ULL);
    for (const char* name : {"w", "centroids", "full"}) {
      const uint64_t seed = 0x123456789ULL, h = fnv1a(name, std::strlen(name));
      std::seed_seq seq{uint32_t(seed), uint32_t(seed >> 32), uint32_t(h), uint32_t(h >> 32)};
      std::mt19937_64 rng(seq);
      std::normal_distribution<float> dist(0.f, 0.02f);
      const Tensor t = s.param(name);
      for (int64_t i = 0; i < t.numel(); ++i)
        ASSERT_EQ(t.ptr<float>()[i], dist(rng))
            << name << "[" << i << "], " << threads << " threads";
    }
    const Tensor ones = s.param("b");
    for (int64_t i = 0; i < ones.numel(); ++i) ASSERT_EQ(ones.ptr<float>()[i], 1.f);
  }
}

TEST(ParameterStore, ShardsAreEqualAlignedAndCoverTheTrainableTensors) {
  int64_t trainable_offsets_n1[6] = {};
  for (int shards : {1, 2, 3, 8}) {
    ParameterStore s;
    declare_odd(s);
    s.finalize(Device::cpu, DType::f32, {ParamRole::base, ParamRole::adapter}, shards);
    EXPECT_EQ(s.num_shards(), shards);
    const int64_t size = s.shard(0).numel;
    EXPECT_EQ(size * shards, s.trainable_buffer_numel()) << shards << " shards";
    EXPECT_EQ(size % kParamAlignElements, 0) << shards << " shards";
    for (int r = 0; r < shards; ++r) {
      EXPECT_EQ(s.shard(r).offset, r * size) << "shard " << r << " of " << shards;
      EXPECT_EQ(s.shard(r).numel, size) << "shard " << r << " of " << shards;
      EXPECT_EQ(s.shard(r).offset % kParamAlignElements, 0);
    }
    // The shards cover [0, trainable_buffer_numel()), which holds every trainable tensor; the
    // frozen ones lie after it. Trainable offsets do not depend on the shard count (the padding
    // is at the end of the range), so state of any shard count has the same tensor offsets.
    int i = 0;
    for (const auto& e : s.entries()) {
      if (e.trainable) {
        EXPECT_LE(e.offset + e.spec.shape.numel(), s.trainable_buffer_numel()) << e.spec.name;
        if (shards == 1) trainable_offsets_n1[i] = e.offset;
        EXPECT_EQ(e.offset, trainable_offsets_n1[i]) << e.spec.name << " with " << shards;
      } else {
        EXPECT_GE(e.offset, s.trainable_buffer_numel()) << e.spec.name;
      }
      ++i;
    }
    EXPECT_EQ(s.num_trainable(), 15 + 65 + 128 + 9);
    EXPECT_EQ(s.grads().numel(), s.trainable_buffer_numel());
    expect_error([&] { s.shard(shards); }, "does not exist");
  }
  ParameterStore none;
  declare_odd(none);
  expect_error([&] { none.finalize(Device::cpu, DType::f32, {ParamRole::base}, 0); },
               "at least one shard");
  // Nothing trainable: an empty range, empty shards.
  ParameterStore frozen;
  declare_odd(frozen);
  frozen.finalize(Device::cpu, DType::f32, {}, 4);
  EXPECT_EQ(frozen.trainable_buffer_numel(), 0);
  EXPECT_EQ(frozen.shard(3).numel, 0);
  EXPECT_EQ(frozen.entries()[0].offset, 0);
}

TEST(ParameterStore, FrozenRolesHaveNoGradients) {
  ParameterStore s;
  declare_odd(s);
  s.finalize(Device::cpu, DType::f32, {ParamRole::attention});
  EXPECT_EQ(s.entries()[0].spec.name, "centroids");
  EXPECT_EQ(s.num_trainable(), 7);
  EXPECT_EQ(s.grads().numel(), kParamAlignElements);  // centroids only, padded
  for (const auto& e : s.entries())
    EXPECT_EQ(s.grad(e.spec.name).empty(), e.spec.role != ParamRole::attention) << e.spec.name;
  EXPECT_EQ(s.grad("centroids").data, s.grads().data);
}

TEST(ParamLayout, JsonRoundTrip) {
  ParameterStore s;
  declare_odd(s);
  s.finalize(Device::cpu, DType::bf16, {ParamRole::base, ParamRole::attention}, 2);
  const ParamLayout l = s.trainable_layout();
  ASSERT_EQ(l.tensors.size(), 5u);
  EXPECT_EQ(l.numel, s.trainable_buffer_numel());
  const ParamLayout r = ParamLayout::from_json(l.to_json(), "x");
  EXPECT_EQ(r.numel, l.numel);
  EXPECT_EQ(r.alignment, kParamAlignElements);
  ASSERT_EQ(r.tensors.size(), l.tensors.size());
  for (size_t i = 0; i < l.tensors.size(); ++i) {
    EXPECT_EQ(r.tensors[i].name, l.tensors[i].name);
    EXPECT_EQ(r.tensors[i].shape, l.tensors[i].shape);
    EXPECT_EQ(r.tensors[i].role, l.tensors[i].role);
    EXPECT_EQ(r.tensors[i].offset, l.tensors[i].offset);
  }
  EXPECT_EQ(layout_difference(r, l), "");
  expect_error([&] { ParamLayout::from_json("{\"format\": 1}", "f.safetensors"); },
               "f.safetensors: the parameter layout is corrupt");
  expect_error([&] { ParamLayout::from_json("not json", "f.safetensors"); }, "corrupt");
  std::string bad = l.to_json();
  bad.replace(bad.find("\"numel\":"), 9, "\"numel\":1");  // tensors now lie outside the range
  expect_error([&] { ParamLayout::from_json(bad, "f"); }, "outside its");
}

TEST(ParamLayout, DifferencesNameTheFirstTensorAndHow) {
  const auto layout = [](std::vector<ParamSpec> specs, int shards = 1) {
    ParameterStore s;
    for (const auto& sp : specs) s.declare(sp);
    s.finalize(Device::cpu, DType::f32, {ParamRole::base, ParamRole::attention}, shards);
    return s.trainable_layout();
  };
  const ParamSpec qkv{"h.0.attn.c_attn.weight", Shape{2304, 768}};
  const ParamSpec qkv_t{"h.0.attn.c_attn.weight", Shape{768, 2304}};
  const ParamSpec bias{"h.0.attn.c_attn.bias", Shape{2304}};
  const ParamSpec ln{"ln_f.weight", Shape{768}};
  const ParamLayout here = layout({bias, qkv, ln});
  EXPECT_EQ(layout_difference(layout({bias, qkv, ln}), here), "");
  EXPECT_EQ(layout_difference(layout({bias, qkv, ln}, 8), here), "");  // shard padding only
  // Same size, transposed: the element count alone would not notice.
  EXPECT_EQ(layout_difference(layout({bias, qkv_t, ln}), here),
            "tensor h.0.attn.c_attn.weight is [768, 2304] at offset 2304 there, [2304, 768] at "
            "offset 2304 here");
  // Reordered: the first tensor (in offset order here) that moved.
  EXPECT_EQ(layout_difference(layout({qkv, bias, ln}), here),
            "tensor h.0.attn.c_attn.bias is [2304] at offset 1769472 there, [2304] at offset 0 "
            "here");
  EXPECT_EQ(layout_difference(layout({bias, qkv}), here),
            "tensor ln_f.weight ([768] at offset 1771776 here) is not in it");
  EXPECT_EQ(layout_difference(here, layout({bias, qkv})),
            "tensor ln_f.weight ([768] at offset 1771776 there) is not trained here");
  ParamSpec ln_attn = ln;
  ln_attn.role = ParamRole::attention;
  EXPECT_EQ(layout_difference(layout({bias, qkv, ln_attn}), here),
            "tensor ln_f.weight has role attention there, base here");
}

}  // namespace
}  // namespace attnlab
