#include "io/safetensors.h"

#include <cuda_fp16.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "core/cuda_check.h"
#include "io/atomic_file.h"
#include "io/data_hash.h"

namespace attnlab::io {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; big-endian hosts would need byte swapping");

namespace {

constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;  // the reference implementation's limit
constexpr size_t kStagingBytes = size_t(64) << 20;         // CUDA -> host and conversion chunks
constexpr const char* kMetadataKey = "__metadata__";

constexpr StDType kAllStDTypes[] = {StDType::F32, StDType::BF16, StDType::F16, StDType::I32,
                                    StDType::U16, StDType::U32,  StDType::I64};

bool parse_st_dtype(const std::string& s, StDType* out) {
  for (StDType t : kAllStDTypes)
    if (s == st_dtype_name(t)) {
      *out = t;
      return true;
    }
  return false;
}

std::string supported_dtypes() {
  std::string s;
  for (StDType t : kAllStDTypes) s += std::string(s.empty() ? "" : ", ") + st_dtype_name(t);
  return s;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// One element of `src` (file dtype, possibly unaligned) as float.
float load_as_float(const std::byte* src, StDType t, int64_t i) {
  switch (t) {
    case StDType::F32: {
      float v;
      std::memcpy(&v, src + 4 * i, 4);
      return v;
    }
    case StDType::BF16: {
      __nv_bfloat16_raw r;
      std::memcpy(&r.x, src + 2 * i, 2);
      return __bfloat162float(bf16(r));
    }
    case StDType::F16: {
      __half_raw r;
      std::memcpy(&r.x, src + 2 * i, 2);
      return __half2float(__half(r));
    }
    default:
      ATTN_ASSERT(false);
  }
  return 0.f;
}

// Converts n float-like elements from file dtype `from` into host memory of attnlab dtype `to`.
void convert_floats(const std::byte* src, StDType from, void* dst, DType to, int64_t n) {
  if (to == DType::f32) {
    float* d = static_cast<float*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = load_as_float(src, from, i);
  } else {
    bf16* d = static_cast<bf16*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = __float2bfloat16(load_as_float(src, from, i));
  }
}

bool is_float_type(StDType t) {
  return t == StDType::F32 || t == StDType::BF16 || t == StDType::F16;
}

}  // namespace

// The flat index of the first NaN or infinity among n elements of float dtype t, -1 if none: the
// exponent field all ones (F32 bits 23-30, BF16 7-14, F16 10-14).
int64_t first_non_finite(const std::byte* src, StDType t, int64_t n) {
  int64_t first = n;
  if (t == StDType::F32) {
#pragma omp parallel for reduction(min : first) schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      uint32_t u;
      std::memcpy(&u, src + 4 * i, 4);
      if ((u & 0x7f800000u) == 0x7f800000u && i < first) first = i;
    }
  } else {
    const uint16_t mask = t == StDType::BF16 ? 0x7f80 : 0x7c00;
#pragma omp parallel for reduction(min : first) schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      uint16_t u;
      std::memcpy(&u, src + 2 * i, 2);
      if ((u & mask) == mask && i < first) first = i;
    }
  }
  return first == n ? -1 : first;
}

const char* st_dtype_name(StDType t) {
  switch (t) {
    case StDType::F32:
      return "F32";
    case StDType::BF16:
      return "BF16";
    case StDType::F16:
      return "F16";
    case StDType::I32:
      return "I32";
    case StDType::U16:
      return "U16";
    case StDType::U32:
      return "U32";
    case StDType::I64:
      return "I64";
  }
  return "?";
}

size_t st_dtype_size(StDType t) {
  switch (t) {
    case StDType::F32:
    case StDType::I32:
    case StDType::U32:
      return 4;
    case StDType::BF16:
    case StDType::F16:
    case StDType::U16:
      return 2;
    case StDType::I64:
      return 8;
  }
  return 0;
}

StDType st_dtype_of(DType t) {
  switch (t) {
    case DType::f32:
      return StDType::F32;
    case DType::bf16:
      return StDType::BF16;
    case DType::i32:
      return StDType::I32;
    case DType::u16:
      return StDType::U16;
    case DType::u32:
      return StDType::U32;
    case DType::u8:  // only the SFA decode cache's indices, which are never saved
      break;
  }
  ATTN_ASSERT(false);
  return StDType::F32;
}

