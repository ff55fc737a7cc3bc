// Focus group assignment (docs/focus.md): scores -> assignment g, and top-k routing.
// All tensors fp32 whatever the activation dtype (they are small: K values per token, and the
// Sinkhorn iterates need the range).
//
// scores, g, dg, dscores: [B, T, K] contiguous. iterates: [iterations + 1, B, T, K] workspace.
// Sinkhorn, in the log domain (X_0 = scores; n = 0 .. N-1):
//   column step  sequence: Y[t,k] = X_n[t,k] - logsumexp_{t'<T} X_n[t',k] + log(T / K)
//                causal:   Y[t,k] = X_n[t,k] - logsumexp_{t'<=t} X_n[t',k] + log((pos+t+1) / K)
//   row step     X_{n+1}[t,k] = Y[t,k] - logsumexp_k Y[t,k]
//   g = exp(X_N) (rows sum to 1).
// fwd: g and iterates (X_0 .. X_N) written (=). state (causal only; may be null): [B, N, K, 2], the
//   running logsumexp of each iteration's column over the tokens before this chunk as a float
//   pair hi + lo (focus_sinkhorn_state.h), read and updated (decode: chunk after chunk gives the
//   rows of one forward over the whole prefix; (-inf, 0) at the start). pos: absolute position of
//   token 0 (0 in training).
// bwd: dscores written (=) from dg and the iterates of the forward (pos 0, no state): the exact
//   gradient of the unrolled iterations. The iterates are only read.
// Softmax assignment: g = softmax_k(scores); bwd dscores = g (dg - sum_k g dg) (written =).
// Top-k routing: groups [B, T, top_k] int32 = the top_k largest g of each token (ties: the lower
//   group index first), written (=).
#pragma once
#include "kernels/common/launch.h"

namespace attnlab {

// Which CUDA Sinkhorn runs: chunked = one launch per step (2N + 1 forward, 4N / 5N backward);
// cooperative = one launch per direction (focus_sinkhorn_coop.cu) where the sequence has at most
// kSinkhornCoopMaxChunks chunks and every block is resident at once (an error where forced and
// not); block = one block per sequence (focus_sinkhorn_block.cu): the forward for T <=
// kSinkhornBlockMaxT, K <= kSinkhornBlockMaxK and at most kSinkhornBlockMaxIterations iterations
// (an error where forced and not), the backward for T <= kSinkhornBlockBwdMaxT and K <=
// kSinkhornBlockMaxK (elsewhere the backward runs as automatic); automatic = both directions
// block where K <= kSinkhornBlockFirstMaxK, the sequence is more than one chunk and T <=
// kSinkhornBlockBwdMaxT (measured faster there), else: the forward cooperative where it fits,
// else block where it fits, else chunked; the backward cooperative where it fits, else chunked.
// A one-chunk forward is one kernel (fwd_single_chunk_kernel) unless block is forced.
enum class SinkhornPath { automatic, chunked, cooperative, block };
constexpr int kSinkhornCoopMaxChunks = 256;
constexpr int kSinkhornBlockMaxT = 4096, kSinkhornBlockMaxK = 8, kSinkhornBlockMaxIterations = 32;
constexpr int kSinkhornBlockBwdMaxT = 1024;
// bench_focus_assign on an H100 (2026-12-06, session 19; B 64 and 1, T 1024, ms): at K 4 the
// block forward and backward take 0.09 and 0.13 against the cooperative 0.17 and 0.27; at K 8
// 0.17 and 0.27 against 0.12 and 0.21 (its column steps run one group after another).
constexpr int kSinkhornBlockFirstMaxK = 4;

struct SinkhornParams {
  const float* scores = nullptr;
  float* iterates = nullptr;  // [iterations + 1, B, T, K]
  float* g = nullptr;
  float* state = nullptr;  // [B, iterations, K, 2] (hi, lo) or null (causal only)
  const float* dg = nullptr;
  float* dscores = nullptr;
  int B = 0, T = 0, K = 0;
  int iterations = 0;
  bool causal = true;
  int pos = 0;
  SinkhornPath path = SinkhornPath::automatic;
};

struct SoftmaxAssignParams {
  const float* scores = nullptr;
  float* g = nullptr;
  const float* dg = nullptr;
  float* dscores = nullptr;
  int64_t rows = 0;  // B * T
  int K = 0;
};

struct TopkRouteParams {
  const float* g = nullptr;
  int32_t* groups = nullptr;
  int64_t rows = 0;
  int K = 0, top_k = 0;
};

void launch_sinkhorn_fwd(const SinkhornParams& p, Stream s);
void launch_sinkhorn_bwd(const SinkhornParams& p, Stream s);
// The cooperative kernels (focus_sinkhorn_coop.cu; launch_sinkhorn_* pick them by p.path): whether
// they take p on the current device, and the launches, which return false (nothing launched, no
// error left) where p does not fit or the device refuses the grid as too large.
bool sinkhorn_cooperative_fits(const SinkhornParams& p, bool backward);
bool launch_sinkhorn_fwd_cooperative(const SinkhornParams& p, Stream s);
bool launch_sinkhorn_bwd_cooperative(const SinkhornParams& p, Stream s);
// The one-block forward and backward (focus_sinkhorn_block.cu): whether they take p, and the
// launches (false: nothing launched).
bool sinkhorn_block_fits(const SinkhornParams& p);
bool launch_sinkhorn_fwd_block(const SinkhornParams& p, Stream s);
bool sinkhorn_block_bwd_fits(const SinkhornParams& p);
bool launch_sinkhorn_bwd_block(const SinkhornParams& p, Stream s);
void launch_softmax_assign_fwd(const SoftmaxAssignParams& p, Stream s);
void launch_softmax_assign_bwd(const SoftmaxAssignParams& p, Stream s);
void launch_topk_route(const TopkRouteParams& p, Stream s);

}  // namespace attnlab
