#include "train/generate.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "config/recipe.h"
#include "core/context.h"
#include "core/cuda_check.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "core/out_of_memory.h"
#include "eval/harness.h"
#include "interop/model_source.h"
#include "model/gpt.h"
#include "model/kv_cache.h"
#include "tokenizer/tokenizer.h"
#include "train/checkpoint.h"
#include "train/from_recipe.h"
#include "train/retrofit.h"

namespace attnlab {
namespace {

// The ids that end generation (GenerateOptions::stop): the end-of-text token; a BOS (it starts a
// new document: the end, for a model trained on BOS-separated shards); the source's
// generation_config.json ids that the tokenizer has (sampling is restricted to its ids: the
// others cannot come); each of `stop_tokens`, an id (digits) or the text of one token. Each once.
std::vector<int32_t> stop_ids_of(const GenerateOptions& o, const ModelSource& source,
                                 const Tokenizer& tok) {
  if (!source.stop_ids_problem.empty()) ATTN_FAIL("%s", source.stop_ids_problem.c_str());
  std::vector<int32_t> stops;
  const auto add = [&](int32_t id) {
    if (std::find(stops.begin(), stops.end(), id) == stops.end()) stops.push_back(id);
  };
  add(tok.eot_id());
  if (tok.bos_id() >= 0) add(tok.bos_id());
  for (int32_t id : source.stop_ids)
    if (id < tok.vocab_size()) add(id);
  for (const std::string& s : o.stop_tokens) {
    std::vector<int32_t> ids;
    if (!s.empty() && s.size() <= 9 && s.find_first_not_of("0123456789") == std::string::npos) {
      ids.push_back(std::stoi(s));
      ATTN_REQUIRE(ids[0] < tok.vocab_size(),
                   "stop token %s is not an id of tokenizer '%s' (%d ids)", s.c_str(),
                   tok.name().c_str(), tok.vocab_size());
    } else {
      tok.encode_with_special(s, ids);
    }
    std::string pieces;
    for (int32_t id : ids) pieces += strformat("%s%d", pieces.empty() ? "" : " ", id);
    ATTN_REQUIRE(ids.size() == 1,
                 "stop token '%s' is %zu tokens (%s) of tokenizer '%s'; give one token: an id, "
                 "or the text of one token such as a special token's (<|eot_id|>, </s>)",
                 s.c_str(), ids.size(), pieces.c_str(), tok.name().c_str());
    add(ids[0]);
  }
  return stops;
}

}  // namespace

GenerateResult generate(const GenerateOptions& o,
                        const std::function<void(const std::string&)>& on_text) {
  ATTN_REQUIRE(o.max_new_tokens >= 0, "max new tokens must be >= 0, got %d", o.max_new_tokens);
  // Any model source: an attnlab run or checkpoint, a Hugging Face GPT-2 directory, an llm.c file.
  const ModelSource source = inspect_model_source(o.checkpoint, o.adapter);
  const Recipe r = recipe_of_model_source(source);
  GPTConfig c = gpt_config_of(r);
  apply_eval_overrides(o.overrides, source, c, "generate");
  std::string tok_spec = o.tokenizer.empty() ? source.tokenizer : o.tokenizer;
  ATTN_REQUIRE(!tok_spec.empty(),
               "model '%s' carries no tokenizer; pass a tokenizer spec "
               "(e.g. --tokenizer byte or --tokenizer gpt2:<dir>)",
               o.checkpoint.c_str());
  std::unique_ptr<Tokenizer> tok = make_tokenizer(tok_spec);
  ATTN_REQUIRE(tok->vocab_size() <= r.model.vocab_size,
               "tokenizer '%s' has %d ids but the model's "
               "vocabulary has %d",
               tok_spec.c_str(), tok->vocab_size(), r.model.vocab_size);
  GenerateResult res;
  // Before the weights load: a bad value is refused at once.
  const ResolvedSampling sampling = resolve_sampling(source.generation_config, o.sampling);
  res.notes.insert(res.notes.end(), sampling.notes.begin(), sampling.notes.end());
  if (tok->vocab_size() < r.model.vocab_size)
    res.notes.push_back(strformat(
        "tokenizer '%s' has %d ids and the model %d: sampling is restricted to the first %d (the "
        "model's other ids have no text), so greedy output can differ from `attnlab score`'s "
        "argmax",
        tok_spec.c_str(), tok->vocab_size(), r.model.vocab_size, tok->vocab_size()));

  std::unique_ptr<ExecContext> ctx;
  DType dtype = DType::f32;
  bool cuda = o.device == "cuda" || (o.device == "auto" && cuda_available());
  ATTN_REQUIRE(o.device == "auto" || o.device == "cpu" || o.device == "cuda",
               "device must be auto, cpu or cuda, got '%s'", o.device.c_str());
  if (cuda) {
    ctx = ExecContext::make_cuda(0);
    // As eval and score run it (the run's own precision; fp32 for HF and llm.c models), so that
    // greedy output and score's argmax agree.
    dtype = source_precision(source) == Precision::bf16 ? DType::bf16 : DType::f32;
  } else {
    ctx = ExecContext::make_cpu();
  }

  GPT model(c);
  ParameterStore store;
  model.declare_params(store);
  {
    const OutOfMemoryNote weights_note(
        strformat("generate: the model's weights in %s (n_layer %d, n_embd %d); hint: --device "
                  "cpu, or a smaller model",
                  dtype_name(dtype), c.n_layer, c.n_embd));
    store.finalize(ctx->device, dtype, {});
    load_model_source(source, store, whole_model_load());  // the model as trained, every tensor
  }
  const int T_max = c.block_size;

  const std::vector<int32_t> stops = stop_ids_of(o, source, *tok);
  if (o.stop && stops.size() > (tok->bos_id() >= 0 ? 2u : 1u)) {
    std::string list;
    for (int32_t id : stops)
      list +=
          strformat("%s%s (%d)", list.empty() ? "" : ", ", quote_piece(tok->piece(id)).c_str(), id);
    res.notes.push_back("stops at " + list);
  }
  std::vector<int32_t> ids;
  // A prompt starts a document: after the BOS of a tokenizer that has one (LLaMA), as transformers
  // encodes it; GPT-2's prompts go as they are, an empty one as <|endoftext|>.
  if (tok->bos_id() >= 0) ids.push_back(tok->bos_id());
  if (o.special) {
    tok->encode_with_special(o.prompt, ids);
    // A chat prompt written out starts with its own BOS: not two (transformers' tokenizer(text)
    // would add one more).
    if (ids.size() >= 2 && ids[0] == tok->bos_id() && ids[1] == tok->bos_id())
      ids.erase(ids.begin());
  } else {
    tok->encode(o.prompt, ids);
  }
  if (ids.empty()) ids.push_back(tok->eot_id());
  ATTN_REQUIRE(int(ids.size()) <= T_max,
               "the prompt is %zu tokens%s, longer than the model's context "
               "(model.block_size = %d)",
               ids.size(), tok->bos_id() >= 0 ? " with the BOS" : "", T_max);

  res.prompt_tokens = int(ids.size());
  res.context_length = T_max;
  // The cache holds what this run can attend: the prompt and the new tokens, or the model's whole
  // context where they pass it (then it slides). A 128K-context model prompted with a line costs a
  // line's K/V, not 128K positions'. The attention is the same (nothing is dropped before a slide;
  // a hard-routed Focus model whose local window spans the cache decodes with the dense kernels,
  // as its eval forward does on a sequence that short: the same pairs, another float order).
  // The last new token is sampled, not run: the run takes P + max_new_tokens - 1 positions.
  const int64_t positions = std::max<int64_t>(1, int64_t(ids.size()) + o.max_new_tokens - 1);
  const int cache_len = int(std::min<int64_t>(T_max, positions));
  const bool slides = positions > T_max;
  const int reserve = slides ? std::max(int(ids.size()), std::max(1, T_max / 2)) : int(ids.size());
  const OutOfMemoryNote oom_note(strformat(
      "generate: a KV cache of %d positions (the prompt's %zu tokens + --max-new-tokens %d - 1, "
      "at most model.block_size %d) and the activations of a %d-token prefill; hint: a shorter "
      "prompt or fewer --max-new-tokens, or --device cpu",
      cache_len, ids.size(), o.max_new_tokens, T_max, reserve));
  KVCache cache = model.make_kv_cache(*ctx, 1, cache_len, dtype);
  res.cache_positions = cache_len;
  res.cache_bytes = cache.cache_bytes();
  // The decoding activations of the longest prefill, the prompt's or a context slide's, now: a
  // model too large for them stops here, before any text.
  if (o.max_new_tokens > 0) model.reserve_decode(*ctx, cache, reserve);
  if (c.n_layer > 0) {  // how the variant generates (Focus: "focus hard routing, top_k 2")
    std::string mode = cache.layer(0).decode_mode();
    if (mode.empty()) mode = model.attention(0).eval_mode();
    if (!mode.empty()) res.notes.push_back("attention: " + mode);
  }
  std::mt19937_64 rng(o.seed);
  Buffer tok_dev(ctx->device, size_t(T_max) * sizeof(int32_t));
  // Runs n ids from position 0 (a fresh cache): the last n, or where the tokenizer has a BOS and
  // the ids do not fit, the BOS and the last n - 1 (a LLaMA model's sequences start with it).
  std::vector<int32_t> run;
  auto prefill_last = [&](size_t n) {
    run.clear();
    if (tok->bos_id() >= 0 && n < ids.size()) run.push_back(tok->bos_id());
    run.insert(run.end(), ids.end() - int64_t(n - run.size()), ids.end());
    Tensor tokens = tok_dev.as(DType::i32, Shape{1, int64_t(n)});
    copy_tensor(tokens, Tensor(run.data(), DType::i32, Device::cpu, tokens.shape));
    return model.prefill(*ctx, store, tokens, cache);
  };
  std::vector<float> row(size_t(c.padded_vocab));
  std::vector<bf16> row_bf(size_t(c.padded_vocab));
  auto t0 = std::chrono::steady_clock::now();
  Tensor logits;
  if (o.max_new_tokens > 0) logits = prefill_last(ids.size());
  for (int n = 0; n < o.max_new_tokens; ++n) {
    NvtxRange range("generate.token");
    if (dtype == DType::f32) {
      copy_tensor(Tensor(row.data(), DType::f32, Device::cpu, logits.shape), logits);
    } else {
      copy_tensor(Tensor(row_bf.data(), DType::bf16, Device::cpu, logits.shape), logits);
      for (size_t i = 0; i < row.size(); ++i) row[i] = __bfloat162float(row_bf[i]);
    }
    const int32_t next = sample_token(row.data(), tok->vocab_size(), sampling.options, rng);
    if (o.stop && std::find(stops.begin(), stops.end(), next) != stops.end()) {
      res.stop_token = next;
      res.stop_piece = quote_piece(tok->piece(next));
      break;
    }
    ++res.new_tokens;
    res.new_ids.push_back(next);
    ids.push_back(next);
    std::string piece = tok->piece(next);
    res.text += piece;
    if (on_text) on_text(piece);
    if (n + 1 == o.max_new_tokens) break;
    if (cache.free_positions() == 0) {
      // The context is full: slide it by re-running the last half (see docs/generate.md).
      logits = prefill_last(size_t(std::max(1, T_max / 2)));
      ++res.context_slides;
    } else {
      Tensor tokens = tok_dev.as(DType::i32, Shape{1, 1});
      copy_tensor(tokens, Tensor(&ids.back(), DType::i32, Device::cpu, tokens.shape));
      logits = model.decode_step(*ctx, store, tokens, cache);
    }
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  res.tokens_per_second = s > 0 ? (res.new_tokens + (res.stop_token >= 0 ? 1 : 0)) / s : 0.0;
  return res;
}

}  // namespace attnlab
