#include "tokenizer/sp_bpe.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/bpe_core.h"
#include "tokenizer/pretokenize.h"

namespace attnlab {

using bpe_detail::hash_bytes;
using bpe_detail::MergeTable;

namespace {

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581, "▁"

// 3 for "▁" at text[pos], 1 for U+0020, 0 otherwise. E2 never continues a UTF-8 sequence, so a
// byte walk finds "▁" only where it is a whole character.
inline size_t metaspace_len(std::string_view text, size_t pos) {
  if (text[pos] == ' ') return 1;
  return text.compare(pos, 3, kMetaspace) == 0 ? 3 : 0;
}

// Token spelling -> byte value for "<0xXX>" (either hex case, as the ByteFallback decoder
// accepts), else -1.
int byte_token_value(std::string_view tok) {
  if (tok.size() != 6 || tok.substr(0, 3) != "<0x" || tok[5] != '>') return -1;
  int v = 0;
  for (char c : tok.substr(3, 2)) {
    const int d = c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                         : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

std::string byte_token_spelling(int b) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "<0x%02X>", unsigned(b) & 0xFF);
  return buf;
}

// The code point of the well-formed UTF-8 character at s (len from next_char).
uint32_t code_point(const unsigned char* s, uint32_t len) {
  switch (len) {
    case 1:
      return s[0];
    case 2:
      return ((s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    case 3:
      return ((s[0] & 0x0F) << 12) | ((s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    default:
      return ((s[0] & 0x07) << 18) | ((s[1] & 0x3F) << 12) | ((s[2] & 0x3F) << 6) | (s[3] & 0x3F);
  }
}

// The last character of a token (well-formed UTF-8, as every spelling from a JSON file is).
uint32_t last_code_point(const std::string& tok) {
  size_t i = tok.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(tok[i]) & 0xC0) == 0x80) --i;
  const auto* s = reinterpret_cast<const unsigned char*>(tok.data()) + i;
  return code_point(s, next_char(s, tok.size() - i).len);
}

}  // namespace

const char* sp_prefix_name(SpPrefix p) {
  switch (p) {
    case SpPrefix::kMetaspaceFirst:
      return "metaspace-first";
    case SpPrefix::kMetaspaceAlways:
      return "metaspace-always";
    case SpPrefix::kMetaspaceNever:
      return "metaspace-never";
    case SpPrefix::kPrepend:
      break;
  }
  return "prepend";
}

bool sp_prefix_from_name(std::string_view name, SpPrefix& p) {
  for (SpPrefix q : {SpPrefix::kPrepend, SpPrefix::kMetaspaceFirst, SpPrefix::kMetaspaceAlways,
                     SpPrefix::kMetaspaceNever}) {
    if (name == sp_prefix_name(q)) {
      p = q;
      return true;
    }
  }
  return false;
}

struct SentencePieceBpeTokenizer::Tables {
  int32_t ascii_id[128];                          // -1: the character is not a token
  std::unordered_map<uint32_t, int32_t> char_id;  // code points >= 128
  int32_t byte_id[256];                           // the <0xXX> tokens (byte_fallback)
  MergeTable merges;
  // Whole words (normalized) that are tokens whose own BPE is themselves.
  bpe_detail::TokenTable words;
  std::vector<std::string> pieces;                        // id -> bytes
  std::vector<std::pair<std::string, int32_t>> specials;  // text, id (longest first)
  // The last characters of the left halves of merges that join a symbol ending in another
  // character than "▁" to one starting with "▁" (sorted; usually none).
  std::vector<uint32_t> crossing_ends;
  uint32_t fallback_end = '>';  // the last character of a symbol that is not the character

  // Whether a word may end after the character `cp` (valid: well-formed UTF-8) when "▁" follows:
  // the symbol holding it ends in cp itself, or in '>' of "<0xXX>", or in the unknown token's
  // last character; no merge may join that ending to a "▁".
  bool word_may_end_after(uint32_t cp, bool valid) const {
    if (crossing_ends.empty()) return true;
    const uint32_t end = valid && char_token(cp) >= 0 ? cp : fallback_end;
    return !std::binary_search(crossing_ends.begin(), crossing_ends.end(), end);
  }

  int32_t char_token(uint32_t cp) const {
    if (cp < 128) return ascii_id[cp];
    const auto it = char_id.find(cp);
    return it == char_id.end() ? -1 : it->second;
  }
};

SentencePieceBpeTokenizer::~SentencePieceBpeTokenizer() = default;

SentencePieceBpeTokenizer::SentencePieceBpeTokenizer(SpVocabData data, const std::string& origin)
    : data_(std::move(data)),
      tables_(std::make_unique<Tables>()),
      serial_(bpe_detail::next_tokenizer_serial()) {
  const size_t V = data_.tokens.size();
  ATTN_REQUIRE(V > 0, "%s: the vocabulary is empty", origin.c_str());
  ATTN_ASSERT(data_.has_token.size() == V && data_.is_special.size() == V);
  Tables& t = *tables_;
  auto is_token = [&](int32_t id) { return id >= 0 && size_t(id) < V && data_.has_token[id]; };
  auto is_ordinary = [&](int32_t id) { return is_token(id) && !data_.is_special[id]; };

  std::unordered_map<std::string_view, int32_t> by_spelling;
  by_spelling.reserve(V * 2);
  std::fill(std::begin(t.ascii_id), std::end(t.ascii_id), -1);
  std::fill(std::begin(t.byte_id), std::end(t.byte_id), -1);
  for (size_t id = 0; id < V; ++id) {
    if (!is_ordinary(int32_t(id))) continue;
    const std::string& tok = data_.tokens[id];
    ATTN_REQUIRE(!tok.empty(), "%s: token %zu is empty", origin.c_str(), id);
    auto [it, inserted] = by_spelling.emplace(tok, int32_t(id));
    ATTN_REQUIRE(inserted, "%s: tokens %d and %zu are both '%s'", origin.c_str(), it->second, id,
                 tok.c_str());
    const auto* s = reinterpret_cast<const unsigned char*>(tok.data());
    const Utf8Char ch = next_char(s, tok.size());
    if (ch.len == tok.size() && (ch.len > 1 || s[0] < 0x80)) {
      const uint32_t cp = code_point(s, ch.len);
      if (cp < 128) {
        t.ascii_id[cp] = int32_t(id);
      } else {
        t.char_id[cp] = int32_t(id);
      }
    }
    // Byte fallback looks the bytes up as "<0x%02X>" (upper case), as the library does.
    if (const int b = byte_token_value(tok); b >= 0 && tok == byte_token_spelling(b))
      t.byte_id[b] = int32_t(id);
  }
  if (data_.byte_fallback) {
    for (int b = 0; b < 256; ++b)
      ATTN_REQUIRE(t.byte_id[b] >= 0,
                   "%s: byte_fallback needs the 256 tokens <0x00>..<0xFF>; <0x%02X> is missing",
                   origin.c_str(), b);
  } else {
    ATTN_REQUIRE(is_token(data_.unk_id),
                 "%s: without byte_fallback an unknown token is needed (characters outside the "
                 "vocabulary would be dropped)",
                 origin.c_str());
  }
  ATTN_REQUIRE(t.char_token(0x2581) >= 0,
               "%s: the vocabulary has no token \"\xE2\x96\x81\" (U+2581, the space)",
               origin.c_str());
  ATTN_REQUIRE(is_token(data_.eot_id), "%s: no end-of-text token", origin.c_str());
  ATTN_REQUIRE(data_.bos_id == -1 || (is_token(data_.bos_id) && data_.is_special[data_.bos_id]),
               "%s: the beginning-of-sequence id %d is not a special token", origin.c_str(),
               data_.bos_id);
  ATTN_REQUIRE(data_.unk_id == -1 || is_token(data_.unk_id), "%s: the unknown id %d is not a token",
               origin.c_str(), data_.unk_id);

  // Merges, and the endings of those that join a symbol that ends in another character than "▁" to
  // one that starts with "▁" (see sp_bpe.h: words are independent where no merge can cross).
  const size_t M = data_.merges.size();
  t.merges = MergeTable(M);
  for (size_t r = 0; r < M; ++r) {
    const auto [a, b] = data_.merges[r];
    ATTN_REQUIRE(is_ordinary(a) && is_ordinary(b),
                 "%s: merge %zu refers to token ids %d, %d, which are not ordinary tokens",
                 origin.c_str(), r, a, b);
    const std::string& left = data_.tokens[a];
    const std::string& right = data_.tokens[b];
    const std::string joined = left + right;
    const auto it = by_spelling.find(joined);
    ATTN_REQUIRE(it != by_spelling.end(),
                 "%s: merge %zu ('%s' + '%s') makes '%s', which is not in the vocabulary",
                 origin.c_str(), r, left.c_str(), right.c_str(), joined.c_str());
    uint32_t earlier = 0;
    ATTN_REQUIRE(t.merges.add(a, b, it->second, earlier),
                 "%s: merge %zu ('%s' + '%s') repeats merge %u", origin.c_str(), r, left.c_str(),
                 right.c_str(), earlier);
    if (right.starts_with(kMetaspace) && !left.ends_with(kMetaspace))
      t.crossing_ends.push_back(last_code_point(left));
  }
  std::sort(t.crossing_ends.begin(), t.crossing_ends.end());
  t.crossing_ends.erase(std::unique(t.crossing_ends.begin(), t.crossing_ends.end()),
                        t.crossing_ends.end());
  if (!data_.byte_fallback) t.fallback_end = last_code_point(data_.tokens[data_.unk_id]);

  t.pieces.resize(V);
  for (size_t id = 0; id < V; ++id) {
    if (!data_.has_token[id]) continue;
    const std::string& tok = data_.tokens[id];
    std::string& p = t.pieces[id];
    if (data_.is_special[id]) {
      p = tok;
    } else if (const int b = byte_token_value(tok); b >= 0) {
      p = std::string(1, char(b));
    } else {
      for (size_t i = 0; i < tok.size();) {
        if (tok.compare(i, 3, kMetaspace) == 0) {
          p += ' ';
          i += 3;
        } else {
          p += tok[i++];
        }
      }
    }
    if (data_.is_special[id]) t.specials.emplace_back(tok, int32_t(id));
  }
  std::sort(t.specials.begin(), t.specials.end(),
            [](const auto& x, const auto& y) { return x.first.size() > y.first.size(); });

  // The whole-word table: tokens that BPE to themselves, so the shortcut never changes a result.
  t.words.reset(V);
  std::vector<int32_t> ids;
  for (const auto& [tok, id] : by_spelling) {
    ids.clear();
    merge_word(tok, ids);
    if (ids.size() != 1 || ids[0] != id) continue;
    t.words.insert(tok, id);
  }
}

bool SentencePieceBpeTokenizer::words_are_independent() const {
  return tables_->crossing_ends.empty();
}

// ---- encode -------------------------------------------------------------------------------------

// Initial symbols of a normalized word (one per character, byte fallback, unknown), then merges.
void SentencePieceBpeTokenizer::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  const Tables& t = *tables_;
  const auto* s = reinterpret_cast<const unsigned char*>(word.data());
  const size_t n = word.size(), before = out.size();
  bool in_unknown_run = false;
  for (size_t i = 0; i < n;) {
    const Utf8Char ch = next_char(s + i, n - i);
    const bool valid = ch.len > 1 || s[i] < 0x80;
    const int32_t id = valid ? t.char_token(code_point(s + i, ch.len)) : -1;
    if (id >= 0) {
      out.push_back(id);
      in_unknown_run = false;
    } else if (data_.byte_fallback) {
      for (uint32_t k = 0; k < ch.len; ++k) out.push_back(t.byte_id[s[i + k]]);
    } else if (!(in_unknown_run && data_.fuse_unk)) {
      out.push_back(data_.unk_id);
      in_unknown_run = true;
    }
    i += ch.len;
  }
  out.resize(before + t.merges.merge(out.data() + before, out.size() - before));
}

void SentencePieceBpeTokenizer::encode_word(std::string_view word,
                                            std::vector<int32_t>& out) const {
  const Tables& t = *tables_;
  const uint64_t h = hash_bytes(word);
  const int32_t id = t.words.find(data_.tokens, word, h);
  if (id >= 0) {
    out.push_back(id);
    return;
  }
  bpe_detail::PieceCache& cache = bpe_detail::thread_cache(serial_);
  if (cache.find(word, h, out)) return;
  const size_t before = out.size();
  merge_word(word, out);
  cache.insert(word, h, out.data() + before, out.size() - before);
}

// One part of the text (all of it for encode(); the text between special tokens for
// encode_with_special): normalized into words on the fly, each word encoded as it is complete.
void SentencePieceBpeTokenizer::encode_part(std::string_view text, bool first_part,
                                            std::vector<int32_t>& out) const {
  if (text.empty()) return;
  const Tables& t = *tables_;
  const bool starts_with_metaspace = metaspace_len(text, 0) > 0;
  bool prepend = false;
  switch (data_.prefix) {
    case SpPrefix::kPrepend:
      prepend = true;
      break;
    case SpPrefix::kMetaspaceFirst:
      prepend = first_part && !starts_with_metaspace;
      break;
    case SpPrefix::kMetaspaceAlways:
      prepend = !starts_with_metaspace;
      break;
    case SpPrefix::kMetaspaceNever:
      break;
  }
  bpe_detail::reserve_more(out, text.size() / 3 + 16);
  thread_local std::string word;
  word.clear();
  if (prepend) word += kMetaspace;
  // Whether a word may end here if a "▁" comes next: not after a "▁" (a run of them stays
  // together), nor after a character that a merge can join to a "▁" (Tables::crossing_ends).
  bool may_end = false;
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t pos = 0; pos < text.size();) {
    const size_t ms = metaspace_len(text, pos);
    if (ms == 0) {
      if (t.crossing_ends.empty()) {
        word += text[pos++];
        may_end = true;
      } else {
        const Utf8Char ch = next_char(s + pos, text.size() - pos);
        const bool valid = ch.len > 1 || s[pos] < 0x80;
        may_end = t.word_may_end_after(valid ? code_point(s + pos, ch.len) : 0, valid);
        word.append(text, pos, ch.len);
        pos += ch.len;
      }
      continue;
    }
    if (!word.empty() && (data_.split_on_metaspace || may_end)) {
      encode_word(word, out);
      word.clear();
    }
    word += kMetaspace;
    pos += ms;
    may_end = false;
  }
  if (!word.empty()) encode_word(word, out);
}

void SentencePieceBpeTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  encode_part(text, /*first_part=*/true, out);
}

