// A 64-bit checksum of a byte stream, to catch bytes of a file that changed after it was
// written (a disk or copy error): attnlab's safetensors files carry the hash of their tensor
// bytes in their header (io/safetensors.h), and the reader checks it on open.
//
// Not cryptographic, and not any published hash (the value is defined here; a test pins it).
// The stream is cut into blocks of kBlockBytes; a block is read as little-endian 64-bit words in
// four lanes (word i to lane i % 4), each step lane = rotl((lane ^ word) * P1, 31) * P2, and its
// last n % 32 bytes go into the block's digest after the lanes. The block digests are chained in
// order with the total length. Every step is a bijection of the state for a fixed input word, so
// a file with one changed word (any number of changed bits within 8 aligned bytes; in the last
// n % 8 bytes, each byte is a word) always gets another hash; other changes go unnoticed with
// probability about 2^-64.
//
// DataHasher takes the stream in pieces of any size (the writer's chunks); data_hash() hashes a
// buffer in one call, its blocks in parallel (OpenMP). Both give the same value.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace attnlab::io {

class DataHasher {
 public:
  static constexpr size_t kBlockBytes = size_t(16) << 20;  // a multiple of the 32-byte stripe

  DataHasher();
  void update(const void* data, size_t bytes);
  // The hash of everything given so far (the hasher may go on taking data afterwards).
  uint64_t digest() const;

  // The digest of one block (at most kBlockBytes) on its own: what update() chains.
  static uint64_t block_digest(const void* data, size_t bytes);
  // The chain's start, its step, and its end over the total length.
  static constexpr uint64_t kChainStart = 0x2545F4914F6CDD1Dull;
  static uint64_t chain(uint64_t state, uint64_t block);
  static uint64_t finish(uint64_t state, uint64_t total_bytes);

 private:
  struct Block {
    uint64_t lanes[4];
    unsigned char pending[32];  // a stripe not yet complete
    size_t n_pending = 0;
    size_t bytes = 0;  // taken into this block so far
    Block();
    void absorb(const unsigned char* p, size_t n);
    uint64_t digest() const;
  };

  Block block_;
  uint64_t state_ = kChainStart;
  uint64_t total_ = 0;
};

// The hash of `bytes` bytes at `data` (blocks in parallel).
uint64_t data_hash(const void* data, size_t bytes);

// 16 lower-case hex digits, and back (false for anything else).
std::string hash_hex(uint64_t h);
bool parse_hash_hex(const std::string& s, uint64_t* h);

}  // namespace attnlab::io
