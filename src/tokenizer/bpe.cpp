#include "tokenizer/bpe.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/pretokenize.h"

namespace attnlab {

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

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

// A fast non-cryptographic hash of a short byte string (8 bytes per multiply).
inline uint64_t hash_bytes(const unsigned char* p, size_t n) {
  constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
  uint64_t h = 0xC2B2AE3D27D4EB4Full ^ (n * kMul);
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * kMul;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  if (n > 0) {
    uint64_t w = 0;
    std::memcpy(&w, p, n);
    h = (h ^ w) * kMul;
    h ^= h >> 29;
  }
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 32);
}

inline uint64_t hash_pair(uint64_t key) {
  key *= 0x9E3779B97F4A7C15ull;
  return key ^ (key >> 31);
}

size_t pow2_at_least(size_t n) {
  size_t c = 16;
  while (c < n) c *= 2;
  return c;
}

std::atomic<uint64_t> g_next_serial{1};

// Room for `extra` more ids, keeping geometric growth: a plain reserve(size + extra) would
// reallocate on every call when encode() appends document after document to one vector.
void reserve_more(std::vector<int32_t>& v, size_t extra) {
  if (v.capacity() - v.size() < extra) v.reserve(std::max(v.size() + extra, 2 * v.capacity()));
}

constexpr uint32_t kNoRank = UINT32_MAX;
constexpr size_t kLinearMax = 64;       // pieces up to this many bytes use the linear-scan merge
constexpr size_t kCacheMaxPiece = 256;  // longer pieces are not cached

// Per-thread cache of pre-token bytes -> ids, for pre-tokens that are not a single token.
// Open addressing; cleared (not evicted) when full, which is cheap and keeps lookups lock-free.
class PieceCache {
 public:
  void reset(uint64_t owner) {
    owner_ = owner;
    slots_.assign(1 << 14, Slot{});
    keys_.clear();
    ids_.clear();
    count_ = 0;
  }
  uint64_t owner() const { return owner_; }

  // Appends the cached ids of `piece` to out; false on a miss.
  bool find(std::string_view piece, uint64_t h, std::vector<int32_t>& out) const {
    const size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (s.key_len == 0) return false;
      if (s.hash == h && s.key_len == piece.size() &&
          std::memcmp(keys_.data() + s.key_off, piece.data(), piece.size()) == 0) {
        out.insert(out.end(), ids_.begin() + s.ids_off, ids_.begin() + s.ids_off + s.ids_len);
        return true;
      }
    }
  }

  void insert(std::string_view piece, uint64_t h, const int32_t* ids, size_t n_ids) {
    if (piece.size() > kCacheMaxPiece) return;
    if (2 * (count_ + 1) > slots_.size() || keys_.size() > kMaxKeyBytes) {
      if (slots_.size() >= kMaxSlots || keys_.size() > kMaxKeyBytes) {
        reset(owner_);
      } else {
        grow();
      }
    }
    Slot s{h, uint32_t(keys_.size()), uint32_t(piece.size()), uint32_t(ids_.size()),
           uint32_t(n_ids)};
    keys_.append(piece);
    ids_.insert(ids_.end(), ids, ids + n_ids);
    place(s);
    ++count_;
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t key_off = 0, key_len = 0;  // key_len 0: empty (cached pieces have >= 2 bytes)
    uint32_t ids_off = 0, ids_len = 0;
  };
  static constexpr size_t kMaxSlots = size_t(1) << 20;      // at most 512K cached pieces
  static constexpr size_t kMaxKeyBytes = size_t(32) << 20;  // and 32 MB of piece bytes

  void place(const Slot& s) {
    const size_t mask = slots_.size() - 1;
    size_t i = s.hash & mask;
    while (slots_[i].key_len != 0) i = (i + 1) & mask;
    slots_[i] = s;
  }
  void grow() {
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    for (const Slot& s : old)
      if (s.key_len != 0) place(s);
  }

  uint64_t owner_ = 0;
  std::vector<Slot> slots_;
  std::string keys_;
  std::vector<int32_t> ids_;
  size_t count_ = 0;
};

PieceCache& thread_cache(uint64_t owner) {
  thread_local PieceCache cache;
  if (cache.owner() != owner) cache.reset(owner);
  return cache;
}

}  // namespace

