// The attention interface (contract v2): dense, Focus and SFA are variants behind one contract,
// chosen by name from one explicit registry (attention_registry.cpp).
//
// A module receives one AttentionInputs per call: the block's normalised hidden state h [B,T,C]
// (Focus projects it into group space), the packed q/k/v [B,T,layout.width()] whose QKVLayout
// knows n_head, n_kv_head and the head dim, the absolute position of the chunk's first token, the
// mode, the layer's decode cache (generate) and the sink of auxiliary losses. It writes out
// [B,T,n_head*D]. It may own parameters (declared into the model's ParameterStore, role
// `attention`), saved state for its backward, a decode cache (its own AttentionCache subclass),
// auxiliary losses and metrics. Its backward writes dqkv (=) and, when uses_h(), accumulates into
// dh (+=); gradients of its parameters are accumulated (+=) into store.grad(...) unless frozen.
// Nothing here assumes T <= block_size of GPT-2 or materialises T x T.
#pragma once
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/parameters.h"
#include "core/tensor.h"
#include "ops/qkv_layout.h"

namespace attnlab {

enum class AttentionMode { train, eval, generate };

struct AttentionShape {
  int B = 0, T = 0;
  QKVLayout layout;
  int n_embd = 0;  // width of h (the model's C; n_head * head_dim for GPT-2)
};

// Auxiliary losses without a host synchronisation: a module's forward adds scale * (its loss)
// into *total, which lives in the context's device memory (the model sums it with the LM loss
// totals and reads it once per step); its backward differentiates the same scale * loss, so the
// weight of the term in the objective is given at forward and folded into the backward.
// total == nullptr: nothing is accumulated (and the backward adds no auxiliary gradient).
struct AuxLossSink {
  double* total = nullptr;
  float scale = 0.f;
};

// A layer's decode state, owned by the module type that made it (dense: K/V of the cached
// positions; Focus adds each token's groups and the per-group index, SFA its sparse features). The
// model keeps one per layer (model/kv_cache.h).
class AttentionCache {
 public:
  virtual ~AttentionCache() = default;
  virtual size_t bytes() const = 0;
  // How decoding runs with this cache, for generate's output, where it differs from the module's
  // eval_mode() (SFA: the sparse cache whatever attention.sfa.kernel says); "" otherwise.
  virtual std::string decode_mode() const { return ""; }
};

// Whether a prefill (a chunk of several tokens at position 0) runs the forward's attention kernels
// rather than decoding its rows against the cache: on the CPU, and on CUDA where the forward's are
// the tensor-core kernels (bf16, head dim 64 or 128). CUDA fp32 and other head dims decode (the
// split-K rows beat the forward's one-row-per-warp fallback, and bf16 forwards refuse other D).
inline bool prefill_on_forward(Device device, DType dtype, int head_dim) {
  return device == Device::cpu || (dtype == DType::bf16 && (head_dim == 64 || head_dim == 128));
}

struct AttentionInputs {
  Tensor h;    // [B, T, C]
  Tensor qkv;  // [B, T, layout.width()]
  QKVLayout layout;
  int pos = 0;  // absolute position of token 0 of every sequence (0 unless decoding)
  AttentionMode mode = AttentionMode::train;
  AttentionCache* cache = nullptr;  // mode == generate: this layer's cache (make_cache)
  // mode == generate: the chunk's scratch, shared by every layer (the KVCache's): at_least(n) with
  // n = decode_scratch_bytes of this chunk; nothing in it outlives the call.
  GrowingBuffer* scratch = nullptr;
  AuxLossSink aux;
};

// Focus attention (nn/attention_focus.h, docs/focus.md); mapped from the recipe's
// attention.focus in train/from_recipe.cpp. Defaults are the paper's.
struct FocusOptions {
  enum class Assign { sinkhorn, softmax };
  enum class Scope { causal, sequence };
  enum class Gate { additive, multiplicative };
  enum class Routing { soft, hard };
  int groups = 8;  // K
  int d_g = 16;
  int local_window = 128;  // w
  float tau = 0.1f;
  int iterations = 10;
  int top_k = 2;
  Assign assign = Assign::sinkhorn;
  Scope scope = Scope::causal;
  Gate gate = Gate::additive;
  float gate_eps = 1e-6f;
  float gate_scale = 10.f, gate_bias = -5.f;  // multiplicative: sigmoid(gate_scale a + gate_bias)
  Routing route_training = Routing::soft;
  Routing eval_routing = Routing::hard;
};

// Sparse Feature Attention (nn/attention_sfa.h, docs/sfa.md); mapped from attention.sfa.
struct SfaOptions {
  int k = 0;            // coordinates kept per q/k head vector; 0: (head dim + 7) / 8
  float distill = 0.f;  // lambda of the dense-teacher distillation term (training only)
  enum class Kernel { auto_select, flash, masked_dense };  // attention.sfa.kernel
  Kernel kernel = Kernel::auto_select;
};

struct AttentionOptions {
  std::string type = "dense";
  int window = 0;   // sliding-window size (0: full causal)
  int n_layer = 1;  // the model's layers (set by the block): terms averaged over layers
  FocusOptions focus;
  SfaOptions sfa;
};

class AttentionModule {
 public:
  virtual ~AttentionModule() = default;
  virtual std::string name() const = 0;
  // Declares this layer's variant parameters (role ParamRole::attention). Dense has none.
  virtual void declare_params(ParameterStore& /*store*/, int /*layer*/,
                              const AttentionShape& /*s*/) {}
  // Binds typed views of this layer's parameters (and gradients, empty when frozen) once per
  // store; called by the model whenever the store it runs on changes, before forward.
  virtual void bind(const ParameterStore& /*store*/) {}
  // (Re)allocates saved state for training/eval activations of up to s.B x s.T tokens.
  virtual void allocate(const ExecContext& ctx, const AttentionShape& s, DType dtype) = 0;
  // True when the module reads h and so contributes to dh in backward.
  virtual bool uses_h() const { return false; }
  // mode train/eval: attends causally within the chunk (pos == 0) and saves what backward needs.
  // mode generate: appends the chunk's keys/values (whatever the variant caches) to in.cache at
  // positions in.pos .. in.pos+T-1 and attends over the cache; token t sees cache positions
  // [0, pos + t]. Equal to the rows of a train/eval forward on the whole prefix. No saved state.
  virtual void forward(const ExecContext& ctx, const AttentionInputs& in, const Tensor& out) = 0;
  // Needs the inputs and output of the matching train forward. dqkv written; dh accumulated.
  virtual void backward(const ExecContext& ctx, const AttentionInputs& in, const Tensor& out,
                        const Tensor& dout, const Tensor& dqkv, const Tensor& dh) = 0;
  // Bytes of AttentionInputs::scratch a generate-mode forward of B x T tokens at position pos
  // takes (0: none). GPT::reserve_decode sizes the shared scratch with it before a run.
  virtual size_t decode_scratch_bytes(const ExecContext& /*ctx*/, int /*B*/, int /*T*/, int /*pos*/,
                                      const QKVLayout& /*layout*/, DType /*dtype*/) const {
    return 0;
  }
  // What a run on a cache of max_T positions that prefills T tokens takes of that scratch at most:
  // the prefill's, or a decode step's after it where that is more (SFA: its step carves the
  // query's top-k features, its prefill on the forward's kernels the masked q, k, v).
  size_t decode_reserve_bytes(const ExecContext& ctx, int B, int T, int max_T,
                              const QKVLayout& layout, DType dtype) const {
    const size_t prefill = decode_scratch_bytes(ctx, B, T, /*pos=*/0, layout, dtype);
    if (max_T <= 1) return prefill;
    return std::max(prefill, decode_scratch_bytes(ctx, B, 1, /*pos=*/1, layout, dtype));
  }
  // This layer's decode state for B sequences of up to max_T tokens.
  virtual std::unique_ptr<AttentionCache> make_cache(const ExecContext& /*ctx*/, int /*B*/,
                                                     int /*max_T*/, const QKVLayout& /*layout*/,
                                                     DType /*dtype*/) const {
    ATTN_FAIL("incremental decoding (KV cache) is not supported by attention '%s'", name().c_str());
  }
  // Telemetry of an evaluation (Focus: group balance): reset_telemetry() before it,
  // count_telemetry(scored) after each of its forwards (scored[b] != 0: sequence b of that batch
  // is scored; the others are padding), metrics() of every token counted since. The counts are
  // sums that add across ranks: telemetry_sums() (null: the variant keeps none) is all-reduced
  // in place before metrics() is read.
  virtual void reset_telemetry() {}
  virtual void count_telemetry(const std::vector<uint8_t>& /*scored*/) {}
  virtual std::vector<double>* telemetry_sums() { return nullptr; }
  virtual void metrics(std::map<std::string, double>& /*out*/) const {}
  // A few words for the eval line about every layer's metrics (m: all layers' metrics() of this
  // variant, gathered by the model), "" when there is nothing to say. Called on one layer's module.
  virtual std::string summarize(const std::map<std::string, double>& /*m*/) const { return ""; }
  // A second eval mode that validation also scores, so that its gap to the default shows (Focus:
  // the routing eval does not use): a short name ("soft"), or "" when the module has none.
  virtual std::string alternate_eval() const { return ""; }
  // Switches eval and generate to that mode (true) or back to the default (false).
  virtual void use_alternate_eval(bool /*on*/) {}
  // A warning about the telemetry counted (metrics()), "" when healthy (Focus: a layer whose
  // groups collapsed).
  virtual std::string health_warning() const { return ""; }
  // Warnings about this module's settings for sequences of T tokens as allocated (allocate's
  // context and dtype), none when there is nothing to say (Focus: a local band covering every
  // pair, or one group: its grouping does nothing; a backward that cannot honour
  // train.deterministic). The trainer prints them at the start.
  virtual std::vector<std::string> config_warnings(int64_t /*T*/) const { return {}; }
  // How eval and score run this module, for their output ("focus hard routing, top_k 2"), "" when
  // there is no choice (dense).
  virtual std::string eval_mode() const { return ""; }
  // A caveat when this module's evaluation is not a causal language model's (Focus with
  // sinkhorn_scope sequence: a token's groups depend on later tokens), "" otherwise. Train,
  // eval and score print it; generate refuses such a module.
  virtual std::string eval_caveat() const { return ""; }
  // Whether a token's output depends on later tokens of its sequence (Focus with sinkhorn_scope
  // sequence), so right padding would change the real tokens' scores: eval then batches only
  // sequences of one length.
  virtual bool reads_later_tokens() const { return false; }
  // Bytes of saved state for s (for the memory estimate of `attnlab info`).
  virtual size_t saved_bytes(const AttentionShape& s, DType dtype) const = 0;
};

// Creates the variant `opts.type` for one layer; an unknown name lists the registered ones.
std::unique_ptr<AttentionModule> make_attention(const AttentionOptions& opts, int layer);
std::vector<std::string> attention_types();

// Tests register their own variants (a probe of this contract); names must be new. Not for
// product variants, which are listed in attention_registry.cpp.
using AttentionFactory = std::unique_ptr<AttentionModule> (*)(const AttentionOptions&, int layer);
void register_test_attention(const std::string& name, AttentionFactory factory);

}  // namespace attnlab
