// EvalModel: a pretrained model from any source (interop/model_source.h) on the CPU or CUDA,
// ready to score token sequences: batched forwards in AttentionMode::eval (so every attention
// variant evaluates the way it says it does), several sequences per forward, right-padded with
// ignore targets. Causal attention makes the padding invisible to the real positions.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/recipe.h"
#include "core/context.h"
#include "core/parameters.h"
#include "data/loader.h"
#include "eval/validation.h"
#include "interop/model_source.h"
#include "model/gpt.h"
#include "tokenizer/tokenizer.h"

namespace attnlab {

struct EvalDeviceOptions {
  std::string device = "auto";     // auto | cpu | cuda
  std::string precision = "auto";  // auto (CUDA: source_precision; CPU: fp32) | bf16 | fp32
  int batch = 0;  // sequences per forward; 0 = 16 on CUDA, 4 on the CPU (of 1,024 tokens or fewer:
                  // fewer sequences for longer contexts, at least 1)
  int max_len = 0;  // longest sequence a forward takes; 0 = model.block_size
};

// One sequence to score: inputs[i] predicts targets[i] (GPT::kIgnoreIndex = not scored).
struct ScoreRequest {
  std::vector<int32_t> inputs;   // 1..max_len tokens
  std::vector<int32_t> targets;  // inputs.size() entries
  bool want_argmax = false;      // also the most likely id at every scored position
};
struct TokenScores {
  std::vector<float> logprob;   // log p(targets[i] | inputs[0..i]) at scored positions, else 0
  std::vector<int32_t> argmax;  // want_argmax: argmax over the vocabulary at scored positions
                                // (-1 elsewhere); else empty
};

class EvalModel {
 public:
  EvalModel(const ModelSource& source, const EvalDeviceOptions& options);
  ~EvalModel();

  // Scores every request (any order in, results in the same order). Requests are batched by
  // length (longest first, as lm-evaluation-harness does) to waste little padding. on_progress
  // (optional) gets (requests done, total) after each forward.
  std::vector<TokenScores> score(const std::vector<ScoreRequest>& requests,
                                 const std::function<void(int64_t, int64_t)>& on_progress = {});

  // The loader's validation windows (eval/validation.h); its batch and seq_len must fit the
  // model's batch() and max_len(). probe: the synthetic retrieval metrics too (or null).
  ValidationResult validate(DataLoader& loader, int batches, const SyntheticProbe* probe = nullptr);

  // The attention variant's telemetry of the last validate() (every layer, every scored token)
  // and its one-line summary (AttentionModule::summarize; "" for dense).
  std::string attention_metrics(std::map<std::string, double>& out) const;
  // The layers' health warnings about that telemetry (AttentionModule::health_warning).
  std::vector<std::string> attention_warnings() const;
  // How the attention variant evaluates (AttentionModule::eval_mode) and its caveat (eval_caveat),
  // "" for dense.
  std::string attention_eval_mode() const;
  std::string attention_caveat() const;

  const GPTConfig& config() const { return model_->config(); }
  const ModelSource& source() const { return source_; }
  Device device() const { return ctx_->device; }
  DType dtype() const { return dtype_; }
  int batch() const { return batch_; }
  int max_len() const { return max_len_; }
  int64_t num_params() const { return model_->num_params_unpadded(store_); }

 private:
  void score_batch(const std::vector<const ScoreRequest*>& batch,
                   std::vector<TokenScores*>& results);

  ModelSource source_;
  std::unique_ptr<ExecContext> ctx_;
  DType dtype_ = DType::f32;
  std::unique_ptr<GPT> model_;
  ParameterStore store_;
  int batch_ = 0, max_len_ = 0;
  Buffer io_dev_;  // tokens and targets on the device
  std::vector<int32_t> tokens_host_, targets_host_;
  std::vector<float> losses_host_, row_f32_;
  std::vector<bf16> row_bf16_;
  std::vector<int32_t> row_argmax_;
};

// The tokenizer for text: `spec` when given, else the one that travels with the model; checked
// against the model's vocabulary. Throws naming both when neither is there.
std::unique_ptr<Tokenizer> eval_tokenizer(const ModelSource& source, const std::string& spec,
                                          int model_vocab);

}  // namespace attnlab
