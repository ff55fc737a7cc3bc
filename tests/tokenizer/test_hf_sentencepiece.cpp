// Hugging Face tokenizer.json of the SentencePiece-style form (LLaMA 1-2, Mistral: BPE over
// characters with byte fallback, "▁" for a space), in both spellings (normalizer Prepend +
// Replace; pre_tokenizer Metaspace), on a tiny vocabulary written here: ids derived by hand (and
// checked against `tokenizers` 0.23.3 with the same files), byte fallback and unknown tokens,
// special tokens, decode, split_point, the word-by-word shortcut against a naive whole-text BPE,
// the to_json round trip, and the errors (each names the file and the key).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/hf_json_fixture.h"
#include "tokenizer/sp_bpe.h"
#include "tokenizer/tiny_sp_tokenizer.h"

namespace attnlab {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;
using test::kMs;
using test::Merges;
using test::sp_json;
using test::tiny_merges;

class HfSentencePiece : public test::HfJsonTest {
 protected:
  HfSentencePiece() : HfJsonTest("hf_sp") {}
};

using test::encode;

Ids with_special(const Tokenizer& t, const std::string& text) {
  Ids ids;
  dynamic_cast<const SentencePieceBpeTokenizer&>(t).encode_with_special(text, ids);
  return ids;
}

TEST_F(HfSentencePiece, LegacyHandDerivedIds) {
  const auto t = load(sp_json("legacy"));
  EXPECT_EQ(t->name(), "sentencepiece-bpe");
  EXPECT_EQ(t->vocab_size(), 281);
  EXPECT_EQ(encode(*t, "hello"), Ids{271});  // ▁h, ▁he, ll, llo, ▁hello
  // "▁world": (o, r) ranks before (▁, w); "d" falls back to its byte.
  EXPECT_EQ(encode(*t, "hello world"), (Ids{271, 277, 265, 103}));
  EXPECT_EQ(encode(*t, "  hello"), (Ids{272, 271}));  // "▁▁▁hello": ▁hello first, then ▁▁
  EXPECT_EQ(encode(*t, " "), Ids{272});               // "▁▁"
  EXPECT_EQ(encode(*t, "ab"), (Ids{259, 280}));       // a+b (rank 9) before ▁+a (rank 10)
  EXPECT_EQ(encode(*t, "cab"), (Ids{259, 262, 280}));
  EXPECT_EQ(encode(*t, "\u00e9"), (Ids{259, 278}));       // a character token
  EXPECT_EQ(encode(*t, "\u00fc"), (Ids{259, 198, 191}));  // <0xC3> <0xBC>
  EXPECT_EQ(encode(*t, "\xFF"), (Ids{259, 258}));         // invalid UTF-8: its byte
  EXPECT_EQ(encode(*t, kMs + "hello"), (Ids{259, 271}));  // a "▁" in the text is a space
  EXPECT_EQ(encode(*t, ""), Ids{});
  EXPECT_EQ(encode(*t, "<s>"), (Ids{259, 3 + '<', 3 + 's', 3 + '>'}));  // text, not the token
}

TEST_F(HfSentencePiece, MetaspaceHandDerivedIds) {
  for (const char* style : {"first", "always", "always-split"}) {
    SCOPED_TRACE(style);
    const auto t = load(sp_json(style));
    EXPECT_EQ(encode(*t, "hello world"), (Ids{271, 277, 265, 103}));
    // No "▁" in front of a text that starts with one (after the replacement).
    EXPECT_EQ(encode(*t, " hello"), Ids{271});
    EXPECT_EQ(encode(*t, kMs + "hello"), Ids{271});
    EXPECT_EQ(encode(*t, " "), Ids{259});
    EXPECT_EQ(encode(*t, ""), Ids{});
  }
  // "▁▁hello": without split ▁h comes first (rank 0); with split "▁", "▁hello" are pieces.
  EXPECT_EQ(encode(*load(sp_json("first")), "  hello"), (Ids{259, 271}));
  EXPECT_EQ(encode(*load(sp_json("always-split")), "  hello"), (Ids{259, 271}));
  // "a▁▁b" vs split: ▁▁ merges only without split.
  EXPECT_EQ(encode(*load(sp_json("first")), "x  b"), (Ids{259, 3 + 'x', 272, 261}));
  EXPECT_EQ(encode(*load(sp_json("always-split")), "x  b"), (Ids{259, 3 + 'x', 259, 259, 261}));
}

TEST_F(HfSentencePiece, SpecialTokensPerSpelling) {
  const auto legacy = load(sp_json("legacy"), "legacy.json");
  const auto first = load(sp_json("first"), "first.json");
  const auto always = load(sp_json("always"), "always.json");
  for (const auto* t : {legacy.get(), first.get(), always.get()}) {
    EXPECT_EQ(t->bos_id(), 1);
    EXPECT_EQ(t->eot_id(), 2);
  }
  // The text after a special token is normalized on its own: Prepend always puts "▁" in front,
  // Metaspace "first" only at the start of the whole text.
  EXPECT_EQ(with_special(*legacy, "<s>hello"), (Ids{1, 271}));
  EXPECT_EQ(with_special(*first, "<s>hello"), (Ids{1, 263, 264, 270}));
  EXPECT_EQ(with_special(*always, "<s>hello"), (Ids{1, 271}));
  EXPECT_EQ(with_special(*first, "a<s> hello</s>"), (Ids{279, 1, 271, 2}));
  // No post_processor in a legacy file: <s> all the same (transformers adds it).
  json j = sp_json("legacy");
  j["post_processor"] = nullptr;
  EXPECT_EQ(load(j, "nopp.json")->bos_id(), 1);
}

TEST_F(HfSentencePiece, UnknownWithoutByteFallback) {
  json j = sp_json("legacy");
  j["model"]["byte_fallback"] = false;
  EXPECT_EQ(encode(*load(j, "fused.json"), "\u00fc\u00fcab"), (Ids{259, 0, 280}));
  j["model"]["fuse_unk"] = false;
  EXPECT_EQ(encode(*load(j, "unfused.json"), "\u00fc\u00fcab"), (Ids{259, 0, 0, 280}));
}

TEST_F(HfSentencePiece, Decode) {
  const auto legacy = load(sp_json("legacy"), "legacy.json");
  const auto first = load(sp_json("first"), "first.json");
  EXPECT_EQ(legacy->decode(Ids{271, 277, 265, 103}), "hello world");
  EXPECT_EQ(legacy->piece(271), " hello");
  EXPECT_EQ(legacy->piece(3 + 0xC3), "\xC3");
  EXPECT_EQ(legacy->piece(1), "<s>");
  // Documents one after the other, each its own encode() call behind a special token.
  Ids ids = {1};
  legacy->encode("hello", ids);
  ids.push_back(2);
  legacy->encode(" world", ids);
  EXPECT_EQ(legacy->decode(ids), "<s>hello</s> world");
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    std::string text(rng() % 60, '\0');
    for (char& c : text) c = char(trial % 2 ? rng() % 256 : " helowrdabc\xC3\xA9"[rng() % 13]);
    for (size_t p; (p = text.find(kMs)) != std::string::npos;) text[p] = 'x';  // decodes as ' '
    EXPECT_EQ(legacy->decode(encode(*legacy, text)), text);
    if (!text.empty() && text[0] == ' ') text[0] = 'y';  // Metaspace: " x" encodes like "x"
    EXPECT_EQ(first->decode(encode(*first, text)), text);
  }
}

