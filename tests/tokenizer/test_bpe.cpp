// Byte-level BPE on small handmade vocabularies (no files needed): merge order, tie-breaking,
// the two merge algorithms against a naive reference, special tokens, to_json round trip, and
// decode(encode(x)) == x on arbitrary bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/bpe.h"

namespace attnlab {
namespace {

// A vocabulary with the 256 bytes as ids 0..255, then the merges given as pairs of token
// strings (each merge adds the concatenation as the next id), then <|endoftext|>.
using Merges = std::vector<std::pair<std::string, std::string>>;

struct TinyVocab {
  BpeVocabData data;
  std::map<std::string, int32_t> id;

  explicit TinyVocab(const Merges& merges) {
    for (int b = 0; b < 256; ++b) add(std::string(1, char(b)));
    for (const auto& [l, r] : merges) {
      if (!id.count(l + r)) add(l + r);
      data.merges.emplace_back(id.at(l), id.at(r));
    }
    data.eot_id = add("<|endoftext|>", true);
  }
  int32_t add(const std::string& tok, bool special = false) {
    const int32_t i = int32_t(data.tokens.size());
    data.tokens.push_back(tok);
    data.has_token.push_back(true);
    data.is_special.push_back(special);
    if (!special) id[tok] = i;
    return i;
  }
  std::vector<int32_t> ids(const std::vector<std::string>& toks) const {
    std::vector<int32_t> v;
    for (const auto& t : toks) v.push_back(id.at(t));
    return v;
  }
};

std::vector<int32_t> encode(const Tokenizer& t, const std::string& text) {
  std::vector<int32_t> ids;
  t.encode(text, ids);
  return ids;
}

std::vector<int32_t> piece_ids(const BpeTokenizer& t, const std::string& piece, BpeMergeMethod m) {
  std::vector<int32_t> ids;
  t.encode_piece(piece, ids, m);
  return ids;
}

// Naive BPE straight from the definition: merge the lowest-ranked adjacent pair (leftmost on a
// tie) until none is left.
std::vector<int32_t> naive_bpe(const BpeVocabData& d, const std::string& piece) {
  std::map<std::pair<int32_t, int32_t>, size_t> rank;
  for (size_t r = 0; r < d.merges.size(); ++r) rank.emplace(d.merges[r], r);
  std::map<std::string, int32_t> by_bytes;
  for (size_t i = 0; i < d.tokens.size(); ++i)
    if (!d.is_special[i]) by_bytes[d.tokens[i]] = int32_t(i);
  std::vector<int32_t> w;
  for (unsigned char c : piece) w.push_back(by_bytes.at(std::string(1, char(c))));
  for (;;) {
    size_t best = SIZE_MAX, at = 0;
    for (size_t i = 0; i + 1 < w.size(); ++i) {
      auto it = rank.find({w[i], w[i + 1]});
      if (it != rank.end() && it->second < best) best = it->second, at = i;
    }
    if (best == SIZE_MAX) return w;
    w[at] = by_bytes.at(d.tokens[w[at]] + d.tokens[w[at + 1]]);
    w.erase(w.begin() + at + 1);
  }
}

const BpeMergeMethod kMethods[] = {BpeMergeMethod::kLinearScan, BpeMergeMethod::kHeap};

TEST(Bpe, MergeOrderFollowsRank) {
  {
    TinyVocab v(Merges{{"b", "c"}, {"a", "b"}, {"a", "bc"}});  // bc first, then a+bc
    BpeTokenizer t(v.data, "tiny");
    for (auto m : kMethods) EXPECT_EQ(piece_ids(t, "abc", m), v.ids({"abc"}));
  }
  {
    TinyVocab v(Merges{{"a", "b"}, {"b", "c"}});  // ab wins; "ab"+"c" is not a merge
    BpeTokenizer t(v.data, "tiny");
    for (auto m : kMethods) EXPECT_EQ(piece_ids(t, "abc", m), v.ids({"ab", "c"}));
  }
}

TEST(Bpe, TiesGoToTheLeftmostPair) {
  TinyVocab v(Merges{{"a", "a"}, {"a", "aa"}});
  BpeTokenizer t(v.data, "tiny");
  for (auto m : kMethods) {
    // aaa -> (aa)a: the (a, aa) merge never applies because aa is on the left.
    EXPECT_EQ(piece_ids(t, "aaa", m), v.ids({"aa", "a"}));
    EXPECT_EQ(piece_ids(t, "aaaa", m), v.ids({"aa", "aa"}));
    EXPECT_EQ(piece_ids(t, "aaaaa", m), v.ids({"aa", "aa", "a"}));
  }
  TinyVocab w(Merges{{"a", "a"}, {"aa", "a"}});
  BpeTokenizer u(w.data, "tiny");
  for (auto m : kMethods) EXPECT_EQ(piece_ids(u, "aaa", m), w.ids({"aaa"}));
}

TEST(Bpe, EncodeSplitsIntoPreTokensFirst) {
  TinyVocab v(Merges{{"h", "i"}, {" ", "hi"}, {"i", " "}});
  BpeTokenizer t(v.data, "tiny");
  // "i " never forms: the space belongs to the next pre-token.
  EXPECT_EQ(encode(t, "hi hi"), v.ids({"hi", " hi"}));
  EXPECT_EQ(encode(t, "hi  hi"), v.ids({"hi", " ", " hi"}));
  EXPECT_EQ(t.vocab_size(), 256 + 3 + 1);
  EXPECT_EQ(t.eot_id(), 259);
}

// Random merge lists over a small alphabet; long pieces exercise both algorithms.
TEST(Bpe, LinearAndHeapMatchNaiveReference) {
  std::mt19937 rng(42);
  for (int vocab_trial = 0; vocab_trial < 4; ++vocab_trial) {
    std::vector<std::string> toks = {"a", "b", "c", "d"};
    std::vector<std::pair<std::string, std::string>> merges;
    std::map<std::string, bool> seen;
    for (auto& s : toks) seen[s] = true;
    while (merges.size() < 60) {
      const std::string& l = toks[rng() % toks.size()];
      const std::string& r = toks[rng() % toks.size()];
      if (seen[l + r] || l.size() + r.size() > 8) continue;
      seen[l + r] = true;
      merges.emplace_back(l, r);
      toks.push_back(l + r);
    }
    TinyVocab v(merges);
    BpeTokenizer t(v.data, "tiny");
    for (int trial = 0; trial < 150; ++trial) {
      std::string piece;
      const int n = 1 + int(rng() % 150);
      for (int i = 0; i < n; ++i) piece += char('a' + rng() % 4);
      const auto expected = naive_bpe(v.data, piece);
      for (auto m : kMethods) ASSERT_EQ(piece_ids(t, piece, m), expected) << piece;
      std::vector<int32_t> ids;
      t.encode_piece(piece, ids);
      ASSERT_EQ(t.decode(ids), piece);
    }
    // Through encode(): the lookup table and the per-thread cache must not change anything.
    for (int trial = 0; trial < 50; ++trial) {
      std::string text;
      std::vector<int32_t> expected;
      for (int w = 0; w < 20; ++w) {
        std::string word;
        const int n = 1 + int(rng() % 12);
        for (int i = 0; i < n; ++i) word += char('a' + rng() % 4);
        const auto ids = naive_bpe(v.data, word);
        expected.insert(expected.end(), ids.begin(), ids.end());
        text += word;
        if (w < 19) {
          text += "-";
          expected.push_back('-');
        }
      }
      ASSERT_EQ(encode(t, text), expected) << text;
    }
  }
}

TEST(Bpe, RoundTripsArbitraryBytes) {
  TinyVocab v(Merges{{"t", "h"}, {"th", "e"}, {" ", "the"}, {"\xE4", "\xB8"}, {"\xFF", "\xFF"}});
  BpeTokenizer t(v.data, "tiny");
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::string text;
    const int n = int(rng() % 200);
    for (int i = 0; i < n; ++i) text += char(rng() % 256);
    if (trial % 2) text += " the \xE4\xB8\x96 \xFF\xFF\xFF";
    const auto ids = encode(t, text);
    ASSERT_EQ(t.decode(ids), text);
  }
}

// encode() appends; many small appends must not reallocate every time (quadratic copying).
// "ab ab cd" is 6 BPE tokens here: ab, " " ab, " " c d.
TEST(Bpe, AppendingKeepsGeometricGrowth) {
  TinyVocab v(Merges{{"a", "b"}});
  BpeTokenizer bpe(v.data, "tiny");
  ByteTokenizer byte;
  for (const Tokenizer* t :
       {static_cast<const Tokenizer*>(&bpe), static_cast<const Tokenizer*>(&byte)}) {
    std::vector<int32_t> ids;
    int reallocations = 0;
    for (int doc = 0; doc < 20000; ++doc) {
      const size_t cap = ids.capacity();
      t->encode("ab ab cd", ids);
      reallocations += ids.capacity() != cap;
    }
    EXPECT_EQ(ids.size(), (t == &bpe ? 6u : 8u) * 20000);
    EXPECT_LT(reallocations, 40) << t->name();
  }
}

TEST(Bpe, SpecialTokens) {
  TinyVocab v(Merges{{"a", "b"}});
  BpeTokenizer t(v.data, "tiny");
  // Ordinary encode() treats the special token's text as text: 13 single-byte tokens here.
  const auto plain = encode(t, "<|endoftext|>");
  EXPECT_EQ(plain.size(), 13u);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), t.eot_id()), 0);
  std::vector<int32_t> ids;
  t.encode_with_special("ab<|endoftext|>ab", ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{v.id.at("ab"), t.eot_id(), v.id.at("ab")}));
  EXPECT_EQ(t.piece(t.eot_id()), "<|endoftext|>");
  EXPECT_EQ(t.decode(ids), "ab<|endoftext|>ab");
}

