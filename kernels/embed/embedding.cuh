// Token + learned position embedding.
// tokens: [B*T] i32 (each in [0, vocab)); wte: [Vp, C]; wpe: [max_T, C]; out/dout: [B*T, C].
// fwd: out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]                                   (written =)
//      wpe may be null: no position table (RoPE models), out = wte[tokens[b,t],:]
// bwd: dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[t,:] += sum_b dout[b,t,:]           (accumulated
// +=)
//      dwte, dwpe may be null (frozen or absent); the CUDA backward is deterministic (no float
//      atomics).
#pragma once
#include "kernels/common/launch.h"

namespace attnlab {

template <typename T>
struct EmbeddingParams {
  const int32_t* tokens = nullptr;
  const T* wte = nullptr;
  const T* wpe = nullptr;
  T* out = nullptr;
  const T* dout = nullptr;
  T* dwte = nullptr;
  T* dwpe = nullptr;
  int64_t B = 0;
  int T_ = 0;  // sequence length
  int C = 0;
  int vocab = 0;  // rows of wte (padded vocab)
};

template <typename T>
void launch_embedding_fwd(const EmbeddingParams<T>& p, Stream s);
template <typename T>
void launch_embedding_bwd(const EmbeddingParams<T>& p, Stream s);

}  // namespace attnlab
