#include "dist/grad_sync.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/nvtx.h"

namespace attnlab {
namespace {

// The layer a tensor belongs to: l for "h.<l>.*", -1 for the embeddings (their gradients are
// written last, by the embedding backward), n_layer for what sits above the layers (ln_f,
// lm_head: written first).
int layer_of(const std::string& name, int n_layer) {
  if (name.rfind("h.", 0) == 0) return std::atoi(name.c_str() + 2);
  if (name.rfind("wte.", 0) == 0 || name.rfind("wpe.", 0) == 0) return -1;
  return n_layer;
}

}  // namespace

GradientSync::GradientSync(Communicator& comm, const ParameterStore& store, int64_t bucket_elems,
                           int zero)
    : comm_(comm), store_(store), zero_(zero) {
  ATTN_REQUIRE(zero == 0 || zero == 1, "distributed.zero must be 0 or 1, got %d", zero);
  ATTN_REQUIRE(store.num_shards() == comm.world_size(),
               "the parameter store has %d shards but there are %d ranks", store.num_shards(),
               comm.world_size());
  const int64_t n = store.trainable_buffer_numel();
  const int64_t b = std::max<int64_t>(kParamAlignElements,
                                      bucket_elems / kParamAlignElements * kParamAlignElements);
  for (int64_t at = 0; at < n; at += b) buckets_.push_back(Bucket{at, std::min(b, n - at)});
  next_ = int(buckets_.size());
  // layer_ready_[l]: the lowest offset of the trainable tensors of layers >= l (and above), valid
  // only if every tensor of a lower layer (or the embeddings) ends at or below it.
  int n_layer = 0;
  for (const auto& e : store.entries())
    if (e.spec.name.rfind("h.", 0) == 0)
      n_layer = std::max(n_layer, std::atoi(e.spec.name.c_str() + 2) + 1);
  layer_ready_.assign(size_t(n_layer), -1);
  for (int l = 0; l < n_layer; ++l) {
    int64_t lo = n, below_end = 0;
    for (const auto& e : store.entries()) {
      if (!e.trainable) continue;
      const int el = layer_of(e.spec.name, n_layer);
      if (el >= l)
        lo = std::min(lo, e.offset);
      else
        below_end = std::max(below_end, e.offset + e.spec.shape.numel());
    }
    if (lo < n && below_end <= lo) layer_ready_[size_t(l)] = lo;
  }
}

void GradientSync::begin_last_backward() {
  armed_ = zero_ == 0 && comm_.world_size() > 1;
  next_ = int(buckets_.size());
  launched_early_ = 0;
}

void GradientSync::launch_down_to(int64_t ready_from) {
  const Tensor grads = store_.grads();
  while (next_ > 0 && buckets_[size_t(next_ - 1)].offset >= ready_from) {
    const Bucket& b = buckets_[size_t(--next_)];
    NvtxRange range("dist.all_reduce_bucket");  // its enqueue; the transfer is on the comm stream
    comm_.all_reduce(grads.slice0(b.offset, b.offset + b.numel), ReduceOp::sum);
  }
}

void GradientSync::layer_done(int layer) {
  if (!armed_ || layer < 0 || layer >= int(layer_ready_.size())) return;
  const int64_t ready = layer_ready_[size_t(layer)];
  if (ready < 0) return;
  const int before = next_;
  launch_down_to(ready);
  launched_early_ += before - next_;
}

void GradientSync::finish() {
  armed_ = false;
  if (comm_.world_size() > 1) {
    if (zero_ == 0) {
      launch_down_to(0);
    } else {
      const Tensor grads = store_.grads();
      NvtxRange range("dist.reduce_scatter");
      const ParameterStore::Range r = store_.shard(comm_.rank());
      comm_.reduce_scatter(grads, grads.slice0(r.offset, r.offset + r.numel), ReduceOp::sum);
    }
  }
  comm_.wait();
}

}  // namespace attnlab
