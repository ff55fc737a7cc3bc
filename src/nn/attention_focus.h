// Focus attention (arXiv 2604.03260; docs/focus.md): per layer, a projection W_g and K centroids
// C, shared by all heads, assign each token to groups; nearby pairs (i - j <= w) attend as dense
// attention, distant pairs are gated by the group affinity g_i . g_j (soft gate in training) or
// routed by shared top-k groups (hard routing, eval and generate by default).
//   z = h W_g^T [B*T, d_g];  S = cos(z, C) / tau [B, T, K];  g = sinkhorn(S) or softmax(S)
// Parameters (role attention): h.<l>.attn.focus.w_g [d_g, n_embd] (a Linear weight) and
// h.<l>.attn.focus.centroids [K, d_g]. Backward: dqkv, dh (+=) through g, dW_g and dC (+=, unless
// frozen). CUDA: kernels/focus/ (the soft gate on Hopper's wgmma, tiled tensor-core kernels
// elsewhere, the hard-routed forward over group lists, Sinkhorn scans), each tested on the GPU
// against its CPU reference (docs/focus.md).
#pragma once
#include "kernels/focus/focus_attention.cuh"
#include "nn/attention.h"

namespace attnlab {

// The CUDA kernels' limits on the settings, named by their recipe keys, or "" within them.
// allocate() refuses a CUDA context beyond them, before anything runs (the ops check them too,
// in their own terms).
std::string focus_cuda_limits_error(const FocusOptions& o);

class FocusAttention final : public AttentionModule {
 public:
  FocusAttention(const AttentionOptions& opts, int layer);
  std::string name() const override { return "focus"; }
  void declare_params(ParameterStore& store, int layer, const AttentionShape& s) override;
  void bind(const ParameterStore& store) override;
  void allocate(const ExecContext& ctx, const AttentionShape& s, DType dtype) override;
  bool uses_h() const override { return true; }
  void forward(const ExecContext& ctx, const AttentionInputs& in, const Tensor& out) override;
  void backward(const ExecContext& ctx, const AttentionInputs& in, const Tensor& out,
                const Tensor& dout, const Tensor& dqkv, const Tensor& dh) override;
  std::unique_ptr<AttentionCache> make_cache(const ExecContext& ctx, int B, int max_T,
                                             const QKVLayout& layout, DType dtype) const override;
  size_t decode_scratch_bytes(const ExecContext& ctx, int B, int T, int pos,
                              const QKVLayout& layout, DType dtype) const override;
  // Telemetry sums: tokens per largest group (K), the sum of the tokens' entropies, tokens.
  void reset_telemetry() override;
  void count_telemetry(const std::vector<uint8_t>& scored) override;
  std::vector<double>* telemetry_sums() override;
  // Of the tokens counted, per layer: focus.h<l>.dominance (share of tokens whose largest group
  // is the most common one; 1/K is perfect balance), .entropy (mean per-token entropy of g,
  // nats), .group_share.<k> (the histogram of group sizes, as shares), .tokens (tokens counted).
  // Nothing when no token was counted.
  void metrics(std::map<std::string, double>& out) const override;
  // Adds rows [rows, K] of assignments g to sums laid out as telemetry_sums().
  static void count_rows(const float* g, int64_t rows, int K, std::vector<double>& sums);
  size_t saved_bytes(const AttentionShape& s, DType dtype) const override;

  // The routing eval and generate do not use ("soft" when they route hard), and the switch to it.
  std::string alternate_eval() const override;
  void use_alternate_eval(bool on) override;
  std::string eval_mode() const override;
  std::string eval_caveat() const override;
  bool reads_later_tokens() const override;
  std::vector<std::string> config_warnings(int64_t T) const override;
  // Dominance above collapse_threshold(K) (collapse; 1/K is balance).
  std::string health_warning() const override;
  // 0.5 for K >= 4; (1 + 1/K) / 2 below (K 2: 75%, K 3: 67%, K 1: 100%, never passed).
  static double collapse_threshold(int groups);
  std::string summarize(const std::map<std::string, double>& m) const override;

  std::string w_g_name() const;
  std::string centroids_name() const;

 private:
  struct Views;  // the saved state of a [B, T] forward
  Views views(int64_t B, int64_t T) const;
  bool hard_in(AttentionMode mode) const;
  bool attends_every_pair(int64_t T) const;
  FocusGateParams gate(bool hard) const;
  // z, scores, g (and iterates) of h [B, T, C]; state/pos for causal decoding.
  void assign(const ExecContext& ctx, const Tensor& h, const Views& v, const Tensor& state,
              int pos) const;

  FocusOptions opts_;
  FocusOptions::Routing default_eval_routing_;  // opts_.eval_routing unless the alternate is on
  int layer_;
  AttentionShape shape_;
  DType dtype_ = DType::f32;
  // allocate's context asked for bitwise-reproducible kernels on CUDA, and this layer's backward
  // runs a kernel without a deterministic form (config_warnings).
  bool atomic_backward_ = false;
  Tensor w_g_, dw_g_, c_, dc_;
  Buffer buf_;
  int64_t last_B_ = 0, last_T_ = 0;
  bool last_hard_ = false;
  std::vector<double> telemetry_;  // K + 2 sums (telemetry_sums)
  std::vector<float> g_host_;      // scratch of count_telemetry
};

// Decode state: K/V and each token's assignment g and top_k groups, the per-group index of the
// cached positions (kernels/focus/focus_decode.cuh; hard routing attends the window plus the
// lists of the query's groups) and the running Sinkhorn column sums (causal scope). A chunk's z,
// scores, g, iterates and groups go in the layers' shared scratch (decode_scratch_bytes).
class FocusKVCache final : public AttentionCache {
 public:
  FocusKVCache(const ExecContext& ctx, int B, int max_T, const QKVLayout& layout, DType dtype,
               const FocusOptions& o);
  size_t bytes() const override { return buf_.bytes(); }
  Tensor k, v;    // [B, n_kv_head, max_T, D]
  Tensor g;       // [B, max_T, K] f32
  Tensor groups;  // [B, max_T, top_k] i32
  Tensor state;   // [B, iterations, K] f32
  Tensor index;   // [B, K, max_T] i32: per group, the cached positions in it (increasing)
  Tensor counts;  // [B, K] i32: the length of each list

 private:
  Buffer buf_;
};

}  // namespace attnlab
