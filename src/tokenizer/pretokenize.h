// Pre-tokenization, written out by hand (no regex engine): splits text into the pieces that one
// of these patterns finds, exactly as a backtracking engine (Python `regex`, Rust fancy-regex in
// tiktoken, Oniguruma in Hugging Face `tokenizers`) does: at each position the first alternative
// that matches wins, and every quantifier is greedy.
//   GPT-2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   LLaMA 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//            ` ?[^\s\p{L}\p{N}]+[\r\n]*`|\s*[\r\n]+|\s+(?!\S)|\s+   (one pattern on two lines)
//   Qwen2:   the LLaMA 3 pattern with \p{N} in place of \p{N}{1,3} (one digit per piece)
// (?i:) makes the contractions match in any ASCII case, and 's also with U+017F (long s), which
// Unicode case folding maps to s (checked against `tokenizers` for every code point).
//
// Input is arbitrary bytes. Well-formed UTF-8 sequences (Unicode Table 3-7: no overlongs, no
// surrogates, at most U+10FFFF) are one character each. Every byte that does not start a
// well-formed sequence is a character of its own of class "other" (like a lone surrogate from
// Python's surrogateescape), so invalid input still splits deterministically and the pieces
// concatenate back to the input byte for byte.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/unicode_tables.h"

namespace attnlab {

// One character at the start of `s` (avail >= 1 bytes): its class and its length in bytes.
struct Utf8Char {
  unicode::CharClass cls;
  uint32_t len;
};
Utf8Char next_char(const unsigned char* s, size_t avail);

// Byte offset one past the end of the pre-token that starts at `pos` (pos < text.size()).
// The result is always > pos.
size_t gpt2_pretoken_end(std::string_view text, size_t pos);
size_t llama3_pretoken_end(std::string_view text, size_t pos);
size_t qwen2_pretoken_end(std::string_view text, size_t pos);

// All pre-tokens of `text`, in order (views into `text`). For tests and tools; the encoder walks
// the text with gpt2_pretoken_end instead.
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

// The pre-tokenizers above, by kind (what a byte-level BPE tokenizer is configured with).
enum class PreTokenizer : uint8_t { kGpt2, kLlama3, kQwen2 };
using PretokenEndFn = size_t (*)(std::string_view text, size_t pos);
PretokenEndFn pretoken_end_fn(PreTokenizer kind);
std::vector<std::string_view> pretokenize(PreTokenizer kind, std::string_view text);
// "gpt2", "llama3", "qwen2" (the spelling in attnlab's tokenizer JSON), and back (false when
// `name` is none of them).
const char* pre_tokenizer_name(PreTokenizer kind);
bool pre_tokenizer_from_name(std::string_view name, PreTokenizer& kind);
// The regular expression each kind implements, exactly as a Hugging Face tokenizer.json spells
// it in a Split pre-tokenizer (after JSON unescaping); false when `pattern` is none of them.
const std::string& pre_tokenizer_pattern(PreTokenizer kind);
bool pre_tokenizer_from_pattern(std::string_view pattern, PreTokenizer& kind);

}  // namespace attnlab
