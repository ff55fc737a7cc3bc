#include "nn/attention_focus.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/carver.h"
#include "kernels/focus/focus_decode.cuh"
#include "ops/focus_decode_ops.h"
#include "ops/focus_ops.h"
#include "ops/ops.h"

namespace attnlab {
namespace {

using Layout = Carver;  // sizes (no buffer) and binds with the same code

}  // namespace

struct FocusAttention::Views {
  Tensor z, dz;           // [B*T, d_g] activation dtype
  Tensor scores;          // [B, T, K] f32
  Tensor iterates;        // [N + 1, B, T, K] f32 (Sinkhorn)
  Tensor g, dg, dscores;  // [B, T, K] f32
  Tensor groups;          // [B, T, top_k] i32
  Tensor lse;             // [B, H, T] f32
};

namespace {
template <class O>
void carve(Layout& l, O& v, const FocusOptions& o, int64_t B, int64_t T, int H, DType dt) {
  const int64_t K = o.groups;
  v.z = l.take(dt, Shape{B * T, o.d_g});
  v.dz = l.take(dt, Shape{B * T, o.d_g});
  v.scores = l.take(DType::f32, Shape{B, T, K});
  if (o.assign == FocusOptions::Assign::sinkhorn)
    v.iterates = l.take(DType::f32, Shape{o.iterations + 1, B, T, K});
  v.g = l.take(DType::f32, Shape{B, T, K});
  v.dg = l.take(DType::f32, Shape{B, T, K});
  v.dscores = l.take(DType::f32, Shape{B, T, K});
  v.groups = l.take(DType::i32, Shape{B, T, o.top_k});
  v.lse = l.take(DType::f32, Shape{B, H, T});
}
}  // namespace

FocusAttention::FocusAttention(const AttentionOptions& opts, int layer)
    : opts_(opts.focus), default_eval_routing_(opts.focus.eval_routing), layer_(layer) {
  const FocusOptions& o = opts_;
  ATTN_REQUIRE(opts.window == 0,
               "attention.window (%d) does not apply to focus: use attention.focus.local_window",
               opts.window);
  ATTN_REQUIRE(o.groups >= 1 && o.d_g >= 1 && o.local_window >= 0 && o.tau > 0.f &&
                   o.iterations >= 1 && o.top_k >= 1 && o.top_k <= o.groups,
               "focus attention: invalid options (groups %d, d_g %d, local_window %d, tau %g, "
               "iterations %d, top_k %d)",
               o.groups, o.d_g, o.local_window, double(o.tau), o.iterations, o.top_k);
}

std::string FocusAttention::w_g_name() const {
  return "h." + std::to_string(layer_) + ".attn.focus.w_g";
}
std::string FocusAttention::centroids_name() const {
  return "h." + std::to_string(layer_) + ".attn.focus.centroids";
}

void FocusAttention::declare_params(ParameterStore& store, int, const AttentionShape& s) {
  // Both are L2-normalised before use, so their scale is free: unit-scale normal draws, no
  // weight decay (it would only shrink a scale that does not matter and raise the step size).
  store.declare({w_g_name(), Shape{opts_.d_g, s.n_embd}, ParamRole::attention, ParamInit::normal,
                 1.f / std::sqrt(float(s.n_embd)), false});
  store.declare({centroids_name(), Shape{opts_.groups, opts_.d_g}, ParamRole::attention,
                 ParamInit::normal, 1.f, false});
}

void FocusAttention::bind(const ParameterStore& store) {
  w_g_ = store.param(w_g_name());
  dw_g_ = store.grad(w_g_name());
  c_ = store.param(centroids_name());
  dc_ = store.grad(centroids_name());
}

std::string focus_cuda_limits_error(const FocusOptions& o) {
  if (o.d_g > ops::kFocusCudaMaxDg || o.groups * o.d_g > ops::kFocusCudaMaxGroupsTimesDg)
    return strformat(
        "attention.focus.d_g (%d) must be <= %d and attention.focus.groups x d_g (%d x %d = %d) "
        "<= %d on CUDA (the group scores kernel's limits)",
        o.d_g, ops::kFocusCudaMaxDg, o.groups, o.d_g, o.groups * o.d_g,
        ops::kFocusCudaMaxGroupsTimesDg);
  if (o.assign == FocusOptions::Assign::sinkhorn && o.groups > ops::kFocusCudaMaxSinkhornGroups)
    return strformat(
        "attention.focus.groups (%d) must be <= %d on CUDA with assign: sinkhorn (the Sinkhorn "
        "kernels' limit)",
        o.groups, ops::kFocusCudaMaxSinkhornGroups);
  return "";
}

void FocusAttention::allocate(const ExecContext& ctx, const AttentionShape& s, DType dtype) {
  if (ctx.device == Device::cuda) {
    const std::string e = focus_cuda_limits_error(opts_);
    ATTN_REQUIRE(e.empty(), "%s", e.c_str());
  }
  shape_ = s;
  dtype_ = dtype;
  // The deterministic backward is the wgmma kernel's (bf16, the additive gate or hard routing's
  // straight-through one, Hopper, head dim 64 / 128, K <= 8: ops::
  // focus_deterministic_backward_available); the others add with atomics.
  const bool deterministic_form =
      dtype == DType::bf16 &&
      (opts_.gate == FocusOptions::Gate::additive ||
       opts_.route_training == FocusOptions::Routing::hard) &&
      ops::focus_deterministic_backward_available(s.layout.head_dim, opts_.groups);
  atomic_backward_ = ctx.device == Device::cuda && ctx.deterministic && !deterministic_form;
  Layout count;
  Views v;
  carve(count, v, opts_, s.B, s.T, s.layout.n_head, dtype);
  buf_ = Buffer(ctx.device, count.bytes());
  last_B_ = last_T_ = 0;
}

FocusAttention::Views FocusAttention::views(int64_t B, int64_t T) const {
  Layout l(&buf_);
  Views v;
  ATTN_ASSERT(B <= shape_.B && T <= shape_.T);
  carve(l, v, opts_, B, T, shape_.layout.n_head, dtype_);
  return v;
}

// A generate-mode chunk's views (the training forward's Views of B x T tokens) in the shared
// scratch.
size_t FocusAttention::decode_scratch_bytes(const ExecContext& /*ctx*/, int B, int T, int /*pos*/,
                                            const QKVLayout& layout, DType dtype) const {
  Layout count;
  Views v;
  carve(count, v, opts_, B, T, layout.n_head, dtype);
  return count.bytes();
}

// Hard routing over every group, or a local band reaching every earlier position of a sequence
// of up to T tokens, attends every causal pair: it is dense attention, and runs the dense op, so
// that a retrofit evaluated this way gives the base model's logits bitwise (docs/retrofit.md).
bool FocusAttention::attends_every_pair(int64_t T) const {
  return opts_.top_k >= opts_.groups || int64_t(opts_.local_window) >= T - 1;
}

bool FocusAttention::hard_in(AttentionMode mode) const {
  const FocusOptions::Routing r =
      mode == AttentionMode::train ? opts_.route_training : opts_.eval_routing;
  return r == FocusOptions::Routing::hard;
}

FocusGateParams FocusAttention::gate(bool hard) const {
  FocusGateParams g;
  g.kind = hard                                         ? FocusGateKind::hard
           : opts_.gate == FocusOptions::Gate::additive ? FocusGateKind::additive
                                                        : FocusGateKind::multiplicative;
  g.local_window = opts_.local_window;
  g.eps = opts_.gate_eps;
  g.scale = opts_.gate_scale;
  g.bias = opts_.gate_bias;
  return g;
}

void FocusAttention::assign(const ExecContext& ctx, const Tensor& h, const Views& v,
                            const Tensor& state, int pos) const {
  const int64_t B = h.dim(0), T = h.dim(1), C = h.dim(2);
  ops::matmul_fwd(ctx, v.z, h.view(Shape{B * T, C}), w_g_, Tensor());
  ops::focus_scores_fwd(ctx, v.scores, v.z, c_, opts_.tau);
  if (opts_.assign == FocusOptions::Assign::sinkhorn)
    ops::focus_sinkhorn_fwd(ctx, v.g, v.iterates, v.scores,
                            opts_.scope == FocusOptions::Scope::causal, state, pos);
  else
    ops::focus_softmax_assign_fwd(ctx, v.g, v.scores);
  ops::focus_route_topk(ctx, v.groups, v.g);
}

void FocusAttention::forward(const ExecContext& ctx, const AttentionInputs& in, const Tensor& out) {
  if (in.mode == AttentionMode::generate) {
    ATTN_REQUIRE(in.cache != nullptr, "focus attention: generate mode needs a decode cache");
    auto& cache = dynamic_cast<FocusKVCache&>(*in.cache);
    const int64_t B = in.qkv.dim(0), T = in.qkv.dim(1), K = opts_.groups, tk = opts_.top_k;
    const int64_t max_T = cache.g.dim(1);
    ATTN_ASSERT(in.scratch != nullptr);
    Views v;
    Layout l(in.scratch->at_least(
        decode_scratch_bytes(ctx, int(B), int(T), in.pos, in.layout, in.qkv.dtype)));
    carve(l, v, opts_, B, T, in.layout.n_head, in.qkv.dtype);
    if (in.pos == 0) {  // a new sequence: the running column sums start empty
      std::vector<float> empty(size_t(cache.state.numel()), 0.f);  // (hi, lo) = (-inf, 0)
      for (size_t i = 0; i < empty.size(); i += focus_sinkhorn_state::kSinkhornStateWords)
        empty[i] = -std::numeric_limits<float>::infinity();
      copy_tensor(cache.state, Tensor(empty.data(), DType::f32, Device::cpu, cache.state.shape));
    }
    assign(ctx, in.h, v, opts_.assign == FocusOptions::Assign::sinkhorn ? cache.state : Tensor(),
           in.pos);
    const Device dev = ctx.device;
    for (int64_t b = 0; b < B; ++b) {
      copy_tensor(
          Tensor(cache.g.ptr<float>() + (b * max_T + in.pos) * K, DType::f32, dev, Shape{T, K}),
          Tensor(v.g.ptr<float>() + b * T * K, DType::f32, dev, Shape{T, K}));
      copy_tensor(Tensor(cache.groups.ptr<int32_t>() + (b * max_T + in.pos) * tk, DType::i32, dev,
                         Shape{T, tk}),
                  Tensor(v.groups.ptr<int32_t>() + b * T * tk, DType::i32, dev, Shape{T, tk}));
    }
    ops::kv_cache_write(ctx, cache.k, cache.v, in.qkv, in.pos, in.layout);
    // The group index follows the cached groups whatever the routing (a switch of eval routing
    // mid-generation finds it current); it costs O(T K / 32) per chunk.
    ops::focus_group_index_append(ctx, cache.index, cache.counts, cache.groups, in.pos, int(T));
    const bool hard = hard_in(in.mode), at_0 = in.pos == 0 && T > 1;
    // A prefill runs the forward's kernels where they are the tensor-core ones (prefill_on_forward;
    // the hard-routed forward in any precision, as the eval forward); decode steps the cache's.
    const bool prefill = at_0 && (prefill_on_forward(ctx.device, in.qkv.dtype,
                                                     in.layout.head_dim) &&
                                  (hard || K <= 64));  // (the tiled soft kernel's groups)
    if (hard && attends_every_pair(max_T) && prefill)
      ops::attention_fwd(ctx, out, v.lse, in.qkv, in.layout, 0);
    else if (hard && attends_every_pair(max_T))
      ops::attention_decode(ctx, out, in.qkv, cache.k, cache.v, in.pos, in.layout, 0, 0);
    else if (prefill || (hard && at_0))
      ops::focus_attention_fwd(ctx, out, v.lse, in.qkv, in.layout, v.g, v.groups, gate(hard));
    else if (hard)  // window + the cached tokens of the query's groups, O(w + group) per row
      ops::focus_group_decode(ctx, out, in.qkv, cache.k, cache.v, cache.groups, cache.index,
                              cache.counts, in.pos, in.layout, opts_.local_window);
    else  // soft gates weigh every cached key
      ops::focus_attention_decode(ctx, out, in.qkv, cache.k, cache.v, cache.g, cache.groups, in.pos,
                                  in.layout, gate(false));
    return;
  }
  ATTN_ASSERT(in.pos == 0);
  last_B_ = in.qkv.dim(0);
  last_T_ = in.qkv.dim(1);
  last_hard_ = hard_in(in.mode);
  const Views v = views(last_B_, last_T_);
  assign(ctx, in.h, v, Tensor(), 0);
  if (in.mode == AttentionMode::eval && last_hard_ && attends_every_pair(last_T_))
    ops::attention_fwd(ctx, out, v.lse, in.qkv, in.layout, 0);
  else
    ops::focus_attention_fwd(ctx, out, v.lse, in.qkv, in.layout, v.g, v.groups, gate(last_hard_));
}

void FocusAttention::backward(const ExecContext& ctx, const AttentionInputs& in, const Tensor& out,
                              const Tensor& dout, const Tensor& dqkv, const Tensor& dh) {
  const int64_t B = in.qkv.dim(0), T = in.qkv.dim(1), C = in.h.dim(2);
  ATTN_ASSERT(B == last_B_ && T == last_T_);
  const Views v = views(B, T);
  ops::focus_attention_bwd(ctx, dqkv, v.dg, dout, in.qkv, out, v.lse, in.layout, v.g, v.groups,
                           gate(last_hard_));
  if (opts_.assign == FocusOptions::Assign::sinkhorn)
    ops::focus_sinkhorn_bwd(ctx, v.dscores, v.dg, v.g, v.iterates,
                            opts_.scope == FocusOptions::Scope::causal);
  else
    ops::focus_softmax_assign_bwd(ctx, v.dscores, v.dg, v.g);
  ops::focus_scores_bwd(ctx, v.dz, dc_, v.dscores, v.z, c_, opts_.tau);
  // dh += dz W_g; dW_g += dz^T h (skipped when frozen).
  ops::matmul_bwd(ctx, dh.view(Shape{B * T, C}), dw_g_, Tensor(), v.dz, in.h.view(Shape{B * T, C}),
                  w_g_, /*accumulate_dx=*/true);
}

std::string FocusAttention::alternate_eval() const {
  return default_eval_routing_ == FocusOptions::Routing::hard ? "soft" : "hard";
}

void FocusAttention::use_alternate_eval(bool on) {
  const auto other = default_eval_routing_ == FocusOptions::Routing::hard
                         ? FocusOptions::Routing::soft
                         : FocusOptions::Routing::hard;
  opts_.eval_routing = on ? other : default_eval_routing_;
}

std::string FocusAttention::eval_mode() const {
  return opts_.eval_routing == FocusOptions::Routing::hard
             ? strformat("focus hard routing, top_k %d", opts_.top_k)
             : std::string("focus soft gate");
}

bool FocusAttention::reads_later_tokens() const {
  return opts_.assign == FocusOptions::Assign::sinkhorn &&
         opts_.scope == FocusOptions::Scope::sequence;
}

std::string FocusAttention::eval_caveat() const {
  if (!reads_later_tokens()) return "";
  return "attention.focus.sinkhorn_scope is sequence (the paper's form): a token's groups depend "
         "on later tokens of its sequence, so losses and scores here are not a causal language "
         "model's (they can use the future; generate refuses this scope)";
}

std::vector<std::string> FocusAttention::config_warnings(int64_t T) const {
  std::vector<std::string> w;
  if (int64_t(opts_.local_window) >= T - 1)
    w.push_back(strformat(
        "attention.focus.local_window (%d) >= the sequence length - 1 (%lld): every pair is in "
        "the local band, so Focus is dense attention here (its groups do nothing)",
        opts_.local_window, (long long)(T - 1)));
  else if (opts_.groups == 1)
    w.push_back(
        "attention.focus.groups is 1: every pair shares the one group, so the grouping does "
        "nothing (the additive gate is then dense attention)");
  if (opts_.gate == FocusOptions::Gate::multiplicative && dtype_ == DType::bf16)
    w.push_back(
        "attention.focus.gate multiplicative in bf16: its W_g and C gradients (and, through h, "
        "the layers' below) measured 2-3.6x the error of a bf16 reference that keeps the gate "
        "in fp32 (docs/focus.md, \"An independent oracle\"); the additive gate (the default) or "
        "train.precision fp32 do not show it");
  if (atomic_backward_)
    w.push_back(
        "train.deterministic is true, but this Focus layer's CUDA backward adds gradients with "
        "fp32 atomics (its dg and dq or dk / dv): only the Hopper kernel (bf16, the additive gate "
        "or route_training hard, head dim 64 or 128, at most 8 groups) has a deterministic "
        "form (docs/focus.md), so a rerun or a resume of this run agrees with it to float "
        "rounding, not bit for bit");
  return w;
}

double FocusAttention::collapse_threshold(int groups) {
  // 50% (the collapse) where balance is far below it; with K <= 3 groups the largest
  // holds >= 1/K >= 33% at perfect balance, so there: halfway from balance to all in one group
  // (K = 1: never, one group is all there is).
  return groups >= 4 ? 0.5 : 0.5 * (1.0 + 1.0 / groups);
}

std::string FocusAttention::health_warning() const {
  std::map<std::string, double> m;
  metrics(m);
  const auto d = m.find("focus.h" + std::to_string(layer_) + ".dominance");
  if (d == m.end() || !(d->second > collapse_threshold(opts_.groups))) return "";
  return strformat("focus layer %d: %.0f%% of the tokens in one group (collapse; 1/K is balance)",
                   layer_, 100.0 * d->second);
}

std::string FocusAttention::summarize(const std::map<std::string, double>& m) const {
  std::map<int, double> dominance;  // by layer (m's keys sort h10 before h2)
  double entropy = 0.0;
  for (const auto& [key, value] : m) {
    int l = -1;
    char what[32] = {0};
    if (std::sscanf(key.c_str(), "focus.h%d.%31s", &l, what) != 2) continue;
    if (std::string(what) == "dominance") dominance[l] = value;
    if (std::string(what) == "entropy") entropy += value;
  }
  if (dominance.empty()) return "";
  const auto worst =
      std::max_element(dominance.begin(), dominance.end(),
                       [](const auto& a, const auto& b) { return a.second < b.second; });
  std::string per_layer;
  for (const auto& [l, d] : dominance) per_layer += strformat(" %.0f", 100.0 * d);
  return strformat(
      "max dominance %.3f (layer %d; 1/K = %.3f) | dominance %% by layer%s | entropy %.3f (ln K = "
      "%.3f)",
      worst->second, worst->first, 1.0 / opts_.groups, per_layer.c_str(),
      entropy / double(dominance.size()), std::log(double(opts_.groups)));
}

void FocusAttention::reset_telemetry() { telemetry_.assign(size_t(opts_.groups) + 2, 0.0); }

std::vector<double>* FocusAttention::telemetry_sums() {
  if (telemetry_.empty()) reset_telemetry();  // the same size on every rank
  return &telemetry_;
}

void FocusAttention::count_rows(const float* g, int64_t rows, int K, std::vector<double>& sums) {
  ATTN_ASSERT(sums.size() == size_t(K) + 2);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = g + r * K;
    // The token's group: its largest entry, a tie shared equally (the causal scope's first token
    // is exactly uniform: counted whole in group 0 it raised group 0's share and the dominance by
    // 1/T, and a layer of uniform rows read as collapsed into group 0).
    const float top = *std::max_element(row, row + K);
    const int ties = int(std::count(row, row + K, top));
    for (int k = 0; k < K; ++k)
      if (row[k] == top) sums[size_t(k)] += 1.0 / ties;
    for (int k = 0; k < K; ++k)
      if (row[k] > 0.f) sums[size_t(K)] -= double(row[k]) * std::log(double(row[k]));
  }
  sums[size_t(K) + 1] += double(rows);
}

