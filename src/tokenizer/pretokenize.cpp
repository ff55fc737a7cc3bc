#include "tokenizer/pretokenize.h"

#include <algorithm>
#include <array>
#include <string>

namespace attnlab {

namespace unicode {
namespace {

using Table = std::array<CharClass, 0x10000>;

Table build_bmp_table() {
  Table t;
  t.fill(CharClass::kOther);
  for (int i = 0; i < kNumClassRanges && kClassRanges[i].first < 0x10000; ++i) {
    const uint32_t last = std::min<uint32_t>(kClassRanges[i].last, 0xFFFF);
    for (uint32_t cp = kClassRanges[i].first; cp <= last; ++cp) t[cp] = kClassRanges[i].cls;
  }
  return t;
}

const Table& bmp_table() {
  static const Table table = build_bmp_table();
  return table;
}

}  // namespace

CharClass classify(uint32_t cp) {
  if (cp < 0x10000) return bmp_table()[cp];
  const ClassRange* end = kClassRanges + kNumClassRanges;
  const ClassRange* it = std::upper_bound(
      kClassRanges, end, cp, [](uint32_t v, const ClassRange& r) { return v < r.first; });
  if (it == kClassRanges) return CharClass::kOther;
  --it;
  return cp <= it->last ? it->cls : CharClass::kOther;
}

}  // namespace unicode

namespace {

using unicode::CharClass;

constexpr std::array<CharClass, 128> make_ascii_classes() {
  std::array<CharClass, 128> t{};
  for (int c = 0; c < 128; ++c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
      t[c] = CharClass::kLetter;
    else if (c >= '0' && c <= '9')
      t[c] = CharClass::kNumber;
    else if (c == ' ' || (c >= 0x09 && c <= 0x0D))
      t[c] = CharClass::kSpace;
    else
      t[c] = CharClass::kOther;
  }
  return t;
}
constexpr std::array<CharClass, 128> kAsciiClass = make_ascii_classes();

inline bool is_cont(unsigned char b) { return (b & 0xC0) == 0x80; }

// A multi-byte character or an invalid byte at s[0] >= 0x80.
Utf8Char decode_non_ascii(const unsigned char* s, size_t avail) {
  constexpr Utf8Char kInvalid{CharClass::kOther, 1};
  const unsigned b0 = s[0];
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (avail < 2 || !is_cont(s[1])) return kInvalid;
    return {unicode::classify(((b0 & 0x1F) << 6) | (s[1] & 0x3F)), 2};
  }
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (avail < 3) return kInvalid;
    const unsigned b1 = s[1];
    const unsigned lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
    if (b1 < lo || b1 > hi || !is_cont(s[2])) return kInvalid;
    return {unicode::classify(((b0 & 0x0F) << 12) | ((b1 & 0x3F) << 6) | (s[2] & 0x3F)), 3};
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (avail < 4) return kInvalid;
    const unsigned b1 = s[1];
    const unsigned lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
    if (b1 < lo || b1 > hi || !is_cont(s[2]) || !is_cont(s[3])) return kInvalid;
    return {unicode::classify(((b0 & 0x07) << 18) | ((b1 & 0x3F) << 12) | ((s[2] & 0x3F) << 6) |
                              (s[3] & 0x3F)),
            4};
  }
  return kInvalid;  // a continuation byte, C0/C1 (overlong) or F5..FF
}

inline Utf8Char char_at(const unsigned char* s, size_t n, size_t pos) {
  const unsigned char c = s[pos];
  if (c < 0x80) return {kAsciiClass[c], 1};
  return decode_non_ascii(s + pos, n - pos);
}

// End of the maximal run of characters of class `cls` starting at pos.
inline size_t run_end(const unsigned char* s, size_t n, size_t pos, CharClass cls) {
  while (pos < n) {
    const unsigned char c = s[pos];
    if (c < 0x80) {
      if (kAsciiClass[c] != cls) break;
      ++pos;
    } else {
      const Utf8Char ch = decode_non_ascii(s + pos, n - pos);
      if (ch.cls != cls) break;
      pos += ch.len;
    }
  }
  return pos;
}

