// Shared argument checks for the host ops (src/ops/*.cpp). Every failure is an attnlab::Error
// whose message names the op, the argument and what was expected, e.g.
//   "layernorm: gamma must be f32[768] on cpu, got bf16[512] on cuda".
#pragma once
#include "core/context.h"
#include "core/tensor.h"
#include "kernels/common/launch.h"
#include "ops/qkv_layout.h"

namespace attnlab::ops::detail {

// The tensor must be non-empty.
inline void require_present(const char* op, const char* name, const Tensor& t) {
  ATTN_REQUIRE(!t.empty(), "%s: %s is required, got an empty tensor", op, name);
}

// Exact dtype, shape and the context's device.
inline void require_tensor(const char* op, const char* name, const Tensor& t, DType dtype,
                           const Shape& shape, const ExecContext& ctx) {
  require_present(op, name, t);
  ATTN_REQUIRE(t.dtype == dtype && t.shape == shape && t.device == ctx.device,
               "%s: %s must be %s%s on %s, got %s", op, name, dtype_name(dtype),
               shape.str().c_str(), device_name(ctx.device), t.str().c_str());
}

// Like require_tensor, but only the element count must match (the op flattens the shape).
inline void require_numel(const char* op, const char* name, const Tensor& t, DType dtype,
                          int64_t numel, const ExecContext& ctx) {
  require_present(op, name, t);
  ATTN_REQUIRE(t.dtype == dtype && t.numel() == numel && t.device == ctx.device,
               "%s: %s must be %s with %lld elements on %s, got %s", op, name, dtype_name(dtype),
               static_cast<long long>(numel), device_name(ctx.device), t.str().c_str());
}

// The activation dtype of an op: f32 on CPU; f32 or bf16 on CUDA. Also checks the device and
// that the tensor has at least `min_ndim` dimensions. Returns the dtype the rest must match.
inline DType require_activation(const char* op, const char* name, const Tensor& t,
                                const ExecContext& ctx, int min_ndim = 1) {
  require_present(op, name, t);
  ATTN_REQUIRE(t.device == ctx.device, "%s: %s must be on %s, got %s", op, name,
               device_name(ctx.device), t.str().c_str());
  if (ctx.device == Device::cpu) {
    ATTN_REQUIRE(t.dtype == DType::f32, "%s: %s must be f32 on cpu, got %s", op, name,
                 t.str().c_str());
  } else {
    ATTN_REQUIRE(t.dtype == DType::f32 || t.dtype == DType::bf16,
                 "%s: %s must be f32 or bf16 on cuda, got %s", op, name, t.str().c_str());
  }
  ATTN_REQUIRE(t.ndim() >= min_ndim, "%s: %s must have at least %d dimension(s), got %s", op, name,
               min_ndim, t.str().c_str());
  return t.dtype;
}

// A packed q/k/v activation (ops/qkv_layout.h) named `name`: present, an activation dtype on the
// context's device, [B, T, layout.width()] with positive head counts and dim and n_kv_head
// dividing n_head. Returns the dtype.
inline DType require_packed_qkv(const char* op, const char* name, const Tensor& qkv,
                                const QKVLayout& layout, const ExecContext& ctx) {
  const DType dt = require_activation(op, name, qkv, ctx, 3);
  const int H = layout.n_head, Hkv = layout.n_kv_head, D = layout.head_dim;
  ATTN_REQUIRE(H > 0 && Hkv > 0 && D > 0,
               "%s: n_head, n_kv_head and head_dim must be positive, got %d, %d and %d", op, H, Hkv,
               D);
  ATTN_REQUIRE(H % Hkv == 0, "%s: n_kv_head (%d) must divide n_head (%d)", op, Hkv, H);
  ATTN_REQUIRE(qkv.ndim() == 3 && qkv.dim(2) == layout.width(),
               "%s: %s must be [B, T, %lld] ((n_head %d + 2 x n_kv_head %d) x head_dim %d), got "
               "%s",
               op, name, (long long)layout.width(), H, Hkv, D, qkv.str().c_str());
  return dt;
}

// Shape without its last dimension, followed by `last` (e.g. [B, T, in] -> [B, T, out]).
inline Shape with_last_dim(const Shape& s, int64_t last) {
  Shape r = s;
  r.dims[r.ndim - 1] = last;
  return r;
}

// Typed data pointer, or nullptr for an empty (optional) tensor.
template <typename T>
T* data_or_null(const Tensor& t) {
  return t.empty() ? nullptr : static_cast<T*>(t.data);
}

// Runs one op: `make.template operator()<T>()` builds its params struct for element type T; the
// CPU gets the float reference, CUDA the launcher for the activation dtype on the context stream.
template <template <typename> class Params, typename Make>
void run_op(const ExecContext& ctx, DType dtype, Make&& make, void (*ref)(const Params<float>&),
            void (*launch_f32)(const Params<float>&, Stream),
            void (*launch_bf16)(const Params<bf16>&, Stream)) {
  if (ctx.device == Device::cpu) {
    ref(make.template operator()<float>());
  } else if (dtype == DType::f32) {
    launch_f32(make.template operator()<float>(), ctx.stream);
  } else {
    launch_bf16(make.template operator()<bf16>(), ctx.stream);
  }
}

}  // namespace attnlab::ops::detail
