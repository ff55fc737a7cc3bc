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
  cfg_.validate();
  blocks_.reserve(size_t(cfg.n_layer));
  for (int l = 0; l < cfg.n_layer; ++l) blocks_.emplace_back(cfg_, l);
}

void GPT::declare_params(ParameterStore& store) const {
  const int64_t C = cfg_.n_embd;
  auto weight = [&](const std::string& n, Shape s, float sd) {
    store.declare({n, s, ParamRole::base, ParamInit::normal, sd, /*weight_decay=*/true});
  };
  auto vec = [&](const std::string& n, int64_t len, ParamInit init) {
    store.declare({n, Shape{len}, ParamRole::base, init, 0.f, false});
  };
  weight("wte.weight", Shape{cfg_.padded_vocab, C}, cfg_.init_std);
  if (cfg_.position == PositionType::learned)
    weight("wpe.weight", Shape{cfg_.block_size, C}, cfg_.init_std / 2);  // GPT-2: 0.01
  for (const Block& b : blocks_) b.declare_params(store);
  vec("ln_f.weight", C, ParamInit::ones);
  if (cfg_.norm_bias()) vec("ln_f.bias", C, ParamInit::zeros);
  if (!cfg_.tied_embeddings) weight("lm_head.weight", Shape{cfg_.padded_vocab, C}, cfg_.init_std);
}

void GPT::init_params(ParameterStore& store, uint64_t seed) const {
  store.initialize(seed);
  // Padding rows of the vocabulary never see a token or a target: keep them exactly zero.
  if (cfg_.padded_vocab == cfg_.vocab_size) return;
  zero_tensor(store.param("wte.weight").slice0(cfg_.vocab_size, cfg_.padded_vocab));
  if (!cfg_.tied_embeddings)
    zero_tensor(store.param("lm_head.weight").slice0(cfg_.vocab_size, cfg_.padded_vocab));
}

void GPT::bind(const ParameterStore& store) {
  const void* params = store.all_params().data;
  const void* grads = store.num_trainable() ? store.grads().data : nullptr;
  if (&store == bound_store_ && params == bound_params_ && grads == bound_grads_) return;
  const bool learned = cfg_.position == PositionType::learned;
  wte_ = store.param("wte.weight");
  dwte_ = store.grad("wte.weight");
  wpe_ = learned ? store.param("wpe.weight") : Tensor();
  dwpe_ = learned ? store.grad("wpe.weight") : Tensor();
  lnf_w_ = store.param("ln_f.weight");
  dlnf_w_ = store.grad("ln_f.weight");
  lnf_b_ = cfg_.norm_bias() ? store.param("ln_f.bias") : Tensor();
  dlnf_b_ = cfg_.norm_bias() ? store.grad("ln_f.bias") : Tensor();
  lm_head_ = cfg_.tied_embeddings ? Tensor() : store.param("lm_head.weight");
  dlm_head_ = cfg_.tied_embeddings ? Tensor() : store.grad("lm_head.weight");
  for (Block& b : blocks_) b.bind(store);
  bound_store_ = &store;
  bound_params_ = params;
  bound_grads_ = grads;
}

Tensor GPT::head_weight(bool grad) const {
  if (cfg_.tied_embeddings) return grad ? dwte_ : wte_;
  return grad ? dlm_head_ : lm_head_;
}

void GPT::allocate(const ExecContext& ctx, int B, int T, DType dtype) {
  ATTN_REQUIRE(T >= 1 && T <= cfg_.block_size,
               "sequence length %d must be in [1, model.block_size = %d]", T, cfg_.block_size);
  ATTN_REQUIRE(B >= 1, "micro-batch must be >= 1, got %d", B);
  maxB_ = B;
  maxT_ = T;
  dtype_ = dtype;
  Carver count;
  carve(count, B, T, dtype);
  acts_ = Buffer(ctx.device, count.bytes());
  loss_totals_ = Buffer(ctx.device, 3 * sizeof(double));
  loss_totals_.zero();
  AttentionShape as{B, T, cfg_.qkv_layout(), cfg_.n_embd};
  for (Block& b : blocks_) b.attention().allocate(ctx, as, dtype);
  B_ = 0;
  T_ = 0;
}

size_t GPT::activation_bytes(int B, int T, DType dtype) const {
  Carver count;
  carve(count, B, T, dtype);
  AttentionShape as{B, T, cfg_.qkv_layout(), cfg_.n_embd};
  size_t saved = 0;
  for (const Block& b : blocks_) saved += b.attention().saved_bytes(as, dtype);
  return count.bytes() + saved;
}

