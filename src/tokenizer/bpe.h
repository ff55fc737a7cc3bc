// Byte-level BPE: GPT-2 (OpenAI's encoder.py, tiktoken "gpt2", Hugging Face ByteLevel BPE
// models), LLaMA 3 and Qwen2 (Hugging Face Split + ByteLevel pre-tokenizers, "ignore_merges").
//
// encode(text) = for each pre-token (GPT-2, LLaMA 3 or Qwen2 pattern: src/tokenizer/pretokenize.h):
// with ignore_merges, a pre-token that is itself a vocabulary entry is that entry; otherwise start
// from one token per byte, then repeatedly merge the adjacent pair with the lowest merge rank (the
// leftmost one on a tie) until no adjacent pair is in the merge list. `encode` treats the text as
// ordinary text: the characters of a special token ("<|endoftext|>", "<|begin_of_text|>") in it
// are encoded as text, never as the special token (the data pipeline inserts eot_id() itself);
// encode_with_special() is the variant that maps them.
//
// Speed: a pre-token that is itself a vocabulary entry whose BPE is that single entry (checked
// for every entry at load time; with ignore_merges, any entry) is looked up in a read-only hash
// table; other pre-tokens go
// through a per-thread cache (no locks, no shared mutable state) and, on a miss, through the
// merge loop (linear scan for short pieces, a heap over a linked list for long ones: O(n log n)).
//
// Files: encoder.json maps token strings to ids and vocab.bpe lists the merges, both in GPT-2's
// "bytes to unicode" spelling (each byte shown as one printable character). Internally every
// token is its raw bytes.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

namespace attnlab {

// GPT-2's reversible byte <-> printable-character map (bytes 33..126, 161..172, 174..255 stand
// for themselves; the other 68 bytes become U+0100.. in order).
std::string gpt2_bytes_to_symbols(std::string_view bytes);  // UTF-8 of the mapped characters
// The inverse; false (out untouched) when `symbols` is not valid UTF-8 of mapped characters.
bool gpt2_symbols_to_bytes(std::string_view symbols, std::string& out);

// The raw contents of a BPE vocabulary, independent of the file format it came from.
struct BpeVocabData {
  // id -> token bytes; ids without a token are allowed (has_token false) and rejected by piece().
  std::vector<std::string> tokens;
  std::vector<bool> has_token;
  std::vector<bool> is_special;  // special tokens are never produced by encode()
  // Merges in rank order (rank 0 first), as token ids; left+right must be a token.
  std::vector<std::pair<int32_t, int32_t>> merges;
  int32_t eot_id = -1;
  int32_t bos_id = -1;       // -1: none
  std::string name = "bpe";  // name() of the tokenizer ("gpt2-bpe" for the GPT-2 files)
  PreTokenizer pre_tokenizer = PreTokenizer::kGpt2;
  // Hugging Face "ignore_merges": a pre-token that is a (non-special) vocabulary entry maps to it
  // directly, even where the merges would not build it.
  bool ignore_merges = false;
};

// Loaders. Errors (missing file, bad JSON, unknown token in a merge, ...) name the file.
// dir/encoder.json + dir/vocab.bpe, or (a Hugging Face GPT-2 directory) dir/vocab.json +
// dir/merges.txt: the same contents under other names. (Hugging Face tokenizer.json:
// src/tokenizer/hf_tokenizer_json.h.)
BpeVocabData load_gpt2_vocab(const std::string& dir);
// `json_text` is the text of a file written by BpeTokenizer::to_json() (version 1 or 2); `path`
// is for messages.
BpeVocabData load_attnlab_bpe_json(const std::string& json_text, const std::string& path);

enum class BpeMergeMethod { kAuto, kLinearScan, kHeap };

class BpeTokenizer final : public Tokenizer {
 public:
  // Validates the data (every byte has a token, merges produce tokens, eot exists, bos is -1 or
  // a special token); `origin` names where it came from in error messages.
  BpeTokenizer(BpeVocabData data, const std::string& origin);
  ~BpeTokenizer() override;

  std::string name() const override { return data_.name; }
  int vocab_size() const override { return int(data_.tokens.size()); }
  int eot_id() const override { return data_.eot_id; }
  int bos_id() const override { return data_.bos_id; }
  void encode(std::string_view text, std::vector<int32_t>& out) const override;
  // The first offset p >= near, at most kSplitScanBytes past it, with text[p-1] an ASCII letter,
  // text[p] == ' ' and text[p+1] an ASCII letter (why that is a safe cut for all three
  // pre-tokenizers: bpe.cpp); text.size() when there is none.
  size_t split_point(std::string_view text, size_t near) const override;
  static constexpr size_t kSplitScanBytes = 1 << 20;
  std::string decode(std::span<const int32_t> ids) const override;
  std::string piece(int32_t id) const override;
  std::string to_json() const override;

  // Like encode(), but every occurrence of a special token's text becomes its id.
  void encode_with_special(std::string_view text, std::vector<int32_t>& out) const override;
  // BPE of one pre-token, without ignore_merges, the lookup table or the cache (tests compare the
  // methods).
  void encode_piece(std::string_view piece, std::vector<int32_t>& out,
                    BpeMergeMethod method = BpeMergeMethod::kAuto) const;
  int num_merges() const { return int(data_.merges.size()); }
  // The vocabulary and merges (what the Hugging Face exporter writes as vocab.json + merges.txt).
  const BpeVocabData& data() const { return data_; }

 private:
  struct Tables;
  void encode_ordinary(std::string_view text, std::vector<int32_t>& out) const;

  BpeVocabData data_;
  std::unique_ptr<Tables> tables_;
  uint64_t serial_;  // identifies this instance to the per-thread caches
};

}  // namespace attnlab
