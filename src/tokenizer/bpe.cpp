#include "tokenizer/bpe.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/bpe_core.h"
#include "tokenizer/pretokenize.h"

namespace attnlab {

using bpe_detail::hash_bytes;
using bpe_detail::MergeTable;

// ---- GPT-2 byte <-> symbol map ------------------------------------------------------------------

namespace {

struct ByteSymbolMap {
  uint32_t byte_to_cp[256];
  int16_t cp_to_byte[512];  // -1: not a symbol (all symbols are < U+0200)
};

ByteSymbolMap build_byte_symbol_map() {
  ByteSymbolMap m;
  std::fill(std::begin(m.cp_to_byte), std::end(m.cp_to_byte), int16_t(-1));
  uint32_t next_extra = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    m.byte_to_cp[b] = printable ? uint32_t(b) : next_extra++;
    m.cp_to_byte[m.byte_to_cp[b]] = int16_t(b);
  }
  return m;
}

const ByteSymbolMap& byte_symbol_map() {
  static const ByteSymbolMap m = build_byte_symbol_map();
  return m;
}

}  // namespace

std::string gpt2_bytes_to_symbols(std::string_view bytes) {
  const ByteSymbolMap& m = byte_symbol_map();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) bpe_detail::append_utf8(m.byte_to_cp[b], out);
  return out;
}

bool gpt2_symbols_to_bytes(std::string_view symbols, std::string& out) {
  const ByteSymbolMap& m = byte_symbol_map();
  std::string bytes;
  bytes.reserve(symbols.size());
  const auto* s = reinterpret_cast<const unsigned char*>(symbols.data());
  size_t i = 0;
  while (i < symbols.size()) {
    uint32_t cp;
    if (s[i] < 0x80) {
      cp = s[i];
      i += 1;
    } else if ((s[i] & 0xE0) == 0xC0 && i + 1 < symbols.size() && (s[i + 1] & 0xC0) == 0x80) {
      cp = ((s[i] & 0x1F) << 6) | (s[i + 1] & 0x3F);
      i += 2;
    } else {
      return false;  // every symbol is below U+0800
    }
    if (cp >= 512 || m.cp_to_byte[cp] < 0) return false;
    bytes += char(m.cp_to_byte[cp]);
  }
  out = std::move(bytes);
  return true;
}

// ---- lookup tables ------------------------------------------------------------------------------

struct BpeTokenizer::Tables {
  int32_t byte_id[256];
  // Vocabulary lookup (bytes -> id) for whole pre-tokens: the non-special tokens whose own BPE is
  // themselves, or with ignore_merges every non-special token.
  bpe_detail::TokenTable vocab;
  MergeTable merges;
  std::vector<std::pair<std::string, int32_t>> specials;  // text, id (longest first)
  PretokenEndFn pretoken_end = nullptr;
};

BpeTokenizer::~BpeTokenizer() = default;

