// The hard-routed forward on the soft-gated wgmma kernel with the hard mask
// (FocusHardKernel::wgmma_masked; kernels/focus/focus_wgmma.cuh, launch_focus_wgmma_hard_fwd):
// every causal tile computed as dense, each distant pair kept iff the two tokens share a group.
#include <cmath>

#include "core/nvtx.h"
#include "kernels/focus/focus_wgmma.cuh"
#include "kernels/focus/focus_wgmma_layout.h"
#include "ops/focus_hard_ops.h"

namespace attnlab::ops {

static_assert(kFocusHardMaskedMaxGroups == focus_wgmma::kHardFwdMaxGroups,
              "the op's limit is the kernel's");

void focus_hard_masked_fwd(const ExecContext& ctx, const Tensor& out, const Tensor& lse,
                           const Tensor& qkv, const QKVLayout& l, const Tensor& groups, int K,
                           int local_window) {
  NvtxRange range("focus_hard_masked_fwd");
  const int64_t B = qkv.dim(0), T = qkv.dim(1), top_k = groups.dim(2);
  FocusAttentionParams<bf16> p;
  const bf16* base = qkv.ptr<bf16>();
  p.q = base;
  p.k = base + l.k_offset();
  p.v = base + l.v_offset();
  p.o = out.ptr<bf16>();
  p.lse = lse.ptr<float>();
  p.groups = groups.ptr<int32_t>();
  p.q_batch_stride = p.kv_batch_stride = T * l.width();
  p.q_row_stride = p.kv_row_stride = l.width();
  p.kv_head_stride = l.head_dim;
  p.o_batch_stride = T * l.q_width();
  p.o_row_stride = l.q_width();
  p.groups_batch_stride = T * top_k;
  p.B = int(B);
  p.seq_len = int(T);
  p.n_head = l.n_head;
  p.n_kv_head = l.n_kv_head;
  p.D = l.head_dim;
  p.K = K;
  p.top_k = int(top_k);
  p.scale = float(1.0 / std::sqrt(double(l.head_dim)));
  p.gate.kind = FocusGateKind::hard;
  p.gate.local_window = local_window;
  launch_focus_wgmma_hard_fwd(p, ctx.stream);
}

}  // namespace attnlab::ops
