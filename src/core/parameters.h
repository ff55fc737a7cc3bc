// ParameterStore: every parameter tensor of a model in one flat buffer, grouped by role so that
// the trainable tensors form one contiguous range [0, trainable_buffer_numel()). Gradients exist
// only for that range (one flat buffer, so all-reduce / reduce-scatter and the optimizer see flat
// memory). Frozen tensors (retrofit) get no gradient: grad(name) returns an empty Tensor and
// callers skip the weight-gradient products.
//
// Layout of the flat buffer (element offsets; the gradient buffer and the optimizer's fp32 m, v
// and master copy use the same offsets over the trainable range):
//   [trainable tensors, declaration order][shard padding][frozen tensors, declaration order]
// - Every tensor starts at a multiple of kParamAlignElements = 64 elements: 128 B in bf16 and
//   256 B in fp32, so both the weights (f32 or bf16) and the fp32 optimizer state that share the
//   offsets are 128-byte aligned for vector loads (cudaMalloc bases are 256-byte aligned; host
//   Buffers 64-byte, enough for the CPU's widest loads). Aligning bytes instead of elements
//   would give different offsets for the bf16 weights and their fp32 state.
// - The trainable range is padded to a multiple of shard_count * 64 elements, so it splits into
//   shard_count equal shards that each start aligned (ZeRO-1): shard(r) = [r * S, (r + 1) * S)
//   with S = trainable_buffer_numel() / shard_count. Shards cut through tensors; together they
//   cover every trainable tensor. The frozen tensors follow the padded trainable range.
// - Padding elements are zero after finalize and nothing in attnlab writes them: initialize(),
//   the loaders and backward write tensor views only, AdamW updates the tensors only. They are
//   not counted by num_params() / num_trainable() (what `attnlab info` and the log report) and
//   change no result (the gradient norm sums the tensors only, see ops::sum_of_squares).
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

// Element alignment of every tensor offset in the flat buffers (see the layout above).
constexpr int64_t kParamAlignElements = 64;

struct ParamSpec {
  std::string name;  // stable checkpoint name, e.g. "h.3.attn.c_attn.weight" (docs/architecture.md)
  Shape shape;
  ParamRole role = ParamRole::base;
  ParamInit init = ParamInit::normal;
  float init_std = 0.02f;
  bool weight_decay = false;  // AdamW decays 2-D weights only
};

// Where tensors lie in a flat range: the trainable range of a store, over which gradients and
// optimizer state are laid out. Saved with the optimizer state and compared on load, so state
// saved for another layout (a reordered, reshaped or re-roled tensor) is refused, not misread.
struct ParamLayout {
  struct Item {
    std::string name;
    Shape shape;
    ParamRole role = ParamRole::base;
    int64_t offset = 0;  // in elements
  };
  int64_t numel = 0;  // length of the range, padding included
  int64_t alignment = kParamAlignElements;
  std::vector<Item> tensors;  // in offset order

  std::string to_json() const;
  // Throws naming `source` when the text is not a layout written by to_json.
  static ParamLayout from_json(const std::string& text, const std::string& source);
};

// Empty when optimizer state saved for `saved` can be loaded into `current`: the same tensors
// with the same shapes, roles and offsets (the length of the range may differ by the shard
// padding at its end). Otherwise one phrase naming the first tensor of `current` (in offset
// order) that differs and how, e.g. "tensor h.0.attn.c_attn.weight is [2304, 768] at offset
// 1280 there, [768, 2304] at offset 1280 here".
std::string layout_difference(const ParamLayout& saved, const ParamLayout& current);

class ParameterStore {
 public:
  struct Entry {
    ParamSpec spec;
    int64_t offset = 0;  // in elements, into the flat parameter buffer (a multiple of 64)
    bool trainable = true;
  };
  struct Range {
    int64_t offset = 0, numel = 0;  // elements
  };

  void declare(const ParamSpec& spec);  // before finalize; names must be unique
  // Orders tensors (trainable roles first, declaration order inside), places them as described
  // at the top (shard_count >= 1 equal shards of the trainable range), allocates the parameter
  // buffer (dtype on device) and the gradient buffer for the trainable range only.
  void finalize(Device device, DType dtype, const std::set<ParamRole>& trainable_roles,
                int shard_count = 1);
  bool finalized() const { return finalized_; }

  const std::vector<Entry>& entries() const { return entries_; }
  const Entry& entry(const std::string& name) const;  // throws listing similar names
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  Tensor param(const std::string& name) const;
  Tensor grad(const std::string& name) const;  // empty when frozen

  Tensor all_params() const;        // [param_buffer_numel()], padding included
  Tensor trainable_params() const;  // [trainable_buffer_numel()] (prefix of all_params)
  Tensor grads() const;             // [trainable_buffer_numel()]
  // Real elements: the sums of the tensors' sizes, without padding (what users are shown).
  int64_t num_params() const { return num_params_; }
  int64_t num_trainable() const { return num_trainable_; }
  // Lengths of the flat buffers, padding included.
  int64_t param_buffer_numel() const { return param_buffer_numel_; }
  int64_t trainable_buffer_numel() const { return trainable_buffer_numel_; }
  // The equal, aligned shards of the trainable range.
  int num_shards() const { return num_shards_; }
  Range shard(int rank) const;
  // The trainable tensors as they lie in the trainable range (for optimizer state).
  ParamLayout trainable_layout() const;
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }

  // Fills every tensor by its ParamInit from a seeded generator (deterministic on any device).
  void initialize(uint64_t seed);
  void zero_grads();

 private:
  static std::vector<float> draw(const ParamSpec& spec, uint64_t seed);  // initialize()'s values
  std::vector<Entry> entries_;
  std::map<std::string, size_t> index_;
  Buffer params_, grads_;
  int64_t num_params_ = 0, num_trainable_ = 0;
  int64_t param_buffer_numel_ = 0, trainable_buffer_numel_ = 0;
  int num_shards_ = 1;
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu;
  bool finalized_ = false;
};

}  // namespace attnlab