void FocusAttention::count_telemetry(const std::vector<uint8_t>& scored) {
  if (last_B_ == 0) return;
  ATTN_REQUIRE(int64_t(scored.size()) == last_B_,
               "focus telemetry: %zu sequence flags for a batch of %lld", scored.size(),
               (long long)last_B_);
  if (telemetry_.empty()) reset_telemetry();
  const Views v = views(last_B_, last_T_);
  const int K = opts_.groups;
  g_host_.resize(size_t(v.g.numel()));  // one copy per evaluation batch
  copy_tensor(Tensor(g_host_.data(), DType::f32, Device::cpu, v.g.shape), v.g);
  for (int64_t b = 0; b < last_B_; ++b)
    if (scored[size_t(b)]) count_rows(g_host_.data() + b * last_T_ * K, last_T_, K, telemetry_);
}

void FocusAttention::metrics(std::map<std::string, double>& out) const {
  const int K = opts_.groups;
  if (telemetry_.size() != size_t(K) + 2 || !(telemetry_[size_t(K) + 1] > 0)) return;
  const double tokens = telemetry_[size_t(K) + 1];
  const std::string p = "focus.h" + std::to_string(layer_) + ".";
  out[p + "dominance"] = *std::max_element(telemetry_.begin(), telemetry_.begin() + K) / tokens;
  out[p + "entropy"] = telemetry_[size_t(K)] / tokens;
  out[p + "tokens"] = tokens;
  for (int k = 0; k < K; ++k)
    out[p + "group_share." + std::to_string(k)] = telemetry_[size_t(k)] / tokens;
}