// Length of a contraction ('s 't 're 've 'm 'll 'd; case-sensitive) at s[pos] == '\'', or 0.
inline size_t contraction_len(const unsigned char* s, size_t n, size_t pos) {
  if (pos + 1 >= n) return 0;
  const unsigned char a = s[pos + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (pos + 2 >= n) return 0;
  const unsigned char b = s[pos + 2];
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

}  // namespace

Utf8Char next_char(const unsigned char* s, size_t avail) { return char_at(s, avail, 0); }

size_t gpt2_pretoken_end(std::string_view text, size_t pos) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  const unsigned char c0 = s[pos];

  // 's|'t|'re|'ve|'m|'ll|'d
  if (c0 == '\'') {
    if (size_t len = contraction_len(s, n, pos)) return pos + len;
  }
  // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional single space (U+0020 only) and a
  // run of one class. The run starts at the first character after the optional space.
  size_t start = pos;
  if (c0 == ' ' && pos + 1 < n) start = pos + 1;
  const Utf8Char first = char_at(s, n, start);
  if (first.cls != CharClass::kSpace) return run_end(s, n, start + first.len, first.cls);
  // `\s+(?!\S)|\s+`. The greedy run of whitespace either reaches the end of the text (the first
  // alternative takes it all) or is followed by a non-space, in which case the first alternative
  // backtracks one character (leaving the last whitespace character to precede the next word),
  // or, for a run of one character, the second alternative takes that character.
  const Utf8Char c = char_at(s, n, pos);
  size_t last_start = pos;
  size_t end = pos + c.len;
  while (end < n) {
    const Utf8Char ch = char_at(s, n, end);
    if (ch.cls != CharClass::kSpace) break;
    last_start = end;
    end += ch.len;
  }
  if (end == n || last_start == pos) return end;
  return last_start;
}

namespace {

inline bool is_cr_lf(unsigned char c) { return c == '\r' || c == '\n'; }

inline unsigned char ascii_lower(unsigned char c) { return c >= 'A' && c <= 'Z' ? c | 0x20 : c; }

// Length of a contraction at s[pos] == '\'' under (?i:'s|'t|'re|'ve|'m|'ll|'d), or 0.
inline size_t contraction_len_any_case(const unsigned char* s, size_t n, size_t pos) {
  if (pos + 1 >= n) return 0;
  const unsigned char a = ascii_lower(s[pos + 1]);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (s[pos + 1] == 0xC5 && pos + 2 < n && s[pos + 2] == 0xBF) return 3;  // U+017F long s
  if (pos + 2 >= n) return 0;
  const unsigned char b = ascii_lower(s[pos + 2]);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// The LLaMA 3 pattern (pretokenize.h) with `kMaxDigits` in place of {1,3}. Each step below is
// one alternative, in the pattern's order; an alternative that cannot match falls through.
template <int kMaxDigits>
size_t llama3_style_end(std::string_view text, size_t pos) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  const unsigned char c0 = s[pos];
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  if (c0 == '\'') {
    if (size_t len = contraction_len_any_case(s, n, pos)) return pos + len;
  }
  const Utf8Char first = char_at(s, n, pos);
  const size_t next = pos + first.len;
  // [^\r\n\p{L}\p{N}]?\p{L}+: a letter run, or one character that is neither a letter, a
  // number, \r nor \n (a space, a tab, punctuation...) followed by a letter run.
  if (first.cls == CharClass::kLetter) return run_end(s, n, next, CharClass::kLetter);
  if (first.cls != CharClass::kNumber && !is_cr_lf(c0) && next < n &&
      char_at(s, n, next).cls == CharClass::kLetter)
    return run_end(s, n, next, CharClass::kLetter);
  // \p{N}{1,kMaxDigits}
  if (first.cls == CharClass::kNumber) {
    size_t end = next;
    for (int k = 1; k < kMaxDigits && end < n; ++k) {
      const Utf8Char ch = char_at(s, n, end);
      if (ch.cls != CharClass::kNumber) break;
      end += ch.len;
    }
    return end;
  }
  // ` ?[^\s\p{L}\p{N}]+[\r\n]*`: an optional U+0020, a run of "other", then any \r and \n.
  size_t start = pos;
  if (c0 == ' ' && next < n && char_at(s, n, next).cls == CharClass::kOther) start = next;
  if (start != pos || first.cls == CharClass::kOther) {
    size_t end = run_end(s, n, start, CharClass::kOther);
    while (end < n && is_cr_lf(s[end])) ++end;
    return end;
  }
  // Whitespace. \s*[\r\n]+: when the run holds a \r or \n, \s* backtracks to the last one,
  // and the match ends just after it. Otherwise \s+(?!\S) | \s+ as in the GPT-2 pattern: the
  // run whole at the end of the text, else all but its last character, else (a run of one
  // character) that character.
  size_t last_start = pos, end = next, after_last_newline = is_cr_lf(c0) ? next : 0;
  while (end < n) {
    const Utf8Char ch = char_at(s, n, end);
    if (ch.cls != CharClass::kSpace) break;
    if (is_cr_lf(s[end])) after_last_newline = end + 1;
    last_start = end;
    end += ch.len;
  }
  if (after_last_newline != 0) return after_last_newline;
  if (end == n || last_start == pos) return end;
  return last_start;
}

const std::string kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const std::string kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*)"
    R"(|\s*[\r\n]+|\s+(?!\S)|\s+)";
