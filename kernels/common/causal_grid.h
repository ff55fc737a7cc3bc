// The grid of the causal attention kernels (host code; kernels/common/device.cuh includes it).
#pragma once
#include <vector_types.h>

#include <cstdint>

#include "core/error.h"

namespace attnlab {

// Whether causal_grid takes (T, tile, B): at most 65535 tiles and sequences (grid y and z). The
// kernels' *_supported checks ask it, so longer calls fall back to the other kernels.
inline bool causal_grid_fits(int64_t T, int tile, int B) {
  return (T + tile - 1) / tile <= 65535 && B <= 65535;
}

// The grid of a causal attention kernel whose blocks are (head, tile, batch row), tile 0 the
// longest (docs/performance.md, "Block order"): (heads, tiles, batch), so that the heads vary
// fastest and the blocks are handed out longest first over all heads; ordered head after head, the
// last heads' long blocks would start late and set the tail of the launch.
inline dim3 causal_grid(int heads, int64_t T, int tile, int B) {
  const int64_t tiles = (T + tile - 1) / tile;
  ATTN_REQUIRE(tiles <= 65535 && B <= 65535,
               "attention: %lld tiles of %d (T = %lld) and batch %d: at most 65535 of each",
               (long long)tiles, tile, (long long)T, B);
  return dim3(unsigned(heads), unsigned(tiles), unsigned(B));
}

}  // namespace attnlab
