// CPU reference for kernels/attention/attention_decode.cuh, the same contract on float.
// Deterministic: each output row is computed by one thread in a fixed order (scores and sums in
// double), so results do not depend on the thread count. n_splits and partial are ignored.
#pragma once
#include "kernels/attention/attention_decode.cuh"

namespace attnlab {

void kv_cache_write_ref(const KVCacheWriteParams<float>& p);
void attention_decode_ref(const AttentionDecodeParams<float>& p);

}  // namespace attnlab
