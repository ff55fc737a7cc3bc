// RAII NVTX range so a profile reads like the model (free when no profiler is attached).
#pragma once
#include <nvtx3/nvToolsExt.h>

namespace attnlab {
class NvtxRange {
 public:
  explicit NvtxRange(const char* name) { nvtxRangePushA(name); }
  ~NvtxRange() { nvtxRangePop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};
}  // namespace attnlab
