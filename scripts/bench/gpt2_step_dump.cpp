// gpt2_step_dump: one forward/backward (and optionally N AdamW steps) of a recipe's model on a
// given token file, written to a safetensors file for an external oracle
// (scripts/torch_gpt2_check.py).
//
//   gpt2_step_dump --recipe R.yaml --tokens batches.i32 --batch B --seq T --out dump.safetensors
//                  [--checkpoint DIR | --init-out DIR] [--train-steps N] [--set k=v ...]
//
// tokens: raw little-endian int32, [n_batches, B, T + 1]; batch i feeds step i (inputs = [:T],
// targets = [1:]). Weights: a checkpoint directory (its model.safetensors), or fresh weights from
// train.seed, which --init-out writes as DIR/model.safetensors first (so the oracle loads them).
// Output tensors:
//   loss [1] f32              mean cross-entropy of batch 0 (before any update)
//   logits [T, Vp]            last sequence of batch 0 (the store's dtype)
//   grad.<param> (store dtype) every parameter gradient of batch 0, loss scaled 1 / valid targets
//   train_loss [N], lr [N] f32 the loss and learning rate of each AdamW step (batches 0..N-1)
//   train_eval_loss [N] f32    the same batch's loss from an extra eval forward before the step
//                              (equal to train_loss unless a kernel is nondeterministic)
//   train_grad_norms [N, P] f32 per-step L2 norm of each trainable gradient (before clipping),
//                              P in store order, names in the "grad_norm_names" metadata
//   after<K>.<param> (store dtype) the weights after AdamW step K, for each K in --weights-after
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "core/context.h"
#include "core/cuda_check.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"
#include "train/from_recipe.h"

using namespace attnlab;