// A whole-text BPE straight from the definition (normalize, one symbol per character or byte,
// merge the lowest-ranked pair, the leftmost on a tie): no words, no tables, no cache.
Ids naive_encode(const SpVocabData& d, const std::string& text) {
  if (text.empty()) return {};
  const bool starts_with_space = text.rfind(kMs, 0) == 0 || text[0] == ' ';
  std::string norm = d.prefix == SpPrefix::kPrepend || !starts_with_space ? kMs : "";
  for (char c : text) norm += c == ' ' ? kMs : std::string(1, c);
  std::map<std::string, int32_t> id;
  for (size_t i = 0; i < d.tokens.size(); ++i)
    if (!d.is_special[i]) id[d.tokens[i]] = int32_t(i);
  std::map<std::pair<int32_t, int32_t>, size_t> rank;
  for (size_t r = 0; r < d.merges.size(); ++r) rank.emplace(d.merges[r], r);
  Ids w;
  for (size_t i = 0; i < norm.size();) {
    // One character: a lead byte and its continuation bytes, else one invalid byte.
    const auto c = static_cast<unsigned char>(norm[i]);
    size_t len = c >= 0xC2 && c <= 0xDF   ? 2
                 : c >= 0xE0 && c <= 0xEF ? 3
                 : c >= 0xF0 && c <= 0xF4 ? 4
                                          : 1;
    for (size_t k = 1; k < len; ++k)
      if (i + k >= norm.size() || (static_cast<unsigned char>(norm[i + k]) & 0xC0) != 0x80) len = 1;
    const auto it = id.find(norm.substr(i, len));
    if (it != id.end() && (len > 1 || c < 0x80)) {
      w.push_back(it->second);
    } else {
      for (size_t k = 0; k < len; ++k) w.push_back(3 + static_cast<unsigned char>(norm[i + k]));
    }
    i += len;
  }
  for (;;) {
    size_t best = SIZE_MAX, at = 0;
    for (size_t i = 0; i + 1 < w.size(); ++i) {
      const auto it = rank.find({w[i], w[i + 1]});
      if (it != rank.end() && it->second < best) best = it->second, at = i;
    }
    if (best == SIZE_MAX) return w;
    w[at] = id.at(d.tokens[w[at]] + d.tokens[w[at + 1]]);
    w.erase(w.begin() + at + 1);
  }
}

