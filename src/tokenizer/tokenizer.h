// Tokenizer interface: text <-> token ids. Implementations: the built-in byte-level tokenizer
// (256 byte tokens + <|endoftext|> = 256) and GPT-2 byte-level BPE (src/tokenizer/bpe.*).
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
  virtual int eot_id() const = 0;        // <|endoftext|>
  // Appends the ids of `text` to `out`. Must be thread-safe (const, no shared mutable state).
  virtual void encode(std::string_view text, std::vector<int32_t>& out) const = 0;
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

// "" when a and b map text and ids alike (the same ids, <|endoftext|>, every id's bytes, and
// the ids of a probe text of every byte and some words), else what differs first.
std::string tokenizer_difference(const Tokenizer& a, const Tokenizer& b);

// Spec forms: "byte"; "gpt2:<dir>" (dir holding encoder.json + vocab.bpe, or vocab.json +
// merges.txt);
// "hf:<path/to/tokenizer.json>"; a path to a tokenizer JSON written by to_json().
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
