// SentencePiece-style BPE, as Hugging Face `tokenizers` runs the tokenizer.json of LLaMA 1-2,
// Mistral 7B v0.1, TinyLlama and CodeLlama: a BPE model over Unicode characters with byte
// fallback, where "▁" (U+2581) stands for a space.
//
// encode(text):
// 1. Normalize: every U+0020 becomes "▁", and a "▁" goes in front (SpPrefix says when). The
//    result is one piece (Metaspace with split true: a new piece before every "▁").
// 2. Initial symbols: one per character. A character that is not a vocabulary entry becomes the
//    <0xXX> tokens of its UTF-8 bytes (byte fallback), or, without byte fallback, the unknown
//    token (consecutive ones fused into one with fuse_unk). Bytes that are not valid UTF-8 are
//    characters of their own, never in the vocabulary: they always take the byte fallback, so
//    decode(encode(x)) gives back any byte string.
// 3. Merge by rank (bpe_core.h: the lowest rank first, the leftmost on a tie) over the ids.
// Speed: a merge can join a symbol ending in a character c other than "▁" to one starting with
// "▁" only if some merge's left half ends in c (SentencePiece vocabularies, whose pieces hold "▁"
// only at their start, have no such merge at all). So the piece falls apart before every "▁"
// that follows another character c that no such merge ends in (the set is found at load), into
// words that merge independently with the same result (each side's lowest-ranked pair is merged
// in the same order as in the whole), and words go through a lookup table and a per-thread cache
// as in bpe.cpp.
//
// decode(ids): each id's bytes (piece(): "▁" as a space, <0xXX> as the byte, a special token as
// its text), with the one space that the prefix put in front of an encode() call removed: at the
// start of the ids and right after each special token other than the unknown token (the data
// pipeline separates documents, each its own encode() call, by eot_id()). This inverts encode()
// except where encode itself loses information: a U+2581 in the text comes back as a space, and
// with the Metaspace prefixes a text starting with a space encodes like the text without it.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace attnlab {

// Where the "▁" goes in front of the text (always after replacing U+0020 by "▁").
enum class SpPrefix : uint8_t {
  kPrepend,          // normalizer Prepend("▁") (the "legacy" spelling): in front of every
                     // non-empty text, whatever it starts with
  kMetaspaceFirst,   // pre_tokenizer Metaspace, prepend_scheme "first": in front unless the text
                     // starts with "▁"; in encode_with_special only before the text's first part
  kMetaspaceAlways,  // prepend_scheme "always": the same, and after every special token too
  kMetaspaceNever,   // prepend_scheme "never" (or add_prefix_space false): no "▁" in front
};
const char* sp_prefix_name(SpPrefix p);  // "prepend", "metaspace-first", ...
bool sp_prefix_from_name(std::string_view name, SpPrefix& p);

// The raw contents of a SentencePiece-style BPE vocabulary.
struct SpVocabData {
  // id -> token as spelled in tokenizer.json: UTF-8, "▁" for a space, "<0x41>" for byte 0x41.
  std::vector<std::string> tokens;
  std::vector<bool> has_token;
  std::vector<bool> is_special;  // never produced by encode()
  // Merges in rank order, as token ids; the two spellings joined must be a token.
  std::vector<std::pair<int32_t, int32_t>> merges;
  SpPrefix prefix = SpPrefix::kPrepend;
  bool split_on_metaspace = false;  // Metaspace "split": every "▁" starts a new piece
  bool byte_fallback = true;        // needs all 256 <0xXX> tokens
  bool fuse_unk = false;
  int32_t unk_id = -1;  // required without byte_fallback (HF would drop unknown characters)
  int32_t eot_id = -1;
  int32_t bos_id = -1;
  std::string name = "sentencepiece-bpe";
};

class SentencePieceBpeTokenizer final : public Tokenizer {
 public:
  // Validates the data (byte tokens with byte_fallback, "▁" in the vocabulary, merges make
  // tokens, eot/bos/unk are tokens); `origin` names where it came from in error messages.
  SentencePieceBpeTokenizer(SpVocabData data, const std::string& origin);
  ~SentencePieceBpeTokenizer() override;

  std::string name() const override { return data_.name; }
  int vocab_size() const override { return int(data_.tokens.size()); }
  int eot_id() const override { return data_.eot_id; }
  int bos_id() const override { return data_.bos_id; }
  void encode(std::string_view text, std::vector<int32_t>& out) const override;
  // Prefix kPrepend: text.size() (never cuts: each encode() call puts its own "▁" in front, so
  // encode(a) + encode(b) has one more "▁" than encode(a + b)). The Metaspace prefixes: the first
  // p >= near, at most kSplitScanBytes past it, with text[p] == ' ' and text[p-1] an ASCII letter
  // after which a word may end (see above; any letter for SentencePiece vocabularies), (why:
  // sp_bpe.cpp); text.size() when there is none.
  size_t split_point(std::string_view text, size_t near) const override;
  static constexpr size_t kSplitScanBytes = 1 << 20;
  std::string decode(std::span<const int32_t> ids) const override;
  std::string piece(int32_t id) const override;
  std::string to_json() const override;

  // Like encode(), but every occurrence of a special token's text becomes its id; the text
  // between them is normalized part by part, as Hugging Face does (see SpPrefix).
  void encode_with_special(std::string_view text, std::vector<int32_t>& out) const override;
  // Whether no merge can join another character to a following "▁", so that every "▁" after
  // another character starts a new word (see above; for tests and docs).
  bool words_are_independent() const;
  const SpVocabData& data() const { return data_; }

 private:
  struct Tables;
  void encode_part(std::string_view text, bool first_part, std::vector<int32_t>& out) const;
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  SpVocabData data_;
  std::unique_ptr<Tables> tables_;
  uint64_t serial_;  // identifies this instance to the per-thread caches
};

// The vocabulary of a JSON object written by SentencePieceBpeTokenizer::to_json() ("kind":
// "sentencepiece-bpe"); `path` is for messages.
SpVocabData sp_vocab_from_attnlab_json(const nlohmann::json& j, const std::string& path);

}  // namespace attnlab