void SentencePieceBpeTokenizer::encode_with_special(std::string_view text,
                                                    std::vector<int32_t>& out) const {
  bpe_detail::walk_specials(tables_->specials, text, out, [&](std::string_view part, size_t at) {
    encode_part(part, at == 0, out);
  });
}

// Why a cut at p with text[p-1] an ASCII letter and text[p] == ' ' keeps the ids, for the
// Metaspace prefixes: normalizing text[p, end) alone puts no "▁" in front (it starts with a
// space), so the normalized parts, one after the other, are the normalized whole text (text[0, p)
// starts like the whole text, and gets the same prefix). In the normalized whole text, p is a "▁"
// after the letter: a new piece with split_on_metaspace; otherwise, when no merge's left half
// ends in that letter, no merge can ever join the symbol holding the letter to the one starting
// with that "▁", so the merges on either side happen as if the other side were not there (each
// side's lowest-ranked pair is merged in the same order). With kPrepend, text[p, end) would get a
// "▁" of its own that the whole text does not have: no cut.
size_t SentencePieceBpeTokenizer::split_point(std::string_view text, size_t near) const {
  const size_t n = text.size();
  if (near >= n || data_.prefix == SpPrefix::kPrepend) return n;
  const Tables& t = *tables_;
  const auto is_letter = [](unsigned char c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; };
  const size_t stop = std::min(n, near + kSplitScanBytes);
  for (size_t p = std::max<size_t>(near, 1); p < stop; ++p) {
    const void* hit = std::memchr(text.data() + p, ' ', stop - p);
    if (!hit) break;
    p = size_t(static_cast<const char*>(hit) - text.data());
    const unsigned char c = text[p - 1];
    if (is_letter(c) && (data_.split_on_metaspace || t.word_may_end_after(c, true))) return p;
  }
  return n;
}

