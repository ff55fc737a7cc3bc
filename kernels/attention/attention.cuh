// Dense causal attention (flash-style on CUDA: online softmax, no T x T tensor).
//
// Layout: token t of sequence b, head h lives at
//   q:  q  + b*qkv_batch_stride + t*qkv_row_stride + h*D          (same for k, v with head h_kv)
//   o:  o  + b*o_batch_stride   + t*o_row_stride   + h*D
// so a packed qkv activation [B, T, 3, H, D] is q = qkv, k = qkv + H*D, v = qkv + 2*H*D with
// qkv_row_stride = 3*H*D. dq/dk/dv use the q/k/v strides; dout uses the o strides.
// GQA: n_kv_head divides n_head; query head h reads kv head h / (n_head / n_kv_head).
// lse: [B, H, T] fp32, the natural-log log-sum-exp of each row of scaled scores (saved by fwd).
//
// fwd: o and lse written (=).
// bwd: dq, dk, dv written (=). The CUDA backward may accumulate dk/dv in fp32 internally.
//   bf16 CUDA backward, two paths (`deterministic`):
//   false (default, fast): one kernel per 128-key block (wgmma on sm_90a, see use_wgmma; else
//     mma.sync) computes dK, dV and adds its share of dQ to an fp32 scratch with atomics (then
//     converted to bf16; scratch B*H*T*D*4 bytes from the stream-ordered pool). dk and dv are
//     bitwise reproducible; dq may differ in the last bits between runs (fp32 addition order).
//   true: dK/dV and dQ in two kernels that each recompute the scores (1.2-1.5x the default's
//     backward time on an H200), no atomics: dq, dk and dv are bitwise identical from run to run.
//   The fp32 CUDA kernels and the CPU reference are always deterministic and ignore the flag.
//
// Room for the variants (Focus, SFA) that extend this family: window > 0 limits causal attention
// to keys with t - window < s <= t (sliding window); the fields below `window` are reserved and
// must be left at their defaults by dense callers.
#pragma once
#include "kernels/common/launch.h"

namespace attnlab {

template <typename T>
struct AttentionParams {
  const T* q = nullptr;
  const T* k = nullptr;
  const T* v = nullptr;
  T* o = nullptr;
  float* lse = nullptr;
  const T* dout = nullptr;
  T* dq = nullptr;
  T* dk = nullptr;
  T* dv = nullptr;
  int64_t qkv_batch_stride = 0;
  int64_t qkv_row_stride = 0;
  int64_t o_batch_stride = 0;
  int64_t o_row_stride = 0;
  int B = 0;
  int T_ = 0;  // sequence length
  int n_head = 0;
  int n_kv_head = 0;
  int D = 0;          // head dim
  float scale = 0.f;  // usually 1/sqrt(D)
  bool causal = true;
  int window = 0;              // 0: no sliding window
  bool deterministic = false;  // bf16 CUDA backward: atomics-free path (see above)
  // bf16 CUDA forward: run the Hopper wgmma kernel (attention_wgmma.cuh) where it is supported
  // (sm_90a build, compute capability 9.0 device, D 64 or 128), else the mma.sync kernel. On by
  // default (validated against the CPU reference on the H200, 1.4-1.5x the mma.sync forward).
  // The fast bf16 backward (deterministic = false) likewise runs the wgmma dK/dV/dQ kernel where
  // supported; the deterministic backward is always mma.sync. false forces the mma.sync kernels
  // (their tests and benchmarks).
  bool use_wgmma = true;
  // Reserved for Focus/SFA (group gates, sparse feature indices); nullptr for dense.
  const void* variant = nullptr;
};

template <typename T>
void launch_attention_fwd(const AttentionParams<T>& p, Stream s);
template <typename T>
void launch_attention_bwd(const AttentionParams<T>& p, Stream s);

// The first step of the bf16 backward, on its own (launch_attention_bwd runs it; public for
// benchmarks): delta [B, n_head, T] fp32 = rowsum(dout * o) written, and when dq_accum is not null
// its B * n_head * T * D floats (16-byte aligned) set to zero.
void launch_attention_bwd_delta(const AttentionParams<bf16>& p, float* delta, float* dq_accum,
                                Stream s);

}  // namespace attnlab
