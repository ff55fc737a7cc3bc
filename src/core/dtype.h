// Element types and devices. bf16 is CUDA's __nv_bfloat16 (host-usable; the toolkit is required).
#pragma once
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace attnlab {

using bf16 = __nv_bfloat16;

enum class DType : uint8_t { f32, bf16, i32, u16, u32, u8 };
enum class Device : uint8_t { cpu, cuda };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::bf16:
      return 2;
    case DType::i32:
      return 4;
    case DType::u16:
      return 2;
    case DType::u32:
      return 4;
    case DType::u8:
      return 1;
  }
  return 0;
}
const char* dtype_name(
    DType t);  // "f32", "bf16", ...  (also the safetensors names via st_dtype_name)
const char* device_name(Device d);  // "cpu", "cuda"

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<bf16>() {
  return DType::bf16;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::i32;
}
template <>
constexpr DType dtype_of<uint16_t>() {
  return DType::u16;
}
template <>
constexpr DType dtype_of<uint32_t>() {
  return DType::u32;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::u8;
}

}  // namespace attnlab