int main(int argc, char** argv) {
  CLI::App app{"one GPT step (and optional training) dumped for an external oracle"};
  std::string recipe_path, tokens_path, out_path, checkpoint, init_out;
  std::vector<std::string> overrides;
  int B = 4, T = 1024, train_steps = 0;
  std::vector<int> weights_after;
  app.add_option("--recipe", recipe_path)->required();
  app.add_option("--tokens", tokens_path)->required();
  app.add_option("--out", out_path)->required();
  app.add_option("--batch", B);
  app.add_option("--seq", T);
  app.add_option("--checkpoint", checkpoint);
  app.add_option("--init-out", init_out);
  app.add_option("--train-steps", train_steps);
  app.add_option("--set", overrides);
  app.add_option("--weights-after", weights_after, "dump the weights after these AdamW steps");
  CLI11_PARSE(app, argc, argv);
  try {
    Recipe r = load_recipe(recipe_path, overrides);
    const bool cuda = r.train.device != DeviceChoice::cpu && cuda_available();
    auto ctx = cuda ? ExecContext::make_cuda(0) : ExecContext::make_cpu();
    ctx->deterministic = r.train.deterministic;
    const DType dt = cuda && r.train.precision == Precision::bf16 ? DType::bf16 : DType::f32;
    GPT model(gpt_config_of(r));
    ParameterStore store;
    model.declare_params(store);
    store.finalize(ctx->device, dt, r.retrofit.trainable_roles());
    if (!checkpoint.empty()) {
      load_model_weights(resolve_checkpoint_dir(checkpoint), store);
    } else {
      model.init_params(store, uint64_t(r.train.seed));
      if (!init_out.empty()) {
        std::filesystem::create_directories(init_out);
        io::SafetensorsWriter w;
        for (const auto& e : store.entries()) w.add(e.spec.name, store.param(e.spec.name));
        w.set_metadata("format", "attnlab");
        w.write((std::filesystem::path(init_out) / "model.safetensors").string());
      }
    }
    model.allocate(*ctx, B, T, dt);

    std::ifstream f(tokens_path, std::ios::binary);
    ATTN_REQUIRE(bool(f), "cannot open --tokens %s", tokens_path.c_str());
    const size_t row = size_t(B) * (T + 1);
    f.seekg(0, std::ios::end);
    const size_t bytes = size_t(f.tellg());
    ATTN_REQUIRE(bytes % (row * 4) == 0 && bytes >= row * 4,
                 "--tokens %s: %zu bytes is not a whole "
                 "number of [%d, %d] int32 batches",
                 tokens_path.c_str(), bytes, B, T + 1);
    std::vector<int32_t> toks(bytes / 4);
    f.seekg(0);
    f.read(reinterpret_cast<char*>(toks.data()), std::streamsize(bytes));
    const int n_batches = int(toks.size() / row);
    ATTN_REQUIRE(train_steps <= n_batches,
                 "--train-steps %d needs %d batches in --tokens, it holds %d", train_steps,
                 train_steps, n_batches);
    for (int k : weights_after)
      ATTN_REQUIRE(k >= 1 && k <= train_steps,
                   "--weights-after %d: expected a step in [1, --train-steps = %d]", k,
                   train_steps);

    Buffer dev(ctx->device, size_t(2 * B * T) * 4);
    Tensor tin = dev.as(DType::i32, Shape{B, T}),
           ttg = dev.as(DType::i32, Shape{B, T}, size_t(B * T) * 4);
    // Uploads batch i; returns its number of valid targets.
    auto load_batch = [&](int i) {
      int64_t valid = 0;
      std::vector<int32_t> in(size_t(B) * T), tg(size_t(B) * T);
      const int32_t* src = toks.data() + size_t(i) * row;
      for (int b = 0; b < B; ++b)
        for (int t = 0; t < T; ++t) {
          in[size_t(b) * T + t] = src[size_t(b) * (T + 1) + t];
          tg[size_t(b) * T + t] = src[size_t(b) * (T + 1) + t + 1];
          valid += tg[size_t(b) * T + t] != GPT::kIgnoreIndex;
        }
      copy_tensor(tin, Tensor(in.data(), DType::i32, Device::cpu, Shape{B, T}));
      copy_tensor(ttg, Tensor(tg.data(), DType::i32, Device::cpu, Shape{B, T}));
      return valid;
    };

    load_batch(0);
    model.forward(*ctx, store, tin, ttg, AttentionMode::eval);
    const LossTotals fr = model.take_loss(*ctx);
    Buffer logits_keep(ctx->device, size_t(T) * r.model.padded_vocab() * dtype_size(dt));
    Tensor last = logits_keep.as(dt, Shape{T, r.model.padded_vocab()});
    copy_tensor(last, model.logits().slice0(B - 1, B).view(last.shape));
    store.zero_grads();
    model.forward(*ctx, store, tin, ttg, AttentionMode::train, float(1.0 / double(fr.valid)));
    model.backward(*ctx, store, tin);
    model.take_loss(*ctx);  // the same loss again; synchronises

    io::SafetensorsWriter w;
    float loss = float(fr.mean());
    w.add("loss", Tensor(&loss, DType::f32, Device::cpu, Shape{1}));
    w.add("logits", last);
    // The gradients are copied: the training below reuses the store's gradient buffer.
    std::vector<std::string> names;
    Buffer grads_copy(ctx->device, store.grads().nbytes());
    Tensor gcopy = grads_copy.as(dt, store.grads().shape);
    copy_tensor(gcopy, store.grads());
    for (const auto& e : store.entries()) {
      if (!e.trainable) continue;
      names.push_back("grad." + e.spec.name);
      w.add(names.back(),
            gcopy.slice0(e.offset, e.offset + e.spec.shape.numel()).view(e.spec.shape));
    }

    std::vector<float> train_loss, eval_loss, lrs, grad_norms;
    std::vector<Buffer> kept;  // weights after the --weights-after steps (the writer holds views)
    std::vector<std::string> kept_names;
    std::string norm_names;
    for (const auto& e : store.entries())
      if (e.trainable) norm_names += (norm_names.empty() ? "" : ",") + e.spec.name;
    // Per-parameter gradient norms in double, from a host copy of the gradients.
    auto record_grad_norms = [&]() {
      Tensor g = store.grads();
      std::vector<float> host(size_t(g.numel()));
      if (g.dtype == DType::f32) {
        copy_tensor(Tensor(host.data(), DType::f32, Device::cpu, g.shape), g);
      } else {
        std::vector<bf16> hb(size_t(g.numel()));
        copy_tensor(Tensor(hb.data(), DType::bf16, Device::cpu, g.shape), g);
        for (size_t i = 0; i < hb.size(); ++i) host[i] = __bfloat162float(hb[i]);
      }
      for (const auto& e : store.entries()) {
        if (!e.trainable) continue;
        double ss = 0;
        for (int64_t i = 0; i < e.spec.shape.numel(); ++i) {
          const double x = host[size_t(e.offset + i)];
          ss += x * x;
        }
        grad_norms.push_back(float(std::sqrt(ss)));
      }
    };
    if (train_steps > 0) {
      AdamW opt(*ctx, store, adamw_config_of(r));
      ScheduleSpec sched = schedule_of(r, int(r.train.steps));
      for (int s = 0; s < train_steps; ++s) {
        const int64_t valid = load_batch(s);
        const float lr = lr_at(sched, s);
        model.forward(*ctx, store, tin, ttg, AttentionMode::eval);
        const double er = model.take_loss(*ctx).mean();
        store.zero_grads();
        model.forward(*ctx, store, tin, ttg, AttentionMode::train, float(1.0 / double(valid)));
        model.backward(*ctx, store, tin);
        const double tr = model.take_loss(*ctx).mean();
        record_grad_norms();
        StepStats ss = opt.step(lr, s + 1);
        train_loss.push_back(float(tr));
        eval_loss.push_back(float(er));
        lrs.push_back(lr);
        std::printf("step %2d | lr %.3e | loss %.6f (eval forward %.6f) | grad norm %.4f\n", s + 1,
                    lr, tr, er, ss.grad_norm);
        if (std::find(weights_after.begin(), weights_after.end(), s + 1) != weights_after.end()) {
          kept.emplace_back(ctx->device, store.all_params().nbytes());
          Tensor copy = kept.back().as(store.all_params().dtype, store.all_params().shape);
          copy_tensor(copy, store.all_params());
          for (const auto& e : store.entries()) {
            kept_names.push_back(strformat("after%d.%s", s + 1, e.spec.name.c_str()));
            w.add(kept_names.back(),
                  copy.slice0(e.offset, e.offset + e.spec.shape.numel()).view(e.spec.shape));
          }
        }
      }
      ctx->synchronize();
      w.add("train_loss", Tensor(train_loss.data(), DType::f32, Device::cpu, Shape{train_steps}));
      w.add("lr", Tensor(lrs.data(), DType::f32, Device::cpu, Shape{train_steps}));
      w.add("train_eval_loss",
            Tensor(eval_loss.data(), DType::f32, Device::cpu, Shape{train_steps}));
      const int64_t P = int64_t(grad_norms.size()) / train_steps;
      w.add("train_grad_norms",
            Tensor(grad_norms.data(), DType::f32, Device::cpu, Shape{train_steps, P}));
      w.set_metadata("grad_norm_names", norm_names);
    }
    w.set_metadata("dtype", dtype_name(dt));
    w.write(out_path);
    std::printf("%s: loss %.6f (%lld targets), %zu gradients, dtype %s\n", out_path.c_str(),
                fr.mean(), (long long)fr.valid, names.size(), dtype_name(dt));
  } catch (const Error& e) {
    std::fprintf(stderr, "gpt2_step_dump: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