const std::string kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*)"
    R"(|\s*[\r\n]+|\s+(?!\S)|\s+)";

}  // namespace

size_t llama3_pretoken_end(std::string_view text, size_t pos) {
  return llama3_style_end<3>(text, pos);
}

size_t qwen2_pretoken_end(std::string_view text, size_t pos) {
  return llama3_style_end<1>(text, pos);
}

PretokenEndFn pretoken_end_fn(PreTokenizer kind) {
  switch (kind) {
    case PreTokenizer::kLlama3:
      return llama3_pretoken_end;
    case PreTokenizer::kQwen2:
      return qwen2_pretoken_end;
    case PreTokenizer::kGpt2:
      break;
  }
  return gpt2_pretoken_end;
}

std::vector<std::string_view> pretokenize(PreTokenizer kind, std::string_view text) {
  const PretokenEndFn end_of = pretoken_end_fn(kind);
  std::vector<std::string_view> pieces;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = end_of(text, pos);
    pieces.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return pieces;
}

std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
  return pretokenize(PreTokenizer::kGpt2, text);
}

const char* pre_tokenizer_name(PreTokenizer kind) {
  switch (kind) {
    case PreTokenizer::kLlama3:
      return "llama3";
    case PreTokenizer::kQwen2:
      return "qwen2";
    case PreTokenizer::kGpt2:
      break;
  }
  return "gpt2";
}

bool pre_tokenizer_from_name(std::string_view name, PreTokenizer& kind) {
  for (PreTokenizer k : {PreTokenizer::kGpt2, PreTokenizer::kLlama3, PreTokenizer::kQwen2}) {
    if (name == pre_tokenizer_name(k)) {
      kind = k;
      return true;
    }
  }
  return false;
}

const std::string& pre_tokenizer_pattern(PreTokenizer kind) {
  switch (kind) {
    case PreTokenizer::kLlama3:
      return kLlama3Pattern;
    case PreTokenizer::kQwen2:
      return kQwen2Pattern;
    case PreTokenizer::kGpt2:
      break;
  }
  return kGpt2Pattern;
}

bool pre_tokenizer_from_pattern(std::string_view pattern, PreTokenizer& kind) {
  for (PreTokenizer k : {PreTokenizer::kGpt2, PreTokenizer::kLlama3, PreTokenizer::kQwen2}) {
    if (pattern == pre_tokenizer_pattern(k)) {
      kind = k;
      return true;
    }
  }
  return false;
}

}  // namespace attnlab
