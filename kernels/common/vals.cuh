// V consecutive values of a row as floats, for row kernels with a 16-byte and a scalar path
// (kernels/norm/layernorm.cu, rmsnorm.cu, kernels/activation/swiglu.cu): V = Pack<T>::N is one
// 16-byte load/store (4 floats or 8 bf16), V = 1 one scalar; and the host test that picks the
// path.
#pragma once
#include <initializer_list>

#include "kernels/common/device.cuh"

namespace attnlab {

// Whether rows of C values at every non-null pointer can take the 16-byte path.
template <typename T>
bool rows_vectorizable(int C, std::initializer_list<const void*> ptrs) {
  if (C % dev::Pack<T>::N != 0) return false;
  for (const void* p : ptrs)
    if (p && !aligned16(p)) return false;
  return true;
}

namespace dev {

template <typename T, int V>
__device__ __forceinline__ void load_vals(const T* p, float (&out)[V]) {
  if constexpr (V == 1) {
    out[0] = to_f(*p);
  } else {
    const Pack<T> pk = load_pack(p);
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = pk.f(j);
  }
}

template <typename T, int V>
__device__ __forceinline__ void store_vals(T* p, const float (&in)[V]) {
  if constexpr (V == 1) {
    *p = from_f<T>(in[0]);
  } else {
    Pack<T> pk;
#pragma unroll
    for (int j = 0; j < V; ++j) pk.set(j, in[j]);
    store_pack(p, pk);
  }
}

// acc[0..V) += v (acc in shared memory); float4 accesses when V allows (fewer bank conflicts).
template <int V>
__device__ __forceinline__ void add_vals(float* acc, const float (&v)[V]) {
  if constexpr (V % 4 == 0) {
#pragma unroll
    for (int j = 0; j < V; j += 4) {
      float4* a4 = reinterpret_cast<float4*>(acc + j);
      float4 a = *a4;
      a.x += v[j];
      a.y += v[j + 1];
      a.z += v[j + 2];
      a.w += v[j + 3];
      *a4 = a;
    }
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] += v[j];
  }
}

}  // namespace dev
}  // namespace attnlab
