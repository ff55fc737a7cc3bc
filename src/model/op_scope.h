// Observers and NVTX ranges around the model's groups of ops.
#pragma once
#include "core/nvtx.h"

namespace attnlab {

// Optional per-op-group observer for benchmarks: begin/end bracket each group of ops the model
// launches (e.g. "fwd.matmul.qkv", "bwd.attention"); a CUDA observer records events there.
class OpObserver {
 public:
  virtual ~OpObserver() = default;
  virtual void begin(const char* group) = 0;
  virtual void end(const char* group) = 0;
};

// NVTX range plus the optional benchmark observer (nullptr = none) around one group of ops.
class OpScope {
 public:
  OpScope(OpObserver* o, const char* name) : nvtx_(name), obs_(o), name_(name) {
    if (obs_) obs_->begin(name_);
  }
  ~OpScope() {
    if (obs_) obs_->end(name_);
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  NvtxRange nvtx_;
  OpObserver* obs_;
  const char* name_;
};

}  // namespace attnlab