BpeTokenizer::BpeTokenizer(BpeVocabData data, const std::string& origin)
    : data_(std::move(data)),
      tables_(std::make_unique<Tables>()),
      serial_(bpe_detail::next_tokenizer_serial()) {
  const size_t V = data_.tokens.size();
  ATTN_REQUIRE(V > 0, "%s: the vocabulary is empty", origin.c_str());
  ATTN_ASSERT(data_.has_token.size() == V && data_.is_special.size() == V);
  Tables& t = *tables_;

  // Every non-special token, by its bytes (a duplicate would make the byte string ambiguous).
  std::unordered_map<std::string_view, int32_t> by_bytes;
  by_bytes.reserve(V * 2);
  for (size_t id = 0; id < V; ++id) {
    if (!data_.has_token[id] || data_.is_special[id]) continue;
    const std::string& tok = data_.tokens[id];
    ATTN_REQUIRE(!tok.empty(), "%s: token %zu is empty", origin.c_str(), id);
    auto [it, inserted] = by_bytes.emplace(tok, int32_t(id));
    ATTN_REQUIRE(inserted, "%s: tokens %d and %zu have the same bytes '%s'", origin.c_str(),
                 it->second, id, gpt2_bytes_to_symbols(tok).c_str());
  }
  for (int b = 0; b < 256; ++b) {
    const char byte = char(b);
    auto it = by_bytes.find(std::string_view(&byte, 1));
    ATTN_REQUIRE(it != by_bytes.end(),
                 "%s: byte 0x%02X has no token (a byte-level BPE vocabulary needs all 256)",
                 origin.c_str(), b);
    t.byte_id[b] = it->second;
  }

  // Merges.
  const size_t M = data_.merges.size();
  t.merges = MergeTable(M);
  for (size_t r = 0; r < M; ++r) {
    const auto [a, b] = data_.merges[r];
    auto valid = [&](int32_t id) {
      return id >= 0 && size_t(id) < V && data_.has_token[id] && !data_.is_special[id];
    };
    ATTN_REQUIRE(valid(a) && valid(b),
                 "%s: merge %zu refers to token ids %d, %d, which are not "
                 "ordinary tokens",
                 origin.c_str(), r, a, b);
    const std::string joined = data_.tokens[a] + data_.tokens[b];
    auto it = by_bytes.find(joined);
    ATTN_REQUIRE(it != by_bytes.end(),
                 "%s: merge %zu ('%s' + '%s') makes '%s', which is not in "
                 "the vocabulary",
                 origin.c_str(), r, gpt2_bytes_to_symbols(data_.tokens[a]).c_str(),
                 gpt2_bytes_to_symbols(data_.tokens[b]).c_str(),
                 gpt2_bytes_to_symbols(joined).c_str());
    uint32_t earlier = 0;
    ATTN_REQUIRE(t.merges.add(a, b, it->second, earlier),
                 "%s: merge %zu ('%s' + '%s') repeats merge %u", origin.c_str(), r,
                 gpt2_bytes_to_symbols(data_.tokens[a]).c_str(),
                 gpt2_bytes_to_symbols(data_.tokens[b]).c_str(), earlier);
  }
  t.pretoken_end = pretoken_end_fn(data_.pre_tokenizer);

  ATTN_REQUIRE(data_.eot_id >= 0 && size_t(data_.eot_id) < V && data_.has_token[data_.eot_id],
               "%s: no end-of-text token", origin.c_str());
  ATTN_REQUIRE(
      data_.bos_id == -1 || (data_.bos_id >= 0 && size_t(data_.bos_id) < V &&
                             data_.has_token[data_.bos_id] && data_.is_special[data_.bos_id]),
      "%s: the beginning-of-sequence id %d is not a special token", origin.c_str(), data_.bos_id);
  for (size_t id = 0; id < V; ++id)
    if (data_.has_token[id] && data_.is_special[id])
      t.specials.emplace_back(data_.tokens[id], int32_t(id));
  std::sort(t.specials.begin(), t.specials.end(),
            [](const auto& x, const auto& y) { return x.first.size() > y.first.size(); });

  // The whole-piece lookup table. With ignore_merges every token (that is the option's meaning);
  // otherwise only tokens that BPE to themselves, so that the shortcut never changes the result
  // (true for every GPT-2 token; not guaranteed for arbitrary vocabularies).
  t.vocab.reset(V);
  std::vector<int32_t> ids;
  for (const auto& [tok, id] : by_bytes) {
    if (tok.size() < 2) continue;  // single bytes take the byte_id path
    if (!data_.ignore_merges) {
      ids.clear();
      encode_piece(tok, ids);
      if (ids.size() != 1 || ids[0] != id) continue;
    }
    t.vocab.insert(tok, id);
  }
}