TEST_F(HfSentencePiece, WordShortcutMatchesWholeTextBpe) {
  // Merges that join "o" or "c" to a following "▁" block the shortcut after those letters only.
  const Merges crossing = {{"o", kMs}, {"c", kMs + "w"}};
  const auto plain = load(sp_json("legacy"), "plain.json");
  const auto cross = load(sp_json("legacy", crossing), "cross.json");
  const auto& cross_sp = dynamic_cast<const SentencePieceBpeTokenizer&>(*cross);
  EXPECT_TRUE(dynamic_cast<const SentencePieceBpeTokenizer&>(*plain).words_are_independent());
  EXPECT_FALSE(cross_sp.words_are_independent());
  EXPECT_EQ(encode(*cross, "xo c"), (Ids{259, 3 + 'x', 281, 262}));  // "o▁" = 281
  EXPECT_EQ(encode(*cross, "c w"), (Ids{259, 282}));                 // "c▁w" = 282
  std::mt19937 rng(3);
  const std::string palette[] = {" ",        "  ",   "a",     "b",      "c",           "o",
                                 "h",        "e",    "l",     "w",      "r",           "d",
                                 "\xC3\xA9", "\xFF", "hello", " world", "\xE2\x96\x81"};
  for (int trial = 0; trial < 400; ++trial) {
    std::string text;
    for (int i = int(rng() % 30); i > 0; --i) text += palette[rng() % 17];
    EXPECT_EQ(encode(*plain, text),
              naive_encode(dynamic_cast<const SentencePieceBpeTokenizer&>(*plain).data(), text))
        << text;
    EXPECT_EQ(encode(*cross, text), naive_encode(cross_sp.data(), text)) << text;
  }
}

