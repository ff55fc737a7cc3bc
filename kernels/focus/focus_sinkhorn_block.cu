// CUDA Sinkhorn of kernels/focus/focus_assign.cuh, the one-block path (docs/focus.md "Sinkhorn on
// CUDA"): where a sequence's [T, K] tile fits in shared memory, forward and backward are each one
// kernel of one block per sequence that runs all N iterations, walking the sequence's chunks of
// C tokens one after another with the helpers of the multi-chunk kernels (focus_sinkhorn_tile.cuh),
// the column sums carried from chunk to chunk in registers (every thread of column k holds the
// same carry) instead of scanned across blocks.
// Forward: the tile X_n stays in shared memory; per iteration, per chunk, the column step
//   (causal: from the carry, which starts at the decode state and ends as its new value; sequence:
//   from the column totals of a first pass), then the row step of the whole tile and X_{n+1} out.
// Backward: d = dX_{n+1} stays in shared memory ([T, K]); X_n and X_{n+1} are read from the
//   iterates (one chunk of X_n staged at a time). Per iteration: the row backward of the whole
//   tile; causal: a pass in chunk order for the prefixes E_c, then one from the last chunk back
//   carrying Q (the reverse recurrence's carry); sequence: the totals L, D, then
//   d = dY - exp(X - L) D.
// Deterministic: fixed order, no atomics.
#include "kernels/focus/focus_sinkhorn_tile.cuh"