TEST(Bpe, ToJsonRebuildsTheSameTokenizer) {
  TinyVocab v(
      Merges{{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {" ", "w"}, {"\xC3", "\xA9"}});
  BpeTokenizer t(v.data, "tiny");
  const test::TempDir tmp("bpe");
  const std::string path = tmp.file("tiny_tokenizer.json");
  {
    std::ofstream f(path);
    f << t.to_json();
  }
  const auto u = make_tokenizer(path);
  EXPECT_EQ(u->vocab_size(), t.vocab_size());
  EXPECT_EQ(u->eot_id(), t.eot_id());
  EXPECT_EQ(u->name(), t.name());
  for (const char* text : {"hello world", "caf\xC3\xA9 hell \xFF", "  \n\thello"}) {
    EXPECT_EQ(encode(*u, text), encode(t, text)) << text;
  }
  EXPECT_EQ(u->to_json(), t.to_json());
}

TEST(Bpe, BadVocabulariesAreRejected) {
  {
    TinyVocab v(Merges{});
    v.data.tokens[65] = "xyz";  // byte 'A' has no token any more
    test::expect_error([&] { BpeTokenizer(v.data, "tiny.json"); },
                       "tiny.json: byte 0x41 has no token");
  }
  {
    TinyVocab v(Merges{{"a", "b"}});
    v.data.merges.emplace_back(v.id.at("x"), v.id.at("y"));  // makes "xy", not a token
    test::expect_error([&] { BpeTokenizer(v.data, "tiny.json"); },
                       "makes 'xy', which is not in the vocabulary");
  }
  {
    TinyVocab v(Merges{{"a", "b"}, {"a", "b"}});
    EXPECT_THROW(BpeTokenizer(v.data, "tiny.json"), Error);  // repeated merge
  }
  {
    TinyVocab v(Merges{});
    v.data.is_special[v.data.eot_id] = false;
    v.data.eot_id = -1;
    EXPECT_THROW(BpeTokenizer(v.data, "tiny.json"), Error);
  }
}

}  // namespace
}  // namespace attnlab
