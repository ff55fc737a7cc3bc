// The sampling a model's generation_config.json asks for, as transformers' generate reads it,
// and the command line's choices over it (attnlab generate; docs/generate.md):
//   do_sample: true    sampling at the file's temperature, top_k and top_p, each absent one at
//                      transformers' GenerationConfig default (1.0, 50, 1.0): LLaMA 3.x's files
//                      give temperature 0.6 and top_p 0.9, so top_k 50 too, as in transformers;
//   do_sample: false   greedy (temperature 0), as transformers decodes;
//   no do_sample       the file states no sampling (GPT-2's, made from its config.json): attnlab's
//                      defaults (temperature 1, no top-k or top-p cut); its temperature, top_k or
//                      top_p, if any, are not applied (a note says so: transformers decodes
//                      greedily there and warns);
//   no file            attnlab's defaults.
// Then each of --temperature, --top-k, --top-p given on the command line replaces its value.
// Values are checked (temperature >= 0, top_k an integer >= 0, top_p in (0, 1], do_sample a
// boolean) with errors naming the file and key. Keys that would change transformers' output and
// that attnlab does not apply (repetition_penalty, num_beams, min_p, ...) are listed in a note.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "model/sampler.h"

namespace attnlab {

// What the command line set; nullopt: not given.
struct SamplingChoice {
  std::optional<float> temperature;
  std::optional<int> top_k;
  std::optional<float> top_p;
};

struct ResolvedSampling {
  SamplingOptions options;
  std::vector<std::string> notes;  // where the values came from, keys not applied
};

// `file`: the model's generation_config.json, "" for none. Throws on a malformed file or value.
ResolvedSampling resolve_sampling(const std::string& file, const SamplingChoice& choice);

}  // namespace attnlab
