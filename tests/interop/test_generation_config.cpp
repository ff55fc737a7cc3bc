// generate's sampling defaults from a model's generation_config.json (interop/generation_config.h):
// transformers' rules for do_sample and its defaults, the command line over them, notes, and the
// refusal of malformed values naming the file and the key. End to end (the samples themselves):
// tests/model/test_generate_stop.cpp.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "interop/generation_config.h"
#include "test_util.h"

using namespace attnlab;

namespace {

struct Resolved {
  SamplingOptions o;
  std::string notes;
};

Resolved resolve(const test::TempDir& dir, const std::string& json,
                 const SamplingChoice& choice = {}) {
  const std::string file = dir.file("generation_config.json");
  std::ofstream(file) << json;
  const ResolvedSampling r = resolve_sampling(file, choice);
  Resolved out{r.options, ""};
  for (const auto& n : r.notes) out.notes += n + "\n";
  return out;
}

void expect_options(const SamplingOptions& o, float temperature, int top_k, float top_p) {
  EXPECT_EQ(o.temperature, temperature);
  EXPECT_EQ(o.top_k, top_k);
  EXPECT_EQ(o.top_p, top_p);
}

}  // namespace

TEST(GenerationConfig, NoFileIsAttnlabsDefaults) {
  const ResolvedSampling r = resolve_sampling("", {});
  expect_options(r.options, 1.f, 0, 1.f);
  EXPECT_TRUE(r.notes.empty());
  SamplingChoice c;
  c.temperature = 0.f;
  c.top_p = 0.5f;
  expect_options(resolve_sampling("", c).options, 0.f, 0, 0.5f);
}

// LLaMA 3.x's file: do_sample true, temperature 0.6, top_p 0.9, no top_k (transformers' 50).
TEST(GenerationConfig, DoSampleTakesTheFileOverTransformersDefaults) {
  test::TempDir dir("gencfg");
  const Resolved r = resolve(dir, R"({"bos_token_id": 128000, "do_sample": true,
      "eos_token_id": [128001, 128008, 128009], "temperature": 0.6, "top_p": 0.9,
      "transformers_version": "4.45.0.dev0"})");
  expect_options(r.o, 0.6f, 50, 0.9f);
  EXPECT_NE(
      r.notes.find("sampling: temperature 0.6, top-k 50, top-p 0.9 (do_sample true in '" +
                   dir.file("generation_config.json") + "', top_k at transformers' default 50)\n"),
      std::string::npos)
      << r.notes;
  EXPECT_EQ(r.notes.find("does not apply"), std::string::npos) << r.notes;  // ids, version
  // Absent values at transformers' defaults; top_k 0 disables the cut, as in transformers.
  expect_options(resolve(dir, R"({"do_sample": true})").o, 1.f, 50, 1.f);
  expect_options(resolve(dir, R"({"do_sample": true, "top_k": 0, "temperature": 0})").o, 0.f, 0,
                 1.f);
  // top_k null is transformers' None: no cut, and no note of its default.
  const Resolved none = resolve(dir, R"({"do_sample": true, "top_k": null})");
  expect_options(none.o, 1.f, 0, 1.f);
  EXPECT_EQ(none.notes.find("transformers' default"), std::string::npos) << none.notes;
}

TEST(GenerationConfig, TheCommandLineReplacesEachValue) {
  test::TempDir dir("gencfg");
  const std::string llama = R"({"do_sample": true, "temperature": 0.6, "top_p": 0.9})";
  SamplingChoice c;
  c.top_p = 1.f;
  expect_options(resolve(dir, llama, c).o, 0.6f, 50, 1.f);
  c.temperature = 0.f;
  c.top_k = 0;
  expect_options(resolve(dir, llama, c).o, 0.f, 0, 1.f);
  c = {};
  c.temperature = 0.8f;  // -t on a greedy model's file samples, and the note says so
  const Resolved r = resolve(dir, R"({"do_sample": false})", c);
  expect_options(r.o, 0.8f, 0, 1.f);
  EXPECT_NE(r.notes.find("sampling: temperature 0.8, top-k 0, top-p 1 (do_sample false in '"),
            std::string::npos)
      << r.notes;
  EXPECT_NE(r.notes.find("', as transformers decodes; given: --temperature)\n"), std::string::npos)
      << r.notes;
}