TEST_F(HfSentencePiece, SplitPoint) {
  const auto legacy = load(sp_json("legacy"), "legacy.json");
  const auto first = load(sp_json("first"), "first.json");
  const auto cross = load(sp_json("first", {{"o", kMs}}), "cross.json");
  EXPECT_EQ(legacy->split_point("hello world", 0), 11u);  // Prepend: never
  EXPECT_EQ(first->split_point("hello world", 0), 5u);
  EXPECT_EQ(first->split_point("hello world", 6), 11u);
  EXPECT_EQ(first->split_point("a  b", 0), 1u);
  EXPECT_EQ(first->split_point("1 a", 0), 3u);          // not after a digit
  EXPECT_EQ(cross->split_point("hello wab c", 0), 9u);  // not after "o": a merge joins o▁
  // Parts encode like the whole.
  std::mt19937 rng(8);
  const std::string palette[] = {" ",   "  ", "a", "b", "c",        "o",    "he",
                                 "llo", "w",  "d", ".", "\xC3\xA9", "\xFF", "1"};
  int cuts = 0;
  for (const auto* t : {first.get(), cross.get()}) {
    for (int trial = 0; trial < 200; ++trial) {
      std::string text;
      for (int i = int(rng() % 40); i > 0; --i) text += palette[rng() % 14];
      Ids parts;
      for (size_t begin = 0; begin < text.size();) {
        const std::string_view rest = std::string_view(text).substr(begin);
        const size_t p = t->split_point(rest, 1 + rng() % 6);
        cuts += p < rest.size();
        t->encode(rest.substr(0, p), parts);
        begin += p;
      }
      EXPECT_EQ(parts, encode(*t, text)) << text;
    }
  }
  EXPECT_GT(cuts, 300);
}

TEST_F(HfSentencePiece, ToJsonRoundTrip) {
  for (const char* style : {"legacy", "first", "always-split"}) {
    SCOPED_TRACE(style);
    const auto t = load(sp_json(style), std::string(style) + ".json");
    const std::string path = tmp_.file(std::string(style) + "_attnlab.json");
    std::ofstream(path, std::ios::binary) << t->to_json();
    const auto u = make_tokenizer(path);
    EXPECT_EQ(tokenizer_difference(*t, *u), "");
    EXPECT_EQ(u->bos_id(), 1);
    EXPECT_EQ(encode(*u, "  hello world\xFF"), encode(*t, "  hello world\xFF"));
    EXPECT_EQ(json::parse(t->to_json())["kind"], "sentencepiece-bpe");
  }
  EXPECT_NE(
      tokenizer_difference(*load(sp_json("legacy"), "a.json"), *load(sp_json("first"), "b.json")),
      "");
}

TEST_F(HfSentencePiece, UnsupportedFormsAreRefused) {
  json j = sp_json("legacy");
  j["model"]["vocab"].erase("<0x41>");
  expect_error(j, {"byte_fallback", "<0x41>"});

  j = sp_json("legacy");
  j["normalizer"] = {{"type", "NFKC"}};
  expect_error(j, {"normalizer", "NFKC", "not supported"});

  j = sp_json("legacy");
  j["normalizer"]["normalizers"].push_back({{"type", "Lowercase"}});
  expect_error(j, {"normalizer", "Lowercase"});

  j = sp_json("legacy");
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_error(j, {"pre_tokenizer", "Whitespace"});

  j = sp_json("first");
  j["pre_tokenizer"]["replacement"] = "_";
  expect_error(j, {"pre_tokenizer.replacement"});

  j = sp_json("first");
  j["model"]["ignore_merges"] = true;
  expect_error(j, {"model.ignore_merges"});

  j = sp_json("legacy");
  j["added_tokens"][1]["normalized"] = true;
  expect_error(j, {"added_tokens[1].normalized"});

  j = sp_json("legacy");
  j["decoder"]["decoders"][3]["start"] = 2;
  expect_error(j, {"decoder", "Strip"});

  j = sp_json("legacy");
  j["model"]["byte_fallback"] = false;
  j["model"]["unk_token"] = nullptr;
  expect_error(j, {"unknown token"});

  j = sp_json("legacy");
  j["model"]["unk_token"] = "<nope>";
  expect_error(j, {"model.unk_token", "<nope>"});

  j = sp_json("legacy");
  j["model"]["vocab"].erase(kMs);
  j["model"]["merges"] = json::array({"l l"});
  expect_error(j, {"U+2581"});
}

}  // namespace
}  // namespace attnlab