// ---- merging ------------------------------------------------------------------------------------

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out,
                                BpeMergeMethod method) const {
  const Tables& t = *tables_;
  const auto* s = reinterpret_cast<const unsigned char*>(piece.data());
  const size_t n = piece.size();
  if (n == 0) return;
  if (method == BpeMergeMethod::kAuto)
    method = n <= MergeTable::kLinearMax ? BpeMergeMethod::kLinearScan : BpeMergeMethod::kHeap;
  if (method == BpeMergeMethod::kLinearScan && n <= MergeTable::kLinearMax) {
    int32_t ids[MergeTable::kLinearMax];
    for (size_t i = 0; i < n; ++i) ids[i] = t.byte_id[s[i]];
    out.insert(out.end(), ids, ids + t.merges.merge_linear(ids, n));
  } else {
    const size_t before = out.size();
    out.resize(before + n);
    for (size_t i = 0; i < n; ++i) out[before + i] = t.byte_id[s[i]];
    out.resize(before + t.merges.merge_heap(out.data() + before, n));
  }
}

// ---- encode / decode ----------------------------------------------------------------------------

void BpeTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  encode_ordinary(text, out);
}

void BpeTokenizer::encode_ordinary(std::string_view text, std::vector<int32_t>& out) const {
  const Tables& t = *tables_;
  bpe_detail::PieceCache& cache = bpe_detail::thread_cache(serial_);
  bpe_detail::reserve_more(out, text.size() / 4 + 16);
  const PretokenEndFn pretoken_end = t.pretoken_end;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = pretoken_end(text, pos);
    const std::string_view piece = text.substr(pos, end - pos);
    pos = end;
    const auto* s = reinterpret_cast<const unsigned char*>(piece.data());
    if (piece.size() == 1) {
      out.push_back(t.byte_id[s[0]]);
      continue;
    }
    const uint64_t h = hash_bytes(piece);
    const int32_t id = t.vocab.find(data_.tokens, piece, h);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    if (cache.find(piece, h, out)) continue;
    const size_t before = out.size();
    encode_piece(piece, out);
    cache.insert(piece, h, out.data() + before, out.size() - before);
  }
}

void BpeTokenizer::encode_with_special(std::string_view text, std::vector<int32_t>& out) const {
  bpe_detail::walk_specials(tables_->specials, text, out,
                            [&](std::string_view part, size_t) { encode_ordinary(part, out); });
}