TEST(GenerationConfig, DoSampleFalseIsGreedyAndAbsentAppliesNothing) {
  test::TempDir dir("gencfg");
  Resolved r = resolve(dir, R"({"do_sample": false, "temperature": 0.7})");
  expect_options(r.o, 0.f, 0, 1.f);
  EXPECT_NE(r.notes.find("greedy decoding"), std::string::npos) << r.notes;
  // GPT-2's file (made from its config.json): no sampling stated, no note.
  r = resolve(dir, R"({"_from_model_config": true, "bos_token_id": 50256,
      "eos_token_id": 50256, "transformers_version": "4.26.0.dev0"})");
  expect_options(r.o, 1.f, 0, 1.f);
  EXPECT_EQ(r.notes, "");
  // Sampling values without do_sample: not applied, and said.
  r = resolve(dir, R"({"temperature": 0.6, "top_p": 0.9})");
  expect_options(r.o, 1.f, 0, 1.f);
  EXPECT_NE(r.notes.find("has no do_sample: its temperature, top_k and top_p are not applied"),
            std::string::npos)
      << r.notes;
}

TEST(GenerationConfig, KeysNotAppliedAreListed) {
  test::TempDir dir("gencfg");
  // Token ids and transformers' own defaults (num_beams 1, typical_p 1) change nothing: unlisted.
  const Resolved r = resolve(dir, R"({"do_sample": true, "repetition_penalty": 1.1,
      "num_beams": 1, "typical_p": 1.0, "max_length": 4096, "pad_token_id": 0, "eos_token_id": 2,
      "min_p": null, "num_return_sequences": 3})");
  EXPECT_NE(r.notes.find("keys attnlab's generate does not apply: max_length = 4096, "
                         "num_return_sequences = 3, repetition_penalty = 1.1\n"),
            std::string::npos)
      << r.notes;
  // Greedy decoding with --top-k: said to change nothing.
  SamplingChoice c;
  c.top_k = 5;
  EXPECT_NE(resolve(dir, R"({"do_sample": false})", c).notes.find("change nothing under greedy"),
            std::string::npos);
}

TEST(GenerationConfig, MalformedValuesAreRefusedNamingTheFileAndKey) {
  test::TempDir dir("gencfg");
  const std::string file = dir.file("generation_config.json");
  const auto refused = [&](const std::string& json, const std::string& needle) {
    test::expect_error([&] { resolve(dir, json); }, {file, needle});
  };
  refused(R"({"do_sample": "yes"})", "do_sample must be true or false, got \"yes\"");
  refused(R"({"do_sample": true, "temperature": -0.5})", "temperature must be a number >= 0");
  refused(R"({"temperature": "hot"})", "temperature must be a number, got \"hot\"");
  refused(R"({"top_p": 1.5})", "top_p must be a number in (0, 1], got 1.5");
  refused(R"({"top_p": 0})", "top_p must be a number in (0, 1], got 0");
  refused(R"({"top_k": -1})", "top_k must be an integer >= 0, got -1");
  refused(R"({"top_k": 2.5})", "top_k must be an integer, got 2.5");
  refused("{\"top_k\": ", "is not valid JSON");
  refused("[1, 2]", "is not a JSON object");
  SamplingChoice c;
  c.top_p = 2.f;
  test::expect_error([&] { resolve_sampling("", c); }, {"--top-p must be in (0, 1], got 2"});
  c = {};
  c.top_k = -3;
  test::expect_error([&] { resolve_sampling("", c); }, {"--top-k must be >= 0, got -3"});
}
