// The buffers of the warp-specialised fused launch (focus_hard_ws.cu) as host/device functions:
// the kernel runs them, and a CPU test (tests/ops/test_focus_hard_ws_ring.cpp) replays the
// producer and the consumers on a model of the mbarriers, over random item sequences and copy
// latencies, to show that no buffer is rewritten while a consumer reads it and that nothing waits
// forever.
//
// The producer numbers the key tiles it loads across the block's items (seq = 0, 1, ..) and the
// items themselves (iseq): tile seq goes to K / V buffer seq % stages, item iseq to Q buffer iseq %
// kQBuffers. Each buffer has a `full` mbarrier (the producer's arrivals, its copies landed) and an
// `empty` one (each consumer's release), each completing once per use of the buffer. Use u of a
// buffer (u = seq / stages) is waited for by the consumers as the completion of full's phase u, and
// the producer waits, before it, for empty's phase u - 1 (the previous use released; for u = 0 the
// phase "before the first", which a fresh mbarrier reports complete). mbarrier waits name a phase
// by its parity only, so a waiter must never be two phases behind the barrier: the consumers
// release a buffer only after its full phase of that use completed (a release made earlier would
// count towards the buffer's previous use), which the replay checks.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define ATTN_WS_HD __host__ __device__ __forceinline__
#else
#define ATTN_WS_HD inline
#endif

namespace attnlab::focus_hard_ws {

// Tile (or item) seq's buffer in a ring of `stages`.
ATTN_WS_HD int ring_buffer(int seq, int stages) { return seq % stages; }
// The parity of full's phase the consumers wait for before reading tile seq.
ATTN_WS_HD uint32_t full_parity(int seq, int stages) { return uint32_t(seq / stages) & 1u; }
// The parity of empty's phase the producer waits for before loading tile seq.
ATTN_WS_HD uint32_t empty_parity(int seq, int stages) { return full_parity(seq, stages) ^ 1u; }

// The Q buffers: one per item in flight. The producer waits for a free one before it takes an
// item number, so a block holds at most kQBuffers - 1 items beyond the one its consumers run:
// at the end of the list an item taken early waits in its block while another block could have
// run it. Two measured fastest on an H100 (2026-12-06, 12 x 64, 4K: 1.46-1.48x dense against
// 1.43-1.44x with the item taken before the wait, and 1.36-1.41x with three buffers).
constexpr int kQBuffers = 2;

}  // namespace attnlab::focus_hard_ws
