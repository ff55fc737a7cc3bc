// safetensors: round trips for every dtype, conversions on load, and every corruption the reader
// must reject with a message that names the file and the tensor.
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "core/cuda_check.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "io/data_hash.h"
#include "io/safetensors.h"
#include "test_util.h"

namespace attnlab::io {
namespace {

namespace fs = std::filesystem;

class Safetensors : public ::testing::Test {
 protected:
  // A file with a hand-written header (padded or not) and `data` bytes.
  std::string write_raw(const std::string& header, const std::string& data,
                        const std::string& name = "raw.safetensors") {
    std::string path = dir_ + "/" + name;
    uint64_t n = header.size();
    std::string bytes(reinterpret_cast<const char*>(&n), 8);
    write_file_atomic(path, bytes + header + data);
    return path;
  }
  test::TempDir tmp_{"st"};
  const std::string dir_ = tmp_.path().string();
};

std::string open_error(const std::string& path) {
  try {
    SafetensorsFile f(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

template <typename T>
std::vector<T> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-3.f, 3.f);
  std::vector<T> v(n);
  for (auto& x : v) {
    if constexpr (std::is_same_v<T, float>)
      x = u(rng);
    else if constexpr (std::is_same_v<T, bf16>)
      x = __float2bfloat16(u(rng));
    else if constexpr (std::is_same_v<T, __half>)
      x = __float2half(u(rng));
    else
      x = T(rng());
  }
  return v;
}

template <typename T>
bool same_bytes(const void* a, const std::vector<T>& b) {
  return std::memcmp(a, b.data(), b.size() * sizeof(T)) == 0;
}

TEST_F(Safetensors, RoundTripAllDtypesMetadataAndEdgeShapes) {
  auto f32 = random_values<float>(6 * 7, 1);
  auto b16 = random_values<bf16>(5, 2);  // odd element count: alignment depends on the ordering
  auto i32 = random_values<int32_t>(3 * 2 * 2, 3);
  auto u16 = random_values<uint16_t>(9, 4);
  auto u32 = random_values<uint32_t>(4, 5);
  auto f16 = random_values<__half>(3, 6);
  auto i64 = random_values<int64_t>(2 * 3, 7);
  std::vector<float> scalar = {1.25f};

  SafetensorsWriter w;
  w.add("h.0.attn.c_attn.weight", Tensor(f32.data(), DType::f32, Device::cpu, {6, 7}));
  w.add("b", Tensor(b16.data(), DType::bf16, Device::cpu, {5}));
  w.add("ids", Tensor(i32.data(), DType::i32, Device::cpu, {3, 2, 2}));
  w.add("tok", Tensor(u16.data(), DType::u16, Device::cpu, {9}));
  w.add("u", Tensor(u32.data(), DType::u32, Device::cpu, {1, 4}));
  w.add_raw("half", StDType::F16, {3}, f16.data());
  w.add_raw("long", StDType::I64, {2, 1, 1, 1, 1, 3}, i64.data());  // 6 dims: raw only
  w.add("empty", Tensor(nullptr, DType::f32, Device::cpu, {0}));
  w.add("empty2", Tensor(nullptr, DType::bf16, Device::cpu, {3, 0}));
  w.add("scalar", Tensor(scalar.data(), DType::f32, Device::cpu, Shape()));
  w.set_metadata({{"format", "pt"}, {"step", "1200"}});
  w.set_metadata("recipe", "gpt2-small \"quoted\" ünïcode");
  std::string path = dir_ + "/model.safetensors";
  w.write(path);
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  SafetensorsFile f(path);
  EXPECT_EQ(f.names().size(), 10u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("step"), "1200");
  EXPECT_EQ(f.metadata().at("recipe"), "gpt2-small \"quoted\" ünïcode");

  Tensor t = f.view("h.0.attn.c_attn.weight");
  EXPECT_EQ(t.dtype, DType::f32);
  EXPECT_EQ(t.shape, Shape({6, 7}));
  EXPECT_TRUE(same_bytes(t.data, f32));
  EXPECT_TRUE(same_bytes(f.view("b").data, b16));
  EXPECT_EQ(f.view("ids").shape, Shape({3, 2, 2}));
  EXPECT_TRUE(same_bytes(f.view("ids").data, i32));
  EXPECT_TRUE(same_bytes(f.view("tok").data, u16));
  EXPECT_TRUE(same_bytes(f.view("u").data, u32));
  EXPECT_EQ(f.info("half").dtype, StDType::F16);
  EXPECT_TRUE(same_bytes(f.raw("half").data(), f16));
  EXPECT_EQ(f.info("long").shape, (std::vector<int64_t>{2, 1, 1, 1, 1, 3}));
  EXPECT_TRUE(same_bytes(f.raw("long").data(), i64));
  EXPECT_EQ(f.view("empty").numel(), 0);
  EXPECT_EQ(f.view("empty2").shape, Shape({3, 0}));
  EXPECT_EQ(f.view("scalar").ndim(), 0);
  EXPECT_EQ(*f.view("scalar").ptr<float>(), 1.25f);
  // Every view is aligned to its element size (the writer orders tensors to guarantee it).
  for (const std::string& n : f.names())
    EXPECT_EQ(uintptr_t(f.raw(n).data()) % st_dtype_size(f.info(n).dtype), 0u) << n;

  // load_into, same dtype.
  std::vector<float> dst(42);
  f.load_into("h.0.attn.c_attn.weight", Tensor(dst.data(), DType::f32, Device::cpu, {6, 7}));
  EXPECT_EQ(dst, f32);
  test::expect_error([&] { f.view("long"); }, "has no attnlab dtype");
}

TEST_F(Safetensors, HeaderIsPaddedAndMatchesSpec) {
  std::vector<float> a = {1, 2, 3};
  std::vector<uint16_t> b = {7};
  SafetensorsWriter w;
  w.add("b", Tensor(b.data(), DType::u16, Device::cpu, {1}));
  w.add("a", Tensor(a.data(), DType::f32, Device::cpu, {3}));
  w.set_metadata("k", "v");
  std::string path = dir_ + "/h.safetensors";
  w.write(path);
  std::string bytes = read_file(path);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 12 + 2);
  auto header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["__metadata__"]["k"], "v");
  EXPECT_EQ(header["a"]["dtype"], "F32");
  EXPECT_EQ(header["a"]["shape"], nlohmann::json::array({3}));
  EXPECT_EQ(header["a"]["data_offsets"], nlohmann::json::array({0, 12}));  // 4-byte first
  EXPECT_EQ(header["b"]["data_offsets"], nlohmann::json::array({12, 14}));
  EXPECT_EQ(std::memcmp(bytes.data() + 8 + n, a.data(), 12), 0);
}

TEST_F(Safetensors, ManyTensors) {
  std::mt19937 rng(11);
  std::vector<std::vector<float>> data;
  SafetensorsWriter w;
  for (int i = 0; i < 500; ++i) data.push_back(random_values<float>(1 + rng() % 50, rng()));
  for (int i = 0; i < 500; ++i)
    w.add("layer." + std::to_string(i) + ".w",
          Tensor(data[i].data(), DType::f32, Device::cpu, {int64_t(data[i].size())}));
  std::string path = dir_ + "/many.safetensors";
  w.write(path);
  SafetensorsFile f(path);
  ASSERT_EQ(f.names().size(), 500u);
  for (int i = 0; i < 500; ++i) {
    Tensor t = f.view("layer." + std::to_string(i) + ".w");
    ASSERT_EQ(t.numel(), int64_t(data[i].size()));
    ASSERT_TRUE(same_bytes(t.data, data[i])) << i;
  }
}

TEST_F(Safetensors, LoadIntoConvertsAndChecks) {
  std::vector<float> f32 = random_values<float>(64, 21);
  f32[0] = 1.0f + 1.0f / 256;  // exactly between two bf16 values: rounds to even (1.0)
  f32[1] = -3.4e38f;           // past bf16's largest and half an ulp: rounds to -inf
  std::vector<__half> f16 = {__float2half(0.5f), __float2half(-2.25f), __float2half(65504.f)};
  SafetensorsWriter w;
  w.add("w", Tensor(f32.data(), DType::f32, Device::cpu, {8, 8}));
  w.add_raw("h", StDType::F16, {3}, f16.data());
  // Non-finite values in a file are refused, naming the tensor and the first one.
  std::vector<float> inf_f32 = random_values<float>(40, 22);
  inf_f32[33] = INFINITY;
  inf_f32[35] = NAN;
  w.add("inf32", Tensor(inf_f32.data(), DType::f32, Device::cpu, {40}));
  std::vector<bf16> nan_bf16(10, __float2bfloat16(0.25f));
  nan_bf16[7] = __float2bfloat16(NAN);
  w.add("nan16", Tensor(nan_bf16.data(), DType::bf16, Device::cpu, {10}));
  std::vector<__half> inf_f16 = {__float2half(1.f), __float2half(-INFINITY)};
  w.add_raw("inf16", StDType::F16, {2}, inf_f16.data());
  std::vector<int32_t> ids = {1, 2, 3};
  w.add("ids", Tensor(ids.data(), DType::i32, Device::cpu, {3}));
  std::string path = dir_ + "/x.safetensors";
  w.write(path);
  SafetensorsFile f(path);

  std::vector<bf16> as_bf16(64);
  f.load_into("w", Tensor(as_bf16.data(), DType::bf16, Device::cpu, {8, 8}));
  EXPECT_EQ(__bfloat162float(as_bf16[0]), 1.0f);
  EXPECT_TRUE(std::isinf(__bfloat162float(as_bf16[1])));
  std::vector<float> any(40);
  test::expect_error(
      [&] { f.load_into("inf32", Tensor(any.data(), DType::f32, Device::cpu, {40})); },
      "checkpoint '" + path + "': tensor 'inf32' holds a non-finite value (inf at flat index 33)");
  test::expect_error(
      [&] { f.load_into("nan16", Tensor(any.data(), DType::f32, Device::cpu, {10})); },
      "tensor 'nan16' holds a non-finite value (nan at flat index 7)");
  test::expect_error(
      [&] { f.load_into("inf16", Tensor(any.data(), DType::f32, Device::cpu, {2})); },
      "tensor 'inf16' holds a non-finite value (-inf at flat index 1)");
  for (int i = 2; i < 64; ++i)
    EXPECT_NEAR(__bfloat162float(as_bf16[i]), f32[i], std::abs(f32[i]) / 256) << i;

  // BF16 -> F32 is exact: write the bf16 values back (finite ones: -inf is refused, below) and
  // reload them as f32.
  as_bf16[1] = __float2bfloat16(-2.f);
  SafetensorsWriter w2;
  w2.add("w", Tensor(as_bf16.data(), DType::bf16, Device::cpu, {8, 8}));
  w2.write(dir_ + "/y.safetensors");
  SafetensorsFile f2(dir_ + "/y.safetensors");
  std::vector<float> back(64);
  f2.load_into("w", Tensor(back.data(), DType::f32, Device::cpu, {8, 8}));
  for (int i = 0; i < 64; ++i) EXPECT_EQ(back[i], __bfloat162float(as_bf16[i])) << i;

  std::vector<float> h(3);
  f.load_into("h", Tensor(h.data(), DType::f32, Device::cpu, {3}));
  EXPECT_EQ(h, (std::vector<float>{0.5f, -2.25f, 65504.f}));

  std::vector<float> wrong(64);
  auto load_wrong = [&](const char* name, int64_t n) {
    return [&f, &wrong, name, n] {
      f.load_into(name, Tensor(wrong.data(), DType::f32, Device::cpu, {n}));
    };
  };
  test::expect_error(
      load_wrong("w", 64),
      "checkpoint '" + path + "': tensor 'w' has shape [8, 8], the model expects [64]");
  test::expect_error(load_wrong("ids", 3), "tensor 'ids' is I32, the model expects F32");
  test::expect_error(load_wrong("nope", 3), "checkpoint '" + path + "' has no tensor 'nope'");
}

TEST_F(Safetensors, CudaTensorsWriteAndLoad) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  std::vector<float> host = random_values<float>(3000, 31);
  Buffer dev(Device::cuda, host.size() * 4);
  Tensor dt = dev.as(DType::f32, {3, 1000});
  copy_tensor(dt, Tensor(host.data(), DType::f32, Device::cpu, {3, 1000}));
  // A small device tensor first (written first: names in order): the staging buffer takes the
  // largest tensor's size, and a staging smaller than a tensor copies it in pieces.
  std::vector<float> small = random_values<float>(10, 32);
  Buffer dsmall(Device::cuda, small.size() * 4);
  copy_tensor(dsmall.as(DType::f32, {10}), Tensor(small.data(), DType::f32, Device::cpu, {10}));
  SafetensorsWriter w;
  w.add("b", dsmall.as(DType::f32, {10}));
  w.add("w", dt);
  std::string path = dir_ + "/cuda.safetensors";
  w.write(path);
  SafetensorsFile f(path);
  EXPECT_TRUE(same_bytes(f.view("w").data, host));
  EXPECT_TRUE(same_bytes(f.view("b").data, small));

