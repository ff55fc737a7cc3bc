#include "tokenizer/pretokenize.h"

#include <algorithm>
#include <array>

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

std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
  std::vector<std::string_view> pieces;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = gpt2_pretoken_end(text, pos);
    pieces.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return pieces;
}

}  // namespace attnlab
