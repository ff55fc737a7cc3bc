// Test helpers for Tokenizer::split_point (header-only): a small hand-made English-like BPE
// vocabulary whose merges cross letters, spaces, digits, apostrophes and newlines, and a generator
// of corpus-like and adversarial text.
#pragma once
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/bpe.h"

namespace attnlab::test {

// Ids 0..255 are the bytes, then one token per merge (in order), then <|endoftext|>.
inline BpeVocabData tiny_english_vocab() {
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"t", "h"},  {"th", "e"},  {" ", "the"},     {"i", "n"},        {"in", "g"},   {" ", "a"},
      {"e", "r"},  {"o", "r"},   {" ", "w"},       {" w", "or"},      {" wor", "d"}, {"l", "l"},
      {"'", "s"},  {"'", "ll"},  {"1", "2"},       {"12", "3"},       {" ", "12"},   {" ", " "},
      {"  ", " "}, {"\n", "\n"}, {"\xC3", "\xA9"}, {" ", "\xC3\xA9"}, {"e", "d"},    {" ", "s"},
      {"a", "n"},  {"an", "d"},  {" ", "and"},     {"o", "f"},        {" ", "of"},   {",", " "},
      {".", "\n"}, {"s", " "},   {"T", "h"},       {"Th", "e"},       {"!", "!"},    {"i", "s"},
      {" ", "is"}, {"e", " "},   {"\xCE", "\xA9"}, {" ", "in"},       {" ", "ing"}};
  BpeVocabData data;
  std::vector<std::string> ids;
  auto add = [&](const std::string& tok, bool special) {
    data.tokens.push_back(tok);
    data.has_token.push_back(true);
    data.is_special.push_back(special);
    return int32_t(data.tokens.size() - 1);
  };
  auto id_of = [&](const std::string& tok) {
    for (size_t i = 0; i < data.tokens.size(); ++i)
      if (data.tokens[i] == tok && !data.is_special[i]) return int32_t(i);
    return int32_t(-1);
  };
  for (int b = 0; b < 256; ++b) add(std::string(1, char(b)), false);
  for (const auto& [l, r] : merges) {
    if (id_of(l + r) < 0) add(l + r, false);
    data.merges.emplace_back(id_of(l), id_of(r));
  }
  data.eot_id = add("<|endoftext|>", true);
  data.name = "tiny-english";
  return data;
}

// `bytes` of text made of random fragments. corpus_like: mostly words and single spaces, with
// punctuation, numbers and paragraph breaks; otherwise adversarial: contractions in both cases,
// digit runs, runs of spaces and newlines, tabs, non-ASCII letters and marks next to ASCII ones,
// NBSP, emoji, the text of <|endoftext|> and invalid UTF-8 bytes, glued without separators.
inline std::string random_text(size_t bytes, uint32_t seed, bool corpus_like) {
  static const std::vector<std::string> words = {
      "the", "of", "and", "word", "in", "is", "The", "string", "a", "I", "x", "Zebra", "ther"};
  static const std::vector<std::string> odd = {"'s",        "'S",
                                               "'ll",       "'LL",
                                               "'re",       "'ve",
                                               "'d",        "'m",
                                               "'t",        "'",
                                               "123",       "4567",
                                               " 12",       "  ",
                                               "    ",      "\n",
                                               "\n\n",      " \n ",
                                               "\t",        "\r\n",
                                               "é",         "\xC3",
                                               "Ω",         "日本語",
                                               "e\xCC\x81", "\xC2\xA0",
                                               "😀",         "!!",
                                               "?",         ",",
                                               ".",         "<|endoftext|>",
                                               "\xFF",      "\xE2\x80\x83",
                                               "a",         "Q",
                                               " ",         " b",
                                               "_",         "-",
                                               "ß",         "١٢",
                                               "\x0B",      "\x85",
                                               "\xC2\x85"};
  std::mt19937 gen(seed);
  auto pick = [&](const std::vector<std::string>& v) -> const std::string& {
    return v[gen() % v.size()];
  };
  std::string s;
  while (s.size() < bytes) {
    const uint32_t r = gen() % 100;
    if (corpus_like) {
      if (r < 80)
        s += (s.empty() ? "" : " ") + pick(words);
      else if (r < 88)
        s += pick(words) + (gen() % 2 ? ", " : ". ");
      else if (r < 93)
        s += " " + std::to_string(gen() % 5000);
      else if (r < 97)
        s += ".\n\n";
      else
        s += pick(odd);
    } else {
      s += r < 45 ? pick(odd) : (r < 75 ? pick(words) : (r < 90 ? " " + pick(words) : " "));
    }
  }
  return s;
}

}  // namespace attnlab::test