std::string gpt2_bytes_to_symbols(std::string_view bytes) {
  const ByteSymbolMap& m = byte_symbol_map();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) append_utf8(m.byte_to_cp[b], out);
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
  // Vocabulary lookup (bytes -> id) for the non-special tokens whose own BPE is themselves.
  struct VocabSlot {
    uint64_t hash;
    int32_t id;  // -1: empty
  };
  std::vector<VocabSlot> vocab_slots;
  // Merge lookup: (left id, right id) -> rank and merged id.
  struct MergeSlot {
    uint64_t key;  // UINT64_MAX: empty
    uint32_t rank;
    int32_t merged;
  };
  std::vector<MergeSlot> merge_slots;
  std::vector<std::pair<std::string, int32_t>> specials;  // text, id (longest first)

  static uint64_t pair_key(int32_t a, int32_t b) {
    return (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
  }

  const MergeSlot* find_merge(int32_t a, int32_t b) const {
    const uint64_t key = pair_key(a, b);
    const size_t mask = merge_slots.size() - 1;
    for (size_t i = hash_pair(key) & mask;; i = (i + 1) & mask) {
      const MergeSlot& s = merge_slots[i];
      if (s.key == key) return &s;
      if (s.key == UINT64_MAX) return nullptr;
    }
  }
  uint32_t rank_of(int32_t a, int32_t b, int32_t& merged) const {
    const MergeSlot* s = find_merge(a, b);
    if (!s) return kNoRank;
    merged = s->merged;
    return s->rank;
  }
  int32_t find_token(const std::vector<std::string>& tokens, std::string_view piece,
                     uint64_t h) const {
    const size_t mask = vocab_slots.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      const VocabSlot& s = vocab_slots[i];
      if (s.id < 0) return -1;
      if (s.hash == h && tokens[s.id] == piece) return s.id;
    }
  }
};

BpeTokenizer::~BpeTokenizer() = default;

BpeTokenizer::BpeTokenizer(BpeVocabData data, const std::string& origin)
    : data_(std::move(data)), tables_(std::make_unique<Tables>()), serial_(g_next_serial++) {
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
  t.merge_slots.assign(pow2_at_least(M * 2 + 1), Tables::MergeSlot{UINT64_MAX, 0, 0});
  const size_t mmask = t.merge_slots.size() - 1;
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
    const uint64_t key = Tables::pair_key(a, b);
    size_t i = hash_pair(key) & mmask;
    while (t.merge_slots[i].key != UINT64_MAX) {
      ATTN_REQUIRE(t.merge_slots[i].key != key, "%s: merge %zu ('%s' + '%s') repeats merge %u",
                   origin.c_str(), r, gpt2_bytes_to_symbols(data_.tokens[a]).c_str(),
                   gpt2_bytes_to_symbols(data_.tokens[b]).c_str(), t.merge_slots[i].rank);
      i = (i + 1) & mmask;
    }
    t.merge_slots[i] = {key, uint32_t(r), it->second};
  }

  ATTN_REQUIRE(data_.eot_id >= 0 && size_t(data_.eot_id) < V && data_.has_token[data_.eot_id],
               "%s: no <|endoftext|> token", origin.c_str());
  for (size_t id = 0; id < V; ++id)
    if (data_.has_token[id] && data_.is_special[id])
      t.specials.emplace_back(data_.tokens[id], int32_t(id));
  std::sort(t.specials.begin(), t.specials.end(),
            [](const auto& x, const auto& y) { return x.first.size() > y.first.size(); });

  // The whole-piece lookup table: only tokens that BPE to themselves, so that the shortcut never
  // changes the result (true for every GPT-2 token; not guaranteed for arbitrary vocabularies).
  t.vocab_slots.assign(pow2_at_least(V * 2 + 1), Tables::VocabSlot{0, -1});
  const size_t vmask = t.vocab_slots.size() - 1;
  std::vector<int32_t> ids;
  for (const auto& [tok, id] : by_bytes) {
    if (tok.size() < 2) continue;  // single bytes take the byte_id path
    ids.clear();
    encode_piece(tok, ids);
    if (ids.size() != 1 || ids[0] != id) continue;
    const uint64_t h = hash_bytes(reinterpret_cast<const unsigned char*>(tok.data()), tok.size());
    size_t i = h & vmask;
    while (t.vocab_slots[i].id >= 0) i = (i + 1) & vmask;
    t.vocab_slots[i] = {h, id};
  }
}

// ---- merging ------------------------------------------------------------------------------------

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out,
                                BpeMergeMethod method) const {
  const auto* s = reinterpret_cast<const unsigned char*>(piece.data());
  const size_t n = piece.size();
  if (n == 0) return;
  if (method == BpeMergeMethod::kAuto)
    method = n <= kLinearMax ? BpeMergeMethod::kLinearScan : BpeMergeMethod::kHeap;
  if (method == BpeMergeMethod::kLinearScan && n <= kLinearMax) {
    merge_linear(s, n, out);
  } else {
    merge_heap(s, n, out);
  }
}

