// The checked entry points of dense attention (contract: attention.cuh) and the dispatch between
// its kernels:
//   fp32                      attention_f32.cu (any D <= 128)
//   bf16 forward              the Hopper wgmma kernel (attention_wgmma.cu) where supported and
//                             use_wgmma is set, else mma.sync (attention_fwd_mma.cu)
//   bf16 backward             delta (attention_bwd_delta.cu), then the wgmma kernel
//                             (attention_wgmma_bwd.cu) for the fast path where supported, else
//                             mma.sync (attention_bwd_mma.cu; always for deterministic)
// The host ops (src/ops/attention.cpp) check shapes, dtypes and head dims with user-facing
// messages; here the kernels' preconditions are asserted.
#include "kernels/attention/attention.cuh"
#include "kernels/attention/attention_impl.cuh"
#include "kernels/attention/attention_wgmma.cuh"
#include "kernels/common/device.cuh"

namespace attnlab {
namespace {

using namespace attention_impl;

template <typename T>
void check_params(const AttentionParams<T>& p) {
  ATTN_ASSERT(p.n_kv_head > 0 && p.n_head % p.n_kv_head == 0 && p.seq_len > 0 && p.B > 0);
  ATTN_ASSERT(p.mask.window >= 0);
}

// The tensor-core kernels need machine code for sm_80 or newer in this build.
void check_bf16_build() {
  const int version = mma_binary_version();
  ATTN_REQUIRE(version >= 80,
               "bf16 attention kernels were built for sm_%d; they need sm_80 or newer (configure "
               "with -DCMAKE_CUDA_ARCHITECTURES=90 for H100/H200)",
               version);
}

void check_bf16_layout(const AttentionParams<bf16>& p) {
  check_bf16_build();
  ATTN_ASSERT(p.D == 64 || p.D == 128);
  ATTN_ASSERT(p.scale > 0.f);  // the forward folds the scale into exp2 after the row max
  ATTN_ASSERT(p.qkv_row_stride % 8 == 0 && p.qkv_batch_stride % 8 == 0 && p.o_row_stride % 8 == 0 &&
              p.o_batch_stride % 8 == 0);
  ATTN_ASSERT(aligned16(p.q) && aligned16(p.k) && aligned16(p.v));
}

}  // namespace

template <typename T>
void launch_attention_fwd(const AttentionParams<T>& p, Stream s) {
  check_params(p);
  auto st = reinterpret_cast<cudaStream_t>(s);
  if constexpr (std::is_same_v<T, float>) {
    fwd_f32(p, st);
  } else {
    check_bf16_layout(p);
    if (p.use_wgmma && attention_fwd_wgmma_supported(p)) {
      launch_attention_fwd_wgmma(p, s);
    } else {
      fwd_bf16_mma(p, st);
    }
  }
}

void launch_attention_bwd_delta(const AttentionParams<bf16>& p, float* delta, float* dq_accum,
                                Stream s) {
  check_params(p);
  check_bf16_layout(p);
  ATTN_ASSERT(delta != nullptr && (dq_accum == nullptr || aligned16(dq_accum)));
  bwd_delta_bf16(p, delta, dq_accum, reinterpret_cast<cudaStream_t>(s));
}

template <typename T>
void launch_attention_bwd(const AttentionParams<T>& p, Stream s) {
  check_params(p);
  if constexpr (std::is_same_v<T, float>) {
    bwd_f32(p, s);
  } else {
    check_bf16_layout(p);
    auto st = reinterpret_cast<cudaStream_t>(s);
    const int64_t rows = int64_t(p.B) * p.n_head * p.seq_len;
    StreamScratch delta(sizeof(float) * rows, s);
    // Fast path: dQ accumulates in fp32 [B, H, T, D], zeroed by the delta kernel in the same pass
    // (faster than a cudaMemsetAsync and a read-only delta kernel; docs/performance.md).
    StreamScratch dq_accum(p.deterministic ? 0 : sizeof(float) * rows * p.D, s);
    bwd_delta_bf16(p, delta.as<float>(), dq_accum.as<float>(), st);
    if (!p.deterministic && p.use_wgmma && aligned16(p.dout) && attention_bwd_wgmma_supported(p)) {
      launch_attention_bwd_wgmma(p, delta.as<float>(), dq_accum.as<float>(), s);
    } else {
      bwd_bf16_mma(p, delta.as<float>(), dq_accum.as<float>(), st);
    }
  }
}

template void launch_attention_fwd<float>(const AttentionParams<float>&, Stream);
template void launch_attention_fwd<bf16>(const AttentionParams<bf16>&, Stream);
template void launch_attention_bwd<float>(const AttentionParams<float>&, Stream);
template void launch_attention_bwd<bf16>(const AttentionParams<bf16>&, Stream);

}  // namespace attnlab
