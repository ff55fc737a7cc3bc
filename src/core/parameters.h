// ParameterStore: every parameter tensor of a model in one flat buffer, grouped by role so that
// the trainable tensors form one contiguous range [0, num_trainable). Gradients exist only for
// that range (one flat buffer, so all-reduce / reduce-scatter and the optimizer see flat memory).
// Frozen tensors (retrofit) get no gradient: grad(name) returns an empty Tensor and callers skip
// the weight-gradient products.
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace attnlab {

enum class ParamRole : uint8_t { base, attention, adapter };
const char* role_name(ParamRole r);          // "base", "attention", "adapter"
ParamRole parse_role(const std::string& s);  // throws with the valid names

enum class ParamInit : uint8_t { normal, zeros, ones };

struct ParamSpec {
  std::string name;  // stable checkpoint name, e.g. "h.3.attn.c_attn.weight" (docs/architecture.md)
  Shape shape;
  ParamRole role = ParamRole::base;
  ParamInit init = ParamInit::normal;
  float init_std = 0.02f;
  bool weight_decay = false;  // AdamW decays 2-D weights only
};

class ParameterStore {
 public:
  struct Entry {
    ParamSpec spec;
    int64_t offset = 0;  // in elements, into the flat parameter buffer
    bool trainable = true;
  };

  void declare(const ParamSpec& spec);  // before finalize; names must be unique
  // Orders tensors (trainable roles first, declaration order inside), allocates the parameter
  // buffer (dtype on device) and the gradient buffer for the trainable range only.
  void finalize(Device device, DType dtype, const std::set<ParamRole>& trainable_roles);
  bool finalized() const { return finalized_; }

  const std::vector<Entry>& entries() const { return entries_; }
  const Entry& entry(const std::string& name) const;  // throws listing similar names
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  Tensor param(const std::string& name) const;
  Tensor grad(const std::string& name) const;  // empty when frozen

  Tensor all_params() const;        // [num_params]
  Tensor trainable_params() const;  // [num_trainable] (prefix of all_params)
  Tensor grads() const;             // [num_trainable]
  int64_t num_params() const { return num_params_; }
  int64_t num_trainable() const { return num_trainable_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }

  // Fills every tensor by its ParamInit from a seeded generator (deterministic on any device).
  void initialize(uint64_t seed);
  void zero_grads();

 private:
  std::vector<Entry> entries_;
  std::map<std::string, size_t> index_;
  Buffer params_, grads_;
  int64_t num_params_ = 0, num_trainable_ = 0;
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu;
  bool finalized_ = false;
};

}  // namespace attnlab