namespace attnlab::sinkhorn {
namespace {

__global__ void fwd_block_kernel(SinkhornParams p, Geometry g, float log_mass) {
  extern __shared__ float smem[];
  Lse* seg = reinterpret_cast<Lse*>(smem);
  float* target = smem + 2 * kThreads;  // [C]
  float* tile = target + g.C;           // [T, KP]
  const int b = blockIdx.x;
  const Cell cl = cell_of(g);
  const int64_t all = int64_t(g.B) * g.T * g.K, base = int64_t(b) * g.T * g.K;
  load_tile(tile, p.scores + base, g, g.T);
  __syncthreads();
  store_tile(p.iterates + base, tile, g, g.T);
  for (int n = 0; n < p.iterations; ++n) {
    float* st =
        p.causal && p.state ? p.state + (int64_t(b) * p.iterations + n) * g.K + cl.k : nullptr;
    Lse from = st ? Lse{*st, 1.f} : LseOp::identity();  // -inf: empty
    if (!p.causal) {                                    // the column totals
      for (int c = 0; c < g.chunks; ++c) {
        const Chunk ch = chunk_at(g, b, c);
        segment_sums(seg, tile + ch.t0 * g.KP, g, cl, ch.count);
        __syncthreads();
        from = combine_segments<LseOp>(from, seg, g, cl.k, g.S);
        __syncthreads();
      }
    }
    for (int c = 0; c < g.chunks; ++c) {
      const Chunk ch = chunk_at(g, b, c);
      float* ct = tile + ch.t0 * g.KP;
      causal_targets(target, p, ch, g.K);
      if (p.causal) segment_sums(seg, ct, g, cl, ch.count);
      __syncthreads();
      column_step(ct, seg, target, g, cl, ch.count, p.causal, from, log_mass);
      if (p.causal) from = combine_segments<LseOp>(from, seg, g, cl.k, g.S);
      __syncthreads();
    }
    if (st && threadIdx.x < g.K) *st = from.m + logf(from.s);  // read by all before the barriers
    row_step(tile, g, g.T);
    __syncthreads();
    store_tile(p.iterates + (n + 1) * all + base, tile, g, g.T);
  }
  for (int e = threadIdx.x; e < g.T * g.K; e += blockDim.x)
    p.g[base + e] = expf(tile[(e / g.K) * g.KP + e % g.K]);
}

__global__ void bwd_block_kernel(SinkhornParams p, Geometry g) {
  extern __shared__ float smem[];
  Lse* seg = reinterpret_cast<Lse*>(smem);
  Affine* seg_maps = reinterpret_cast<Affine*>(smem + 2 * kThreads);
  float* x = smem + 4 * kThreads;                        // [C, KP]: one chunk of X_n
  float* d = x + g.C * g.KP;                             // [T, KP]
  Lse* prefix = reinterpret_cast<Lse*>(d + g.T * g.KP);  // [chunks, K]: E_c (causal)
  const int b = blockIdx.x;
  const Cell cl = cell_of(g);
  const int64_t all = int64_t(g.B) * g.T * g.K, base = int64_t(b) * g.T * g.K;
  for (int e = threadIdx.x; e < g.T * g.K; e += blockDim.x)
    d[(e / g.K) * g.KP + e % g.K] = p.dg[base + e] * p.g[base + e];
  __syncthreads();
  for (int n = p.iterations - 1; n >= 0; --n) {
    const float* xn = p.iterates + n * all + base;
    row_backward(d, p.iterates + (n + 1) * all + base, g.K, g, g.T);
    __syncthreads();
    if (p.causal) {
      Lse E = LseOp::identity();
      for (int c = 0; c < g.chunks; ++c) {
        const Chunk ch = chunk_at(g, b, c);
        load_tile(x, xn + ch.t0 * g.K, g, ch.count);
        __syncthreads();
        segment_sums(seg, x, g, cl, ch.count);
        __syncthreads();
        if (threadIdx.x < g.K) prefix[c * g.K + threadIdx.x] = E;
        E = combine_segments<LseOp>(E, seg, g, cl.k, g.S);
      }
      float Q = 0.f;  // the carry into the chunk from the tokens after it
      for (int c = g.chunks - 1; c >= 0; --c) {
        const Chunk ch = chunk_at(g, b, c);
        float* dc = d + ch.t0 * g.KP;
        load_tile(x, xn + ch.t0 * g.K, g, ch.count);
        __syncthreads();
        segment_sums(seg, x, g, cl, ch.count);
        __syncthreads();
        CausalCell cc;
        if (cl.active) {
          const Lse Es = combine_segments<LseOp>(prefix[c * g.K + cl.k], seg, g, cl.k, cl.seg);
          seg_maps[cl.seg * g.K + cl.k] = causal_cell_load(cc, x, dc, g, cl, ch.count, Es);
        }
        __syncthreads();
        if (cl.active) {
          for (int s = g.S - 1; s > cl.seg; --s) {
            const Affine f = seg_maps[s * g.K + cl.k];
            Q = fmaf(f.a, Q, f.b);
          }
          causal_cell_walk(cc, Q, dc, g, cl);
          for (int s = cl.seg; s >= 0; --s) {  // on to the chunk's first token: the next carry
            const Affine f = seg_maps[s * g.K + cl.k];
            Q = fmaf(f.a, Q, f.b);
          }
        }
      }
    } else {
      Lse L = LseOp::identity();
      Affine D = AffineOp::identity();
      for (int c = 0; c < g.chunks; ++c) {
        const Chunk ch = chunk_at(g, b, c);
        load_tile(x, xn + ch.t0 * g.K, g, ch.count);
        __syncthreads();
        segment_sums(seg, x, g, cl, ch.count);
        if (cl.active) {
          float s = 0.f;
          for (int i = 0; i < kSeg && cl.t(i) < ch.count; ++i)
            s += d[(ch.t0 + cl.t(i)) * g.KP + cl.k];
          seg_maps[cl.seg * g.K + cl.k] = {1.f, s};
        }
        __syncthreads();
        L = combine_segments<LseOp>(L, seg, g, cl.k, g.S);
        D = combine_segments<AffineOp>(D, seg_maps, g, cl.k, g.S);
      }
      const float lls = logf(L.s);
      if (cl.active)
        for (int c = 0; c < g.chunks; ++c)
          for (int i = 0; i < kSeg; ++i) {
            const int t = c * g.C + cl.t(i);
            if (t < g.T)
              d[t * g.KP + cl.k] -= exp_diff(xn[int64_t(t) * g.K + cl.k], 0.f, L.m, lls) * D.b;
          }
    }
    __syncthreads();
  }
  store_tile(p.dscores + base, d, g, g.T);
}

cudaStream_t st(Stream s) { return reinterpret_cast<cudaStream_t>(s); }

template <class Kernel>
void allow_shared(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

}  // namespace

size_t block_path_limit_bytes() {
  int device = 0, bytes = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return size_t(bytes);
}

void launch_block_fwd(const SinkhornParams& p, Stream s) {
  const Geometry g = geometry(p);
  const size_t bytes = sizeof(float) * (size_t(2 * kThreads) + g.C + size_t(g.T) * g.KP);
  allow_shared(fwd_block_kernel, bytes);
  fwd_block_kernel<<<g.B, kThreads, bytes, st(s)>>>(p, g, float(std::log(double(p.T) / p.K)));
  CUDA_CHECK_LAUNCH();
}

void launch_block_bwd(const SinkhornParams& p, Stream s) {
  const Geometry g = geometry(p);
  const size_t bytes = block_path_bytes(g);
  allow_shared(bwd_block_kernel, bytes);
  bwd_block_kernel<<<g.B, kThreads, bytes, st(s)>>>(p, g);
  CUDA_CHECK_LAUNCH();
}

}  // namespace attnlab::sinkhorn