DType dtype_of(StDType t) {
  switch (t) {
    case StDType::F32:
      return DType::f32;
    case StDType::BF16:
      return DType::bf16;
    case StDType::I32:
      return DType::i32;
    case StDType::U16:
      return DType::u16;
    case StDType::U32:
      return DType::u32;
    default:
      ATTN_FAIL("safetensors dtype %s has no attnlab dtype", st_dtype_name(t));
  }
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorInfo::shape_str() const { return io::shape_str(shape); }

// ---- writer ------------------------------------------------------------------------------------

void SafetensorsWriter::add(const std::string& name, const Tensor& t) {
  std::vector<int64_t> shape(t.shape.dims.begin(), t.shape.dims.begin() + t.shape.ndim);
  add_raw(name, st_dtype_of(t.dtype), std::move(shape), t.data);
  entries_.back().device = t.device;
}

void SafetensorsWriter::add_raw(const std::string& name, StDType dtype, std::vector<int64_t> shape,
                                const void* data) {
  ATTN_REQUIRE(!name.empty(), "safetensors: tensor names must not be empty");
  ATTN_REQUIRE(name != kMetadataKey, "safetensors: '%s' is reserved for metadata", kMetadataKey);
  for (const Entry& e : entries_)
    ATTN_REQUIRE(e.name != name, "safetensors: tensor '%s' added twice", name.c_str());
  int64_t numel = 1;
  for (int64_t d : shape) {
    ATTN_REQUIRE(d >= 0, "safetensors: tensor '%s' has a negative dimension in %s", name.c_str(),
                 shape_str(shape).c_str());
    numel *= d;
  }
  size_t bytes = size_t(numel) * st_dtype_size(dtype);
  ATTN_REQUIRE(bytes == 0 || data != nullptr, "safetensors: tensor '%s' has no data", name.c_str());
  entries_.push_back(Entry{name, dtype, std::move(shape), data, Device::cpu, bytes});
}

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) {
  metadata_[key] = value;
}

void SafetensorsWriter::set_metadata(const std::map<std::string, std::string>& metadata) {
  for (const auto& [k, v] : metadata) metadata_[k] = v;
}

std::vector<const SafetensorsWriter::Entry*> SafetensorsWriter::ordered() const {
  std::vector<const Entry*> out;
  for (const Entry& e : entries_) out.push_back(&e);
  std::sort(out.begin(), out.end(), [](const Entry* a, const Entry* b) {
    size_t sa = st_dtype_size(a->dtype), sb = st_dtype_size(b->dtype);
    return sa != sb ? sa > sb : a->name < b->name;
  });
  return out;
}

