// A tiny Hugging Face tokenizer.json of the LLaMA 3 form (byte-level BPE behind Split +
// ByteLevel, "ignore_merges", <|begin_of_text|> put first by the post-processor), for the tokenizer
// tests and the tests of what writes tokenizers back out (interop).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/pretokenize.h"

namespace attnlab::test {

// Ids 0..255: the bytes (id = byte value, GPT-2 spelling); 256 "Ġt", 257 "he", 258 "Ġthe", 259
// "12", 260 "123" (all built by the merges), 261 "Ġworld" (no merge builds it); specials 262
// <|begin_of_text|>, 263 <|end_of_text|>, 264 <|reserved_special_token_0|>.
inline nlohmann::json llama3_json(bool ignore_merges) {
  using nlohmann::json;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[gpt2_bytes_to_symbols(std::string(1, char(b)))] = b;
  const char* extra[] = {"\u0120t", "he", "\u0120the", "12", "123", "\u0120world"};
  for (int i = 0; i < 6; ++i) vocab[extra[i]] = 256 + i;
  json merges = json::array();  // pairs (json's {{"a", "b"}, ...} would be an object)
  for (const auto& [l, r] : std::vector<std::pair<std::string, std::string>>{
           {"\u0120", "t"}, {"h", "e"}, {"\u0120t", "he"}, {"1", "2"}, {"12", "3"}})
    merges.push_back(json::array({l, r}));
  json added = json::array();
  const char* specials[] = {"<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>"};
  for (int i = 0; i < 3; ++i)
    added.push_back({{"id", 262 + i},
                     {"content", specials[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  const json bos = {{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}};
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Split"},
               {"pattern", {{"Regex", pre_tokenizer_pattern(PreTokenizer::kLlama3)}}},
               {"behavior", "Isolated"},
               {"invert", false}},
              {{"type", "ByteLevel"},
               {"add_prefix_space", false},
               {"trim_offsets", true},
               {"use_regex", false}}}}}},
          {"post_processor",
           {{"type", "Sequence"},
            {"processors",
             {{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}},
              {{"type", "TemplateProcessing"},
               {"single", {bos, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
               {"special_tokens",
                {{"<|begin_of_text|>",
                  {{"id", "<|begin_of_text|>"},
                   {"ids", {262}},
                   {"tokens", {"<|begin_of_text|>"}}}}}}}}}}},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", ignore_merges},
            {"vocab", vocab},
            {"merges", merges}}}};
}

}  // namespace attnlab::test
