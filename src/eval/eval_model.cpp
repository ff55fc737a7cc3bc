#include "eval/eval_model.h"

#include <algorithm>
#include <numeric>

#include "config/recipe.h"
#include "core/cuda_check.h"
#include "core/error.h"
#include "core/nvtx.h"

namespace attnlab {

EvalModel::EvalModel(const ModelSource& source, const EvalDeviceOptions& o) : source_(source) {
  ATTN_REQUIRE(o.device == "auto" || o.device == "cpu" || o.device == "cuda",
               "--device must be auto, cpu or cuda, got '%s'", o.device.c_str());
  ATTN_REQUIRE(o.precision == "auto" || o.precision == "bf16" || o.precision == "fp32",
               "--precision must be auto, bf16 or fp32, got '%s'", o.precision.c_str());
  const bool cuda = o.device == "cuda" || (o.device == "auto" && cuda_available());
  if (cuda) {
    ctx_ = ExecContext::make_cuda(0);
    const bool bf = o.precision == "bf16" ||
                    (o.precision == "auto" && source_precision(source) == Precision::bf16);
    dtype_ = bf ? DType::bf16 : DType::f32;
  } else {
    ATTN_REQUIRE(
        o.precision != "bf16",
        "--precision bf16 needs CUDA; the CPU path is fp32 (use --precision fp32 or auto)");
    ctx_ = ExecContext::make_cpu();
    dtype_ = DType::f32;
  }
  const GPTConfig& c = source.config;
  max_len_ = o.max_len > 0 ? std::min(o.max_len, c.block_size) : c.block_size;
  // The default: 16 (CUDA) or 4 (CPU) sequences of 1,024 tokens' worth, fewer for longer
  // contexts (a LLaMA 3 or Mistral block_size of 8K-32K would otherwise ask for 16 x 32K).
  const int per_1k = cuda ? 16 : 4;
  batch_ = o.batch > 0 ? o.batch
                       : int(std::clamp<int64_t>(int64_t(per_1k) * 1024 / max_len_, 1, per_1k));
  model_ = std::make_unique<GPT>(c);
  model_->declare_params(store_);
  store_.finalize(ctx_->device, dtype_, {});  // nothing trainable: no gradient buffers
  // Evaluation uses the model as trained: every tensor (a variant's too) must come from the file.
  load_model_source(source, store_, whole_model_load());
  model_->allocate(*ctx_, batch_, max_len_, dtype_);
  const size_t BT = size_t(batch_) * size_t(max_len_);
  io_dev_ = Buffer(ctx_->device, 2 * BT * sizeof(int32_t));
  tokens_host_.resize(BT);
  targets_host_.resize(BT);
  losses_host_.resize(BT);
  row_f32_.resize(size_t(c.padded_vocab));
  row_bf16_.resize(size_t(c.padded_vocab));
}

EvalModel::~EvalModel() = default;

std::vector<TokenScores> EvalModel::score(
    const std::vector<ScoreRequest>& requests,
    const std::function<void(int64_t, int64_t)>& on_progress) {
  for (size_t i = 0; i < requests.size(); ++i) {
    const ScoreRequest& r = requests[i];
    ATTN_REQUIRE(!r.inputs.empty() && int(r.inputs.size()) <= max_len_,
                 "sequence %zu has %zu tokens; a forward takes 1 to %d", i, r.inputs.size(),
                 max_len_);
    ATTN_REQUIRE(r.targets.size() == r.inputs.size(), "sequence %zu: %zu targets for %zu inputs", i,
                 r.targets.size(), r.inputs.size());
  }
  std::vector<TokenScores> out(requests.size());
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return requests[a].inputs.size() > requests[b].inputs.size();
  });
  // A model whose tokens read later ones (reads_later_tokens) would see the right padding: its
  // batches hold sequences of one length only, so every score is that of the sequence alone.
  bool pad_free = false;
  for (int l = 0; l < model_->config().n_layer; ++l)
    pad_free = pad_free || model_->attention(l).reads_later_tokens();
  std::vector<const ScoreRequest*> batch;
  std::vector<TokenScores*> results;
  int64_t done = 0;
  for (size_t at = 0; at < order.size(); at += batch.size()) {
    batch.clear();
    results.clear();
    const size_t len = requests[order[at]].inputs.size();
    for (size_t k = at; k < std::min(order.size(), at + size_t(batch_)); ++k) {
      if (pad_free && requests[order[k]].inputs.size() != len) break;
      batch.push_back(&requests[order[k]]);
      results.push_back(&out[order[k]]);
    }
    score_batch(batch, results);
    done += int64_t(batch.size());
    if (on_progress) on_progress(done, int64_t(requests.size()));
  }
  return out;
}

