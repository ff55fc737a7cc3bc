// GPT-2 pre-tokenizer: split boundaries on hand-checked cases (each expectation is what Python's
// `regex` module returns for the GPT-2 pattern), character classes, and UTF-8 edge cases.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "tokenizer/pretokenize.h"
#include "tokenizer/unicode_tables.h"

namespace attnlab {
namespace {

using unicode::CharClass;

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  for (std::string_view p : gpt2_pretokenize(text)) out.emplace_back(p);
  return out;
}

using V = std::vector<std::string>;

TEST(Pretokenize, WordsAndSpaces) {
  EXPECT_EQ(split("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(split("  hello"), (V{" ", " hello"}));
  EXPECT_EQ(split("a   b"), (V{"a", "  ", " b"}));
  EXPECT_EQ(split("a   "), (V{"a", "   "}));
  EXPECT_EQ(split("x  "), (V{"x", "  "}));
  EXPECT_EQ(split(" "), (V{" "}));
  EXPECT_EQ(split("  "), (V{"  "}));
  EXPECT_EQ(split(""), (V{}));
}

TEST(Pretokenize, Contractions) {
  EXPECT_EQ(split("I'm"), (V{"I", "'m"}));
  EXPECT_EQ(split("I'M"), (V{"I", "'", "M"}));  // case-sensitive: 'M is not a contraction
  EXPECT_EQ(split("it's"), (V{"it", "'s"}));
  EXPECT_EQ(split("'S"), (V{"'", "S"}));
  EXPECT_EQ(split("don't they'll"), (V{"don", "'t", " they", "'ll"}));
  EXPECT_EQ(split("'re'VE"), (V{"'re", "'", "VE"}));
  EXPECT_EQ(split(" 's"), (V{" '", "s"}));  // the space takes the apostrophe as punctuation
  EXPECT_EQ(split("''s"), (V{"''", "s"}));  // a punctuation run is greedy
  EXPECT_EQ(split("'"), (V{"'"}));
}

TEST(Pretokenize, NumbersAndPunctuation) {
  EXPECT_EQ(split("123abc"), (V{"123", "abc"}));
  EXPECT_EQ(split(" 123"), (V{" 123"}));
  EXPECT_EQ(split("x=1;"), (V{"x", "=", "1", ";"}));
  EXPECT_EQ(split("\u216B\u00B2"
                  "3"),
            (V{"\u216B\u00B2"
               "3"}));  // Nl, No, Nd: one number run
}

TEST(Pretokenize, WhitespaceRuns) {
  EXPECT_EQ(split("a\n\nb"), (V{"a", "\n", "\n", "b"}));
  EXPECT_EQ(split("a  \tb"), (V{"a", "  ", "\t", "b"}));
  EXPECT_EQ(split("a\r\nb"), (V{"a", "\r", "\n", "b"}));
  EXPECT_EQ(split("\r\n"), (V{"\r\n"}));
  EXPECT_EQ(split("\t\t x"), (V{"\t\t", " x"}));
  EXPECT_EQ(split("a \n b"), (V{"a", " \n", " b"}));
  EXPECT_EQ(split("a\u00A0b"), (V{"a", "\u00A0", "b"}));  // NBSP is \s but not ` ?`
}

TEST(Pretokenize, NonLatinScripts) {
  EXPECT_EQ(split("h\u00E9llo"), (V{"h\u00E9llo"}));
  EXPECT_EQ(split("e\u0301t"), (V{"e", "\u0301", "t"}));  // a combining mark is not \p{L}
  EXPECT_EQ(split("\u4F60\u597D \u4E16\u754C"), (V{"\u4F60\u597D", " \u4E16\u754C"}));
  EXPECT_EQ(split("hi \U0001F44B\U0001F3FD!"), (V{"hi", " \U0001F44B\U0001F3FD!"}));
}

TEST(Pretokenize, InvalidUtf8BytesAreOtherCharacters) {
  EXPECT_EQ(split("\xFF\xFE"
                  "ab"),
            (V{"\xFF\xFE", "ab"}));
  EXPECT_EQ(split("a\xFF"
                  "b"),
            (V{"a", "\xFF", "b"}));
  EXPECT_EQ(split(" \x80"), (V{" \x80"}));
  EXPECT_EQ(split("x\xE2\x82"), (V{"x", "\xE2\x82"}));  // truncated 3-byte sequence
  EXPECT_EQ(split("\xC0\x80"
                  "a"),
            (V{"\xC0\x80", "a"}));  // overlong NUL
  EXPECT_EQ(split("\xED\xA0\x80"
                  "a"),
            (V{"\xED\xA0\x80", "a"}));                            // encoded surrogate
  EXPECT_EQ(split("\xF4\x90\x80\x80"), (V{"\xF4\x90\x80\x80"}));  // above U+10FFFF
}

TEST(Pretokenize, Utf8Decoding) {
  auto ch = [](const std::string& s) {
    return next_char(reinterpret_cast<const unsigned char*>(s.data()), s.size());
  };
  EXPECT_EQ(ch("\xC3\xA9").len, 2u);
  EXPECT_EQ(ch("\xC3\xA9").cls, CharClass::kLetter);
  EXPECT_EQ(ch("\xE4\xB8\x96").len, 3u);
  EXPECT_EQ(ch("\xF0\x9F\x98\x80").len, 4u);
  EXPECT_EQ(ch("\xF0\x9F\x98\x80").cls, CharClass::kOther);
  EXPECT_EQ(ch("\xF0\xA0\x80\x80").cls, CharClass::kLetter);  // U+20000, CJK extension B
  for (const char* bad :
       {"\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xED\xA0\x80", "\xF0\x80\x80\x80",
        "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\x80", "\xC3", "\xE4\xB8"}) {
    const Utf8Char c = ch(bad);
    EXPECT_EQ(c.len, 1u) << bad;
    EXPECT_EQ(c.cls, CharClass::kOther);
  }
}

TEST(Pretokenize, Classify) {
  EXPECT_EQ(unicode::classify('A'), CharClass::kLetter);
  EXPECT_EQ(unicode::classify('5'), CharClass::kNumber);
  EXPECT_EQ(unicode::classify(0x0661), CharClass::kNumber);  // Arabic-Indic digit one
  EXPECT_EQ(unicode::classify(0x3000), CharClass::kSpace);   // ideographic space
  EXPECT_EQ(unicode::classify(0x0085), CharClass::kSpace);   // NEL
  EXPECT_EQ(unicode::classify(0x001C), CharClass::kOther);   // isspace() in Python, not \s
  EXPECT_EQ(unicode::classify(0x200B), CharClass::kOther);   // zero-width space: Cf
  EXPECT_EQ(unicode::classify(0x0301), CharClass::kOther);
  EXPECT_EQ(unicode::classify(0x1F600), CharClass::kOther);
  EXPECT_EQ(unicode::classify(0x1D7CE), CharClass::kNumber);  // mathematical bold digit zero
  EXPECT_EQ(unicode::classify(0x10FFFF), CharClass::kOther);
  EXPECT_EQ(unicode::classify(0x110000), CharClass::kOther);
  // The table is sorted and disjoint (the binary search relies on it).
  for (int i = 1; i < unicode::kNumClassRanges; ++i)
    ASSERT_GT(unicode::kClassRanges[i].first, unicode::kClassRanges[i - 1].last);
}

// Any byte string splits into non-empty pieces that concatenate back to it.
TEST(Pretokenize, PiecesCoverRandomBytes) {
  const std::vector<std::string> palette = {
      "a",          "Z",      "7",      " ",    "  ",     "\n",       "\t",
      "'",          "'s",     "'ll",    ".",    "\u00E9", "\u0301",   "\u4E16",
      "\U0001F600", "\u00A0", "\u3000", "\xFF", "\x80",   "\xE2\x82", "\xF0\x9F"};
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    const int n = 1 + int(rng() % 60);
    for (int i = 0; i < n; ++i) text += palette[rng() % palette.size()];
    std::string joined;
    for (std::string_view p : gpt2_pretokenize(text)) {
      ASSERT_FALSE(p.empty());
      joined += p;
    }
    ASSERT_EQ(joined, text);
  }
}

}  // namespace
}  // namespace attnlab
