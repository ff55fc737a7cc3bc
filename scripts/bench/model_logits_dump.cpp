// model_logits_dump: the logits and loss of a model from any source (an attnlab checkpoint or run,
// a Hugging Face GPT-2 directory, an llm.c .bin: interop/model_source.h) on one batch, for an
// external comparison (scripts/hf_interop_check.py).
//
//   model_logits_dump --model SRC --tokens batch.i32 --batch B --seq T --out dump.safetensors
//                     [--device cpu|cuda] [--precision fp32|bf16]
//
// tokens: raw little-endian int32 [B, T + 1] (inputs = [:, :T], targets = [:, 1:]).
// Output: loss [1] f32 (mean cross-entropy), logits [B, T, V] f32 (the real vocabulary columns;
// bf16 logits widened), metadata: format, model, precision.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <vector>

#include "core/context.h"
#include "core/cuda_check.h"
#include "interop/foreign_tensors.h"
#include "interop/model_source.h"
#include "io/safetensors.h"
#include "model/gpt.h"

using namespace attnlab;

int main(int argc, char** argv) {
  CLI::App app{"logits and loss of a model from any source, for an external comparison"};
  std::string model_path, tokens_path, out_path, device = "cuda", precision = "fp32";
  int B = 1, T = 64;
  app.add_option("--model", model_path)->required();
  app.add_option("--tokens", tokens_path)->required();
  app.add_option("--out", out_path)->required();
  app.add_option("--batch", B);
  app.add_option("--seq", T);
  app.add_option("--device", device)->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--precision", precision)->check(CLI::IsMember({"fp32", "bf16"}));
  CLI11_PARSE(app, argc, argv);
  try {
    const bool cuda = device == "cuda";
    ATTN_REQUIRE(!cuda || cuda_available(), "--device cuda: no CUDA device");
    ATTN_REQUIRE(cuda || precision == "fp32", "--precision bf16 needs --device cuda");
    auto ctx = cuda ? ExecContext::make_cuda(0) : ExecContext::make_cpu();
    ctx->deterministic = true;
    const DType dt = precision == "bf16" ? DType::bf16 : DType::f32;

    const ModelSource src = inspect_model_source(model_path);
    for (const auto& n : src.notes) std::fprintf(stderr, "note: %s\n", n.c_str());
    ATTN_REQUIRE(T <= src.config.block_size, "--seq %d exceeds the model's block size %d", T,
                 src.config.block_size);
    GPT model(src.config);
    ParameterStore store;
    model.declare_params(store);
    store.finalize(ctx->device, dt, {ParamRole::base, ParamRole::attention, ParamRole::adapter});
    model.init_params(store, 0);
    WeightLoadOptions all;
    all.required_roles = {ParamRole::base, ParamRole::attention, ParamRole::adapter};
    load_model_source(src, store, all);
    model.allocate(*ctx, B, T, dt);

    std::ifstream f(tokens_path, std::ios::binary);
    ATTN_REQUIRE(bool(f), "cannot open --tokens %s", tokens_path.c_str());
    std::vector<int32_t> toks(size_t(B) * (T + 1));
    f.read(reinterpret_cast<char*>(toks.data()), std::streamsize(toks.size() * 4));
    ATTN_REQUIRE(f.gcount() == std::streamsize(toks.size() * 4),
                 "--tokens %s holds fewer than [%d, %d] int32", tokens_path.c_str(), B, T + 1);
    std::vector<int32_t> in(size_t(B) * T), tg(size_t(B) * T);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t) {
        in[size_t(b) * T + t] = toks[size_t(b) * (T + 1) + t];
        tg[size_t(b) * T + t] = toks[size_t(b) * (T + 1) + t + 1];
      }
    Buffer dev(ctx->device, size_t(2 * B * T) * 4);
    Tensor tin = dev.as(DType::i32, Shape{B, T}),
           ttg = dev.as(DType::i32, Shape{B, T}, size_t(B * T) * 4);
    copy_tensor(tin, Tensor(in.data(), DType::i32, Device::cpu, Shape{B, T}));
    copy_tensor(ttg, Tensor(tg.data(), DType::i32, Device::cpu, Shape{B, T}));
    model.forward(*ctx, store, tin, ttg, AttentionMode::eval);
    float loss = float(model.take_loss(*ctx).mean());

    const int V = src.config.vocab_size, Vp = src.config.padded_vocab;
    const std::vector<float> padded = tensor_to_host_f32(model.logits());
    std::vector<float> logits(size_t(B) * T * V);
    for (int64_t r = 0; r < int64_t(B) * T; ++r)
      std::copy_n(padded.begin() + r * Vp, V, logits.begin() + r * V);
    io::SafetensorsWriter w;
    w.add("loss", Tensor(&loss, DType::f32, Device::cpu, Shape{1}));
    w.add("logits", Tensor(logits.data(), DType::f32, Device::cpu, Shape{B, T, V}));
    w.set_metadata("format", model_format_name(src.format));
    w.set_metadata("model", model_path);
    w.set_metadata("precision", precision);
    w.write(out_path);
    std::fprintf(stderr, "%s (%s, %s on %s): loss %.6f\n", model_path.c_str(),
                 model_format_name(src.format), precision.c_str(), device.c_str(), loss);
  } catch (const Error& e) {
    std::fprintf(stderr, "model_logits_dump: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
