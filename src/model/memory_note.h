// The memory estimate as text, for the start-up check and for out-of-memory errors mid-run
// (src/model/memory.cpp).
#pragma once
#include <string>

#include "model/gpt.h"

namespace attnlab {

// "the run needs about 12.3 GiB (weights ..., activations ... for micro-batch 8, recompute none)"
std::string memory_estimate_text(const TrainingMemoryEstimate& e, int micro_batch,
                                 ActivationRecompute recompute);
// The estimate and a hint, for out-of-memory errors during the run (set_out_of_memory_note).
std::string out_of_memory_note(const TrainingMemoryEstimate& e, int micro_batch,
                               ActivationRecompute recompute);

}  // namespace attnlab
