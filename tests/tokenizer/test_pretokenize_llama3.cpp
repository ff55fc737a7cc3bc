// LLaMA 3 and Qwen2 pre-tokenizers (pretokenize.h): split boundaries on a table of cases. Every
// expectation of valid UTF-8 is what Hugging Face `tokenizers` 0.23.3 returns for the exact
// pattern (pre_tokenizers.Split(Regex(P), "isolated").pre_tokenize_str, run 2026-12-07; the
// script is in docs/tokenizer.md); the invalid-UTF-8 ones are Python `regex` over the text decoded
// with surrogateescape (the library cannot take invalid UTF-8).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "tokenizer/pretokenize.h"

namespace attnlab {
namespace {

using V = std::vector<std::string>;

V split(PreTokenizer kind, const std::string& text) {
  V out;
  for (std::string_view p : pretokenize(kind, text)) out.emplace_back(p);
  return out;
}

struct Case {
  std::string text;
  V pieces;
};

TEST(PretokenizeLlama3, MatchesTokenizersLibrary) {
  const std::vector<Case> cases = {
      {"Hello world", {"Hello", " world"}},
      {"DON'T", {"DON", "'T"}},
      {"'LL", {"'LL"}},
      {"I'M here", {"I", "'M", " here"}},
      {"we'Re they'VE", {"we", "'Re", " they", "'VE"}},
      {"it'\u017F", {"it", "'\u017F"}},
      // A contraction followed by letters: (?i:) and U+017F decide the split.
      {"DON'TS", {"DON", "'T", "S"}},
      {"'LLama", {"'LL", "ama"}},
      {"it'\u017Fx", {"it", "'\u017F", "x"}},
      {"'Sup", {"'S", "up"}},
      {"we'REd", {"we", "'RE", "d"}},
      {"x'mY", {"x", "'m", "Y"}},
      {"'lL'", {"'lL", "'"}},
      {"x'D'S", {"x", "'D", "'S"}},
      {"''s", {"''", "s"}},
      {"'", {"'"}},
      {"'x", {"'x"}},
      {"  \n\n  x", {"  \n\n", " ", " x"}},
      {"\t\tabc", {"\t", "\tabc"}},
      {".abc", {".abc"}},
      {"hi!\n\n", {"hi", "!\n\n"}},
      {" !!\n x", {" !!\n", " x"}},
      {"a\r\n\r\n b", {"a", "\r\n\r\n", " b"}},
      {"x \n y", {"x", " \n", " y"}},
      {"a   b", {"a", "  ", " b"}},
      {"a   ", {"a", "   "}},
      {" ", {" "}},
      {"\n", {"\n"}},
      {"1234567", {"123", "456", "7"}},
      {" 12345", {" ", "123", "45"}},
      {"x1y22z333", {"x", "1", "y", "22", "z", "333"}},
      {"\u0661\u0662\u0663\u0664", {"\u0661\u0662\u0663", "\u0664"}},
      {"\u00A0x", {"\u00A0x"}},
      {"a\u00A0b", {"a", "\u00A0b"}},
      {"\u3000x", {"\u3000x"}},
      {"e\u0301t", {"e", "\u0301t"}},
      {"\u4F60\u597D \u4E16\u754C", {"\u4F60\u597D", " \u4E16\u754C"}},
      {"hi \U0001F44B\U0001F3FD!", {"hi", " \U0001F44B\U0001F3FD!"}},
      {"<|begin_of_text|>hello", {"<|", "begin", "_of", "_text", "|>", "hello"}},
      {"\tx", {"\tx"}},
      {"\u2028x", {"\u2028x"}},
      {"a\u2028\nb", {"a", "\u2028\n", "b"}},
      {"$100.50", {"$", "100", ".", "50"}},
      {"x=1;\r\n", {"x", "=", "1", ";\r\n"}},
      {"don't stop", {"don", "'t", " stop"}},
      {"\U0001F468\u200D\U0001F469", {"\U0001F468\u200D\U0001F469"}},
  };
  for (const Case& c : cases) EXPECT_EQ(split(PreTokenizer::kLlama3, c.text), c.pieces) << c.text;
  EXPECT_EQ(split(PreTokenizer::kLlama3, ""), V{});
}

TEST(PretokenizeLlama3, InvalidUtf8BytesAreOtherCharacters) {
  const std::vector<Case> cases = {
      {"\xFF\xFE"
       "ab",
       {"\xFF\xFE", "ab"}},
      {"a\xFF"
       "b",
       {"a",
        "\xFF"
        "b"}},
      {" \x80", {" \x80"}},
      {"x\xE2\x82", {"x", "\xE2\x82"}},
      {"\xC0\x80"
       "a",
       {"\xC0\x80", "a"}},
      {"\xFF\n\n", {"\xFF\n\n"}},
      {"'\xFF", {"'\xFF"}},
  };
  for (const Case& c : cases) EXPECT_EQ(split(PreTokenizer::kLlama3, c.text), c.pieces) << c.text;
}

TEST(PretokenizeQwen2, OneDigitPerPiece) {
  const std::vector<Case> cases = {
      {"1234567", {"1", "2", "3", "4", "5", "6", "7"}},
      {" 12345", {" ", "1", "2", "3", "4", "5"}},
      {"x1y22z333", {"x", "1", "y", "2", "2", "z", "3", "3", "3"}},
      {"\u0661\u0662\u0663\u0664", {"\u0661", "\u0662", "\u0663", "\u0664"}},
  };
  for (const Case& c : cases) EXPECT_EQ(split(PreTokenizer::kQwen2, c.text), c.pieces) << c.text;
  // Everything else is the LLaMA 3 pattern.
  EXPECT_EQ(split(PreTokenizer::kQwen2, "DON'T  \n\n  x.abc"),
            split(PreTokenizer::kLlama3, "DON'T  \n\n  x.abc"));
}

TEST(PretokenizeLlama3, PatternsAreRecognisedExactly) {
  PreTokenizer k = PreTokenizer::kGpt2;
  const std::string llama3 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*)"
      R"(|\s*[\r\n]+|\s+(?!\S)|\s+)";
  ASSERT_TRUE(pre_tokenizer_from_pattern(llama3, k));
  EXPECT_EQ(k, PreTokenizer::kLlama3);
  std::string qwen2 = llama3;
  qwen2.replace(qwen2.find("{1,3}"), 5, "");
  ASSERT_TRUE(pre_tokenizer_from_pattern(qwen2, k));
  EXPECT_EQ(k, PreTokenizer::kQwen2);
  ASSERT_TRUE(pre_tokenizer_from_pattern(
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)", k));
  EXPECT_EQ(k, PreTokenizer::kGpt2);
  // One character off is another pattern.
  EXPECT_FALSE(pre_tokenizer_from_pattern(llama3 + " ", k));
  std::string digits4 = llama3;
  digits4.replace(digits4.find("{1,3}"), 5, "{1,4}");
  EXPECT_FALSE(pre_tokenizer_from_pattern(digits4, k));
  for (PreTokenizer kind : {PreTokenizer::kGpt2, PreTokenizer::kLlama3, PreTokenizer::kQwen2}) {
    PreTokenizer back = PreTokenizer::kGpt2;
    ASSERT_TRUE(pre_tokenizer_from_name(pre_tokenizer_name(kind), back));
    EXPECT_EQ(back, kind);
  }
}

// Any byte string splits into non-empty pieces that concatenate back to it.
TEST(PretokenizeLlama3, PiecesCoverRandomBytes) {
  const std::vector<std::string> palette = {
      "a",      "Z",      "7",    " ",    "  ",       "\n",       "\r",     "\t",
      "'",      "'s",     "'LL",  ".",    "\u00E9",   "\u0301",   "\u4E16", "\U0001F600",
      "\u00A0", "\u3000", "\xFF", "\x80", "\xE2\x82", "\xF0\x9F", "\u017F", "123456"};
  std::mt19937 rng(99);
  for (PreTokenizer kind : {PreTokenizer::kLlama3, PreTokenizer::kQwen2}) {
    for (int trial = 0; trial < 300; ++trial) {
      std::string text;
      const int n = 1 + int(rng() % 60);
      for (int i = 0; i < n; ++i) text += palette[rng() % palette.size()];
      std::string joined;
      for (std::string_view p : pretokenize(kind, text)) {
        ASSERT_FALSE(p.empty());
        joined += p;
      }
      ASSERT_EQ(joined, text);
    }
  }
}

}  // namespace
}  // namespace attnlab