// ---- decode -------------------------------------------------------------------------------------

std::string SentencePieceBpeTokenizer::decode(std::span<const int32_t> ids) const {
  const Tables& t = *tables_;
  const bool strip = data_.prefix != SpPrefix::kMetaspaceNever;
  std::string s;
  bool part_start = true;
  for (int32_t id : ids) {
    ATTN_REQUIRE(id >= 0 && size_t(id) < data_.tokens.size() && data_.has_token[id],
                 "%s: token id %d is not in the vocabulary (size %d)", name().c_str(), id,
                 vocab_size());
    const std::string& p = t.pieces[id];
    const bool special = data_.is_special[id];
    const size_t skip = strip && part_start && !special && !p.empty() && p[0] == ' ' ? 1 : 0;
    s.append(p, skip);
    part_start = special && id != data_.unk_id;
  }
  return s;
}

std::string SentencePieceBpeTokenizer::piece(int32_t id) const {
  ATTN_REQUIRE(id >= 0 && size_t(id) < data_.tokens.size() && data_.has_token[id],
               "%s: token id %d is not in the vocabulary (size %d)", name().c_str(), id,
               vocab_size());
  return tables_->pieces[id];
}

// ---- attnlab JSON -------------------------------------------------------------------------------

std::string SentencePieceBpeTokenizer::to_json() const {
  nlohmann::ordered_json j;
  j["format"] = "attnlab-tokenizer";
  j["version"] = 2;
  j["type"] = "bpe";
  j["kind"] = "sentencepiece-bpe";
  j["name"] = data_.name;
  j["prefix"] = sp_prefix_name(data_.prefix);
  j["split_on_metaspace"] = data_.split_on_metaspace;
  j["byte_fallback"] = data_.byte_fallback;
  j["fuse_unk"] = data_.fuse_unk;
  j["unk_id"] = data_.unk_id;
  j["vocab_size"] = vocab_size();
  j["eot_id"] = data_.eot_id;
  j["bos_id"] = data_.bos_id;
  nlohmann::ordered_json specials = nlohmann::ordered_json::array();
  nlohmann::ordered_json tokens = nlohmann::ordered_json::array();
  for (size_t id = 0; id < data_.tokens.size(); ++id) {
    tokens.push_back(data_.has_token[id] ? nlohmann::ordered_json(data_.tokens[id]) : nullptr);
    if (data_.has_token[id] && data_.is_special[id]) specials.push_back(id);
  }
  j["special_ids"] = std::move(specials);
  j["tokens"] = std::move(tokens);
  nlohmann::ordered_json merges = nlohmann::ordered_json::array();
  for (const auto& [a, b] : data_.merges) merges.push_back({a, b});
  j["merges"] = std::move(merges);  // pairs of ids, in rank order
  return j.dump();
}

