#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "core/cuda_check.h"
#include "core/out_of_memory.h"

namespace attnlab {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::bf16:
      return "bf16";
    case DType::i32:
      return "i32";
    case DType::u16:
      return "u16";
    case DType::u32:
      return "u32";
    case DType::u8:
      return "u8";
  }
  return "?";
}

const char* device_name(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }

Shape::Shape(std::initializer_list<int64_t> d) {
  ATTN_ASSERT(d.size() <= size_t(kMaxDims));
  for (int64_t v : d) dims[ndim++] = v;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= dims[i];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (ndim != o.ndim) return false;
  for (int i = 0; i < ndim; ++i)
    if (dims[i] != o.dims[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

Tensor Tensor::view(Shape s) const {
  ATTN_REQUIRE(s.numel() == numel(), "cannot view %s as %s: element counts differ",
               shape.str().c_str(), s.str().c_str());
  return Tensor(data, dtype, device, s);
}

Tensor Tensor::slice0(int64_t begin, int64_t end) const {
  ATTN_ASSERT(ndim() >= 1 && begin >= 0 && begin <= end && end <= shape[0]);
  Shape s = shape;
  s.dims[0] = end - begin;
  int64_t row = shape[0] ? numel() / shape[0] : 0;
  return Tensor(static_cast<char*>(data) + size_t(begin * row) * dtype_size(dtype), dtype, device,
                s);
}

std::string Tensor::str() const {
  return std::string(dtype_name(dtype)) + shape.str() + " on " + device_name(device);
}

namespace {
std::string& out_of_memory_note() {
  static std::string note;
  return note;
}
std::string note_suffix() {
  return out_of_memory_note().empty() ? std::string() : "; " + out_of_memory_note();
}
}  // namespace

void set_out_of_memory_note(std::string note) { out_of_memory_note() = std::move(note); }
const std::string& current_out_of_memory_note() { return out_of_memory_note(); }

std::string gpu_out_of_memory_detail() {
  cudaGetLastError();  // the failed allocation's error, so that the queries below report theirs
  size_t free_b = 0, total_b = 0;
  std::string s;
  if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
    s = strformat(" (%.1f MiB free of %.1f MiB)", free_b / 1048576.0, total_b / 1048576.0);
  cudaGetLastError();
  return s + (out_of_memory_note().empty() ? "; try a smaller train.micro_batch or train.seq_len"
                                           : note_suffix());
}

Buffer::Buffer(Device dev, size_t bytes) : bytes_(bytes), device_(dev) {
  if (bytes == 0) return;
  if (dev == Device::cpu) {
    size_t rounded = (bytes + 63) / 64 * 64;
    data_ = std::aligned_alloc(64, rounded);
    ATTN_REQUIRE(data_ != nullptr, "out of host memory allocating %.1f MiB%s", bytes / 1048576.0,
                 note_suffix().c_str());
  } else {
    cudaError_t err = cudaMalloc(&data_, bytes);
    if (err == cudaErrorMemoryAllocation)
      ATTN_FAIL("out of GPU memory allocating %.1f MiB%s", bytes / 1048576.0,
                gpu_out_of_memory_detail().c_str());
    CUDA_CHECK(err);
  }
}

Buffer::~Buffer() { release(); }

Buffer::Buffer(Buffer&& o) noexcept : data_(o.data_), bytes_(o.bytes_), device_(o.device_) {
  o.data_ = nullptr;
  o.bytes_ = 0;
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    release();
    data_ = o.data_;
    bytes_ = o.bytes_;
    device_ = o.device_;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void Buffer::release() {
  if (!data_) return;
  if (device_ == Device::cpu)
    std::free(data_);
  else
    cudaFree(data_);
  data_ = nullptr;
  bytes_ = 0;
}

Tensor Buffer::as(DType t, Shape s, size_t byte_offset) const {
  ATTN_ASSERT(byte_offset + size_t(s.numel()) * dtype_size(t) <= bytes_);
  return Tensor(static_cast<char*>(data_) + byte_offset, t, device_, s);
}

void Buffer::zero() {
  if (!data_) return;
  if (device_ == Device::cpu)
    std::memset(data_, 0, bytes_);
  else
    CUDA_CHECK(cudaMemset(data_, 0, bytes_));
}

const Buffer& GrowingBuffer::at_least(size_t bytes) {
  if (buf_.bytes() < bytes) {
    buf_ = Buffer();
    buf_ = Buffer(device_, bytes);
  }
  return buf_;
}

void copy_tensor(const Tensor& dst, const Tensor& src) {
  ATTN_REQUIRE(dst.nbytes() == src.nbytes() && dst.dtype == src.dtype,
               "copy_tensor: %s <- %s mismatch", dst.str().c_str(), src.str().c_str());
  if (dst.nbytes() == 0) return;
  if (dst.device == Device::cpu && src.device == Device::cpu) {
    std::memcpy(dst.data, src.data, dst.nbytes());
    return;
  }
  cudaMemcpyKind kind = dst.device == Device::cpu   ? cudaMemcpyDeviceToHost
                        : src.device == Device::cpu ? cudaMemcpyHostToDevice
                                                    : cudaMemcpyDeviceToDevice;
  CUDA_CHECK(cudaMemcpy(dst.data, src.data, dst.nbytes(), kind));
}

void zero_tensor(const Tensor& t) {
  if (t.nbytes() == 0) return;
  if (t.device == Device::cpu)
    std::memset(t.data, 0, t.nbytes());
  else
    CUDA_CHECK(cudaMemset(t.data, 0, t.nbytes()));
}

}  // namespace attnlab
