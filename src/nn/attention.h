// The attention interface: dense, Focus and SFA are variants behind one contract, chosen by name
// from one explicit registry (attention_registry.cpp).
//
// A module receives the block's context — the normalised hidden state h [B,T,C] (Focus projects it
// into group space), the packed qkv [B,T,3C] — and writes out [B,T,C]. It may own parameters (role
// `attention`, declared into the model's ParameterStore), saved state for its backward, auxiliary
// losses and metrics. Its backward writes dqkv (=) and, when uses_h(), accumulates into dh (+=).
// Nothing here assumes T <= block_size of GPT-2 or materialises T x T.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/parameters.h"
#include "core/tensor.h"

namespace attnlab {

enum class AttentionMode { train, eval, generate };

struct AttentionShape {
  int B = 0, T = 0;
  int n_head = 0, n_kv_head = 0, head_dim = 0;
  int n_embd() const { return n_head * head_dim; }
};

// One layer's slice of a KV cache (model/kv_cache.h): k, v [B, n_kv_head, max_T, D] in the
// activation dtype on the context's device. Variants that cache more (Focus group ids) add fields.
struct KVCacheView {
  Tensor k, v;
};

struct AttentionOptions {
  std::string type = "dense";
  int window = 0;  // sliding-window size (0: full causal)
};

class AttentionModule {
 public:
  virtual ~AttentionModule() = default;
  virtual std::string name() const = 0;
  // Declares this layer's variant parameters (role ParamRole::attention). Dense has none.
  virtual void declare_params(ParameterStore& /*store*/, int /*layer*/,
                              const AttentionShape& /*s*/) {}
  // (Re)allocates saved state for activations of shape s on the context's device.
  virtual void allocate(const ExecContext& ctx, const AttentionShape& s, DType dtype) = 0;
  // True when the module reads h and so contributes to dh in backward.
  virtual bool uses_h() const { return false; }
  virtual void forward(const ExecContext& ctx, const ParameterStore& store, const Tensor& h,
                       const Tensor& qkv, const Tensor& out, AttentionMode mode) = 0;
  // Needs the tensors of the matching forward (same h, qkv, out). dqkv written; dh accumulated.
  virtual void backward(const ExecContext& ctx, const ParameterStore& store, const Tensor& h,
                        const Tensor& qkv, const Tensor& out, const Tensor& dout,
                        const Tensor& dqkv, const Tensor& dh) = 0;
  // Incremental decoding (AttentionMode::generate with a KV cache): qkv [B,T,3C] holds T new
  // tokens at positions pos .. pos+T-1 of every sequence, h [B,T,C] as in forward. Appends their
  // keys/values to `cache` and writes out [B,T,C], where new token t attends to cache positions
  // [0, pos + t]. Equal to the rows of forward() on the whole prefix. No saved state.
  virtual void decode(const ExecContext& /*ctx*/, const ParameterStore& /*store*/,
                      const Tensor& /*h*/, const Tensor& /*qkv*/, const KVCacheView& /*cache*/,
                      int /*pos*/, const Tensor& /*out*/) {
    ATTN_FAIL("incremental decoding (KV cache) is not supported by attention '%s'", name().c_str());
  }
  // Auxiliary loss of the last forward (added to the LM loss; 0 for dense), and telemetry.
  virtual double aux_loss() const { return 0.0; }
  virtual void metrics(std::map<std::string, double>& /*out*/) const {}
  // Bytes of saved state per (B, T) (for the memory estimate of `attnlab info`).
  virtual size_t saved_bytes(const AttentionShape& s, DType dtype) const = 0;
};

// Creates the variant `opts.type` for one layer; an unknown name lists the registered ones.
std::unique_ptr<AttentionModule> make_attention(const AttentionOptions& opts, int layer);
std::vector<std::string> attention_types();

}  // namespace attnlab
