// Text generation from a checkpoint: the model and tokenizer the checkpoint describes, sampled
// token by token and streamed, on the CPU or CUDA. The prompt is prefilled into a KV cache, then
// each new token is one decode step (GPT::decode_step). When the context reaches model.block_size
// it slides: the last block_size / 2 tokens are prefilled again (positions restart at 0).
// Bad input: a tokenizer with more ids than the model's vocabulary, a prompt longer than
// block_size, a checkpoint without tokenizer.json (and no --tokenizer), or a stop token that is
// not one token is an error. An empty prompt starts a new document (<|endoftext|>); any bytes,
// valid UTF-8 or not, are a prompt.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "interop/generation_config.h"

namespace attnlab {

struct GenerateOptions {
  std::string checkpoint;  // checkpoint or run directory
  std::string adapter;     // optional: a retrofit's adapter.safetensors on `checkpoint`
  std::string prompt;
  std::string tokenizer;  // "" = the checkpoint's tokenizer.json
  int max_new_tokens = 128;
  // Sampling: the values given here replace the defaults, which are the model's
  // generation_config.json's where it has do_sample (interop/generation_config.h), else
  // temperature 1 and no top-k or top-p cut.
  SamplingChoice sampling;
  uint64_t seed = 1337;
  std::string device = "auto";  // auto | cpu | cuda
  // Stop at a sampled stop token: the tokenizer's end-of-text, its BOS (a new document), the ids
  // of the model's generation_config.json (ModelSource::stop_ids: LLaMA 3 Instruct's <|eot_id|>)
  // and `stop_tokens`.
  bool stop = true;
  // More stop tokens: an id (a string of digits), or the text of one token (a special token's:
  // "<|eot_id|>"; text of digits only is read as an id).
  std::vector<std::string> stop_tokens;
  // The prompt's special-token texts ("<|start_header_id|>") become their ids, as transformers
  // encodes a text; a prompt that then starts with the BOS gets no second one.
  bool special = false;
  std::vector<std::string> overrides;  // --set: attention.focus.top_k / eval_routing only
};

struct GenerateResult {
  std::vector<std::string> notes;  // what the caller should show the user
  std::string text;                // the generated continuation (without the prompt)
  int prompt_tokens = 0;
  int new_tokens = 0;              // tokens of `text` (the stop token that ended it excluded)
  std::vector<int32_t> new_ids;    // their ids
  int32_t stop_token = -1;         // the stop token sampled, which ended generation; -1: none
  std::string stop_piece;          // its text quoted for messages ("\"<|eot_id|>\"", quote_piece)
  double tokens_per_second = 0.0;  // sampled tokens (new_tokens, plus a stop token) over the
                                   // time of prefill + decode steps
  int context_slides = 0;          // times the full context was cut to its last half
  int context_length = 0;          // the model's context (model.block_size)
  int cache_positions = 0;         // positions the KV cache holds: prompt + new tokens - 1 (the
                                   // last is sampled, not run), at most context_length
  size_t cache_bytes = 0;          // the cache's memory, every layer's (KVCache::cache_bytes)
};

// Calls on_text with each new piece of text as it is produced.
GenerateResult generate(const GenerateOptions& o,
                        const std::function<void(const std::string&)>& on_text);

}  // namespace attnlab