// Why a cut at p with text[p-1] an ASCII letter, text[p] == ' ' and text[p+1] an ASCII letter
// keeps the ids: encode() is the concatenation of the BPE of each GPT-2 pre-token, so it is
// enough that pre-tokenizing text[0, p) and text[p, end) separately gives the pre-tokens of the
// whole text. Go through the alternatives of the pattern (pretokenize.h):
// - The pre-token holding the letter at p-1 ends at p. A contraction ('s 't 're 've 'm 'll 'd) is
//   an apostrophe and letters, so one holding p-1 must end there ('re, 've, 'll would need a
//   letter at p, which is a space). ` ?\p{L}+` stops at the first non-letter: at p. Numbers,
//   `[^\s\p{L}\p{N}]+` and whitespace runs cannot hold a letter. So there is a pre-token
//   boundary at p in the whole text.
// - text[0, p) alone: every pre-token before p is decided by the characters up to and including
//   the first one it does not take (greedy runs; the whitespace rule's (?!\S) looks one character
//   past its run). A pre-token ending at or before p-1 looks at most at p-1, which is in the
//   prefix. The one ending at p looked at text[p] (a space, not a letter, so the run stops) and,
//   for a contraction, at text[p] to rule out 're/'ve/'ll: in the prefix that character is
//   missing, which also stops the run and also rules out the longer contraction. The whitespace
//   rule's special case at the end of the text does not apply: the prefix ends in a letter.
// - text[p, end) alone: the pattern has no look-behind, so the pre-tokens from a boundary on
//   depend only on the text from there: " x..." is matched by ` ?\p{L}+` in both cases, and the
//   rest follows identically. (The letter at p+1 is not needed by this argument, and the whitespace
//   rule would make most cuts before " <letter>" safe even without the letter at p-1; the
//   stricter rule keeps the argument short, and ordinary prose has such a place every few bytes.)
// The LLaMA 3 and Qwen2 patterns give the same argument: the pre-token holding the letter at p-1
// is a contraction (only letters after the apostrophe; the longer ones need a letter at p) or
// `[^\r\n\p{L}\p{N}]?\p{L}+`, whose letter run stops at the space, in the whole text and in the
// prefix alike; from p on, " x..." is matched by `[^\r\n\p{L}\p{N}]?\p{L}+` (a space is none of
// \r, \n, a letter, a number) in both cases, and these patterns have no look-behind either.
// ASCII letters are single bytes, never part of a multi-byte UTF-8 character, so the byte tests
// see whole characters.
size_t BpeTokenizer::split_point(std::string_view text, size_t near) const {
  const size_t n = text.size();
  if (near >= n) return n;
  const auto is_letter = [](unsigned char c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; };
  const size_t stop = std::min(n - 1, near + kSplitScanBytes);  // p + 1 must be < n
  for (size_t p = std::max<size_t>(near, 1); p < stop; ++p) {
    const void* hit = std::memchr(text.data() + p, ' ', stop - p);
    if (!hit) break;
    p = size_t(static_cast<const char*>(hit) - text.data());
    if (is_letter(text[p - 1]) && is_letter(text[p + 1])) return p;
  }
  return n;
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  size_t total = 0;
  for (int32_t id : ids) {
    ATTN_REQUIRE(id >= 0 && size_t(id) < data_.tokens.size() && data_.has_token[id],
                 "%s: token id %d is not in the vocabulary (size %d)", name().c_str(), id,
                 vocab_size());
    total += data_.tokens[id].size();
  }
  std::string s;
  s.reserve(total);
  for (int32_t id : ids) s += data_.tokens[id];
  return s;
}

std::string BpeTokenizer::piece(int32_t id) const {
  ATTN_REQUIRE(id >= 0 && size_t(id) < data_.tokens.size() && data_.has_token[id],
               "%s: token id %d is not in the vocabulary (size %d)", name().c_str(), id,
               vocab_size());
  return data_.tokens[id];
}

// ---- to_json ------------------------------------------------------------------------------------

std::string BpeTokenizer::to_json() const {
  nlohmann::ordered_json j;
  j["format"] = "attnlab-tokenizer";
  j["version"] = 2;
  j["type"] = "bpe";
  j["kind"] = "byte-level-bpe";
  j["name"] = data_.name;
  j["pre_tokenizer"] = pre_tokenizer_name(data_.pre_tokenizer);
  j["ignore_merges"] = data_.ignore_merges;
  j["byte_encoding"] = "gpt2-bytes-to-unicode";
  j["vocab_size"] = vocab_size();
  j["eot_id"] = data_.eot_id;
  j["bos_id"] = data_.bos_id;
  nlohmann::ordered_json specials = nlohmann::ordered_json::array();
  nlohmann::ordered_json tokens = nlohmann::ordered_json::array();
  for (size_t id = 0; id < data_.tokens.size(); ++id) {
    if (!data_.has_token[id]) {
      tokens.push_back(nullptr);
      continue;
    }
    tokens.push_back(gpt2_bytes_to_symbols(data_.tokens[id]));
    if (data_.is_special[id]) specials.push_back(id);
  }
  j["special_ids"] = std::move(specials);
  j["tokens"] = std::move(tokens);
  nlohmann::ordered_json merges = nlohmann::ordered_json::array();
  for (const auto& [a, b] : data_.merges)
    merges.push_back(gpt2_bytes_to_symbols(data_.tokens[a]) + " " +
                     gpt2_bytes_to_symbols(data_.tokens[b]));
  j["merges"] = std::move(merges);
  return j.dump();
}

}  // namespace attnlab
