#include "model/block.h"

#include <cmath>
#include <string>

#include "core/error.h"
#include "ops/ops.h"

namespace attnlab {

namespace {

AttentionOptions attention_options(const GPTConfig& cfg) {
  AttentionOptions o = cfg.attention;
  o.n_layer = cfg.n_layer;
  return o;
}

}  // namespace

const char* norm_scope(const GPTConfig& cfg, bool backward) {
  if (cfg.norm == NormType::rmsnorm) return backward ? "bwd.rmsnorm" : "fwd.rmsnorm";
  return backward ? "bwd.layernorm" : "fwd.layernorm";
}

void norm_fwd(const ExecContext& ctx, const GPTConfig& cfg, const Tensor& y, const Tensor& mean,
              const Tensor& rstd, const Tensor& x, const Norm& w) {
  if (cfg.norm == NormType::rmsnorm) {
    ops::rmsnorm_fwd(ctx, y, rstd, x, w.w, cfg.norm_eps);
  } else {
    ops::layernorm_fwd(ctx, y, mean, rstd, x, w.w, w.b, cfg.norm_eps);
  }
}

void norm_bwd(const ExecContext& ctx, const GPTConfig& cfg, const Tensor& dx, const Norm& dw,
              const Tensor& dy, const Tensor& x, const Norm& w, const Tensor& mean,
              const Tensor& rstd) {
  if (cfg.norm == NormType::rmsnorm) {
    ops::rmsnorm_bwd(ctx, dx, dw.w, dy, x, w.w, rstd);
  } else {
    ops::layernorm_bwd(ctx, dx, dw.w, dw.b, dy, x, w.w, mean, rstd);
  }
}

Block::Block(const GPTConfig& cfg, int layer)
    : cfg_(cfg), layer_(layer), attn_(make_attention(attention_options(cfg), layer)) {
  if (cfg.lora.enabled())
    lora_.emplace(cfg.lora, lora_linear_name(layer, "c_attn"), cfg.n_embd,
                  cfg.qkv_layout().width());
}

std::string Block::name(const char* what) const {
  return "h." + std::to_string(layer_) + "." + what;
}

void Block::declare_params(ParameterStore& store) const {
  const int64_t C = cfg_.n_embd, F = cfg_.mlp_hidden(), FC = cfg_.mlp_fc_rows();
  const QKVLayout qkv = cfg_.qkv_layout();
  const float std = cfg_.init_std;
  const float proj_std = std / std::sqrt(2.f * cfg_.n_layer);  // GPT-2: scaled residual projections
  auto weight = [&](const char* n, Shape s, float sd) {
    store.declare({name(n), s, ParamRole::base, ParamInit::normal, sd, /*weight_decay=*/true});
  };
  auto vec = [&](const char* n, int64_t len, ParamInit init) {
    store.declare({name(n), Shape{len}, ParamRole::base, init, 0.f, false});
  };
  auto bias = [&](const char* n, int64_t len) {
    if (cfg_.bias) vec(n, len, ParamInit::zeros);
  };
  auto norm_bias = [&](const char* n) {
    if (cfg_.norm_bias()) vec(n, C, ParamInit::zeros);
  };
  vec("ln_1.weight", C, ParamInit::ones);
  norm_bias("ln_1.bias");
  weight("attn.c_attn.weight", Shape{qkv.width(), C}, std);
  bias("attn.c_attn.bias", qkv.width());
  if (lora_) lora_->declare_params(store);
  weight("attn.c_proj.weight", Shape{C, qkv.q_width()}, proj_std);
  bias("attn.c_proj.bias", C);
  AttentionShape as{0, 0, qkv, cfg_.n_embd};
  attn_->declare_params(store, layer_, as);
  vec("ln_2.weight", C, ParamInit::ones);
  norm_bias("ln_2.bias");
  weight("mlp.c_fc.weight", Shape{FC, C}, std);
  bias("mlp.c_fc.bias", FC);
  weight("mlp.c_proj.weight", Shape{C, F}, proj_std);
  bias("mlp.c_proj.bias", C);
}

void Block::bind(const ParameterStore& store) {
  auto param = [&](const char* n) { return store.param(name(n)); };
  auto grad = [&](const char* n) { return store.grad(name(n)); };
  auto bias_param = [&](const char* n) { return cfg_.bias ? param(n) : Tensor(); };
  auto bias_grad = [&](const char* n) { return cfg_.bias ? grad(n) : Tensor(); };
  const bool nb = cfg_.norm_bias();
  auto bind_all = [&](auto get, auto get_bias) {
    BlockTensors t;
    t.ln_1 = {get("ln_1.weight"), nb ? get_bias("ln_1.bias") : Tensor()};
    t.qkv = {get("attn.c_attn.weight"), get_bias("attn.c_attn.bias")};
    t.attn_proj = {get("attn.c_proj.weight"), get_bias("attn.c_proj.bias")};
    t.ln_2 = {get("ln_2.weight"), nb ? get_bias("ln_2.bias") : Tensor()};
    t.fc = {get("mlp.c_fc.weight"), get_bias("mlp.c_fc.bias")};
    t.mlp_proj = {get("mlp.c_proj.weight"), get_bias("mlp.c_proj.bias")};
    return t;
  };
  w_ = bind_all(param, bias_param);
  g_ = bind_all(grad, bias_grad);
  attn_->bind(store);
  if (lora_) lora_->bind(store);
  // The attention variant's tensors are the layer's h.<l>.attn.* other than c_attn and c_proj.
  const std::string attn_prefix = name("attn.");
  bool attention_trains = false;
  for (const auto& e : store.entries()) {
    const std::string& n = e.spec.name;
    if (e.trainable && n.compare(0, attn_prefix.size(), attn_prefix) == 0 &&
        n.compare(attn_prefix.size(), 7, "c_attn.") != 0 &&
        n.compare(attn_prefix.size(), 7, "c_proj.") != 0)
      attention_trains = true;
  }
  auto trains = [](const auto& t) { return !t.w.empty() || !t.b.empty(); };
  const bool qkv_trains = trains(g_.qkv) || (lora_ && lora_->trainable());
  lowest_trainable_ = trains(g_.ln_1)        ? Stage::ln_1
                      : qkv_trains           ? Stage::qkv
                      : attention_trains     ? Stage::attention
                      : trains(g_.attn_proj) ? Stage::attn_proj
                      : trains(g_.ln_2)      ? Stage::ln_2
                      : trains(g_.fc)        ? Stage::fc
                      : trains(g_.mlp_proj)  ? Stage::mlp_proj
                                             : Stage::none;
}

BlockActs Block::carve(Carver& cv, const GPTConfig& cfg, int B, int T, DType dt, bool keep_gelu,
                       bool keep_out) {
  const int64_t BT = int64_t(B) * T, C = cfg.n_embd, F = cfg.mlp_hidden();
  const QKVLayout qkv = cfg.qkv_layout();
  const bool layernorm = cfg.norm == NormType::layernorm;
  BlockActs a;
  a.ln1 = cv.take(dt, Shape{BT, C});
  if (layernorm) a.ln1_mean = cv.take(DType::f32, Shape{BT});
  a.ln1_rstd = cv.take(DType::f32, Shape{BT});
  a.qkv = cv.take(dt, Shape{B, T, qkv.width()});
  a.atty = cv.take(dt, Shape{B, T, qkv.q_width()});
  a.res2 = cv.take(dt, Shape{BT, C});
  a.ln2 = cv.take(dt, Shape{BT, C});
  if (layernorm) a.ln2_mean = cv.take(DType::f32, Shape{BT});
  a.ln2_rstd = cv.take(DType::f32, Shape{BT});
  a.fch = cv.take(dt, Shape{BT, cfg.mlp_fc_rows()});
  if (keep_gelu) a.fch_act = cv.take(dt, Shape{BT, F});
  if (keep_out) a.out = cv.take(dt, Shape{BT, C});
  if (cfg.lora.enabled()) a.lora_u = cv.take(dt, Shape{BT, cfg.lora.rank});
  return a;
}

BlockScratch Block::carve_scratch(Carver& cv, const GPTConfig& cfg, int B, int T, DType dt) {
  const int64_t BT = int64_t(B) * T, C = cfg.n_embd;
  const QKVLayout qkv = cfg.qkv_layout();
  BlockScratch s;
  s.dres = cv.take(dt, Shape{BT, C});
  s.dln = cv.take(dt, Shape{BT, C});
  s.datty = cv.take(dt, Shape{B, T, qkv.q_width()});
  s.dqkv = cv.take(dt, Shape{B, T, qkv.width()});
  s.dfch = cv.take(dt, Shape{BT, cfg.mlp_fc_rows()});
  if (cfg.mlp == MlpType::swiglu) s.dact = cv.take(dt, Shape{BT, cfg.mlp_hidden()});
  if (cfg.lora.enabled()) s.dlora_u = cv.take(dt, Shape{BT, cfg.lora.rank});
  return s;
}

AttentionInputs Block::attention_inputs(const BlockActs& a, const BlockRun& run) const {
  AttentionInputs in;
  in.h = a.ln1.view(Shape{a.qkv.dim(0), a.qkv.dim(1), cfg_.n_embd});
  in.qkv = a.qkv;
  in.layout = cfg_.qkv_layout();
  in.pos = run.pos;
  in.mode = run.mode;
  in.cache = run.cache;
  in.scratch = run.scratch;
  in.aux = run.aux;
  return in;
}

void Block::forward(const ExecContext& ctx, const Tensor& x, const BlockActs& a,
                    const BlockRun& run, OpObserver* ob) const {
  const int64_t BT = a.ln1.dim(0);
  {
    OpScope s(ob, norm_scope(cfg_, false));
    norm_fwd(ctx, cfg_, a.ln1, a.ln1_mean, a.ln1_rstd, x, w_.ln_1);
  }
  {
    OpScope s(ob, "fwd.matmul.qkv");
    ops::matmul_fwd(ctx, a.qkv.view(Shape{BT, a.qkv.dim(2)}), a.ln1, w_.qkv.w, w_.qkv.b);
  }
  if (lora_) {
    OpScope s(ob, "fwd.lora");
    lora_->forward(ctx, a.qkv.view(Shape{BT, a.qkv.dim(2)}), a.ln1, a.lora_u);
  }
  if (cfg_.position == PositionType::rope) {
    // q and k rotated in place at their absolute positions (run.pos on: decoding); the attention
    // variants and the KV caches see the rotated vectors.
    OpScope s(ob, "fwd.rope");
    ops::rope_fwd(ctx, a.qkv, cfg_.qkv_layout(), run.pos, cfg_.rope_theta, cfg_.rope_scaling);
  }
  {
    OpScope s(ob, "fwd.attention");
    attn_->forward(ctx, attention_inputs(a, run), a.atty);
  }
  {
    // res2 = x + atty @ Wproj^T + b: the residual add is the GEMM's epilogue (C = x, beta = 1).
    OpScope s(ob, "fwd.matmul.attn_proj");
    ops::matmul_fwd(ctx, a.res2, a.atty.view(Shape{BT, a.atty.dim(2)}), w_.attn_proj.w,
                    w_.attn_proj.b, x);
  }
  {
    OpScope s(ob, norm_scope(cfg_, false));
    norm_fwd(ctx, cfg_, a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, w_.ln_2);
  }
  mlp_forward(ctx, a, ob);
  if (!run.with_output) return;
  {
    OpScope s(ob, "fwd.matmul.mlp_proj");
    ops::matmul_fwd(ctx, a.out, a.fch_act, w_.mlp_proj.w, w_.mlp_proj.b, a.res2);
  }
}

void Block::mlp_forward(const ExecContext& ctx, const BlockActs& a, OpObserver* ob) const {
  if (cfg_.mlp == MlpType::swiglu) {
    {
      OpScope s(ob, "fwd.matmul.fc");
      ops::matmul_fwd(ctx, a.fch, a.ln2, w_.fc.w, w_.fc.b);
    }
    OpScope s(ob, "fwd.swiglu");
    ops::swiglu_fwd(ctx, a.fch_act, a.fch);
    return;
  }
  if (cfg_.recompute != ActivationRecompute::gelu) {
    // fch = ln2 @ Wfc^T + b and fch_act = gelu(fch) from one GEMM (GELU epilogue).
    OpScope s(ob, "fwd.matmul.fc");
    ops::matmul_gelu_fwd(ctx, a.fch_act, a.fch, a.ln2, w_.fc.w, w_.fc.b);
    return;
  }
  // The backward recomputes fch_act with gelu_fwd from fch; the forward runs the same kernel
  // so the recomputation reproduces it bitwise (the epilogue's GELU on the fp32 accumulator
  // would differ from the GELU of the rounded fch in the last bit).
  {
    OpScope s(ob, "fwd.matmul.fc");
    ops::matmul_fwd(ctx, a.fch, a.ln2, w_.fc.w, w_.fc.b);
  }
  OpScope s(ob, "fwd.gelu");
  ops::gelu_fwd(ctx, a.fch_act, a.fch);
}

void Block::backward(const ExecContext& ctx, const Tensor& x, const BlockActs& a,
                     const BlockScratch& s, const AuxLossSink& aux, OpObserver* ob,
                     bool need_dx) const {
  const int64_t BT = a.ln1.dim(0);
  // Which steps run: all with need_dx, else down to the lowest trainable one. A step's data
  // gradient (dx of its product) is needed only when a step below it runs.
  const Stage last = need_dx ? Stage::ln_1 : lowest_trainable_;
  if (last == Stage::none) return;
  auto runs = [&](Stage st) { return st <= last; };
  auto below_runs = [&](Stage st) { return st < last; };
  auto dx_if = [&](Stage st, const Tensor& dx) { return below_runs(st) ? dx : Tensor(); };
  if (cfg_.recompute == ActivationRecompute::block) {
    // Re-run the forward from the saved input into the shared layer buffers, timed as one group.
    OpScope sc(ob, "bwd.recompute.block");
    BlockRun run;
    run.aux = aux;
    run.aux.total = nullptr;  // the auxiliary loss was counted by the first forward
    run.with_output = false;
    forward(ctx, x, a, run, /*ob=*/nullptr);
  } else if (cfg_.recompute == ActivationRecompute::gelu) {
    // (the MLP's activation, GELU or SwiGLU, by the kernel its forward ran)
    OpScope sc(ob, "bwd.recompute.gelu");
    if (cfg_.mlp == MlpType::swiglu) {
      ops::swiglu_fwd(ctx, a.fch_act, a.fch);
    } else {
      ops::gelu_fwd(ctx, a.fch_act, a.fch);
    }
  }
  // dres holds d(out); the residual passes it to res2 unchanged, the MLP branch adds to it.
  if (cfg_.mlp == MlpType::swiglu) {
    OpScope sc(ob, "bwd.matmul.mlp_proj");
    ops::matmul_bwd(ctx, dx_if(Stage::mlp_proj, s.dact), g_.mlp_proj.w, g_.mlp_proj.b, s.dres,
                    a.fch_act, w_.mlp_proj.w);
    if (below_runs(Stage::mlp_proj)) {
      OpScope sw(ob, "bwd.swiglu");
      ops::swiglu_bwd(ctx, s.dfch, s.dact, a.fch);
    }
  } else {
    // d(fch) = (dres @ Wproj) * gelu'(fch): the GELU backward is the GEMM's DGELU epilogue.
    OpScope sc(ob, "bwd.matmul.mlp_proj");
    ops::matmul_dgelu_bwd(ctx, dx_if(Stage::mlp_proj, s.dfch), g_.mlp_proj.w, g_.mlp_proj.b, s.dres,
                          a.fch_act, w_.mlp_proj.w, a.fch);
  }
  if (!runs(Stage::fc)) return;
  {
    OpScope sc(ob, "bwd.matmul.fc");
    ops::matmul_bwd(ctx, dx_if(Stage::fc, s.dln), g_.fc.w, g_.fc.b, s.dfch, a.ln2, w_.fc.w);
  }
  if (!runs(Stage::ln_2)) return;
  {
    OpScope sc(ob, norm_scope(cfg_, true));
    norm_bwd(ctx, cfg_, s.dres, g_.ln_2, s.dln, a.res2, w_.ln_2, a.ln2_mean, a.ln2_rstd);
  }
  if (!runs(Stage::attn_proj)) return;
  // dres now holds d(res2); attention branch.
  {
    OpScope sc(ob, "bwd.matmul.attn_proj");
    ops::matmul_bwd(ctx, dx_if(Stage::attn_proj, s.datty.view(Shape{BT, s.datty.dim(2)})),
                    g_.attn_proj.w, g_.attn_proj.b, s.dres, a.atty.view(Shape{BT, a.atty.dim(2)}),
                    w_.attn_proj.w);
  }
  if (!runs(Stage::attention)) return;
  const bool attention_adds_dh = attn_->uses_h();
  {
    OpScope sc(ob, "bwd.attention");
    BlockRun run;
    run.aux = aux;
    if (attention_adds_dh) zero_tensor(s.dln);
    attn_->backward(ctx, attention_inputs(a, run), a.atty, s.datty, s.dqkv,
                    s.dln.view(Shape{a.qkv.dim(0), a.qkv.dim(1), cfg_.n_embd}));
  }
  if (!runs(Stage::qkv)) return;
  if (cfg_.position == PositionType::rope) {
    // d(qkv before the rotation): the inverse rotation of dq and dk (training runs at pos 0).
    OpScope sc(ob, "bwd.rope");
    ops::rope_bwd(ctx, s.dqkv, cfg_.qkv_layout(), 0, cfg_.rope_theta, cfg_.rope_scaling);
  }
  {
    OpScope sc(ob, "bwd.matmul.qkv");
    ops::matmul_bwd(ctx, dx_if(Stage::qkv, s.dln), g_.qkv.w, g_.qkv.b,
                    s.dqkv.view(Shape{BT, s.dqkv.dim(2)}), a.ln1, w_.qkv.w,
                    /*accumulate_dx=*/attention_adds_dh);
  }
  if (lora_) {
    // dA, dB, and the branch's share of d(ln1) added to the base product's.
    OpScope sc(ob, "bwd.lora");
    lora_->backward(ctx, dx_if(Stage::qkv, s.dln), s.dqkv.view(Shape{BT, s.dqkv.dim(2)}), a.ln1,
                    a.lora_u, s.dlora_u);
  }
  if (!runs(Stage::ln_1)) return;
  {
    OpScope sc(ob, norm_scope(cfg_, true));
    norm_bwd(ctx, cfg_, s.dres, g_.ln_1, s.dln, x, w_.ln_1, a.ln1_mean, a.ln1_rstd);
  }
}

}  // namespace attnlab
