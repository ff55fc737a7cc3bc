// GPT-2 pre-tokenization, written out by hand (no regex engine): splits text into the pieces
// that the GPT-2 pattern
//     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// finds, exactly as a backtracking engine (Python `regex`, Rust fancy-regex in tiktoken) does:
// at each position the first alternative that matches wins, and every `+` is greedy.
//
// Input is arbitrary bytes. Well-formed UTF-8 sequences (Unicode Table 3-7: no overlongs, no
// surrogates, at most U+10FFFF) are one character each. Every byte that does not start a
// well-formed sequence is a character of its own of class "other" (like a lone surrogate from
// Python's surrogateescape), so invalid input still splits deterministically and the pieces
// concatenate back to the input byte for byte.
#pragma once
#include <cstddef>
#include <cstdint>
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

// All pre-tokens of `text`, in order (views into `text`). For tests and tools; the encoder walks
// the text with gpt2_pretoken_end instead.
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

}  // namespace attnlab