size_t FocusAttention::saved_bytes(const AttentionShape& s, DType dtype) const {
  Layout count;
  Views v;
  carve(count, v, opts_, s.B, s.T, s.layout.n_head, dtype);
  return count.bytes();
}

std::unique_ptr<AttentionCache> FocusAttention::make_cache(const ExecContext& ctx, int B, int max_T,
                                                           const QKVLayout& layout,
                                                           DType dtype) const {
  ATTN_REQUIRE(
      opts_.assign == FocusOptions::Assign::softmax || opts_.scope == FocusOptions::Scope::causal,
      "focus attention: generation needs attention.focus.sinkhorn_scope causal (with "
      "scope sequence a token's group depends on tokens not generated yet)");
  // Checked here, before the prompt's prefill, not at the first decode step.
  ATTN_REQUIRE(ctx.device == Device::cpu || opts_.eval_routing != FocusOptions::Routing::hard ||
                   attends_every_pair(max_T) || opts_.top_k <= kFocusDecodeMaxTopK,
               "focus attention: hard-routed generation on CUDA takes attention.focus.top_k <= %d, "
               "got %d",
               kFocusDecodeMaxTopK, opts_.top_k);
  return std::make_unique<FocusKVCache>(ctx, B, max_T, layout, dtype, opts_);
}

