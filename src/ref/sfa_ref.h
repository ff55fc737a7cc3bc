// CPU references of the SFA kernel family (kernels/sfa/*.cuh), the same contracts on float. They
// are the CPU backend of SFA attention and the oracle for its CUDA kernels. Deterministic: every
// output is owned by one thread and reduced in a fixed order.
#pragma once
#include <cstdint>

#include "kernels/sfa/sfa_attention.cuh"
#include "kernels/sfa/sfa_distill.cuh"
#include "kernels/sfa/sfa_flash.cuh"
#include "kernels/sfa/sfa_select.cuh"

namespace attnlab {

// The selected coordinates of one head vector x[0..D) in ascending order (idx[0..k)), by the rule
// of sfa_select.cuh; shared by the reference kernels and the tests.
void sfa_select_coords(const float* x, int D, int k, int32_t* idx);

void sfa_select_ref(const SfaSelectParams<float>& p);
void sfa_attention_fwd_ref(const SfaAttentionParams<float>& p);
// FlashSFA's contract (sfa_flash.cuh) on the host: the forward by sfa_attention_fwd_ref over the
// sparse form; the backward in the overlap form directly (double accumulation, one owner per
// (b, kv head), fixed order).
void sfa_flash_fwd_ref(const SfaFlashParams<float>& p);
void sfa_flash_bwd_ref(const SfaFlashParams<float>& p);
void sfa_distill_fwd_ref(const SfaDistillParams<float>& p);
void sfa_distill_bwd_ref(const SfaDistillParams<float>& p);

}  // namespace attnlab