void EvalModel::score_batch(const std::vector<const ScoreRequest*>& batch,
                            std::vector<TokenScores*>& results) {
  NvtxRange range("eval.batch");
  const int B = int(batch.size());
  int T = 0;
  for (const ScoreRequest* r : batch) T = std::max(T, int(r->inputs.size()));
  const size_t BT = size_t(B) * size_t(T);
  // Padding: token 0 (any valid id) with an ignore target, after the real tokens.
  std::fill(tokens_host_.begin(), tokens_host_.begin() + ptrdiff_t(BT), 0);
  std::fill(targets_host_.begin(), targets_host_.begin() + ptrdiff_t(BT), GPT::kIgnoreIndex);
  for (int b = 0; b < B; ++b) {
    std::copy(batch[b]->inputs.begin(), batch[b]->inputs.end(),
              tokens_host_.begin() + ptrdiff_t(b) * T);
    std::copy(batch[b]->targets.begin(), batch[b]->targets.end(),
              targets_host_.begin() + ptrdiff_t(b) * T);
  }
  const Shape sh{B, T};
  Tensor tokens = io_dev_.as(DType::i32, sh);
  Tensor targets = io_dev_.as(DType::i32, sh, BT * sizeof(int32_t));
  copy_tensor(tokens, Tensor(tokens_host_.data(), DType::i32, Device::cpu, sh));
  copy_tensor(targets, Tensor(targets_host_.data(), DType::i32, Device::cpu, sh));
  model_->forward(*ctx_, store_, tokens, targets, AttentionMode::eval);
  model_->take_loss(*ctx_);  // keeps the totals from growing; synchronises
  copy_tensor(Tensor(losses_host_.data(), DType::f32, Device::cpu, sh), model_->token_losses());

  const GPTConfig& c = model_->config();
  const Tensor logits = model_->logits();
  const size_t row_bytes = size_t(c.padded_vocab) * dtype_size(dtype_);
  for (int b = 0; b < B; ++b) {
    const ScoreRequest& r = *batch[b];
    TokenScores& s = *results[b];
    const size_t n = r.inputs.size();
    s.logprob.assign(n, 0.f);
    if (r.want_argmax) s.argmax.assign(n, -1);
    for (size_t i = 0; i < n; ++i) {
      if (r.targets[i] == GPT::kIgnoreIndex) continue;
      s.logprob[i] = -losses_host_[size_t(b) * T + i];
      if (!r.want_argmax) continue;
      // Only the rows asked for leave the device (a row is Vp values).
      const size_t row = size_t(b) * T + i;
      const Tensor src(static_cast<char*>(logits.data) + row * row_bytes, dtype_, logits.device,
                       Shape{c.padded_vocab});
      logits_argmax(src, c.vocab_size, row_f32_, row_bf16_, row_argmax_);
      s.argmax[i] = row_argmax_[0];
    }
  }
}

ValidationResult EvalModel::validate(DataLoader& loader, int batches, const SyntheticProbe* probe) {
  const int B = loader.options().batch_size, T = loader.options().seq_len;
  ATTN_REQUIRE(B <= batch_ && T <= max_len_,
               "validation batches [%d, %d] exceed the evaluation batch [%d, %d]", B, T, batch_,
               max_len_);
  const Shape sh{B, T};
  return score_validation(*model_, *ctx_, store_, loader, batches, io_dev_.as(DType::i32, sh),
                          io_dev_.as(DType::i32, sh, size_t(B) * T * sizeof(int32_t)), probe);
}

std::unique_ptr<Tokenizer> eval_tokenizer(const ModelSource& source, const std::string& spec,
                                          int model_vocab) {
  const std::string use = spec.empty() ? source.tokenizer : spec;
  ATTN_REQUIRE(!use.empty(),
               "model '%s' has no tokenizer with it; pass one with --tokenizer "
               "(e.g. --tokenizer byte or --tokenizer gpt2:<dir with encoder.json, vocab.bpe>)",
               source.path.c_str());
  std::unique_ptr<Tokenizer> tok = make_tokenizer(use);
  ATTN_REQUIRE(tok->vocab_size() <= model_vocab,
               "tokenizer '%s' has %d ids but the model's vocabulary has %d", use.c_str(),
               tok->vocab_size(), model_vocab);
  return tok;
}

std::string EvalModel::attention_eval_mode() const {
  return model_->config().n_layer > 0 ? model_->attention(0).eval_mode() : "";
}

std::string EvalModel::attention_caveat() const {
  return model_->config().n_layer > 0 ? model_->attention(0).eval_caveat() : "";
}

std::string EvalModel::attention_metrics(std::map<std::string, double>& out) const {
  model_->attention_metrics(out);
  return model_->config().n_layer > 0 ? model_->attention(0).summarize(out) : "";
}

std::vector<std::string> EvalModel::attention_warnings() const {
  std::vector<std::string> out;
  for (int l = 0; l < model_->config().n_layer; ++l)
    if (std::string w = model_->attention(l).health_warning(); !w.empty()) out.push_back(w);
  return out;
}

}  // namespace attnlab
