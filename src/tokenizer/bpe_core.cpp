#include "tokenizer/bpe_core.h"

#include <algorithm>
#include <atomic>
#include <functional>

#include "core/error.h"

namespace attnlab::bpe_detail {

size_t pow2_at_least(size_t n) {
  size_t c = 16;
  while (c < n) c *= 2;
  return c;
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

uint64_t next_tokenizer_serial() {
  static std::atomic<uint64_t> next{1};
  return next++;
}

// ---- PieceCache ---------------------------------------------------------------------------------

void PieceCache::reset(uint64_t owner) {
  owner_ = owner;
  slots_.assign(1 << 14, Slot{});
  keys_.clear();
  ids_.clear();
  count_ = 0;
}

void PieceCache::insert(std::string_view piece, uint64_t h, const int32_t* ids, size_t n_ids) {
  if (piece.empty() || piece.size() > kMaxPiece) return;
  if (2 * (count_ + 1) > slots_.size() || keys_.size() > kMaxKeyBytes) {
    if (slots_.size() >= kMaxSlots || keys_.size() > kMaxKeyBytes) {
      reset(owner_);
    } else {
      grow();
    }
  }
  Slot s{h, uint32_t(keys_.size()), uint32_t(piece.size()), uint32_t(ids_.size()), uint32_t(n_ids)};
  keys_.append(piece);
  ids_.insert(ids_.end(), ids, ids + n_ids);
  place(s);
  ++count_;
}

void PieceCache::place(const Slot& s) {
  const size_t mask = slots_.size() - 1;
  size_t i = s.hash & mask;
  while (slots_[i].key_len != 0) i = (i + 1) & mask;
  slots_[i] = s;
}

void PieceCache::grow() {
  std::vector<Slot> old(slots_.size() * 2);
  old.swap(slots_);
  for (const Slot& s : old)
    if (s.key_len != 0) place(s);
}

PieceCache& thread_cache(uint64_t owner) {
  thread_local PieceCache cache;
  if (cache.owner() != owner) cache.reset(owner);
  return cache;
}

// ---- MergeTable ---------------------------------------------------------------------------------

MergeTable::MergeTable(size_t n_merges)
    : slots_(pow2_at_least(n_merges * 2 + 1), Slot{kEmpty, 0, 0}) {}

bool MergeTable::add(int32_t left, int32_t right, int32_t merged, uint32_t& earlier) {
  if (2 * (size_t(count_) + 1) > slots_.size()) {
    std::vector<Slot> old(slots_.size() * 2, Slot{kEmpty, 0, 0});
    old.swap(slots_);
    const size_t mask = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.key == kEmpty) continue;
      size_t i = hash_pair(s.key) & mask;
      while (slots_[i].key != kEmpty) i = (i + 1) & mask;
      slots_[i] = s;
    }
  }
  const uint64_t key = pair_key(left, right);
  const size_t mask = slots_.size() - 1;
  size_t i = hash_pair(key) & mask;
  while (slots_[i].key != kEmpty) {
    if (slots_[i].key == key) {
      earlier = slots_[i].rank;
      return false;
    }
    i = (i + 1) & mask;
  }
  slots_[i] = {key, count_++, merged};
  return true;
}

size_t MergeTable::merge_linear(int32_t* ids, size_t m) const {
  ATTN_ASSERT(m <= kLinearMax);
  uint32_t rank[kLinearMax];   // rank[i]: rank of the pair (ids[i], ids[i+1])
  int32_t merged[kLinearMax];  // merged[i]: the token that pair becomes
  for (size_t i = 0; i + 1 < m; ++i) rank[i] = rank_of(ids[i], ids[i + 1], merged[i]);
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
    if (bi + 1 < m) rank[bi] = rank_of(ids[bi], ids[bi + 1], merged[bi]);
    if (bi > 0) rank[bi - 1] = rank_of(ids[bi - 1], ids[bi], merged[bi - 1]);
  }
  return m;
}

// A popped candidate is stale (skipped) when either of its tokens has changed since it was pushed.
size_t MergeTable::merge_heap(int32_t* ids, size_t n) const {
  if (n < 2) return n;
  ATTN_REQUIRE(n < size_t(INT32_MAX), "bpe: a single piece of %zu symbols is too long", n);
  struct Node {
    int32_t id, prev, next;  // id -1: merged into its left neighbour
  };
  struct Cand {
    uint32_t rank;
    int32_t pos, left, right, merged;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Node> nodes(n);
  for (size_t i = 0; i < n; ++i) nodes[i] = {ids[i], int32_t(i) - 1, int32_t(i + 1)};
  nodes[n - 1].next = -1;
  std::vector<Cand> heap;
  heap.reserve(n);
  auto push = [&](int32_t pos) {
    const int32_t nx = nodes[pos].next;
    if (nx < 0) return;
    int32_t merged = 0;
    const uint32_t r = rank_of(nodes[pos].id, nodes[nx].id, merged);
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
  size_t m = 0;
  for (int32_t i = 0; i >= 0; i = nodes[i].next) ids[m++] = nodes[i].id;
  return m;
}

}  // namespace attnlab::bpe_detail
