// Tensor: a non-owning, typed, shaped view of contiguous row-major memory on one device.
// Buffer: owning device or host memory. Ops take Tensors and check shapes at their boundary.
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/dtype.h"
#include "core/error.h"

namespace attnlab {

struct Shape {
  static constexpr int kMaxDims = 5;
  std::array<int64_t, kMaxDims> dims{};
  int ndim = 0;

  Shape() = default;
  Shape(std::initializer_list<int64_t> d);
  int64_t operator[](int i) const { return dims[i < 0 ? i + ndim : i]; }
  int64_t numel() const;
  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::string str() const;  // "[2, 3, 4]"
};

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device = Device::cpu;
  Shape shape;

  Tensor() = default;
  Tensor(void* d, DType t, Device dev, Shape s) : data(d), dtype(t), device(dev), shape(s) {}

  bool empty() const { return data == nullptr; }
  int64_t numel() const { return shape.numel(); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype); }
  int ndim() const { return shape.ndim; }
  int64_t dim(int i) const { return shape[i]; }
  // Same memory, new shape (same number of elements).
  Tensor view(Shape s) const;
  // Rows [begin, end) of the leading dimension.
  Tensor slice0(int64_t begin, int64_t end) const;

  template <typename T>
  T* ptr() const {
    ATTN_ASSERT(dtype_of<T>() == dtype);
    return static_cast<T*>(data);
  }
  std::string str() const;  // "f32[2, 3] on cpu"
};

// Owning memory. CPU memory is 64-byte aligned; CUDA memory comes from cudaMalloc.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Device dev, size_t bytes);
  ~Buffer();
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  Tensor as(DType t, Shape s, size_t byte_offset = 0) const;
  void zero();

 private:
  void release();
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_ = Device::cpu;
};

// Scratch whose size depends on the work (a decoding chunk's activations): at_least(n) reallocates
// when the buffer is smaller than n (the old one freed first, so the peak is the new size), never
// shrinks. Nothing in it outlives the call that asked for it.
class GrowingBuffer {
 public:
  explicit GrowingBuffer(Device dev = Device::cpu) : device_(dev) {}
  const Buffer& at_least(size_t bytes);
  size_t bytes() const { return buf_.bytes(); }
  Device device() const { return device_; }

 private:
  Device device_;
  Buffer buf_;
};

// Copies between any two devices (sizes must match).
void copy_tensor(const Tensor& dst, const Tensor& src);
// Fill with zeros on its device.
void zero_tensor(const Tensor& t);

}  // namespace attnlab
