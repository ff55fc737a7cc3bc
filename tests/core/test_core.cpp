// Tensor views, buffers and the parameter store (ordering by role, frozen tensors, initialisation).
#include <gtest/gtest.h>

#include <cmath>

#include "core/cuda_check.h"
#include "core/out_of_memory.h"
#include "core/parameters.h"
#include "core/tensor.h"
#include "test_util.h"

using namespace attnlab;

TEST(Tensor, ViewAndSlice) {
  Buffer b(Device::cpu, 6 * 4 * sizeof(float));
  Tensor t = b.as(DType::f32, Shape{6, 4});
  for (int i = 0; i < 24; ++i) t.ptr<float>()[i] = float(i) + 0.5f;
  Tensor rows = t.slice0(2, 5);
  EXPECT_EQ(rows.shape, (Shape{3, 4}));
  EXPECT_EQ(rows.ptr<float>()[0], 8.5f);
  EXPECT_EQ(t.view(Shape{24}).numel(), 24);
  EXPECT_THROW(t.view(Shape{5, 5}), Error);
  EXPECT_EQ(t.str(), "f32[6, 4] on cpu");
}

TEST(Tensor, CopyChecksSizes) {
  Buffer a(Device::cpu, 16), b(Device::cpu, 32);
  Tensor ta = a.as(DType::f32, Shape{4}), tb = b.as(DType::f32, Shape{8});
  EXPECT_THROW(copy_tensor(ta, tb), Error);
}

// A command's out-of-memory note (generate's) is in the error of an allocation that fails in its
// scope, and the one before it (a training run's) is back after it.
TEST(Buffer, OutOfMemoryNoteHoldsForItsScope) {
  const size_t too_much = size_t(1) << 62;
  set_out_of_memory_note("the outer note");
  {
    const OutOfMemoryNote note("generate: a KV cache of 8 positions");
    EXPECT_EQ(current_out_of_memory_note(), "generate: a KV cache of 8 positions");
    test::expect_error([&] { Buffer b(Device::cpu, too_much); },
                       {"out of host memory", "; generate: a KV cache of 8 positions"});
  }
  EXPECT_EQ(current_out_of_memory_note(), "the outer note");
  test::expect_error([&] { Buffer b(Device::cpu, too_much); }, {"; the outer note"});
  set_out_of_memory_note("");
}

// A CUDA call that fails for lack of memory (a launcher's StreamScratch, a cuBLAS workspace) says
// so, names the call, and ends with the note or, without one, the hint, as Buffer's errors do.
// (cuda_fail needs no GPU: on this machine the free-memory query fails and is left out.)
TEST(CudaCheck, OutOfMemoryNamesTheCallAndTheNote) {
  set_out_of_memory_note("");
  test::expect_error([] { CUDA_CHECK(cudaErrorMemoryAllocation); },
                     {"out of GPU memory in cudaErrorMemoryAllocation at ",
                      "; try a smaller train.micro_batch or train.seq_len"});
  {
    const OutOfMemoryNote note("the run needs 70.0 GiB");
    test::expect_error([] { CUDA_CHECK(cudaErrorMemoryAllocation); },
                       {"out of GPU memory in ", "; the run needs 70.0 GiB"});
  }
  // Other errors keep their name.
  test::expect_error([] { CUDA_CHECK(cudaErrorInvalidValue); },
                     {"CUDA error cudaErrorInvalidValue"});
}

TEST(ParameterStore, TrainableRolesFormAPrefix) {
  ParameterStore s;
  s.declare({"a", Shape{3, 2}, ParamRole::base, ParamInit::normal, 0.02f, true});
  s.declare({"centroids", Shape{4}, ParamRole::attention, ParamInit::normal, 0.02f, false});
  s.declare({"b", Shape{5}, ParamRole::base, ParamInit::ones, 0.f, false});
  s.finalize(Device::cpu, DType::f32, {ParamRole::attention});
  EXPECT_EQ(s.num_params(), 15);
  EXPECT_EQ(s.num_trainable(), 4);
  EXPECT_EQ(s.entries()[0].spec.name, "centroids");
  EXPECT_EQ(s.entry("centroids").offset, 0);
  EXPECT_TRUE(s.grad("a").empty());
  EXPECT_FALSE(s.grad("centroids").empty());
  EXPECT_EQ(s.grads().numel(), kParamAlignElements);  // 4 elements, padded to the alignment
  EXPECT_THROW(s.param("nope"), Error);
}

TEST(ParameterStore, InitialisationIsDeterministicAndByKind) {
  auto make = [](uint64_t seed) {
    auto s = std::make_unique<ParameterStore>();
    s->declare({"w", Shape{64, 8}, ParamRole::base, ParamInit::normal, 0.5f, true});
    s->declare({"g", Shape{8}, ParamRole::base, ParamInit::ones, 0.f, false});
    s->declare({"z", Shape{8}, ParamRole::base, ParamInit::zeros, 0.f, false});
    s->finalize(Device::cpu, DType::f32, {ParamRole::base});
    s->initialize(seed);
    return s;
  };
  auto a = make(1), b = make(1), c = make(2);
  const float* wa = a->param("w").ptr<float>();
  const float* wb = b->param("w").ptr<float>();
  const float* wc = c->param("w").ptr<float>();
  double sq = 0;
  int same_c = 0;
  for (int i = 0; i < 512; ++i) {
    EXPECT_EQ(wa[i], wb[i]);
    same_c += wa[i] == wc[i];
    sq += double(wa[i]) * wa[i];
  }
  EXPECT_LT(same_c, 5);
  EXPECT_NEAR(std::sqrt(sq / 512), 0.5, 0.06);  // the requested std
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(a->param("g").ptr<float>()[i], 1.f);
    EXPECT_EQ(a->param("z").ptr<float>()[i], 0.f);
  }
  ParameterStore dup;
  dup.declare({"x", Shape{1}});
  EXPECT_THROW(dup.declare({"x", Shape{1}}), Error);
}

TEST(TestUtil, MaxRelErrorFailsOnNaNAndInf) {
  // The comparisons of every kernel test rely on this: a NaN must never pass a tolerance.
  std::vector<float> ref = {1.f, -2.f, 3.f}, same = ref, nan = ref, inf = ref;
  nan[1] = std::nanf("");
  inf[2] = INFINITY;
  EXPECT_EQ(test::max_rel_error(same, ref), 0.0);
  EXPECT_TRUE(std::isinf(test::max_rel_error(nan, ref)));
  EXPECT_TRUE(std::isinf(test::max_rel_error(inf, ref)));
  EXPECT_TRUE(std::isinf(test::max_rel_error(ref, nan)));
}