  Buffer dev2(Device::cuda, host.size() * 2);
  f.load_into("w", dev2.as(DType::bf16, {3, 1000}));
  std::vector<bf16> got(host.size());
  copy_tensor(Tensor(got.data(), DType::bf16, Device::cpu, {3, 1000}),
              dev2.as(DType::bf16, {3, 1000}));
  for (size_t i = 0; i < host.size(); ++i)
    ASSERT_EQ(__bfloat162float(got[i]), __bfloat162float(__float2bfloat16(host[i]))) << i;
}

// ---- corrupt files
// -------------------------------------------------------------------------------

TEST_F(Safetensors, RejectsTruncatedFiles) {
  std::vector<float> a = random_values<float>(100, 41);
  SafetensorsWriter w;
  w.add("a", Tensor(a.data(), DType::f32, Device::cpu, {100}));
  std::string path = dir_ + "/t.safetensors";
  w.write(path);
  std::string bytes = read_file(path);

  write_file_atomic(path, bytes.substr(0, bytes.size() - 4));
  std::string msg = open_error(path);
  EXPECT_CONTAINS(msg, "checkpoint '" + path +
                           "': tensor 'a' has data_offsets [0, 400] outside "
                           "the data (396 bytes)");
  write_file_atomic(path, bytes.substr(0, 20));
  EXPECT_CONTAINS(open_error(path), "header length");
  EXPECT_CONTAINS(open_error(path), "exceeds the file size (20 bytes)");
  write_file_atomic(path, bytes.substr(0, 5));
  EXPECT_CONTAINS(open_error(path), "too short for the 8-byte header length");
  EXPECT_CONTAINS(open_error(dir_ + "/absent"), "cannot open checkpoint");
}

