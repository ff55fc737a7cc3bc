// Text generation from a checkpoint: the model and tokenizer the checkpoint describes, sampled
// token by token and streamed. Dense attention recomputes the context each token on the CPU
// reference path; the context slides when it reaches model.block_size.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "model/sampler.h"

namespace attnlab {

struct GenerateOptions {
  std::string checkpoint;     // checkpoint or run directory
  std::string prompt;
  std::string tokenizer;      // "" = the checkpoint's tokenizer.json
  int max_new_tokens = 128;
  SamplingOptions sampling;
  uint64_t seed = 1337;
  std::string device = "auto";  // auto | cpu | cuda
  bool stop_at_eot = true;
};

struct GenerateResult {
  std::string text;            // the generated continuation (without the prompt)
  int prompt_tokens = 0;
  int new_tokens = 0;
  double tokens_per_second = 0.0;
};

// Calls on_text with each new piece of text as it is produced.
GenerateResult generate(const GenerateOptions& o, const std::function<void(const std::string&)>& on_text);

}  // namespace attnlab
