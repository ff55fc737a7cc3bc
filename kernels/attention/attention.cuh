// Dense attention (flash-style on CUDA: online softmax, no T x T tensor), causal by default.
//
// Layout: token t of sequence b, head h lives at
//   q:  q  + b*qkv_batch_stride + t*qkv_row_stride + h*D          (same for k, v with head h_kv)
//   o:  o  + b*o_batch_stride   + t*o_row_stride   + h*D
// so a packed qkv activation [B, T, (n_head + 2 n_kv_head) D] (src/ops/qkv_layout.h) is q = qkv,
// k = qkv + n_head*D, v = k + n_kv_head*D with qkv_row_stride its width. dq/dk/dv use the q/k/v
// strides; dout uses the o strides.
// GQA: n_kv_head divides n_head; query head h reads kv head h / (n_head / n_kv_head).
// Visibility (causal, sliding window): AttentionMask (visibility.h), the one definition every
// kernel and the CPU reference derive their loops and masks from.
// lse: [B, n_head, T] fp32, the natural-log log-sum-exp of each row of scaled scores (saved by
// fwd).
//
// fwd: o and lse written (=).
// bwd: dq, dk, dv written (=). The CUDA backward may accumulate dk/dv in fp32 internally.
//   bf16 CUDA backward, two paths (`deterministic`):
//   false (default, fast): one kernel per 128-key block (wgmma on sm_90a, see use_wgmma; else
//     mma.sync) computes dK, dV and adds its share of dQ to an fp32 scratch with atomics (then
//     converted to bf16; scratch B*H*T*D*4 bytes from the stream-ordered pool). dk and dv are
//     bitwise reproducible; dq may differ in the last bits between runs (fp32 addition order).
//   true: dK/dV and dQ in two mma.sync kernels that each recompute the scores (slower; timings
//     in docs/performance.md), no atomics: dq, dk and dv bitwise identical from run to run.
//   The fp32 CUDA kernels and the CPU reference are always deterministic and ignore the flag.
//
// Kernel files: attention.cu (checked entry points, dispatch), attention_fwd_mma.cu and
// attention_bwd_mma.cu (bf16 mma.sync, any sm_80+), attention_wgmma.cu and attention_wgmma_bwd.cu
// (bf16 wgmma, sm_90a), attention_f32.cu (fp32). The variants that extend dense attention (Focus,
// SFA) get their own kernel families with their own typed params structs.
#pragma once
#include "kernels/attention/visibility.h"
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
  int seq_len = 0;  // T
  int n_head = 0;
  int n_kv_head = 0;
  int D = 0;          // head dim
  float scale = 0.f;  // usually 1/sqrt(D); > 0 for bf16 (folded into exp2 after the row max)
  AttentionMask mask;
  bool deterministic = false;  // bf16 CUDA backward: atomics-free path (see above)
  // bf16 CUDA: run the Hopper wgmma kernels (attention_wgmma.cuh) where supported (sm_90a build,
  // compute capability 9.0 device, D 64 or 128), else mma.sync; the default, as they measured
  // faster on the H200 (docs/performance.md). The fast backward (deterministic = false) likewise;
  // the deterministic backward is always mma.sync. false forces the mma.sync kernels (their tests
  // and benchmarks).
  bool use_wgmma = true;
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