std::string SafetensorsWriter::header_json() const {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  nlohmann::ordered_json md = nlohmann::ordered_json::object();
  for (const auto& [k, v] : metadata_) md[k] = v;
  md[kDataHashKey] = hash_hex(0);  // write() puts the hash in its place
  header[kMetadataKey] = md;
  uint64_t offset = 0;
  for (const Entry* e : ordered()) {
    header[e->name] = {{"dtype", st_dtype_name(e->dtype)},
                       {"shape", e->shape},
                       {"data_offsets", {offset, offset + e->bytes}}};
    offset += e->bytes;
  }
  std::string s = header.dump();
  s.append((8 - s.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  return s;
}

void SafetensorsWriter::write(const std::string& path) const {
  std::string header = header_json();
  // The hash's value: the only unescaped `"<key>":"` of the header (in a JSON string a quote is
  // escaped, so no key or value can contain that text).
  const std::string field = std::string("\"") + kDataHashKey + "\":\"";
  const size_t at = header.find(field);
  ATTN_ASSERT(at != std::string::npos);
  const size_t hash_offset = 8 + at + field.size();
  AtomicFileWriter out(path);
  uint64_t n = header.size();
  out.write(&n, sizeof(n));
  out.write(header);
  DataHasher hash;
  // One staging buffer for the device tensors, as large as the largest of them up to
  // kStagingBytes (sized by the first one, a bias, it copied wte in tens of thousands of pieces).
  size_t largest = 0;
  for (const Entry* e : ordered())
    if (e->device != Device::cpu) largest = std::max(largest, e->bytes);
  Buffer staging;
  if (largest > 0) staging = Buffer(Device::cpu, std::min(kStagingBytes, largest));
  for (const Entry* e : ordered()) {
    if (e->device == Device::cpu) {
      out.write(e->data, e->bytes);
      if (e->bytes > 0) hash.update(e->data, e->bytes);
      continue;
    }
    const char* src = static_cast<const char*>(e->data);
    for (size_t done = 0; done < e->bytes;) {
      size_t chunk = std::min(staging.bytes(), e->bytes - done);
      CUDA_CHECK(cudaMemcpy(staging.data(), src + done, chunk, cudaMemcpyDeviceToHost));
      out.write(staging.data(), chunk);
      hash.update(staging.data(), chunk);
      done += chunk;
    }
  }
  out.overwrite(hash_offset, hash_hex(hash.digest()).data(), 16);
  out.commit();
}

// ---- reader ------------------------------------------------------------------------------------

SafetensorsFile::SafetensorsFile(const std::string& path, DataCheck check) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) ATTN_FAIL("cannot open checkpoint '%s': %s", path.c_str(), errno_text(errno).c_str());
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    ATTN_FAIL("cannot stat checkpoint '%s': %s", path.c_str(), errno_text(err).c_str());
  }
  file_size_ = size_t(st.st_size);
  if (file_size_ < 8) {
    ::close(fd);
    ATTN_FAIL(
        "checkpoint '%s' is not a safetensors file: %zu bytes, too short for the 8-byte "
        "header length",
        path.c_str(), file_size_);
  }
  map_ = ::mmap(nullptr, file_size_, PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    ATTN_FAIL("cannot map checkpoint '%s': %s", path.c_str(), errno_text(err).c_str());
  }
  try {
    const char* bytes = static_cast<const char*>(map_);
    uint64_t n;
    std::memcpy(&n, bytes, 8);
    ATTN_REQUIRE(n <= file_size_ - 8,
                 "checkpoint '%s': header length %llu exceeds the file size (%zu bytes); the file "
                 "is truncated or not a safetensors file",
                 path.c_str(), (unsigned long long)n, file_size_);
    ATTN_REQUIRE(n <= kMaxHeaderBytes,
                 "checkpoint '%s': header length %llu is larger than the %llu-byte limit",
                 path.c_str(), (unsigned long long)n, (unsigned long long)kMaxHeaderBytes);
    data_start_ = 8 + size_t(n);
    parse_header(bytes + 8, size_t(n));
    if (check == DataCheck::verify) check_data_hash();
  } catch (...) {
    ::munmap(map_, file_size_);
    map_ = nullptr;
    throw;
  }
}

void SafetensorsFile::check_data_hash() const {
  const auto it = metadata_.find(kDataHashKey);
  if (it == metadata_.end()) return;
  uint64_t recorded;
  ATTN_REQUIRE(parse_hash_hex(it->second, &recorded),
               "checkpoint '%s': metadata '%s' must be 16 hex digits, got '%s'", path_.c_str(),
               kDataHashKey, it->second.c_str());
  const uint64_t actual =
      data_hash(static_cast<const std::byte*>(map_) + data_start_, file_size_ - data_start_);
  ATTN_REQUIRE(actual == recorded,
               "checkpoint '%s' is corrupt: its tensor bytes hash to %s, but its header records "
               "%s from when it was written (metadata '%s'); a byte changed since (a disk or copy "
               "error): restore the file from a copy or use another checkpoint",
               path_.c_str(), hash_hex(actual).c_str(), it->second.c_str(), kDataHashKey);
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, file_size_);
}

