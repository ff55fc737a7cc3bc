// Tokenizer::split_point: cutting text there and encoding the parts separately gives the ids of
// the whole text (what `attnlab prepare` relies on to spread long documents over threads).
// The tiny hand-made vocabulary always runs; the real GPT-2 vocabulary needs ATTNLAB_SHARED_DATA.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "tests/tokenizer/split_text.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenize.h"

namespace attnlab {
namespace {

std::vector<int32_t> encode(const Tokenizer& t, std::string_view text) {
  std::vector<int32_t> ids;
  t.encode(text, ids);
  return ids;
}

bool ascii_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Cuts `text` at split points from random places, as prepare does (each cut searched in the
// rest of the text), and checks that the ids of the parts, concatenated, are those of the text;
// for BPE also the rule of the cut and that the pre-tokens of the parts are those of the text.
// Returns the number of cuts made.
int check_cuts(const Tokenizer& t, const std::string& text, uint32_t seed, size_t max_step,
               bool bpe = true, PreTokenizer kind = PreTokenizer::kGpt2) {
  std::mt19937 gen(seed);
  const std::vector<int32_t> whole = encode(t, text);
  std::vector<std::string_view> whole_pieces = pretokenize(kind, text), part_pieces;
  std::vector<int32_t> parts;
  size_t begin = 0;
  int cuts = 0;
  while (begin < text.size()) {
    const std::string_view rest = std::string_view(text).substr(begin);
    const size_t near = 1 + gen() % max_step;
    const size_t p = t.split_point(rest, near);
    EXPECT_TRUE(p == rest.size() || (p >= near && p < rest.size()))
        << "near " << near << " gave " << p << " of " << rest.size();
    if (p < rest.size()) ++cuts;
    if (bpe && p < rest.size()) {
      EXPECT_TRUE(ascii_letter(rest[p - 1]) && rest[p] == ' ' && ascii_letter(rest[p + 1]))
          << "cut at " << begin + p;
    }
    const std::string_view part = rest.substr(0, p);
    t.encode(part, parts);
    for (auto piece : pretokenize(kind, part)) part_pieces.push_back(piece);
    begin += p;
  }
  if (bpe) {
    EXPECT_EQ(part_pieces, whole_pieces);
  }
  EXPECT_EQ(parts, whole);
  return cuts;
}

TEST(SplitPoint, ByteTokenizerCutsAnywhere) {
  ByteTokenizer t;
  EXPECT_EQ(t.split_point("abcdef", 3), 3u);
  EXPECT_EQ(t.split_point("abcdef", 6), 6u);
  EXPECT_EQ(t.split_point("abcdef", 60), 6u);
  const std::string text = test::random_text(5000, 3, false);
  EXPECT_GT(check_cuts(t, text, 4, 300, /*bpe=*/false), 10);
}

TEST(SplitPoint, BpeRuleAndBounds) {
  BpeTokenizer t(test::tiny_english_vocab(), "tiny");
  EXPECT_EQ(t.split_point("hello world", 0), 5u);
  EXPECT_EQ(t.split_point("hello world", 5), 5u);
  EXPECT_EQ(t.split_point("hello world", 6), 11u);  // no cut after 6
  EXPECT_EQ(t.split_point("hello world", 99), 11u);
  // Not a cut: digits, punctuation, two spaces, non-ASCII letters, the end of the text.
  for (const char* s :
       {"a 1 b", "12 34", "a. b", "a  b", "\xC3\xA9 a", "a \xC3\xA9", "ab ", " ab", "a\nb", "a\tb"})
    EXPECT_EQ(t.split_point(s, 0), std::string_view(s).size()) << s;
  EXPECT_EQ(t.split_point("'s x", 0), 2u);  // after a contraction
  EXPECT_EQ(t.split_point("x's y", 0), 3u);
  // The scan is bounded: a cut further than kSplitScanBytes from `near` is not found.
  std::string far(BpeTokenizer::kSplitScanBytes + 10, '.');
  far += "a b";
  EXPECT_EQ(t.split_point(far, 0), far.size());
  EXPECT_EQ(t.split_point(far, 20), far.size() - 2);
}

TEST(SplitPoint, BpePartsEncodeLikeTheWholeTinyVocab) {
  BpeTokenizer t(test::tiny_english_vocab(), "tiny");
  int cuts = 0;
  for (uint32_t seed = 0; seed < 40; ++seed) {
    const bool corpus_like = seed % 2 == 0;
    const std::string text = test::random_text(3000 + seed * 97, seed, corpus_like);
    cuts += check_cuts(t, text, seed + 100, corpus_like ? 200 : 40);
  }
  EXPECT_GT(cuts, 400);  // the property was exercised, not vacuously true
}

// The same rule for the LLaMA 3 and Qwen2 pre-tokenizers (bpe.cpp says why), with and without
// ignore_merges.
TEST(SplitPoint, BpePartsEncodeLikeTheWholeLlama3AndQwen2) {
  int cuts = 0;
  for (PreTokenizer kind : {PreTokenizer::kLlama3, PreTokenizer::kQwen2}) {
    for (bool ignore_merges : {false, true}) {
      BpeVocabData data = test::tiny_english_vocab();
      data.pre_tokenizer = kind;
      data.ignore_merges = ignore_merges;
      BpeTokenizer t(std::move(data), "tiny");
      for (uint32_t seed = 0; seed < 20; ++seed) {
        const bool corpus_like = seed % 2 == 0;
        const std::string text = test::random_text(3000 + seed * 89, seed, corpus_like);
        cuts += check_cuts(t, text, seed + 300, corpus_like ? 200 : 40, true, kind);
      }
    }
  }
  EXPECT_GT(cuts, 800);
}

TEST(SplitPoint, BpePartsEncodeLikeTheWholeGpt2) {
  const char* env = std::getenv("ATTNLAB_SHARED_DATA");
  if (!env) GTEST_SKIP() << "ATTNLAB_SHARED_DATA is not set";
  const std::string dir = std::string(env) + "/gpt2-vocab";
  BpeTokenizer t(load_gpt2_vocab(dir), dir);
  int cuts = 0;
  for (uint32_t seed = 0; seed < 30; ++seed) {
    const bool corpus_like = seed % 2 == 0;
    const std::string text = test::random_text(4000 + seed * 131, seed, corpus_like);
    cuts += check_cuts(t, text, seed + 7, corpus_like ? 300 : 50);
  }
  EXPECT_GT(cuts, 300);
}

}  // namespace
}  // namespace attnlab
