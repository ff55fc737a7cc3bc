// Validation loss over the windows of a DataLoader: the trainer's periodic evaluation and
// `attnlab eval` on a recipe's validation data (docs/eval.md).
//
// Windows. The loader's windows (seq_len inputs + the next token as the last target, data/loader.h)
// from the start of its first epoch, in order: the first min(batches * B, num_windows) of them,
// split over the ranks (`batches` counts batches of B windows in all, so any number of ranks
// scores the same windows). When that is the whole set, every whole window is scored: the last
// batch may be partial, its unused rows padded with ignore targets (a 980-window set with B = 32 is
// scored on 980 windows, not 960). Only a remainder of fewer than seq_len + 1 tokens at the end
// of a source is never scored (it is not a whole window).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "config/recipe.h"
#include "core/context.h"
#include "core/parameters.h"
#include "data/loader.h"
#include "eval/synthetic_probe.h"
#include "model/gpt.h"

namespace attnlab {

struct ValidationResult {
  double loss = 0.0;        // mean cross-entropy (nats per token)
  double perplexity = 0.0;  // exp(loss)
  int64_t tokens = 0;       // targets scored
  int64_t windows = 0;      // windows scored (by this rank)
  // With a synthetic probe: per-kind loss and accuracy of the same targets
  // (eval/synthetic_probe.h).
  std::optional<SyntheticScores> synthetic;
};

// The first maximum over [0, vocab) of each row of `logits` ([..., Vp], f32 or bf16, any device;
// the last dimension is the row), like torch.argmax: the rows go to the host (`host`, `host_bf16`
// are scratch) and `argmax` gets one id per row.
void logits_argmax(const Tensor& logits, int vocab, std::vector<float>& host,
                   std::vector<bf16>& host_bf16, std::vector<int32_t>& argmax);

// tokens_dev, targets_dev: [B, T] i32 on ctx's device (B, T = the loader's batch and seq_len),
// the model allocated for them. Resets the loader. Reads the model's loss totals (take_loss).
// probe (the loader's synthetic stream, or null): also the retrieval metrics, from the logits and
// per-token losses of every batch (one copy to the host per batch: synthetic vocabularies are
// small).
// telemetry: the attention variants' telemetry counts the scored windows' tokens of every batch
// (GPT::reset_attention_telemetry, then count_attention_telemetry per batch); false leaves it
// as it was (a second pass under another eval mode).
ValidationResult score_validation(GPT& model, const ExecContext& ctx, const ParameterStore& store,
                                  DataLoader& loader, int batches, const Tensor& tokens_dev,
                                  const Tensor& targets_dev, const SyntheticProbe* probe = nullptr,
                                  bool telemetry = true);

// The retrieval probe of a recipe's validation loader: non-null when data.source is synthetic.
std::unique_ptr<SyntheticProbe> validation_probe(const Recipe& r, const DataLoader& loader);

// The generator settings of a recipe's data.synthetic, with `train_tokens` training tokens (the
// one place that maps the recipe keys onto SyntheticConfig, so training and `attnlab eval` agree).
SyntheticConfig synthetic_config(const Recipe& r, int64_t train_tokens);

// The validation data of a recipe (no training data is read or needed): the synthetic
// validation stream, or the data.val shards. Windows of train.seq_len, batches of
// train.micro_batch, shuffle off. Throws when the recipe has no validation data.
// vocab_size: the ids the evaluated model takes (0: the recipe's model.vocab_size), checked per
// shard so that an out-of-range id names its file.
std::unique_ptr<DataLoader> validation_loader(const Recipe& r, int rank = 0, int world_size = 1,
                                              int64_t vocab_size = 0);

}  // namespace attnlab