void SafetensorsFile::parse_header(const char* text, size_t len) {
  const char* p = path_.c_str();
  ATTN_REQUIRE(len > 0 && text[0] == '{',
               "checkpoint '%s': the header does not start with '{'; not a safetensors file", p);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, text + len);
  } catch (const nlohmann::json::exception& e) {
    ATTN_FAIL("checkpoint '%s': the header is not valid JSON (%s)", p, e.what());
  }
  ATTN_REQUIRE(header.is_object(), "checkpoint '%s': the header is not a JSON object", p);
  const uint64_t data_size = file_size_ - data_start_;

  for (const auto& [name, entry] : header.items()) {
    const char* n = name.c_str();
    if (name == kMetadataKey) {
      ATTN_REQUIRE(entry.is_object(), "checkpoint '%s': __metadata__ is not a JSON object", p);
      for (const auto& [k, v] : entry.items()) {
        ATTN_REQUIRE(v.is_string(), "checkpoint '%s': metadata '%s' is not a string", p, k.c_str());
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    ATTN_REQUIRE(entry.is_object(), "checkpoint '%s': tensor '%s' is not a JSON object", p, n);
    TensorInfo ti;
    auto dt = entry.find("dtype");
    ATTN_REQUIRE(dt != entry.end() && dt->is_string(),
                 "checkpoint '%s': tensor '%s' has no string 'dtype'", p, n);
    ATTN_REQUIRE(parse_st_dtype(dt->get<std::string>(), &ti.dtype),
                 "checkpoint '%s': tensor '%s' has dtype '%s'; attnlab reads %s", p, n,
                 dt->get<std::string>().c_str(), supported_dtypes().c_str());

    auto sh = entry.find("shape");
    ATTN_REQUIRE(sh != entry.end() && sh->is_array(),
                 "checkpoint '%s': tensor '%s' has no 'shape' array", p, n);
    // Byte size, computed with overflow checks (a hostile shape must not wrap around).
    using u128 = unsigned __int128;
    u128 bytes = st_dtype_size(ti.dtype);
    for (const auto& d : *sh) {
      ATTN_REQUIRE(d.is_number_unsigned() || (d.is_number_integer() && d.get<int64_t>() >= 0),
                   "checkpoint '%s': tensor '%s' has a shape entry that is not a non-negative "
                   "integer: %s",
                   p, n, sh->dump().c_str());
      uint64_t v = d.get<uint64_t>();
      ATTN_REQUIRE(v <= uint64_t(INT64_MAX), "checkpoint '%s': tensor '%s' has shape %s, too large",
                   p, n, sh->dump().c_str());
      ti.shape.push_back(int64_t(v));
      bytes *= v;
      if (bytes > u128(UINT64_MAX)) bytes = u128(UINT64_MAX) + 1;  // saturate: never wraps
    }

    auto off = entry.find("data_offsets");
    ATTN_REQUIRE(off != entry.end() && off->is_array() && off->size() == 2 &&
                     (*off)[0].is_number_unsigned() && (*off)[1].is_number_unsigned(),
                 "checkpoint '%s': tensor '%s' needs 'data_offsets': [begin, end] with "
                 "non-negative integers",
                 p, n);
    ti.begin = (*off)[0].get<uint64_t>();
    ti.end = (*off)[1].get<uint64_t>();
    ATTN_REQUIRE(ti.begin <= ti.end && ti.end <= data_size,
                 "checkpoint '%s': tensor '%s' has data_offsets [%llu, %llu] outside the data "
                 "(%llu bytes); the file is truncated or corrupt",
                 p, n, (unsigned long long)ti.begin, (unsigned long long)ti.end,
                 (unsigned long long)data_size);
    ATTN_REQUIRE(bytes == ti.end - ti.begin,
                 "checkpoint '%s': tensor '%s' is %s %s (%s bytes) but its data_offsets span "
                 "%llu bytes",
                 p, n, st_dtype_name(ti.dtype), ti.shape_str().c_str(),
                 bytes > u128(UINT64_MAX) ? std::string("> 2^64").c_str()
                                          : std::to_string(uint64_t(bytes)).c_str(),
                 (unsigned long long)(ti.end - ti.begin));
    infos_[name] = std::move(ti);
  }

  // The tensors must tile the data buffer exactly: no overlap, no gap, nothing left over.
  for (const auto& [name, ti] : infos_) names_.push_back(name);
  std::stable_sort(names_.begin(), names_.end(), [&](const std::string& a, const std::string& b) {
    const TensorInfo &x = infos_.at(a), &y = infos_.at(b);
    return x.begin != y.begin ? x.begin < y.begin : x.end < y.end;
  });
  uint64_t covered = 0;
  const std::string* prev = nullptr;
  for (const std::string& name : names_) {
    const TensorInfo& ti = infos_.at(name);
    if (ti.begin < covered)
      ATTN_FAIL(
          "checkpoint '%s': tensors '%s' and '%s' overlap (data_offsets [%llu, %llu] and "
          "[%llu, %llu])",
          p, prev->c_str(), name.c_str(), (unsigned long long)infos_.at(*prev).begin,
          (unsigned long long)infos_.at(*prev).end, (unsigned long long)ti.begin,
          (unsigned long long)ti.end);
    ATTN_REQUIRE(ti.begin == covered,
                 "checkpoint '%s': %llu bytes before tensor '%s' belong to no tensor", p,
                 (unsigned long long)(ti.begin - covered), name.c_str());
    covered = ti.end;
    prev = &name;
  }
  ATTN_REQUIRE(covered == data_size,
               "checkpoint '%s': the last %llu bytes of the file belong to no tensor", p,
               (unsigned long long)(data_size - covered));
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = infos_.find(name);
  ATTN_REQUIRE(it != infos_.end(), "checkpoint '%s' has no tensor '%s' (it has %zu tensors)",
               path_.c_str(), name.c_str(), infos_.size());
  return it->second;
}

const std::byte* SafetensorsFile::data_ptr(const TensorInfo& ti) const {
  return static_cast<const std::byte*>(map_) + data_start_ + ti.begin;
}

std::span<const std::byte> SafetensorsFile::raw(const std::string& name) const {
  const TensorInfo& ti = info(name);
  return {data_ptr(ti), size_t(ti.end - ti.begin)};
}

Tensor SafetensorsFile::view(const std::string& name) const {
  const TensorInfo& ti = info(name);
  const char *p = path_.c_str(), *n = name.c_str();
  ATTN_REQUIRE(ti.dtype != StDType::F16 && ti.dtype != StDType::I64,
               "checkpoint '%s': tensor '%s' is %s, which has no attnlab dtype; use load_into() "
               "to convert it",
               p, n, st_dtype_name(ti.dtype));
  ATTN_REQUIRE(ti.shape.size() <= size_t(Shape::kMaxDims),
               "checkpoint '%s': tensor '%s' has %zu dimensions; attnlab tensors have at most %d",
               p, n, ti.shape.size(), Shape::kMaxDims);
  const std::byte* ptr = data_ptr(ti);
  ATTN_REQUIRE(reinterpret_cast<uintptr_t>(ptr) % st_dtype_size(ti.dtype) == 0,
               "checkpoint '%s': tensor '%s' is not aligned to its element size; use load_into()",
               p, n);
  Shape s;
  for (int64_t d : ti.shape) s.dims[s.ndim++] = d;
  return Tensor(const_cast<std::byte*>(ptr), dtype_of(ti.dtype), Device::cpu, s);
}

void SafetensorsFile::load_into(const std::string& name, const Tensor& dst) const {
  const TensorInfo& ti = info(name);
  const char *p = path_.c_str(), *n = name.c_str();
  std::vector<int64_t> want(dst.shape.dims.begin(), dst.shape.dims.begin() + dst.shape.ndim);
  ATTN_REQUIRE(ti.shape == want, "checkpoint '%s': tensor '%s' has shape %s, the model expects %s",
               p, n, ti.shape_str().c_str(), shape_str(want).c_str());
  const StDType want_dt = st_dtype_of(dst.dtype);
  const std::byte* src = data_ptr(ti);
  const int64_t numel = ti.numel();
  if (is_float_type(ti.dtype)) {  // a NaN weight would surface steps later as a "divergence"
    const int64_t bad = first_non_finite(src, ti.dtype, numel);
    ATTN_REQUIRE(bad < 0,
                 "checkpoint '%s': tensor '%s' holds a non-finite value (%g at flat index %lld): "
                 "the file is corrupt or was written by a run that had diverged",
                 p, n, double(load_as_float(src, ti.dtype, bad)), (long long)bad);
  }
  if (ti.dtype == want_dt) {
    if (numel == 0) return;
    if (dst.device == Device::cpu)
      std::memcpy(dst.data, src, dst.nbytes());
    else
      CUDA_CHECK(cudaMemcpy(dst.data, src, dst.nbytes(), cudaMemcpyHostToDevice));
    return;
  }
  ATTN_REQUIRE(is_float_type(ti.dtype) && is_float_type(want_dt) && want_dt != StDType::F16,
               "checkpoint '%s': tensor '%s' is %s, the model expects %s (only F32 <-> BF16 and "
               "F16 -> F32/BF16 convert on load)",
               p, n, st_dtype_name(ti.dtype), st_dtype_name(want_dt));
  if (dst.device == Device::cpu) {
    convert_floats(src, ti.dtype, dst.data, dst.dtype, numel);
    return;
  }
  // CUDA destination: convert chunk by chunk through a bounded host buffer.
  const size_t out_size = dtype_size(dst.dtype);
  const int64_t chunk = int64_t(std::max<size_t>(1, kStagingBytes / out_size));
  Buffer staging(Device::cpu, size_t(std::min(chunk, numel)) * out_size);
  Tensor flat = dst.view({numel});
  for (int64_t i = 0; i < numel; i += chunk) {
    int64_t m = std::min(chunk, numel - i);
    convert_floats(src + size_t(i) * st_dtype_size(ti.dtype), ti.dtype, staging.data(), dst.dtype,
                   m);
    copy_tensor(flat.slice0(i, i + m), staging.as(dst.dtype, {m}));
  }
}

}  // namespace attnlab::io