GPT::Acts GPT::carve(Carver& cv, int B, int T, DType dt) const {
  const int64_t BT = int64_t(B) * T, C = cfg_.n_embd, Vp = cfg_.padded_vocab;
  Acts a;
  a.layers.assign(size_t(cfg_.n_layer), BlockActs{});
  a.encoded = cv.take(dt, Shape{BT, C});
  switch (cfg_.recompute) {
    case ActivationRecompute::none:
      for (auto& L : a.layers) L = Block::carve(cv, cfg_, B, T, dt, true, true);
      break;
    case ActivationRecompute::gelu: {
      // One GELU output shared by every layer: recomputed per layer in backward.
      Tensor gelu = cv.take(dt, Shape{BT, cfg_.mlp_hidden()});
      for (auto& L : a.layers) {
        L = Block::carve(cv, cfg_, B, T, dt, false, true);
        L.fch_act = gelu;
      }
      break;
    }
    case ActivationRecompute::block: {
      // Every layer's working state is shared; only `out` (the next layer's input) is per layer.
      const BlockActs shared = Block::carve(cv, cfg_, B, T, dt, true, false);
      for (auto& L : a.layers) {
        L = shared;
        L.out = cv.take(dt, Shape{BT, C});
      }
      break;
    }
  }
  a.lnf = cv.take(dt, Shape{BT, C});
  if (cfg_.norm == NormType::layernorm) a.lnf_mean = cv.take(DType::f32, Shape{BT});
  a.lnf_rstd = cv.take(DType::f32, Shape{BT});
  a.logits = cv.take(dt, Shape{BT, Vp});
  a.losses = cv.take(DType::f32, Shape{BT});
  a.scratch = Block::carve_scratch(cv, cfg_, B, T, dt);
  return a;
}

double* GPT::aux_total() const { return static_cast<double*>(loss_totals_.data()) + 2; }

void GPT::forward(const ExecContext& ctx, const ParameterStore& store, const Tensor& tokens,
                  const Tensor& targets, AttentionMode mode, float dloss, float aux_scale) {
  NvtxRange range("gpt.forward");
  ATTN_REQUIRE(tokens.ndim() == 2 && tokens.dtype == DType::i32,
               "model input must be i32[B, T], got %s", tokens.str().c_str());
  const int B = int(tokens.dim(0)), T = int(tokens.dim(1));
  ATTN_REQUIRE(B <= maxB_ && T <= maxT_, "batch [%d, %d] exceeds the allocated [%d, %d]", B, T,
               maxB_, maxT_);
  const int64_t BT = int64_t(B) * T, C = cfg_.n_embd;
  if (B != B_ || T != T_) {
    Carver cv(acts_);
    Acts a = carve(cv, B, T, dtype_);
    layers_ = std::move(a.layers);
    scratch_ = a.scratch;
    encoded_ = a.encoded, lnf_ = a.lnf, lnf_mean_ = a.lnf_mean, lnf_rstd_ = a.lnf_rstd;
    logits_ = a.logits, losses_ = a.losses;
    B_ = B;
    T_ = T;
  }
  bind(store);
  OpObserver* ob = observer_;
  {
    OpScope s(ob, "fwd.embedding");
    ops::embedding_fwd(ctx, encoded_.view(Shape{B, T, C}), tokens, wte_, wpe_);
  }
  BlockRun run;
  // Without a cache, generate mode is an eval forward of the whole chunk (prefill/decode_step
  // decode incrementally).
  run.mode = mode == AttentionMode::generate ? AttentionMode::eval : mode;
  // The auxiliary losses join the loss totals of forwards with targets only (gpt.h).
  run.aux = {targets.empty() ? nullptr : aux_total(), aux_scale};
  aux_scale_ = aux_scale;
  for (int l = 0; l < cfg_.n_layer; ++l) {
    NvtxRange lr("layer");
    blocks_[size_t(l)].forward(ctx, layer_input(l), layers_[size_t(l)], run, ob);
  }
  {
    OpScope s(ob, norm_scope(cfg_, false));
    norm_fwd(ctx, cfg_, lnf_, lnf_mean_, lnf_rstd_, layers_.back().out, {lnf_w_, lnf_b_});
  }
  {
    OpScope s(ob, "fwd.matmul.lm_head");
    ops::matmul_fwd(ctx, logits_, lnf_, head_weight(false), Tensor());
  }
  has_dlogits_ = false;
  if (targets.empty()) return;
  ATTN_REQUIRE(targets.shape == tokens.shape && targets.dtype == DType::i32,
               "targets must be i32%s like the tokens, got %s", tokens.shape.str().c_str(),
               targets.str().c_str());
  Tensor tflat = targets.view(Shape{BT});
  OpScope s(ob, "fwd.crossentropy");
  if (dloss != 0.f) {
    ops::crossentropy_fwd_bwd(ctx, losses_, logits_, logits_, tflat, cfg_.vocab_size, kIgnoreIndex,
                              dloss);
    has_dlogits_ = true;
  } else {
    ops::crossentropy_fwd(ctx, losses_, logits_, tflat, cfg_.vocab_size, kIgnoreIndex);
  }
  ops::crossentropy_loss_sum(ctx, static_cast<double*>(loss_totals_.data()), losses_, tflat,
                             kIgnoreIndex);
}

