#include "eval/validation.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "data/synthetic.h"

namespace attnlab {

void logits_argmax(const Tensor& logits, int vocab, std::vector<float>& host,
                   std::vector<bf16>& host_bf16, std::vector<int32_t>& argmax) {
  const int64_t Vp = logits.dim(logits.ndim() - 1), rows = logits.numel() / Vp;
  host.resize(size_t(rows * Vp));
  if (logits.dtype == DType::f32) {
    copy_tensor(Tensor(host.data(), DType::f32, Device::cpu, logits.shape), logits);
  } else {
    host_bf16.resize(host.size());
    copy_tensor(Tensor(host_bf16.data(), DType::bf16, Device::cpu, logits.shape), logits);
    for (size_t i = 0; i < host.size(); ++i) host[i] = __bfloat162float(host_bf16[i]);
  }
  argmax.resize(size_t(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = host.data() + r * Vp;
    argmax[size_t(r)] = int32_t(std::max_element(row, row + vocab) - row);
  }
}

ValidationResult score_validation(GPT& model, const ExecContext& ctx, const ParameterStore& store,
                                  DataLoader& loader, int batches, const Tensor& tokens_dev,
                                  const Tensor& targets_dev, const SyntheticProbe* probe,
                                  bool telemetry) {
  const DataLoaderOptions& o = loader.options();
  const int B = o.batch_size, T = o.seq_len, W = o.world_size;
  ATTN_REQUIRE(tokens_dev.numel() == int64_t(B) * T && targets_dev.numel() == int64_t(B) * T,
               "score_validation: device batch %s does not hold [%d, %d]", tokens_dev.str().c_str(),
               B, T);
  ATTN_REQUIRE(batches > 0, "eval.batches must be >= 1, got %d", batches);
  ATTN_REQUIRE(loader.num_windows() > 0,
               "the validation data holds no whole window of %d + 1 tokens", T);
  // Stream entries (windows over all ranks) to score: `batches` batches of B in all, the same
  // windows on any number of ranks; a pass over the ranks consumes B * W of them.
  const int64_t per_batch = int64_t(B) * W;
  const int64_t entries = std::min<int64_t>(int64_t(batches) * B, loader.num_windows());
  const int64_t n_batches = (entries + per_batch - 1) / per_batch;
  std::vector<int32_t> in(size_t(B) * T), tg(size_t(B) * T);
  const Shape sh{B, T};
  ValidationResult out;
  std::vector<float> losses(size_t(B) * T), logits_host;
  std::vector<bf16> logits_bf16;
  std::vector<int32_t> argmax;
  if (probe) out.synthetic.emplace();
  std::vector<uint8_t> scored(static_cast<size_t>(B));
  loader.reset();
  model.take_loss(ctx);  // start from zero totals
  if (telemetry) model.reset_attention_telemetry();
  for (int64_t i = 0; i < n_batches; ++i) {
    loader.next(in.data(), tg.data());
    for (int b = 0; b < B; ++b) {
      // Row b of this rank is stream entry i * B * W + b * W + rank (data/loader.h); rows past
      // the end of the set wrapped into the next epoch: they are not scored.
      scored[size_t(b)] = i * per_batch + int64_t(b) * W + o.rank < entries;
      if (scored[size_t(b)]) {
        ++out.windows;
      } else {
        std::fill(tg.begin() + ptrdiff_t(b) * T, tg.begin() + ptrdiff_t(b + 1) * T,
                  GPT::kIgnoreIndex);
      }
    }
    copy_tensor(tokens_dev, Tensor(in.data(), DType::i32, Device::cpu, sh));
    copy_tensor(targets_dev, Tensor(tg.data(), DType::i32, Device::cpu, sh));
    model.forward(ctx, store, tokens_dev, targets_dev, AttentionMode::eval);
    if (telemetry) model.count_attention_telemetry(scored);
    if (!probe) continue;
    copy_tensor(Tensor(losses.data(), DType::f32, Device::cpu, sh), model.token_losses());
    logits_argmax(model.logits(), model.config().vocab_size, logits_host, logits_bf16, argmax);
    for (int b = 0; b < B; ++b) {
      const int64_t entry = i * per_batch + int64_t(b) * W + o.rank;
      if (entry >= entries) continue;
      // Shuffle off, one source: window j starts at token j * T.
      const int64_t start = loader.window_at(0, uint64_t(entry)) * T;
      probe->score_window(start, T, losses.data() + size_t(b) * T, argmax.data() + size_t(b) * T,
                          &*out.synthetic);
    }
  }
  const LossTotals totals = model.take_loss(ctx);  // one synchronisation
  out.tokens = totals.valid;
  out.loss = totals.mean();
  out.perplexity = std::exp(out.loss);
  return out;
}

std::unique_ptr<SyntheticProbe> validation_probe(const Recipe& r, const DataLoader& loader) {
  if (r.data.source != DataSource::synthetic) return nullptr;
  return SyntheticProbe::for_loader(loader, r.data.synthetic.vocab_size);
}

SyntheticConfig synthetic_config(const Recipe& r, int64_t train_tokens) {
  const SyntheticDataConfig& d = r.data.synthetic;
  SyntheticConfig sc;
  sc.vocab_size = d.vocab_size;
  sc.train_tokens = train_tokens;
  sc.val_tokens = d.val_tokens;
  sc.seed = uint64_t(d.seed);
  sc.mix = SyntheticMix{d.mix.markov, d.mix.bind, d.mix.query, d.mix.copy};
  sc.keys = d.keys;
  sc.values = d.values;
  sc.doc_min_tokens = d.doc_min_tokens;
  sc.doc_max_tokens = d.doc_max_tokens;
  return sc;
}

std::unique_ptr<DataLoader> validation_loader(const Recipe& r, int rank, int world_size,
                                              int64_t vocab_size) {
  DataLoaderOptions opts;
  opts.batch_size = r.train.micro_batch;
  opts.seq_len = r.train.seq_len;
  opts.shuffle = false;
  opts.rank = rank;
  opts.world_size = world_size;
  opts.vocab_size = vocab_size > 0 ? vocab_size : r.model.vocab_size;
  if (r.data.source == DataSource::synthetic) {
    ATTN_REQUIRE(r.data.synthetic.val_tokens > r.train.seq_len,
                 "data.synthetic.val_tokens (%lld) must exceed train.seq_len (%d) to evaluate",
                 (long long)r.data.synthetic.val_tokens, r.train.seq_len);
    SyntheticData d = generate_synthetic(synthetic_config(r, r.train.seq_len + 1));  // no train
    std::vector<std::shared_ptr<const TokenSource>> src{
        std::make_shared<MemoryTokens>(std::move(d.val), "synthetic/val")};
    return std::make_unique<DataLoader>(std::move(src), opts);
  }
  ATTN_REQUIRE(!r.data.val.empty(),
               "no validation data: data.source is 'shards' but data.val is empty "
               "(set data.val to a glob of shards, or evaluate with --shards GLOB)");
  return std::make_unique<DataLoader>(DataLoader::from_files({r.data.val}, opts));
}

}  // namespace attnlab