// O(n^2) but branch-light and allocation-free: the fastest for the short pieces of real text.
void BpeTokenizer::merge_linear(const unsigned char* s, size_t n, std::vector<int32_t>& out) const {
  const Tables& t = *tables_;
  int32_t ids[kLinearMax];
  uint32_t rank[kLinearMax];   // rank[i]: rank of the pair (ids[i], ids[i+1])
  int32_t merged[kLinearMax];  // merged[i]: the token that pair becomes
  size_t m = n;
  for (size_t i = 0; i < m; ++i) ids[i] = t.byte_id[s[i]];
  for (size_t i = 0; i + 1 < m; ++i) rank[i] = t.rank_of(ids[i], ids[i + 1], merged[i]);
  while (m > 1) {
    uint32_t best = kNoRank;
    size_t bi = 0;
    for (size_t i = 0; i + 1 < m; ++i) {
      if (rank[i] < best) {
        best = rank[i];
        bi = i;
      }
    }
    if (best == kNoRank) break;
    ids[bi] = merged[bi];
    // Drop ids[bi + 1] and pair bi + 1; pairs bi - 1 and bi now involve the new token.
    for (size_t i = bi + 1; i + 1 < m; ++i) ids[i] = ids[i + 1];
    for (size_t i = bi + 1; i + 2 < m; ++i) {
      rank[i] = rank[i + 1];
      merged[i] = merged[i + 1];
    }
    --m;
    if (bi + 1 < m) rank[bi] = t.rank_of(ids[bi], ids[bi + 1], merged[bi]);
    if (bi > 0) rank[bi - 1] = t.rank_of(ids[bi - 1], ids[bi], merged[bi - 1]);
  }
  out.insert(out.end(), ids, ids + m);
}

// O(n log n): candidate pairs in a min-heap keyed by (rank, position), tokens in a linked list.
// A popped candidate is stale (skipped) when either of its tokens has changed since it was pushed.
void BpeTokenizer::merge_heap(const unsigned char* s, size_t n, std::vector<int32_t>& out) const {
  ATTN_REQUIRE(n < size_t(INT32_MAX), "bpe: a single pre-token of %zu bytes is too long", n);
  const Tables& t = *tables_;
  struct Node {
    int32_t id, prev, next;  // id -1: merged into its left neighbour
  };
  struct Cand {
    uint32_t rank;
    int32_t pos, left, right, merged;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Node> nodes(n);
  for (size_t i = 0; i < n; ++i) nodes[i] = {t.byte_id[s[i]], int32_t(i) - 1, int32_t(i + 1)};
  nodes[n - 1].next = -1;
  std::vector<Cand> heap;
  heap.reserve(n);
  auto push = [&](int32_t pos) {
    const int32_t nx = nodes[pos].next;
    if (nx < 0) return;
    int32_t merged = 0;
    const uint32_t r = t.rank_of(nodes[pos].id, nodes[nx].id, merged);
    if (r == kNoRank) return;
    heap.push_back({r, pos, nodes[pos].id, nodes[nx].id, merged});
    std::push_heap(heap.begin(), heap.end(), std::greater<Cand>());
  };
  for (size_t i = 0; i + 1 < n; ++i) push(int32_t(i));
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<Cand>());
    const Cand c = heap.back();
    heap.pop_back();
    Node& left = nodes[c.pos];
    if (left.id != c.left || left.next < 0 || nodes[left.next].id != c.right) continue;
    Node& right = nodes[left.next];
    left.id = c.merged;
    right.id = -1;
    left.next = right.next;
    if (right.next >= 0) nodes[right.next].prev = c.pos;
    if (left.prev >= 0) push(left.prev);
    push(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = nodes[i].next) out.push_back(nodes[i].id);
}

// ---- encode / decode ----------------------------------------------------------------------------

void BpeTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  encode_ordinary(text, out);
}

void BpeTokenizer::encode_ordinary(std::string_view text, std::vector<int32_t>& out) const {
  const Tables& t = *tables_;
  PieceCache& cache = thread_cache(serial_);
  reserve_more(out, text.size() / 4 + 16);
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = gpt2_pretoken_end(text, pos);
    const std::string_view piece = text.substr(pos, end - pos);
    pos = end;
    const auto* s = reinterpret_cast<const unsigned char*>(piece.data());
    if (piece.size() == 1) {
      out.push_back(t.byte_id[s[0]]);
      continue;
    }
    const uint64_t h = hash_bytes(s, piece.size());
    const int32_t id = t.find_token(data_.tokens, piece, h);
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
  const auto& specials = tables_->specials;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t best = std::string_view::npos;
    int32_t best_id = -1;
    size_t best_len = 0;
    for (const auto& [str, id] : specials) {  // longest first: wins ties at the same position
      const size_t at = text.find(str, pos);
      if (at < best) {
        best = at;
        best_id = id;
        best_len = str.size();
      }
    }
    if (best == std::string_view::npos) {
      encode_ordinary(text.substr(pos), out);
      return;
    }
    encode_ordinary(text.substr(pos, best - pos), out);
    out.push_back(best_id);
    pos = best + best_len;
  }
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
  j["version"] = 1;
  j["type"] = "bpe";
  j["name"] = data_.name;
  j["pre_tokenizer"] = "gpt2";
  j["byte_encoding"] = "gpt2-bytes-to-unicode";
  j["vocab_size"] = vocab_size();
  j["eot_id"] = data_.eot_id;
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
