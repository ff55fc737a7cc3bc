// Tokenizer interface: text <-> token ids. Implementations: the built-in byte-level tokenizer
// (256 byte tokens + <|endoftext|> = 256), byte-level BPE (GPT-2, LLaMA 3, Qwen2:
// src/tokenizer/bpe.*) and SentencePiece-style BPE (LLaMA 1-2, Mistral: src/tokenizer/sp_bpe.*).
// Chosen by a spec string through make_tokenizer(); an unknown spec lists the valid forms.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace attnlab {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;  // "byte", "gpt2-bpe", ...
  virtual int vocab_size() const = 0;    // number of ids (including special tokens)
  virtual int eot_id() const = 0;        // the end-of-text token: <|endoftext|>, </s>, ...
  // The token a model of this tokenizer expects before a sequence (<|begin_of_text|> for LLaMA 3,
  // <s> for LLaMA 1-2 and Mistral: what the Hugging Face post_processor puts first); -1 when
  // there is none (GPT-2). encode() never adds it.
  virtual int bos_id() const { return -1; }
  // Appends the ids of `text` to `out`. Must be thread-safe (const, no shared mutable state).
  virtual void encode(std::string_view text, std::vector<int32_t>& out) const = 0;
  // Like encode(), but the text of every special token ("<|eot_id|>", "</s>") becomes its id, as
  // Hugging Face tokenizers encode a text (`generate --special`). encode() for tokenizers
  // without special-token texts (the byte tokenizer).
  virtual void encode_with_special(std::string_view text, std::vector<int32_t>& out) const {
    encode(text, out);
  }
  // A byte offset p >= near (or text.size() when near >= text.size() or no such offset is found
  // nearby) at which `text` can be cut into two parts encoded independently without changing
  // the ids: encode(text[0, p)) followed by encode(text[p, end)) == encode(text). `prepare` cuts
  // long documents there to spread one document over several threads. Pure and thread-safe.
  virtual size_t split_point(std::string_view text, size_t near) const = 0;
  // Bytes of the ids, concatenated (may be invalid UTF-8 when cut inside a character).
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  // The bytes of one id (for `attnlab tokenize` and streaming generation).
  virtual std::string piece(int32_t id) const = 0;
  // A self-describing description written next to checkpoints (JSON text).
  virtual std::string to_json() const = 0;
};

// The id each document starts with, in `prepare`'s shards, text evaluation, `score` and
// generation: the tokenizer's BOS where it has one (LLaMA's <s> / <|begin_of_text|>), else its
// end-of-text token (GPT-2 puts <|endoftext|> before every document).
inline int32_t document_start_id(const Tokenizer& t) {
  return t.bos_id() >= 0 ? t.bos_id() : t.eot_id();
}

// A token's bytes double-quoted and escaped for a terminal (\n, \t, \", \\, other control and
// stray bytes as \xNN), whole UTF-8 characters as they are: `attnlab tokenize`, messages.
std::string quote_piece(const std::string& bytes);

// "" when a and b map text and ids alike (the same ids, end-of-text and beginning-of-sequence
// ids, every id's bytes, the same kind and settings (pre-tokenizer, ignore_merges, "▁" prefix,
// byte fallback), and the ids of probe texts of every byte and some words, numbers, contractions
// and spaces), else what differs first.
std::string tokenizer_difference(const Tokenizer& a, const Tokenizer& b);

// Spec forms: "byte"; "gpt2:<dir>" (dir holding encoder.json + vocab.bpe, or vocab.json +
// merges.txt); "hf:<path/to/tokenizer.json>" (a Hugging Face tokenizer.json: the GPT-2, LLaMA 3 /
// Qwen2 and SentencePiece-style BPE forms of docs/tokenizer.md); a path to a tokenizer JSON
// written by to_json(), or to a Hugging Face tokenizer.json.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec);

// The built-in byte-level tokenizer: id b (0..255) is byte b, 256 is <|endoftext|>.
class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int kEot = 256;
  std::string name() const override { return "byte"; }
  int vocab_size() const override { return 257; }
  int eot_id() const override { return kEot; }
  void encode(std::string_view text, std::vector<int32_t>& out) const override;
  // One id per byte: any offset is a cut point.
  size_t split_point(std::string_view text, size_t near) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  std::string piece(int32_t id) const override;
  std::string to_json() const override;
};

}  // namespace attnlab
