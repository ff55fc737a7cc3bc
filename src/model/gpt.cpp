#include "model/gpt.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "ops/ops.h"

namespace attnlab {

GPT::GPT(const GPTConfig& cfg) : cfg_(cfg) {
  ATTN_REQUIRE(cfg.n_layer >= 1 && cfg.n_head >= 1 && cfg.n_embd >= 1,
               "model: n_layer, n_head and "
               "n_embd must be >= 1 (got %d, %d, %d)",
               cfg.n_layer, cfg.n_head, cfg.n_embd);
  ATTN_REQUIRE(cfg.n_embd % cfg.n_head == 0,
               "model.n_embd (%d) must be a multiple of model.n_head (%d)", cfg.n_embd, cfg.n_head);
  ATTN_REQUIRE(cfg.kv_heads() == cfg.n_head,
               "model.n_kv_head = %d: grouped-query attention is not "
               "supported by the GPT-2 family yet (use 0 or n_head)",
               cfg.n_kv_head);
  ATTN_REQUIRE(cfg.padded_vocab >= cfg.vocab_size, "padded vocab %d < vocab %d", cfg.padded_vocab,
               cfg.vocab_size);
  for (int l = 0; l < cfg.n_layer; ++l) attn_.push_back(make_attention(cfg.attention, l));
}

std::string GPT::p(int l, const char* name) const { return "h." + std::to_string(l) + "." + name; }

void GPT::declare_params(ParameterStore& store) const {
  const int64_t C = cfg_.n_embd;
  const float std = cfg_.init_std;
  const float proj_std = std / std::sqrt(2.f * cfg_.n_layer);  // GPT-2: scaled residual projections
  auto weight = [&](const std::string& n, Shape s, float sd) {
    store.declare({n, s, ParamRole::base, ParamInit::normal, sd, /*weight_decay=*/true});
  };
  auto vec = [&](const std::string& n, int64_t len, ParamInit init) {
    store.declare({n, Shape{len}, ParamRole::base, init, 0.f, false});
  };
  weight("wte.weight", Shape{cfg_.padded_vocab, C}, std);
  weight("wpe.weight", Shape{cfg_.block_size, C}, std / 2);  // GPT-2 used 0.01 for positions
  AttentionShape as{0, 0, cfg_.n_head, cfg_.kv_heads(), cfg_.head_dim()};
  for (int l = 0; l < cfg_.n_layer; ++l) {
    vec(p(l, "ln_1.weight"), C, ParamInit::ones);
    vec(p(l, "ln_1.bias"), C, ParamInit::zeros);
    weight(p(l, "attn.c_attn.weight"), Shape{3 * C, C}, std);
    vec(p(l, "attn.c_attn.bias"), 3 * C, ParamInit::zeros);
    weight(p(l, "attn.c_proj.weight"), Shape{C, C}, proj_std);
    vec(p(l, "attn.c_proj.bias"), C, ParamInit::zeros);
    attn_[l]->declare_params(store, l, as);
    vec(p(l, "ln_2.weight"), C, ParamInit::ones);
    vec(p(l, "ln_2.bias"), C, ParamInit::zeros);
    weight(p(l, "mlp.c_fc.weight"), Shape{4 * C, C}, std);
    vec(p(l, "mlp.c_fc.bias"), 4 * C, ParamInit::zeros);
    weight(p(l, "mlp.c_proj.weight"), Shape{C, 4 * C}, proj_std);
    vec(p(l, "mlp.c_proj.bias"), C, ParamInit::zeros);
  }
  vec("ln_f.weight", C, ParamInit::ones);
  vec("ln_f.bias", C, ParamInit::zeros);
}

void GPT::init_params(ParameterStore& store, uint64_t seed) const {
  store.initialize(seed);
  // Padding rows of the vocabulary never see a token or a target: keep them exactly zero.
  Tensor wte = store.param("wte.weight");
  int64_t pad_rows = cfg_.padded_vocab - cfg_.vocab_size;
  if (pad_rows > 0) zero_tensor(wte.slice0(cfg_.vocab_size, cfg_.padded_vocab));
}

void GPT::allocate(const ExecContext& ctx, int B, int T, DType dtype) {
  ATTN_REQUIRE(T >= 1 && T <= cfg_.block_size,
               "sequence length %d must be in [1, model.block_size = %d]", T, cfg_.block_size);
  ATTN_REQUIRE(B >= 1, "micro-batch must be >= 1, got %d", B);
  maxB_ = B;
  maxT_ = T;
  dtype_ = dtype;
  acts_ = Buffer(ctx.device, activation_bytes(B, T, dtype));
  loss_totals_ = Buffer(ctx.device, 2 * sizeof(double));
  loss_totals_.zero();
  AttentionShape as{B, T, cfg_.n_head, cfg_.kv_heads(), cfg_.head_dim()};
  for (auto& a : attn_) a->allocate(ctx, as, dtype);
  B_ = 0;
  T_ = 0;
}

size_t GPT::activation_bytes(int B, int T, DType dtype) const {
  const size_t BT = size_t(B) * T, C = cfg_.n_embd, L = cfg_.n_layer, es = dtype_size(dtype);
  auto al = [](size_t b) { return (b + 255) / 256 * 256; };
  const size_t aC = al(BT * C * es), a3C = al(BT * 3 * C * es), a4C = al(BT * 4 * C * es);
  const size_t stats = 4 * al(BT * 4);
  // One layer's forward state: ln1, atty, res2, ln2 (C each), qkv (3C), fch (4C), 4 stats rows;
  // plus fch_gelu (4C) and res3 (C, the next layer's input).
  const size_t core = 4 * aC + a3C + a4C + stats;
  size_t layers = 0;
  switch (cfg_.recompute) {
    case ActivationRecompute::none:
      layers = L * (core + a4C + aC);
      break;
    case ActivationRecompute::gelu:
      layers = L * (core + aC) + a4C;
      break;  // one shared GELU
    case ActivationRecompute::block:
      layers = (core + a4C) + L * aC;
      break;  // one shared layer
  }
  size_t head = 2 * aC + 2 * al(BT * 4) + al(BT * cfg_.padded_vocab * es) + al(BT * 4);
  size_t scratch = 3 * aC + a3C + a4C;
  return layers + head + scratch;  // attention variants' saved state is theirs (saved_bytes)
}

const char* recompute_name(ActivationRecompute r) {
  switch (r) {
    case ActivationRecompute::none:
      return "none";
    case ActivationRecompute::gelu:
      return "gelu";
    case ActivationRecompute::block:
      return "block";
  }
  return "?";
}

namespace {
// Carves the activation buffer into views for a [B, T] micro-batch (B <= maxB, T <= maxT).
struct Carver {
  const Buffer& buf;
  size_t off = 0;
  Tensor take(DType t, Shape s) {
    Tensor v = buf.as(t, s, off);
    off += (v.nbytes() + 255) / 256 * 256;
    return v;
  }
};

// NVTX range plus the optional benchmark observer around one group of ops.
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
}  // namespace

void GPT::bind_activations(int B, int T) {
  const int64_t BT = int64_t(B) * T, C = cfg_.n_embd, Vp = cfg_.padded_vocab;
  const DType dt = dtype_;
  Carver cv{acts_};
  auto carve_layer = [&](Layer& L, bool gelu, bool res3) {
    L.ln1 = cv.take(dt, Shape{BT, C});
    L.ln1_mean = cv.take(DType::f32, Shape{BT});
    L.ln1_rstd = cv.take(DType::f32, Shape{BT});
    L.qkv = cv.take(dt, Shape{B, T, 3 * C});
    L.atty = cv.take(dt, Shape{B, T, C});
    L.res2 = cv.take(dt, Shape{BT, C});
    L.ln2 = cv.take(dt, Shape{BT, C});
    L.ln2_mean = cv.take(DType::f32, Shape{BT});
    L.ln2_rstd = cv.take(DType::f32, Shape{BT});
    L.fch = cv.take(dt, Shape{BT, 4 * C});
    if (gelu) L.fch_gelu = cv.take(dt, Shape{BT, 4 * C});
    if (res3) L.res3 = cv.take(dt, Shape{BT, C});
  };
  layers_.assign(cfg_.n_layer, Layer{});
  encoded_ = cv.take(dt, Shape{BT, C});
  switch (cfg_.recompute) {
    case ActivationRecompute::none:
      for (auto& L : layers_) carve_layer(L, true, true);
      break;
    case ActivationRecompute::gelu: {
      Tensor gelu = cv.take(dt, Shape{BT, 4 * C});  // shared: recomputed per layer in backward
      for (auto& L : layers_) {
        carve_layer(L, false, true);
        L.fch_gelu = gelu;
      }
      break;
    }
    case ActivationRecompute::block: {
      Layer shared;  // every layer's working state; only res3 (the next input) is per layer
      carve_layer(shared, true, false);
      for (auto& L : layers_) {
        L = shared;
        L.res3 = cv.take(dt, Shape{BT, C});
      }
      break;
    }
  }
  lnf_ = cv.take(dt, Shape{BT, C});
  lnf_mean_ = cv.take(DType::f32, Shape{BT});
  lnf_rstd_ = cv.take(DType::f32, Shape{BT});
  logits_ = cv.take(dt, Shape{BT, Vp});
  losses_ = cv.take(DType::f32, Shape{BT});
  dres_ = cv.take(dt, Shape{BT, C});
  dln_ = cv.take(dt, Shape{BT, C});
  datty_ = cv.take(dt, Shape{B, T, C});
  dqkv_ = cv.take(dt, Shape{B, T, 3 * C});
  dfch_ = cv.take(dt, Shape{BT, 4 * C});
  ATTN_ASSERT(cv.off <= acts_.bytes());
  B_ = B;
  T_ = T;
}

void GPT::layer_forward(const ExecContext& ctx, const ParameterStore& store, int l,
                        AttentionMode mode, bool with_output, ForwardResult* result) {
  const int B = B_, T = T_;
  const int64_t BT = int64_t(B) * T, C = cfg_.n_embd;
  Layer& L = layers_[l];
  Tensor x = layer_input(l);
  OpObserver* ob = observer_;
  {
    OpScope s(ob, "fwd.layernorm");
    ops::layernorm_fwd(ctx, L.ln1, L.ln1_mean, L.ln1_rstd, x, store.param(p(l, "ln_1.weight")),
                       store.param(p(l, "ln_1.bias")), cfg_.norm_eps);
  }
  {
    OpScope s(ob, "fwd.matmul.qkv");
    ops::matmul_fwd(ctx, L.qkv.view(Shape{BT, 3 * C}), L.ln1,
                    store.param(p(l, "attn.c_attn.weight")), store.param(p(l, "attn.c_attn.bias")));
  }
  {
    OpScope s(ob, "fwd.attention");
    attn_[l]->forward(ctx, store, L.ln1.view(Shape{B, T, C}), L.qkv, L.atty, mode);
  }
  if (result) result->aux_loss += attn_[l]->aux_loss();
  {
    // res2 = x + atty @ Wproj^T + b: the residual add is the GEMM's epilogue (C = x, beta = 1).
    OpScope s(ob, "fwd.matmul.attn_proj");
    ops::matmul_fwd(ctx, L.res2, L.atty.view(Shape{BT, C}), store.param(p(l, "attn.c_proj.weight")),
                    store.param(p(l, "attn.c_proj.bias")), x);
  }
  {
    OpScope s(ob, "fwd.layernorm");
    ops::layernorm_fwd(ctx, L.ln2, L.ln2_mean, L.ln2_rstd, L.res2, store.param(p(l, "ln_2.weight")),
                       store.param(p(l, "ln_2.bias")), cfg_.norm_eps);
  }
  if (cfg_.recompute != ActivationRecompute::gelu) {
    // fch = ln2 @ Wfc^T + b and fch_gelu = gelu(fch) from one GEMM (GELU epilogue).
    OpScope s(ob, "fwd.matmul.fc");
    ops::matmul_gelu_fwd(ctx, L.fch_gelu, L.fch, L.ln2, store.param(p(l, "mlp.c_fc.weight")),
                         store.param(p(l, "mlp.c_fc.bias")));
  } else {
    // The backward recomputes fch_gelu with gelu_fwd from fch; the forward runs the same kernel
    // so the recomputation reproduces it bitwise (the epilogue's GELU on the fp32 accumulator
    // would differ from the GELU of the rounded fch in the last bit).
    {
      OpScope s(ob, "fwd.matmul.fc");
      ops::matmul_fwd(ctx, L.fch, L.ln2, store.param(p(l, "mlp.c_fc.weight")),
                      store.param(p(l, "mlp.c_fc.bias")));
    }
    OpScope s(ob, "fwd.gelu");
    ops::gelu_fwd(ctx, L.fch_gelu, L.fch);
  }
  if (!with_output) return;
  {
    OpScope s(ob, "fwd.matmul.mlp_proj");
    ops::matmul_fwd(ctx, L.res3, L.fch_gelu, store.param(p(l, "mlp.c_proj.weight")),
                    store.param(p(l, "mlp.c_proj.bias")), L.res2);
  }
}

ForwardResult GPT::forward(const ExecContext& ctx, const ParameterStore& store,
                           const Tensor& tokens, const Tensor& targets, AttentionMode mode,
                           float dloss) {
  NvtxRange range("gpt.forward");
  ATTN_REQUIRE(tokens.ndim() == 2 && tokens.dtype == DType::i32,
               "model input must be i32[B, T], got %s", tokens.str().c_str());
  const int B = int(tokens.dim(0)), T = int(tokens.dim(1));
  ATTN_REQUIRE(B <= maxB_ && T <= maxT_, "batch [%d, %d] exceeds the allocated [%d, %d]", B, T,
               maxB_, maxT_);
  const int64_t BT = int64_t(B) * T, C = cfg_.n_embd;
  if (B != B_ || T != T_) bind_activations(B, T);
  OpObserver* ob = observer_;

  {
    OpScope s(ob, "fwd.embedding");
    ops::embedding_fwd(ctx, encoded_.view(Shape{B, T, C}), tokens, store.param("wte.weight"),
                       store.param("wpe.weight"));
  }
  ForwardResult result;
  for (int l = 0; l < cfg_.n_layer; ++l) {
    NvtxRange lr("layer");
    layer_forward(ctx, store, l, mode, /*with_output=*/true, &result);
  }
  {
    OpScope s(ob, "fwd.layernorm");
    ops::layernorm_fwd(ctx, lnf_, lnf_mean_, lnf_rstd_, layers_.back().res3,
                       store.param("ln_f.weight"), store.param("ln_f.bias"), cfg_.norm_eps);
  }
  {
    OpScope s(ob, "fwd.matmul.lm_head");
    ops::matmul_fwd(ctx, logits_, lnf_, store.param("wte.weight"), Tensor());
  }
  has_dlogits_ = false;
  if (targets.empty()) return result;
  ATTN_REQUIRE(targets.shape == tokens.shape && targets.dtype == DType::i32,
               "targets must be i32%s like the tokens, got %s", tokens.shape.str().c_str(),
               targets.str().c_str());
  Tensor tflat = targets.view(Shape{BT});
  {
    OpScope s(ob, "fwd.crossentropy");
    if (dloss != 0.f) {
      ops::crossentropy_fwd_bwd(ctx, losses_, logits_, logits_, tflat, cfg_.vocab_size,
                                kIgnoreIndex, dloss);
      has_dlogits_ = true;
    } else {
      ops::crossentropy_fwd(ctx, losses_, logits_, tflat, cfg_.vocab_size, kIgnoreIndex);
    }
    ops::crossentropy_loss_sum(ctx, static_cast<double*>(loss_totals_.data()), losses_, tflat,
                               kIgnoreIndex);
  }
  return result;
}

LossTotals GPT::take_loss(const ExecContext& ctx) {
  ATTN_REQUIRE(loss_totals_.data() != nullptr, "GPT::take_loss: call allocate() first");
  double host[2] = {0.0, 0.0};
  if (loss_totals_.device() == Device::cpu) {
    std::memcpy(host, loss_totals_.data(), sizeof(host));
    loss_totals_.zero();
  } else {
    auto stream = reinterpret_cast<cudaStream_t>(ctx.stream);
    CUDA_CHECK(
        cudaMemcpyAsync(host, loss_totals_.data(), sizeof(host), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaMemsetAsync(loss_totals_.data(), 0, sizeof(host), stream));
  }
  LossTotals t;
  t.sum = host[0];
  t.valid = int64_t(host[1]);
  return t;
}

Tensor GPT::layer_input(int l) const { return l == 0 ? encoded_ : layers_[l - 1].res3; }

void GPT::layer_backward(const ExecContext& ctx, const ParameterStore& store, int l) {
  const int B = B_, T = T_;
  const int64_t BT = int64_t(B) * T, C = cfg_.n_embd;
  OpObserver* ob = observer_;
  Layer& L = layers_[l];
  Tensor x = layer_input(l);
  if (cfg_.recompute == ActivationRecompute::block) {
    // Re-run the layer's forward from its saved input into the shared layer buffers.
    OpScope s(ob, "bwd.recompute.block");
    observer_ = nullptr;  // time the recomputation as one group
    layer_forward(ctx, store, l, AttentionMode::train, /*with_output=*/false, nullptr);
    observer_ = ob;
  } else if (cfg_.recompute == ActivationRecompute::gelu) {
    OpScope s(ob, "bwd.recompute.gelu");
    ops::gelu_fwd(ctx, L.fch_gelu, L.fch);
  }
  // dres holds d(res3); the residual passes it to res2 unchanged, the MLP branch adds to it.
  {
    // d(fch) = (dres @ Wproj) * gelu'(fch): the GELU backward is the GEMM's DGELU epilogue.
    OpScope s(ob, "bwd.matmul.mlp_proj");
    ops::matmul_dgelu_bwd(ctx, dfch_, store.grad(p(l, "mlp.c_proj.weight")),
                          store.grad(p(l, "mlp.c_proj.bias")), dres_, L.fch_gelu,
                          store.param(p(l, "mlp.c_proj.weight")), L.fch);
  }
  {
    OpScope s(ob, "bwd.matmul.fc");
    ops::matmul_bwd(ctx, dln_, store.grad(p(l, "mlp.c_fc.weight")),
                    store.grad(p(l, "mlp.c_fc.bias")), dfch_, L.ln2,
                    store.param(p(l, "mlp.c_fc.weight")));
  }
  {
    OpScope s(ob, "bwd.layernorm");
    ops::layernorm_bwd(ctx, dres_, store.grad(p(l, "ln_2.weight")), store.grad(p(l, "ln_2.bias")),
                       dln_, L.res2, store.param(p(l, "ln_2.weight")), L.ln2_mean, L.ln2_rstd);
  }
  // dres now holds d(res2); attention branch.
  {
    OpScope s(ob, "bwd.matmul.attn_proj");
    ops::matmul_bwd(ctx, datty_.view(Shape{BT, C}), store.grad(p(l, "attn.c_proj.weight")),
                    store.grad(p(l, "attn.c_proj.bias")), dres_, L.atty.view(Shape{BT, C}),
                    store.param(p(l, "attn.c_proj.weight")));
  }
  bool dh = attn_[l]->uses_h();
  {
    OpScope s(ob, "bwd.attention");
    if (dh) zero_tensor(dln_);
    attn_[l]->backward(ctx, store, L.ln1.view(Shape{B, T, C}), L.qkv, L.atty, datty_, dqkv_,
                       dln_.view(Shape{B, T, C}));
  }
  {
    OpScope s(ob, "bwd.matmul.qkv");
    ops::matmul_bwd(ctx, dln_, store.grad(p(l, "attn.c_attn.weight")),
                    store.grad(p(l, "attn.c_attn.bias")), dqkv_.view(Shape{BT, 3 * C}), L.ln1,
                    store.param(p(l, "attn.c_attn.weight")),
                    /*accumulate_dx=*/dh);
  }
  {
    OpScope s(ob, "bwd.layernorm");
    ops::layernorm_bwd(ctx, dres_, store.grad(p(l, "ln_1.weight")), store.grad(p(l, "ln_1.bias")),
                       dln_, x, store.param(p(l, "ln_1.weight")), L.ln1_mean, L.ln1_rstd);
  }
}

void GPT::backward(const ExecContext& ctx, const ParameterStore& store, const Tensor& tokens) {
  NvtxRange range("gpt.backward");
  ATTN_REQUIRE(has_dlogits_, "backward() needs a forward() with targets and dloss != 0 first");
  const int B = B_, T = T_;
  const int64_t C = cfg_.n_embd;
  OpObserver* ob = observer_;
  // Head: logits = lnf @ wte^T (dlogits sit in the logits buffer).
  {
    OpScope s(ob, "bwd.matmul.lm_head");
    ops::matmul_bwd(ctx, dln_, store.grad("wte.weight"), Tensor(), logits_, lnf_,
                    store.param("wte.weight"));
  }
  {
    OpScope s(ob, "bwd.layernorm");
    zero_tensor(dres_);
    ops::layernorm_bwd(ctx, dres_, store.grad("ln_f.weight"), store.grad("ln_f.bias"), dln_,
                       layers_.back().res3, store.param("ln_f.weight"), lnf_mean_, lnf_rstd_);
  }
  for (int l = cfg_.n_layer - 1; l >= 0; --l) {
    NvtxRange lr("layer.backward");
    layer_backward(ctx, store, l);
  }
  {
    OpScope s(ob, "bwd.embedding");
    ops::embedding_bwd(ctx, store.grad("wte.weight"), store.grad("wpe.weight"),
                       dres_.view(Shape{B, T, C}), tokens);
  }
  has_dlogits_ = false;
}

int64_t GPT::num_params_unpadded(const ParameterStore& store) const {
  return store.num_params() - int64_t(cfg_.padded_vocab - cfg_.vocab_size) * cfg_.n_embd;
}

double GPT::flops_per_token(int T) const {
  // PaLM appendix B: 6 N for the weight matmuls (fwd + bwd) plus 12 L C T for attention scores,
  // halved for the causal mask (the work a causal kernel actually does).
  const double C = cfg_.n_embd, L = cfg_.n_layer;
  double n = L * 12.0 * C * C + double(cfg_.vocab_size) * C;  // weights in matmuls (LM head tied)
  return 6.0 * n + 6.0 * L * C * T;
}

TrainingMemoryEstimate estimate_training_memory(const GPT& model, int64_t num_params,
                                                int64_t num_trainable, int B, int T, DType dtype) {
  TrainingMemoryEstimate e;
  const size_t es = dtype_size(dtype);
  e.weights = size_t(num_params) * es;
  e.grads = size_t(num_trainable) * es;
  e.optimizer = size_t(num_trainable) * 4 * (dtype == DType::bf16 ? 3 : 2);  // m, v (+ f32 master)
  const GPTConfig& c = model.config();
  AttentionShape as{B, T, c.n_head, c.kv_heads(), c.head_dim()};
  e.activations = model.activation_bytes(B, T, dtype) +
                  size_t(c.n_layer) * make_attention(c.attention, 0)->saved_bytes(as, dtype);
  e.workspace = size_t(32) << 20;  // cuBLASLt workspace
  return e;
}

namespace {
std::string gib(size_t b) { return strformat("%.2f GiB", double(b) / double(size_t(1) << 30)); }
}  // namespace

std::string device_memory_shortfall(const TrainingMemoryEstimate& e, size_t free_bytes,
                                    int micro_batch, ActivationRecompute recompute) {
  const size_t need = e.total() + e.total() / 20;  // 5% for allocator rounding and the context
  if (need <= free_bytes) return "";
  std::string hint;
  const size_t fixed = e.weights + e.grads + e.optimizer + e.workspace;
  if (fixed + fixed / 20 >= free_bytes) {
    hint =
        "the weights, gradients and optimizer state alone do not fit: use a smaller model or a "
        "GPU with more memory";
  } else {
    // Activations scale with the micro-batch: the largest that fits, keeping the recompute mode.
    const double room = double(free_bytes) / 1.05 - double(fixed) - double(1 << 20);
    int mb = int(double(micro_batch) * room / double(e.activations));
    hint = "lower train.micro_batch";
    if (mb >= 1) hint += strformat(" (about %d fits)", std::min(mb, micro_batch - 1));
    hint += " and raise train.batch_tokens / accumulation accordingly";
    if (recompute != ActivationRecompute::block)
      hint += ", or set train.recompute: block (keeps only each layer's input)";
  }
  return strformat(
      "out of device memory at start-up: the run needs about %s (weights %s, "
      "gradients %s, optimizer %s, activations %s for micro-batch %d, recompute %s) "
      "but the GPU has %s free; %s",
      gib(e.total()).c_str(), gib(e.weights).c_str(), gib(e.grads).c_str(),
      gib(e.optimizer).c_str(), gib(e.activations).c_str(), micro_batch, recompute_name(recompute),
      gib(free_bytes).c_str(), hint.c_str());
}

}  // namespace attnlab
