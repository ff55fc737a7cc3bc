// Building blocks shared by the two BPE tokenizers (bpe.cpp: byte-level, GPT-2 / LLaMA 3;
// sp_bpe.cpp: SentencePiece-style, LLaMA 1-2 / Mistral): hashing, the per-thread cache of
// piece -> ids, and rank-ordered merging over token ids. Internal to src/tokenizer/.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace attnlab::bpe_detail {

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
inline uint64_t hash_bytes(std::string_view s) {
  return hash_bytes(reinterpret_cast<const unsigned char*>(s.data()), s.size());
}

size_t pow2_at_least(size_t n);  // the smallest power of two >= max(n, 16)

// Room for `extra` more ids, keeping geometric growth: a plain reserve(size + extra) would
// reallocate on every call when encode() appends document after document to one vector.
inline void reserve_more(std::vector<int32_t>& v, size_t extra) {
  if (v.capacity() - v.size() < extra) v.reserve(std::max(v.size() + extra, 2 * v.capacity()));
}

void append_utf8(uint32_t cp, std::string& out);

// A fresh number per tokenizer instance: it keys the per-thread caches.
uint64_t next_tokenizer_serial();

// Per-thread cache of piece bytes -> ids. Open addressing; cleared (not evicted) when full, which
// is cheap and keeps lookups lock-free. Pieces longer than kMaxPiece bytes are not cached.
class PieceCache {
 public:
  static constexpr size_t kMaxPiece = 256;
  void reset(uint64_t owner);
  uint64_t owner() const { return owner_; }
  // Appends the cached ids of `piece` (h = hash_bytes(piece)) to out; false on a miss.
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
  void insert(std::string_view piece, uint64_t h, const int32_t* ids, size_t n_ids);

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t key_off = 0, key_len = 0;  // key_len 0: empty (pieces are never empty)
    uint32_t ids_off = 0, ids_len = 0;
  };
  static constexpr size_t kMaxSlots = size_t(1) << 20;      // at most 512K cached pieces
  static constexpr size_t kMaxKeyBytes = size_t(32) << 20;  // and 32 MB of piece bytes
  void place(const Slot& s);
  void grow();

  uint64_t owner_ = 0;
  std::vector<Slot> slots_;
  std::string keys_;
  std::vector<int32_t> ids_;
  size_t count_ = 0;
};

// The calling thread's cache, emptied when it last served another tokenizer than `owner`.
PieceCache& thread_cache(uint64_t owner);

// The merge list as a hash table (left id, right id) -> (rank, merged id), and BPE over ids:
// repeatedly merge the adjacent pair of lowest rank, the leftmost one on a tie, until no adjacent
// pair is a merge. That is the rule of OpenAI's encoder.py and of Hugging Face `tokenizers`
// (whose priority queue breaks rank ties by position).
class MergeTable {
 public:
  static constexpr uint32_t kNoRank = UINT32_MAX;
  static constexpr size_t kLinearMax = 64;  // merge_linear takes at most this many ids

  explicit MergeTable(size_t n_merges = 0);
  // Adds the merge of the next rank (ranks count up from 0). False, with `earlier` set to the
  // rank of the first one, when the pair is already a merge.
  bool add(int32_t left, int32_t right, int32_t merged, uint32_t& earlier);
  uint32_t size() const { return count_; }

  uint32_t rank_of(int32_t a, int32_t b, int32_t& merged) const {
    const uint64_t key = pair_key(a, b);
    const size_t mask = slots_.size() - 1;
    for (size_t i = hash_pair(key) & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (s.key == key) {
        merged = s.merged;
        return s.rank;
      }
      if (s.key == kEmpty) return kNoRank;
    }
  }

  // Both merge ids[0, n) in place and return how many ids are left; they give the same result.
  // merge_linear: O(n^2) but branch-light and allocation-free, the fastest for short pieces
  // (n <= kLinearMax). merge_heap: O(n log n), a min-heap of (rank, position) over a linked list.
  size_t merge_linear(int32_t* ids, size_t n) const;
  size_t merge_heap(int32_t* ids, size_t n) const;
  size_t merge(int32_t* ids, size_t n) const {
    return n <= kLinearMax ? merge_linear(ids, n) : merge_heap(ids, n);
  }

 private:
  static constexpr uint64_t kEmpty = UINT64_MAX;
  struct Slot {
    uint64_t key;
    uint32_t rank;
    int32_t merged;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
  }
  static uint64_t hash_pair(uint64_t key) {
    key *= 0x9E3779B97F4A7C15ull;
    return key ^ (key >> 31);
  }
  std::vector<Slot> slots_;
  uint32_t count_ = 0;
};

// encode_with_special's walk: `text` as ordinary parts and special tokens. `specials` (text, id)
// are sorted longest first, so the longest wins where several start at one position. Calls
// on_part(part, offset) for the text before each special token (maybe empty) and after the last
// (when not empty), and appends each special token's id to `out` in between.
template <class OnPart>
void walk_specials(const std::vector<std::pair<std::string, int32_t>>& specials,
                   std::string_view text, std::vector<int32_t>& out, OnPart on_part) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t best = std::string_view::npos;
    int32_t best_id = -1;
    size_t best_len = 0;
    for (const auto& [str, id] : specials) {
      const size_t at = text.find(str, pos);
      if (at < best) {
        best = at;
        best_id = id;
        best_len = str.size();
      }
    }
    const size_t end = best == std::string_view::npos ? text.size() : best;
    on_part(text.substr(pos, end - pos), pos);
    if (best == std::string_view::npos) return;
    out.push_back(best_id);
    pos = best + best_len;
  }
}

// Token ids by their text: open addressing with linear probing over a power-of-two table of
// (hash, id) slots, for the whole-piece shortcuts of the byte-level and SentencePiece-style
// encoders (read-only once built, so lookups are thread-safe).
class TokenTable {
 public:
  void reset(size_t max_entries) { slots_.assign(pow2_at_least(max_entries * 2 + 1), Slot{0, -1}); }
  void insert(std::string_view text, int32_t id) {
    const size_t mask = slots_.size() - 1;
    const uint64_t h = hash_bytes(text);
    size_t i = h & mask;
    while (slots_[i].id >= 0) i = (i + 1) & mask;
    slots_[i] = {h, id};
  }
  // The id whose text (tokens[id]) is `text` (hash h = hash_bytes(text)), or -1.
  int32_t find(const std::vector<std::string>& tokens, std::string_view text, uint64_t h) const {
    const size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (s.id < 0) return -1;
      if (s.hash == h && tokens[s.id] == text) return s.id;
    }
  }

 private:
  struct Slot {
    uint64_t hash;
    int32_t id;  // -1: empty
  };
  std::vector<Slot> slots_;
};

}  // namespace attnlab::bpe_detail