TEST_F(Safetensors, RejectsHeaderLengthBeyondFile) {
  std::string path = dir_ + "/big.safetensors";
  uint64_t n = uint64_t(1) << 40;
  write_file_atomic(path, std::string(reinterpret_cast<const char*>(&n), 8) + "{}      ");
  EXPECT_CONTAINS(open_error(path), "header length 1099511627776 exceeds the file size (16 bytes)");
}

TEST_F(Safetensors, RejectsBadJson) {
  EXPECT_CONTAINS(open_error(write_raw(R"({"a": {"dtype": "F32", )", "")),
                  "the header is not valid JSON");
  EXPECT_CONTAINS(open_error(write_raw(R"([1, 2])", "")), "does not start with '{'");
  EXPECT_CONTAINS(open_error(write_raw(R"({"a": 3})", "")), "tensor 'a' is not a JSON object");
  EXPECT_CONTAINS(open_error(write_raw(R"({"__metadata__": {"k": 1}})", "")),
                  "metadata 'k' is not a string");
}

TEST_F(Safetensors, RejectsBadDtypeAndShapes) {
  std::string d8(8, 'x');
  std::string msg =
      open_error(write_raw(R"({"w": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}})", d8));
  EXPECT_CONTAINS(msg, "tensor 'w' has dtype 'F64'; attnlab reads F32, BF16, F16, I32");
  EXPECT_CONTAINS(open_error(write_raw(R"({"w": {"shape": [2], "data_offsets": [0, 8]}})", d8)),
                  "tensor 'w' has no string 'dtype'");
  EXPECT_CONTAINS(
      open_error(write_raw(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", d8)),
      "tensor 'w' is F32 [3] (12 bytes) but its data_offsets span 8 bytes");
  EXPECT_CONTAINS(open_error(write_raw(
                      R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", d8)),
                  "tensor 'w' has a shape entry that is not a non-negative integer");
  // A shape whose byte size overflows 64 bits must not wrap around to a small number.
  EXPECT_CONTAINS(
      open_error(write_raw(R"({"w": {"dtype": "F32", "shape": [4611686018427387904, 4],)"
                           R"( "data_offsets": [0, 0]}})",
                           "")),
      "but its data_offsets span 0 bytes");
}

TEST_F(Safetensors, RejectsOffsetsOutOfRangeOverlapsAndGaps) {
  std::string d16(16, 'x');
  EXPECT_CONTAINS(open_error(write_raw(
                      R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})", d16)),
                  "tensor 'w' has data_offsets [8, 24] outside the data (16 bytes)");
  EXPECT_CONTAINS(open_error(write_raw(
                      R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", d16)),
                  "data_offsets [8, 4] outside the data");
  EXPECT_CONTAINS(open_error(write_raw(R"({"a": {"dtype": "F32", "shape": [3], )"
                                       R"("data_offsets": [0, 12]}, "b": {"dtype": "F32", )"
                                       R"("shape": [2], "data_offsets": [8, 16]}})",
                                       d16)),
                  "tensors 'a' and 'b' overlap (data_offsets [0, 12] and [8, 16])");
  EXPECT_CONTAINS(open_error(write_raw(R"({"a": {"dtype": "F32", "shape": [1], )"
                                       R"("data_offsets": [0, 4]}, "b": {"dtype": "F32", )"
                                       R"("shape": [2], "data_offsets": [8, 16]}})",
                                       d16)),
                  "4 bytes before tensor 'b' belong to no tensor");
  EXPECT_CONTAINS(open_error(write_raw(
                      R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", d16)),
                  "the last 8 bytes of the file belong to no tensor");
  // Padding with trailing spaces is fine; a valid hand-written file opens.
  SafetensorsFile ok(write_raw(R"({"a": {"dtype": "U16", "shape": [2, 4], )"
                               R"("data_offsets": [0, 16]}}   )",
                               d16));
  EXPECT_EQ(ok.view("a").shape, Shape({2, 4}));
}

// The writer records the hash of the data (metadata kDataHashKey, io/data_hash.h) and the reader
// refuses a file whose tensor bytes or recorded hash changed since; a file without the key (other
// tools' files, attnlab's before it) is read unchecked.
TEST_F(Safetensors, RecordsTheDataHashAndRejectsChangedBytes) {
  std::vector<float> a = random_values<float>(1000, 43);
  std::vector<bf16> b = random_values<bf16>(77, 44);
  SafetensorsWriter w;
  w.add("a", Tensor(a.data(), DType::f32, Device::cpu, {1000}));
  w.add("b", Tensor(b.data(), DType::bf16, Device::cpu, {7, 11}));
  w.set_metadata(kDataHashKey, "0123456789abcdef");  // stale (copied metadata): replaced
  std::string path = dir_ + "/h.safetensors";
  w.write(path);
  const std::string bytes = read_file(path);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(w.header_json().size(), n);
  const std::string data = bytes.substr(8 + n);
  const std::string recorded = hash_hex(data_hash(data.data(), data.size()));
  EXPECT_EQ(SafetensorsFile(path).metadata().at(kDataHashKey), recorded);
  // The header as header_json() gives it but for the hash's 16 characters.
  const size_t at = w.header_json().find(hash_hex(0));
  ASSERT_NE(at, std::string::npos);
  EXPECT_EQ(bytes.substr(8, at) + hash_hex(0) + bytes.substr(8 + at + 16, n - at - 16),
            w.header_json());

  for (size_t pos : {size_t(8 + n), size_t(8 + n + 2001), bytes.size() - 1}) {
    std::string bad = bytes;
    bad[pos] ^= 0x10;
    write_file_atomic(path, bad);
    const std::string msg = open_error(path);
    EXPECT_CONTAINS(msg, "checkpoint '" + path + "' is corrupt");
    EXPECT_CONTAINS(msg, "its header records " + recorded);
    // Header-only opens (metadata readers) skip the data.
    const SafetensorsFile header(path, SafetensorsFile::DataCheck::header_only);
    EXPECT_EQ(header.metadata().at(kDataHashKey), recorded);
  }
  std::string bad = bytes;
  bad[8 + at] = bad[8 + at] == 'a' ? 'b' : 'a';  // the recorded hash itself
  write_file_atomic(path, bad);
  EXPECT_CONTAINS(open_error(path), "is corrupt");
  bad[8 + at] = 'X';
  write_file_atomic(path, bad);
  EXPECT_CONTAINS(open_error(path), "'attnlab_data_hash' must be 16 hex digits, got '");
  write_file_atomic(path, bytes);
  EXPECT_EQ(SafetensorsFile(path).metadata().at(kDataHashKey), recorded);

  // Without the key: read as it is, changed bytes and all.
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string p2 = write_raw(header, std::string(8, '\x01'), "nohash.safetensors");
  SafetensorsFile f(p2);
  EXPECT_EQ(f.metadata().count(kDataHashKey), 0u);
  EXPECT_EQ(f.raw("a")[0], std::byte{1});
}

}  // namespace
}  // namespace attnlab::io
