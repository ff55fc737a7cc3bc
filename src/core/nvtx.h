// NVTX ranges so that a profile (nsys) reads like the model: one range per op and layer.
// Without a profiler attached the push/pop calls are near-free no-ops.
#pragma once
#include <nvtx3/nvToolsExt.h>

namespace attnlab {

// RAII: pushes a named range on construction, pops it on destruction.
class NvtxRange {
 public:
  explicit NvtxRange(const char* name) { nvtxRangePushA(name); }
  ~NvtxRange() { nvtxRangePop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace attnlab
