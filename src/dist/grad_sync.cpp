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

GradientSync::GradientSync(Communicator& comm, const ParameterStore& store, const ZeroShardMap& map,
                           int zero)
    : comm_(comm), store_(store), map_(map), zero_(zero) {
  ATTN_REQUIRE(zero == 0 || zero == 1, "distributed.zero must be 0 or 1, got %d", zero);
  ATTN_REQUIRE(store.num_shards() == comm.world_size(),
               "the parameter store has %d shards but there are %d ranks", store.num_shards(),
               comm.world_size());
  ATTN_REQUIRE(map.world() == comm.world_size() && map.rank() == comm.rank(),
               "GradientSync: the shard map is for rank %d of %d, this is rank %d of %d",
               map.rank(), map.world(), comm.rank(), comm.world_size());
  const int64_t n = store.trainable_buffer_numel();
  next_ = num_buckets();
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
  armed_ = comm_.world_size() > 1;
  next_ = num_buckets();
  launched_early_ = 0;
  timing_ = armed_;
  if (timing_) comm_.begin_timeline();
}

void GradientSync::launch_down_to(int64_t ready_from) {
  const Tensor grads = store_.grads();
  const auto& buckets = map_.buckets();
  while (next_ > 0 && buckets[size_t(next_ - 1)].offset >= ready_from) {
    const int k = --next_;
    const ZeroShardMap::Bucket& b = buckets[size_t(k)];
    const Tensor view = grads.slice0(b.offset, b.offset + b.numel);
    if (zero_ == 0) {
      NvtxRange range("dist.all_reduce_bucket");  // its enqueue; the transfer is on the comm stream
      comm_.all_reduce(view, ReduceOp::sum);
    } else {
      NvtxRange range("dist.reduce_scatter_bucket");
      const ZeroShardMap::Piece& p = map_.pieces()[size_t(k)];
      comm_.reduce_scatter(view, grads.slice0(p.flat, p.flat + p.numel), ReduceOp::sum);
    }
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
  if (timing_) comm_.mark_timeline();  // the backward's last kernel
  if (comm_.world_size() > 1) launch_down_to(0);
  comm_.wait();
  if (timing_) {
    comm_.mark_timeline();  // the compute stream after every bucket: the optimizer may start
    comm_.stop_timeline();
  }
}

OverlapReport GradientSync::overlap() {
  OverlapReport r;
  if (!timing_) return r;
  timing_ = false;
  const CommTimeline t = comm_.read_timeline();
  ATTN_ASSERT(t.marks_ms.size() == 2);
  r.valid = true;
  for (const CommTimeline::Span& s : t.collectives) {
    r.bucket_ms.push_back(s.end_ms - s.start_ms);
    r.comm_ms += s.end_ms - s.start_ms;
  }
  r.backward_end_ms = t.marks_ms[0];
  r.optimizer_ready_ms = t.marks_ms[1];
  r.exposed_ms = t.blocking ? r.comm_ms : std::max(0.0, r.optimizer_ready_ms - r.backward_end_ms);
  return r;
}

}  // namespace attnlab