FocusKVCache::FocusKVCache(const ExecContext& ctx, int B, int max_T, const QKVLayout& layout,
                           DType dtype, const FocusOptions& o) {
  ATTN_REQUIRE(B >= 1 && max_T >= 1, "KV cache: batch and length must be >= 1 (got %d, %d)", B,
               max_T);
  Layout count;
  const Shape kv{B, layout.n_kv_head, max_T, layout.head_dim};
  auto lay = [&](Layout& l) {
    k = l.take(dtype, kv);
    v = l.take(dtype, kv);
    g = l.take(DType::f32, Shape{B, max_T, o.groups});
    groups = l.take(DType::i32, Shape{B, max_T, o.top_k});
    state = l.take(DType::f32,
                   Shape{B, o.iterations, o.groups, focus_sinkhorn_state::kSinkhornStateWords});
    index = l.take(DType::i32, Shape{B, o.groups, max_T});
    counts = l.take(DType::i32, Shape{B, o.groups});
  };
  lay(count);
  buf_ = Buffer(ctx.device, count.bytes());
  Layout bind(&buf_);
  lay(bind);
  std::vector<int32_t> empty(size_t(counts.numel()), 0);  // every list starts empty
  copy_tensor(counts, Tensor(empty.data(), DType::i32, Device::cpu, counts.shape));
}

}  // namespace attnlab
