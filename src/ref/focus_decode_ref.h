// CPU references of kernels/focus/focus_decode.cuh, the same contracts on float (double
// accumulation). Deterministic: each list and each output row is owned by one thread.
#pragma once
#include "kernels/focus/focus_decode.cuh"

namespace attnlab {

void focus_group_index_append_ref(const FocusGroupIndexParams& p);
void focus_group_decode_ref(const FocusGroupDecodeParams<float>& p);

}  // namespace attnlab
