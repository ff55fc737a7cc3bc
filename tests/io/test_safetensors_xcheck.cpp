// Cross-check against the official Python `safetensors` package. Skipped unless
// ATTNLAB_SAFETENSORS_XCHECK_DIR is set; scripts/check_safetensors.py sets it, writes
// python.safetensors there, runs this test, then verifies attnlab.safetensors with the package.
// Both sides fill tensor i-th elements from the same integer formulas, exact in every dtype.
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "io/safetensors.h"

namespace attnlab::io {
namespace {

struct Spec {
  const char* name;
  StDType dtype;
  std::vector<int64_t> shape;
};

// Keep in sync with SPECS in scripts/check_safetensors.py.
const std::vector<Spec> kSpecs = {
    {"h.0.attn.c_attn.weight", StDType::F32, {3, 5, 7}},
    {"h.0.ln_1.weight", StDType::BF16, {33}},
    {"half", StDType::F16, {2, 3}},
    {"ids", StDType::I32, {4, 4}},
    {"tokens", StDType::U16, {7}},
    {"u", StDType::U32, {5}},
    {"long", StDType::I64, {2, 2}},
    {"empty", StDType::F32, {0, 4}},
    {"scalar", StDType::F32, {}},
};

// Element i of a tensor of dtype t, as raw little-endian bytes appended to `out`.
void append_element(std::string& out, StDType t, uint64_t i) {
  auto put = [&](const auto& v) { out.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  switch (t) {
    case StDType::F32:
      put(float(int64_t(i * 37 % 1000) - 500) / 64.f);
      break;
    case StDType::BF16:
      put(__float2bfloat16(float(int64_t(i * 37 % 256) - 128) / 4.f));
      break;
    case StDType::F16:
      put(__float2half(float(int64_t(i * 37 % 2048) - 1024) / 16.f));
      break;
    case StDType::I32:
      put(int32_t(uint32_t(i * 2654435761u)));
      break;
    case StDType::U16:
      put(uint16_t(i * 40503u));
      break;
    case StDType::U32:
      put(uint32_t(i * 2654435761u));
      break;
    case StDType::I64:
      put(int64_t(i * 0x9E3779B97F4A7C15ull));
      break;
  }
}

std::string expected_bytes(const Spec& s) {
  int64_t n = 1;
  for (int64_t d : s.shape) n *= d;
  std::string out;
  for (int64_t i = 0; i < n; ++i) append_element(out, s.dtype, uint64_t(i));
  return out;
}

TEST(SafetensorsXCheck, PythonInterop) {
  const char* dir = std::getenv("ATTNLAB_SAFETENSORS_XCHECK_DIR");
  if (!dir) GTEST_SKIP() << "run scripts/check_safetensors.py to cross-check with Python";

  // 1. Read the file the Python package wrote.
  std::string py_path = std::string(dir) + "/python.safetensors";
  ASSERT_TRUE(std::filesystem::exists(py_path)) << py_path;
  SafetensorsFile py(py_path);
  EXPECT_EQ(py.names().size(), kSpecs.size());
  EXPECT_EQ(py.metadata().at("producer"), "python");
  EXPECT_EQ(py.metadata().at("note"), "ünïcode \"quoted\"");
  for (const Spec& s : kSpecs) {
    const TensorInfo& ti = py.info(s.name);
    EXPECT_EQ(ti.dtype, s.dtype) << s.name;
    EXPECT_EQ(ti.shape, s.shape) << s.name;
    auto raw = py.raw(s.name);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(raw.data()), raw.size()), expected_bytes(s))
        << s.name;
  }

  // 2. Write the same contents for the Python side to verify.
  std::vector<std::string> storage;
  storage.reserve(kSpecs.size());
  SafetensorsWriter w;
  for (const Spec& s : kSpecs) {
    storage.push_back(expected_bytes(s));
    bool native = s.dtype != StDType::F16 && s.dtype != StDType::I64;
    if (native) {
      Shape shape;
      for (int64_t d : s.shape) shape.dims[shape.ndim++] = d;
      w.add(s.name, Tensor(storage.back().data(), dtype_of(s.dtype), Device::cpu, shape));
    } else {
      w.add_raw(s.name, s.dtype, s.shape, storage.back().data());
    }
  }
  w.set_metadata({{"producer", "attnlab"}, {"note", "ünïcode \"quoted\""}});
  w.write(std::string(dir) + "/attnlab.safetensors");
}

}  // namespace
}  // namespace attnlab::io