LossTotals GPT::take_loss(const ExecContext& ctx) {
  ATTN_REQUIRE(loss_totals_.data() != nullptr, "GPT::take_loss: call allocate() first");
  double host[3] = {0.0, 0.0, 0.0};
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
  t.aux = host[2];
  return t;
}

void GPT::backward(const ExecContext& ctx, const ParameterStore& store, const Tensor& tokens) {
  NvtxRange range("gpt.backward");
  ATTN_REQUIRE(has_dlogits_, "backward() needs a forward() with targets and dloss != 0 first");
  ATTN_REQUIRE(&store == bound_store_, "backward() must use the store of its forward()");
  const int B = B_, T = T_;
  const int64_t C = cfg_.n_embd;
  OpObserver* ob = observer_;
  const BlockScratch& s = scratch_;
  // Frozen below some point: the backward stops at the lowest trainable tensor. Data gradients
  // are computed only where a trainable tensor lies further down (docs/retrofit.md).
  const bool embeddings_train = !dwte_.empty() || !dwpe_.empty();
  int lowest_layer = cfg_.n_layer;  // lowest layer with a trainable tensor
  for (int l = cfg_.n_layer - 1; l >= 0; --l)
    if (blocks_[size_t(l)].has_trainable()) lowest_layer = l;
  const bool below_head_trains =
      embeddings_train || lowest_layer < cfg_.n_layer || !dlnf_w_.empty() || !dlnf_b_.empty();
  // Head: logits = lnf @ W_head^T (dlogits sit in the logits buffer).
  {
    OpScope sc(ob, "bwd.matmul.lm_head");
    ops::matmul_bwd(ctx, below_head_trains ? s.dln : Tensor(), head_weight(true), Tensor(), logits_,
                    lnf_, head_weight(false));
  }
  if (below_head_trains) {
    OpScope sc(ob, norm_scope(cfg_, true));
    zero_tensor(s.dres);
    norm_bwd(ctx, cfg_, s.dres, {dlnf_w_, dlnf_b_}, s.dln, layers_.back().out, {lnf_w_, lnf_b_},
             lnf_mean_, lnf_rstd_);
  }
  const AuxLossSink aux{aux_total(), aux_scale_};
  const int stop = embeddings_train ? 0 : lowest_layer;
  for (int l = cfg_.n_layer - 1; l >= stop; --l) {
    NvtxRange lr("layer.backward");
    blocks_[size_t(l)].backward(ctx, layer_input(l), layers_[size_t(l)], s, aux, ob,
                                /*need_dx=*/embeddings_train || l > lowest_layer);
    if (backward_hook_) backward_hook_(l);
  }
  if (embeddings_train) {
    OpScope sc(ob, "bwd.embedding");
    ops::embedding_bwd(ctx, dwte_, dwpe_, s.dres.view(Shape{B, T, C}), tokens);
  }
  has_dlogits_ = false;
}

int64_t GPT::vocab_padding() const {
  const int64_t pad = int64_t(cfg_.padded_vocab - cfg_.vocab_size) * cfg_.n_embd;
  return pad * (cfg_.tied_embeddings ? 1 : 2);
}

int64_t GPT::num_params_unpadded(const ParameterStore& store) const {
  return store.num_params() - vocab_padding();
}

int64_t GPT::num_trainable_unpadded(const ParameterStore& store) const {
  const int64_t rows = int64_t(cfg_.padded_vocab - cfg_.vocab_size) * cfg_.n_embd;
  int64_t n = store.num_trainable();
  for (const std::string_view name : kVocabRowParams)
    if (store.contains(std::string(name)) && store.entry(std::string(name)).trainable) n -= rows;
  return n;
}

double GPT::flops_per_token(int T, const ParameterStore& store,
                            const std::set<ParamRole>& trainable_roles) const {
  // PaLM appendix B: 6 N for the weight matmuls (fwd + bwd) plus 12 L C T for attention scores,
  // halved for the causal mask (the work a causal kernel actually does).
  const QKVLayout q = cfg_.qkv_layout();
  const double C = cfg_.n_embd, L = cfg_.n_layer;
  double flops = 6.0 * L * double(q.q_width()) * T;
  for (const ParameterStore::Entry& e : store.entries()) {
    const ParamSpec& p = e.spec;
    if (p.shape.ndim != 2 || p.name == "wpe.weight") continue;
    double n = double(p.shape.numel());
    if (p.name == "wte.weight") {  // a lookup; a matmul only as the tied output layer
      if (!cfg_.tied_embeddings) continue;
      n = double(cfg_.vocab_size) * C;
    } else if (p.name == "lm_head.weight") {
      n = double(cfg_.vocab_size) * C;
    }
    flops += (trainable_roles.count(p.role) ? 6.0 : 4.0) * n;
  }
  return flops;
}

}  // namespace attnlab