SpVocabData sp_vocab_from_attnlab_json(const nlohmann::json& j, const std::string& path) {
  using nlohmann::json;
  auto field = [&](const char* key) -> const json& {
    ATTN_REQUIRE(j.contains(key), "tokenizer: '%s': missing field \"%s\"", path.c_str(), key);
    return j[key];
  };
  auto integer = [&](const char* key) {
    const json& v = field(key);
    ATTN_REQUIRE(v.is_number_integer(), "tokenizer: '%s': %s is not an integer", path.c_str(), key);
    return v.get<int32_t>();
  };
  auto boolean = [&](const char* key) {
    const json& v = field(key);
    ATTN_REQUIRE(v.is_boolean(), "tokenizer: '%s': %s is not true or false", path.c_str(), key);
    return v.get<bool>();
  };
  SpVocabData d;
  const json& prefix = field("prefix");
  ATTN_REQUIRE(prefix.is_string() && sp_prefix_from_name(prefix.get<std::string>(), d.prefix),
               "tokenizer: '%s': unsupported prefix %s", path.c_str(), prefix.dump().c_str());
  d.split_on_metaspace = boolean("split_on_metaspace");
  d.byte_fallback = boolean("byte_fallback");
  d.fuse_unk = boolean("fuse_unk");
  d.unk_id = integer("unk_id");
  d.eot_id = integer("eot_id");
  d.bos_id = integer("bos_id");
  d.name = j.value("name", d.name);
  const json& tokens = field("tokens");
  const json& special_ids = field("special_ids");
  const json& merges = field("merges");
  ATTN_REQUIRE(tokens.is_array() && special_ids.is_array() && merges.is_array(),
               "tokenizer: '%s': tokens, special_ids and merges must be arrays", path.c_str());
  const size_t V = tokens.size();
  d.tokens.resize(V);
  d.has_token.assign(V, false);
  d.is_special.assign(V, false);
  for (size_t id = 0; id < V; ++id) {
    if (tokens[id].is_null()) continue;
    ATTN_REQUIRE(tokens[id].is_string(), "tokenizer: '%s': tokens[%zu] is not a string",
                 path.c_str(), id);
    d.tokens[id] = tokens[id].get<std::string>();
    d.has_token[id] = true;
  }
  for (const json& id : special_ids) {
    ATTN_REQUIRE(id.is_number_integer() && id.get<int64_t>() >= 0 &&
                     size_t(id.get<int64_t>()) < V && d.has_token[id.get<size_t>()],
                 "tokenizer: '%s': special id %s is not a token id", path.c_str(),
                 id.dump().c_str());
    d.is_special[id.get<size_t>()] = true;
  }
  d.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    ATTN_REQUIRE(
        m.is_array() && m.size() == 2 && m[0].is_number_integer() && m[1].is_number_integer(),
        "tokenizer: '%s': merges[%zu] is not a pair of ids", path.c_str(), i);
    d.merges.emplace_back(m[0].get<int32_t>(), m[1].get<int32_t>());
  }
  return d;
}

}  // namespace attnlab
