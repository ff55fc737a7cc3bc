// Carver: lays tensors out in one activation buffer, 256-byte aligned. The same code sizes a
// buffer (no buffer: it only counts bytes) and binds views into it, so the two cannot disagree.
#pragma once
#include "core/error.h"
#include "core/tensor.h"

namespace attnlab {

class Carver {
 public:
  Carver() = default;                                 // counts only
  explicit Carver(const Buffer& buf) : buf_(&buf) {}  // binds views into buf
  explicit Carver(const Buffer* buf) : buf_(buf) {}   // nullptr: counts only
  Tensor take(DType t, Shape s) {
    const size_t bytes = size_t(s.numel()) * dtype_size(t);
    Tensor v = buf_ ? buf_->as(t, s, off_) : Tensor(nullptr, t, Device::cpu, s);
    off_ += (bytes + 255) / 256 * 256;
    ATTN_ASSERT(!buf_ || off_ <= buf_->bytes());
    return v;
  }
  size_t bytes() const { return off_; }

 private:
  const Buffer* buf_ = nullptr;
  size_t off_ = 0;
};

}  // namespace attnlab
