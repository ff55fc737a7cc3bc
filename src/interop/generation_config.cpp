#include "interop/generation_config.h"

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "interop/hf_files.h"
#include "io/atomic_file.h"

namespace attnlab {
namespace {

// transformers' GenerationConfig defaults of the keys applied.
constexpr float kHfTemperature = 1.0f;
constexpr int kHfTopK = 50;
constexpr float kHfTopP = 1.0f;

// Keys that do not change what is sampled: the stop ids (read by ModelSource), the other token
// ids, bookkeeping. Other keys count only where they differ from transformers' default
// (kHfDefault).
const std::set<std::string> kNotSampling = {
    "bos_token_id",       "eos_token_id",         "pad_token_id",      "decoder_start_token_id",
    "_from_model_config", "transformers_version", "use_cache",         "return_dict_in_generate",
    "output_scores",      "output_logits",        "output_attentions", "output_hidden_states"};

// transformers' GenerationConfig defaults of keys that change its output where set otherwise.
const std::map<std::string, nlohmann::json> kHfDefault = {{"max_length", 20},
                                                          {"min_length", 0},
                                                          {"num_beams", 1},
                                                          {"num_beam_groups", 1},
                                                          {"num_return_sequences", 1},
                                                          {"repetition_penalty", 1.0},
                                                          {"length_penalty", 1.0},
                                                          {"no_repeat_ngram_size", 0},
                                                          {"typical_p", 1.0},
                                                          {"epsilon_cutoff", 0.0},
                                                          {"eta_cutoff", 0.0},
                                                          {"diversity_penalty", 0.0},
                                                          {"encoder_repetition_penalty", 1.0},
                                                          {"early_stopping", false}};

float number_in(const HfConfig& c, const char* key, float lo, bool lo_open, float hi,
                const char* expected) {
  const double v = c.get_double(key, 0.0);
  const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi;
  ATTN_REQUIRE(ok, "'%s': %s must be %s, got %s", c.path().c_str(), key, expected,
               c.json()[key].dump().c_str());
  return float(v);
}

}  // namespace

ResolvedSampling resolve_sampling(const std::string& file, const SamplingChoice& choice) {
  ResolvedSampling r;
  SamplingOptions& o = r.options;  // attnlab's defaults: temperature 1, no cuts
  std::string why;                 // where do_sample set the defaults: the note's reason
  if (!file.empty()) {
    const HfConfig c(io::read_file(file), file);
    const bool has_temperature = c.has("temperature"), has_top_k = c.has("top_k"),
               has_top_p = c.has("top_p");
    // "top_k": null is transformers' None: no top-k cut (absent is its default, 50).
    const bool top_k_null = c.json().contains("top_k") && c.json()["top_k"].is_null();
    const float temperature = has_temperature
                                  ? number_in(c, "temperature", 0.f, false, 1e30f, "a number >= 0")
                                  : kHfTemperature;
    const float top_p =
        has_top_p ? number_in(c, "top_p", 0.f, true, 1.f, "a number in (0, 1]") : kHfTopP;
    int top_k = top_k_null ? 0 : kHfTopK;
    if (has_top_k) {
      top_k = c.get_int("top_k", kHfTopK);
      ATTN_REQUIRE(top_k >= 0, "'%s': top_k must be an integer >= 0, got %d", file.c_str(), top_k);
    }
    const std::set<std::string> applied = {"do_sample", "temperature", "top_k", "top_p"};
    if (c.has("do_sample")) {
      const bool sample = c.get_bool("do_sample", false);
      if (sample) {
        o = {temperature, top_k, top_p};
      } else {
        o.temperature = 0.f;
      }
      std::string given;
      for (const auto& [flag, set] : {std::pair{"--temperature", choice.temperature.has_value()},
                                      std::pair{"--top-k", choice.top_k.has_value()},
                                      std::pair{"--top-p", choice.top_p.has_value()}})
        if (set) given += strformat("%s%s", given.empty() ? "" : ", ", flag);
      const std::string how = !sample ? ", as transformers decodes"
                              : has_top_k || top_k_null
                                  ? ""
                                  : strformat(", top_k at transformers' default %d", kHfTopK);
      why = strformat("do_sample %s in '%s'%s%s", sample ? "true" : "false", file.c_str(),
                      how.c_str(), given.empty() ? "" : ("; given: " + given).c_str());
    } else if (has_temperature || has_top_k || has_top_p) {
      r.notes.push_back(strformat(
          "'%s' has no do_sample: its temperature, top_k and top_p are not applied (transformers "
          "decodes greedily there); sampling at temperature 1 unless the command line says "
          "otherwise",
          file.c_str()));
    }
    std::string ignored;
    for (const auto& [key, value] : c.json().items()) {
      if (applied.count(key) || kNotSampling.count(key) || value.is_null()) continue;
      const auto def = kHfDefault.find(key);
      if (def != kHfDefault.end() && def->second == value) continue;
      ignored +=
          strformat("%s%s = %s", ignored.empty() ? "" : ", ", key.c_str(), value.dump().c_str());
    }
    if (!ignored.empty())
      r.notes.push_back(strformat("'%s': keys attnlab's generate does not apply: %s", file.c_str(),
                                  ignored.c_str()));
  }
  if (choice.temperature) o.temperature = *choice.temperature;
  if (choice.top_k) o.top_k = *choice.top_k;
  if (choice.top_p) o.top_p = *choice.top_p;
  // (The file's values were checked above: these are the command line's.)
  ATTN_REQUIRE(o.temperature >= 0.f && std::isfinite(o.temperature),
               "--temperature must be a finite number >= 0, got %g", o.temperature);
  ATTN_REQUIRE(o.top_k >= 0, "--top-k must be >= 0, got %d", o.top_k);
  ATTN_REQUIRE(o.top_p > 0.f && o.top_p <= 1.f, "--top-p must be in (0, 1], got %g", o.top_p);
  if (o.temperature == 0.f && (choice.top_k || choice.top_p))
    r.notes.push_back("--top-k and --top-p change nothing under greedy decoding (temperature 0)");
  if (!why.empty()) {  // the values in effect, and why
    const std::string what = o.temperature == 0.f
                                 ? "greedy decoding"
                                 : strformat("sampling: temperature %g, top-k %d, top-p %g",
                                             o.temperature, o.top_k, o.top_p);
    r.notes.insert(r.notes.begin(), what + " (" + why + ")");
  }
  return r;
}

}  // namespace attnlab
