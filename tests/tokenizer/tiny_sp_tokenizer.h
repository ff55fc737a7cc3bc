// A tiny SentencePiece-style tokenizer.json (LLaMA 2's form: byte fallback, "▁" for spaces) in
// each of its spellings, for the tokenizer tests and the tests of what uses a BOS tokenizer
// (prepare, eval, generate).
#pragma once
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace attnlab::test {

using Merges = std::vector<std::pair<std::string, std::string>>;

inline const std::string kMs = "\u2581";  // "▁"

// <unk> 0, <s> 1, </s> 2, <0x00>..<0xFF> 3..258, then 259 "▁", 260 "a", 261 "b", 262 "c",
// 263 "h", 264 "e", 265 "l", 266 "o", 267 "▁h", 268 "▁he", 269 "ll", 270 "llo", 271 "▁hello",
// 272 "▁▁", 273 "w", 274 "r", 275 "or", 276 "▁w", 277 "▁wor", 278 "é", 279 "▁a", 280 "ab";
// "d" is not a token (byte fallback: <0x64> = 103). `extra` merges add their tokens after 280.
inline Merges tiny_merges() {
  return {{kMs, "h"},          {kMs + "h", "e"}, {"l", "l"}, {"ll", "o"},
          {kMs + "he", "llo"}, {kMs, kMs},       {"o", "r"}, {kMs, "w"},
          {kMs + "w", "or"},   {"a", "b"},       {kMs, "a"}};
}

inline nlohmann::json sp_json(const std::string& style, const Merges& extra = {}) {
  using nlohmann::json;
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  char buf[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    vocab[buf] = 3 + b;
  }
  for (const char* t :
       {"\u2581", "a",       "b",        "c",       "h",         "e",           "l",
        "o",      "\u2581h", "\u2581he", "ll",      "llo",       "\u2581hello", "\u2581\u2581",
        "w",      "r",       "or",       "\u2581w", "\u2581wor", "\u00e9",      "\u2581a",
        "ab"})
    vocab[t] = vocab.size();
  Merges merges = tiny_merges();
  for (const auto& m : extra) {
    if (!vocab.contains(m.first + m.second)) vocab[m.first + m.second] = vocab.size();
    merges.push_back(m);
  }
  json merge_list = json::array();
  for (const auto& [l, r] : merges) merge_list.push_back(l + " " + r);  // the LLaMA 2 spelling
  json added = json::array();
  for (int i = 0; i < 3; ++i)
    added.push_back({{"id", i},
                     {"content", std::vector<std::string>{"<unk>", "<s>", "</s>"}[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  json j = {{"version", "1.0"},
            {"added_tokens", added},
            {"normalizer", nullptr},
            {"pre_tokenizer", nullptr},
            {"post_processor",
             {{"type", "TemplateProcessing"},
              {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                      {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
              {"special_tokens",
               {{"<s>", {{"id", "<s>"}, {"ids", json::array({1})}, {"tokens", {"<s>"}}}}}}}},
            {"decoder", nullptr},
            {"model",
             {{"type", "BPE"},
              {"dropout", nullptr},
              {"unk_token", "<unk>"},
              {"continuing_subword_prefix", nullptr},
              {"end_of_word_suffix", nullptr},
              {"fuse_unk", true},
              {"byte_fallback", true},
              {"ignore_merges", false},
              {"vocab", vocab},
              {"merges", merge_list}}}};
  if (style == "legacy") {
    j["normalizer"] = {
        {"type", "Sequence"},
        {"normalizers",
         json::array({{{"type", "Prepend"}, {"prepend", kMs}},
                      {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMs}}})}};
    j["decoder"] = {
        {"type", "Sequence"},
        {"decoders",
         json::array({{{"type", "Replace"}, {"pattern", {{"String", kMs}}}, {"content", " "}},
                      {{"type", "ByteFallback"}},
                      {{"type", "Fuse"}},
                      {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}};
  } else {  // "first", "always", "always-split"
    const bool split = style == "always-split";
    const std::string scheme = split ? "always" : style;
    j["pre_tokenizer"] = {
        {"type", "Metaspace"}, {"replacement", kMs}, {"prepend_scheme", scheme}, {"split", split}};
    j["decoder"] = j["pre_tokenizer"];
  }
  return j;
}

}  // namespace attnlab::test
