#include "train/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "dist/communicator.h"
#include "io/safetensors.h"
#include "ops/ops.h"

namespace attnlab {

void AdamWConfig::validate() const {
  ATTN_REQUIRE(std::isfinite(lr) && lr >= 0.f, "optimizer.lr must be finite and >= 0, got %g", lr);
  ATTN_REQUIRE(beta1 >= 0.f && beta1 < 1.f, "optimizer.beta1 must be in [0, 1), got %g", beta1);
  ATTN_REQUIRE(beta2 >= 0.f && beta2 < 1.f, "optimizer.beta2 must be in [0, 1), got %g", beta2);
  ATTN_REQUIRE(eps > 0.f && std::isfinite(eps), "optimizer.eps must be > 0, got %g", eps);
  ATTN_REQUIRE(weight_decay >= 0.f && std::isfinite(weight_decay),
               "optimizer.weight_decay must be >= 0, got %g", weight_decay);
  ATTN_REQUIRE(std::isfinite(grad_clip), "optimizer.grad_clip must be finite, got %g", grad_clip);
}

AdamW::AdamW(const ExecContext& ctx, ParameterStore& store, const AdamWConfig& config,
             Communicator* zero1, const ZeroShardMap* shards)
    : ctx_(ctx),
      store_(store),
      config_(config),
      zero1_(zero1 && zero1->world_size() > 1 ? zero1 : nullptr) {
  config_.validate();
  ATTN_REQUIRE(store.finalized(), "AdamW: the parameter store must be finalized first");
  ATTN_REQUIRE(store.device() == ctx.device, "AdamW: parameters are on %s but the context is %s",
               device_name(store.device()), device_name(ctx.device));
  ATTN_REQUIRE(store.dtype() == DType::f32 || store.dtype() == DType::bf16,
               "AdamW: parameters must be f32 or bf16, got %s", dtype_name(store.dtype()));
  // Ranges and spans cover the tensors only: the alignment padding between them is never updated
  // and not part of the gradient norm.
  std::vector<ops::AdamWRangeSpec> ranges;
  for (const auto& e : store.entries()) {
    if (!e.trainable) continue;  // trainable entries form a prefix, in offset order
    const int64_t n = e.spec.shape.numel();
    if (n == 0) continue;
    if (!ranges.empty() && ranges.back().decay == e.spec.weight_decay &&
        ranges.back().offset + ranges.back().numel == e.offset) {
      ranges.back().numel += n;
    } else {
      ranges.push_back(ops::AdamWRangeSpec{e.offset, n, e.spec.weight_decay, 0});
    }
    if (!spans_.empty() && spans_.back().offset + spans_.back().numel == e.offset)
      spans_.back().numel += n;
    else
      spans_.push_back(ops::FlatSpan{e.offset, n});
  }
  // A distinct stream of random bits per step and range for stochastic rounding (bf16): range i
  // uses seed step * 0x9E3779B9 ^ (i + 1) * 0x85EBCA6B.
  for (size_t i = 0; i < ranges.size(); ++i) ranges[i].seed = (uint32_t(i) + 1u) * 0x85EBCA6Bu;
  // This rank's pieces: everything, or its ZeRO-1 slices (ranges and spans clipped to each, offsets
  // relative to it; a clipped range keeps its seed, but its rounding bits count elements from the
  // piece's edge, so bf16 ZeRO-1 rounds differently from ZeRO 0 there).
  map_ = ZeroShardMap::whole(store.trainable_buffer_numel());
  if (zero1_) {
    ATTN_REQUIRE(store.num_shards() == zero1_->world_size(),
                 "ZeRO-1: the parameter store has %d shards for %d ranks", store.num_shards(),
                 zero1_->world_size());
    ATTN_REQUIRE(
        shards && shards->world() == zero1_->world_size() && shards->rank() == zero1_->rank(),
        "ZeRO-1: AdamW needs the shard map of rank %d of %d", zero1_->rank(), zero1_->world_size());
    map_ = *shards;
  }
  for (const ZeroShardMap::Piece& p : map_.pieces()) {
    const int64_t lo = p.flat, hi = p.flat + p.numel;
    std::vector<ops::AdamWRangeSpec> clipped;
    for (const ops::AdamWRangeSpec& r : ranges) {
      const int64_t a = std::max(r.offset, lo), b = std::min(r.offset + r.numel, hi);
      if (a < b) clipped.push_back(ops::AdamWRangeSpec{a - lo, b - a, r.decay, r.seed});
    }
    std::vector<ops::FlatSpan> spans;
    for (const ops::FlatSpan& f : spans_) {
      const int64_t a = std::max(f.offset, lo), b = std::min(f.offset + f.numel, hi);
      if (a < b) spans.push_back(ops::FlatSpan{a - lo, b - a});
    }
    piece_ranges_.emplace_back(ctx, std::move(clipped));
    piece_spans_.push_back(std::move(spans));
  }
  const size_t bytes = size_t(map_.shard_numel()) * sizeof(float);
  m_ = Buffer(store.device(), bytes);
  v_ = Buffer(store.device(), bytes);
  m_.zero();
  v_.zero();
  if (store.dtype() == DType::bf16) {
    master_ = Buffer(store.device(), bytes);
    sync_master_from_params();
  }
}

std::vector<AdamW::SpanCopy> AdamW::shard_copies() const {
  std::vector<SpanCopy> c;
  for (const ZeroShardMap::Piece& p : map_.pieces())
    c.push_back(SpanCopy{p.flat, p.local, p.numel});
  return c;
}

std::vector<AdamW::SpanCopy> AdamW::shard_of(const std::vector<SpanCopy>& spans) const {
  std::vector<SpanCopy> out;
  const std::vector<SpanCopy> shard = shard_copies();
  for (const SpanCopy& s : spans) {
    for (const SpanCopy& c : shard) {  // c.src: flat offset, c.dst: this rank's
      const int64_t lo = std::max(s.dst, c.src), hi = std::min(s.dst + s.numel, c.src + c.numel);
      if (lo < hi) out.push_back(SpanCopy{s.src + (lo - s.dst), c.dst + (lo - c.src), hi - lo});
    }
  }
  return out;
}

StepStats AdamW::step(float lr, int step) {
  ATTN_REQUIRE(step >= 1, "AdamW::step: step counts from 1, got %d", step);
  StepStats stats;
  const Tensor grads = store_.grads();
  const auto& pieces = map_.pieces();
  double sum_sq = 0.0;
  for (size_t k = 0; k < pieces.size(); ++k)
    if (!piece_spans_[k].empty())
      sum_sq += ops::sum_of_squares(
          ctx_, grads.slice0(pieces[k].flat, pieces[k].flat + pieces[k].numel), piece_spans_[k]);
  if (zero1_) zero1_->all_reduce_host(&sum_sq, 1);  // the shards' sums: the global norm
  stats.grad_norm = std::sqrt(sum_sq);
  if (!std::isfinite(stats.grad_norm)) {  // the same on every rank: none updates or gathers
    stats.finite = false;
    stats.clip_scale = 0.f;
    return stats;
  }
  if (config_.grad_clip > 0.f)
    stats.clip_scale =
        float(config_.grad_clip / std::max(stats.grad_norm, double(config_.grad_clip)));

  const Tensor params = store_.trainable_params();
  ops::AdamWStep s;
  s.lr = lr;
  s.beta1 = config_.beta1;
  s.beta2 = config_.beta2;
  s.eps = config_.eps;
  s.weight_decay = config_.weight_decay;
  s.grad_scale = stats.clip_scale;
  s.step = step;
  s.seed = uint32_t(step) * 0x9E3779B9u;
  const Shape shape{map_.shard_numel()};
  const Tensor m = m_.as(DType::f32, shape), v = v_.as(DType::f32, shape);
  const Tensor master = master_.data() ? master_.as(DType::f32, shape) : Tensor();
  for (size_t k = 0; k < pieces.size(); ++k) {
    if (piece_ranges_[k].ranges().empty()) continue;
    const ZeroShardMap::Piece& p = pieces[k];
    const int64_t a = p.local, b = p.local + p.numel;
    ops::adamw_update_multi(ctx_, params.slice0(p.flat, p.flat + p.numel),
                            master.data ? master.slice0(a, b) : Tensor(),
                            grads.slice0(p.flat, p.flat + p.numel), m.slice0(a, b), v.slice0(a, b),
                            piece_ranges_[k], s);
  }
  if (zero1_) {  // every rank's updated slices to every rank, bucket by bucket
    NvtxRange range("dist.all_gather_weights");
    for (size_t k = 0; k < pieces.size(); ++k) {
      const ZeroShardMap::Bucket& bk = map_.buckets()[k];
      zero1_->all_gather(params.slice0(pieces[k].flat, pieces[k].flat + pieces[k].numel),
                         params.slice0(bk.offset, bk.offset + bk.numel));
    }
    zero1_->wait();
  }
  return stats;
}

std::vector<std::pair<std::string, Tensor>> AdamW::state_tensors() const {
  const Shape shape{map_.shard_numel()};
  std::vector<std::pair<std::string, Tensor>> out;
  out.emplace_back("adamw.m", m_.as(DType::f32, shape));
  out.emplace_back("adamw.v", v_.as(DType::f32, shape));
  if (store_.dtype() == DType::bf16)
    out.emplace_back("adamw.master", master_.as(DType::f32, shape));
  return out;
}

std::vector<std::pair<std::string, Tensor>> AdamW::gathered_state(
    std::vector<Buffer>& storage) const {
  auto state = state_tensors();
  if (!zero1_) return state;
  // Bucket by bucket through one device buffer of the largest bucket into host memory on rank 0,
  // the writer (the whole state on every device would add 12 bytes per parameter to each: 87 GB
  // at 7B).
  const bool root = zero1_->rank() == 0;
  const Shape whole{store_.trainable_buffer_numel()};
  int64_t largest = 0;
  for (const ZeroShardMap::Bucket& bk : map_.buckets()) largest = std::max(largest, bk.numel);
  const Buffer staging(store_.device(), size_t(largest) * sizeof(float));
  for (auto& [name, t] : state) {
    Tensor full;
    if (root) {
      storage.emplace_back(Device::cpu, size_t(whole.numel()) * sizeof(float));
      storage.back().zero();  // the padding between buckets
      full = storage.back().as(DType::f32, whole);
    }
    for (size_t k = 0; k < map_.pieces().size(); ++k) {
      const ZeroShardMap::Piece& p = map_.pieces()[k];
      const ZeroShardMap::Bucket& bk = map_.buckets()[k];
      const Tensor bucket = staging.as(DType::f32, Shape{bk.numel});
      zero1_->all_gather(t.slice0(p.local, p.local + p.numel), bucket);
      zero1_->wait();
      // (synchronous: the next bucket's gather reuses the staging buffer)
      if (root) copy_state(full.slice0(bk.offset, bk.offset + bk.numel), bucket);
    }
    t = full;
  }
  ctx_.synchronize();
  if (!root) state.clear();
  return state;
}

void AdamW::copy_state(const Tensor& dst, const Tensor& src) const {
  if (dst.nbytes() == 0) return;
  // On the context's stream: a plain cudaMemcpy would not order with a non-blocking stream.
  ctx_.synchronize();
  if (dst.device == Device::cpu && src.device == Device::cpu) {
    copy_tensor(dst, src);
    return;
  }
  const cudaMemcpyKind kind = dst.device == Device::cpu   ? cudaMemcpyDeviceToHost
                              : src.device == Device::cpu ? cudaMemcpyHostToDevice
                                                          : cudaMemcpyDeviceToDevice;
  auto stream = reinterpret_cast<cudaStream_t>(ctx_.stream);
  CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, dst.nbytes(), kind, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
}

void AdamW::copy_spans(const Tensor& dst, const Tensor& src,
                       const std::vector<SpanCopy>& spans) const {
  ATTN_ASSERT(dst.dtype == src.dtype);
  ctx_.synchronize();
  const size_t es = dtype_size(dst.dtype);
  const auto* from = static_cast<const char*>(src.data);
  auto* to = static_cast<char*>(dst.data);
  for (const SpanCopy& c : spans)
    ATTN_ASSERT(c.src + c.numel <= src.numel() && c.dst + c.numel <= dst.numel());
  if (dst.device == Device::cpu && src.device == Device::cpu) {
    for (const SpanCopy& c : spans)
      std::memcpy(to + size_t(c.dst) * es, from + size_t(c.src) * es, size_t(c.numel) * es);
    return;
  }
  const cudaMemcpyKind kind = dst.device == Device::cpu   ? cudaMemcpyDeviceToHost
                              : src.device == Device::cpu ? cudaMemcpyHostToDevice
                                                          : cudaMemcpyDeviceToDevice;
  auto stream = reinterpret_cast<cudaStream_t>(ctx_.stream);
  for (const SpanCopy& c : spans)
    CUDA_CHECK(cudaMemcpyAsync(to + size_t(c.dst) * es, from + size_t(c.src) * es,
                               size_t(c.numel) * es, kind, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
}

void AdamW::load_each(const std::vector<std::pair<std::string, Tensor>>& state,
                      const std::string& source, int64_t expected_numel,
                      const std::vector<SpanCopy>& spans) {
  const std::string where = source.empty() ? "optimizer state" : "optimizer state in " + source;
  const auto mine = state_tensors();
  std::string valid;
  for (const auto& [name, t] : mine) valid += (valid.empty() ? "" : ", ") + name;
  const std::vector<SpanCopy> shard = zero1_ ? shard_of(spans) : std::vector<SpanCopy>{};
  for (const auto& [name, src] : state) {
    bool known = false;
    for (const auto& [n, t] : mine) known |= n == name;
    // A NaN or infinity in the moments or the master would make the first resumed step's weights
    // NaN, then fail as a divergence ("the last checkpoint is intact"): refused here, named.
    if (src.device == Device::cpu && src.dtype == DType::f32) {
      // The elements this rank reads: under ZeRO-1 its shard's (each rank checks its own; not the
      // whole file on every rank), else all (an f32 store reads the whole master).
      std::vector<SpanCopy> read = {SpanCopy{0, 0, src.numel()}};
      if (zero1_ && !(name == "adamw.master" && store_.dtype() == DType::f32)) read = shard;
      const float* x = src.ptr<float>();
      for (const SpanCopy& r : read) {
        const int64_t lo = std::min(r.src, src.numel()), n = std::min(r.numel, src.numel() - lo);
        int64_t bad =
            io::first_non_finite(reinterpret_cast<const std::byte*>(x + lo), io::StDType::F32, n);
        if (bad >= 0) bad += lo;
        ATTN_REQUIRE(bad < 0,
                     "%s: '%s' holds %s at element %lld: the checkpoint is corrupt (resume from "
                     "an earlier one)",
                     where.c_str(), name.c_str(),
                     bad >= 0 && std::isnan(x[bad]) ? "NaN" : "an infinity", (long long)bad);
        // The second moment is a mean of squares: a negative one (the moments' names swapped)
        // gave NaN weights after a few steps, reported as a divergence.
        if (name == "adamw.v") {
          const int64_t neg = std::find_if(x + lo, x + lo + n, [](float y) { return y < 0.f; }) - x;
          ATTN_REQUIRE(neg == lo + n,
                       "%s: 'adamw.v' (the second moment, a mean of squares) holds %g < 0 at "
                       "element %lld: the checkpoint is corrupt",
                       where.c_str(), neg < lo + n ? double(x[neg]) : 0.0, (long long)neg);
        }
      }
    }
    if (name == "adamw.master" && store_.dtype() == DType::f32) continue;  // a bf16 run's: below
    ATTN_REQUIRE(known, "%s: unexpected tensor '%s' (expected %s)", where.c_str(), name.c_str(),
                 valid.c_str());
  }
  bool have_master = false;
  for (const auto& [name, dst] : mine) {
    const Tensor* src = nullptr;
    for (const auto& [n, t] : state)
      if (n == name) src = &t;
    if (!src) {
      ATTN_REQUIRE(name == "adamw.master", "%s: missing tensor '%s'", where.c_str(), name.c_str());
      continue;
    }
    ATTN_REQUIRE(src->dtype == DType::f32 && src->numel() == expected_numel,
                 "%s: '%s' must be f32 with %lld elements (the trainable parameters), got %s",
                 where.c_str(), name.c_str(), (long long)expected_numel, src->str().c_str());
    if (!zero1_) {
      copy_spans(dst, *src, spans);
    } else {  // this rank's shard of the spans, straight from the source; zeros elsewhere
      zero_tensor(dst);
      copy_spans(dst, *src, shard);
    }
    have_master |= name == "adamw.master";
  }
  if (store_.dtype() == DType::bf16 && !have_master) sync_master_from_params();
  // A bf16 run resumed in f32 (e.g. on the CPU): the fp32 master is the trainable weights' value
  // (the model file holds them rounded to bf16), so the f32 parameters take it.
  if (store_.dtype() == DType::f32) {
    for (const auto& [n, src] : state) {
      if (n != "adamw.master") continue;
      ATTN_REQUIRE(src.dtype == DType::f32 && src.numel() == expected_numel,
                   "%s: 'adamw.master' must be f32 with %lld elements (the trainable parameters), "
                   "got %s",
                   where.c_str(), (long long)expected_numel, src.str().c_str());
      if (store_.trainable_buffer_numel() > 0) copy_spans(store_.trainable_params(), src, spans);
    }
  }
}

void AdamW::load_state(const std::vector<std::pair<std::string, Tensor>>& state) {
  const int64_t n = store_.trainable_buffer_numel();
  load_each(state, "", n, {SpanCopy{0, 0, n}});
}

void AdamW::load_state(const std::vector<std::pair<std::string, Tensor>>& state,
                       const ParamLayout& saved, const std::string& source) {
  const std::string diff = layout_difference(saved, state_layout());
  ATTN_REQUIRE(diff.empty(),
               "optimizer state in %s was saved for a different parameter layout: %s; resume "
               "with the model and retrofit settings of the run that wrote it",
               source.c_str(), diff.c_str());
  // The same offsets on both sides (checked): copy the tensors, not the padding.
  std::vector<SpanCopy> spans;
  for (const ops::FlatSpan& s : spans_) spans.push_back(SpanCopy{s.offset, s.offset, s.numel});
  load_each(state, source, saved.numel, spans);
}

void AdamW::load_packed_state(const std::vector<std::pair<std::string, Tensor>>& state,
                              const std::string& source) {
  std::vector<SpanCopy> spans;
  int64_t packed = 0;
  for (const auto& e : store_.entries()) {
    if (!e.trainable) continue;
    const int64_t n = e.spec.shape.numel();
    if (n > 0) spans.push_back(SpanCopy{packed, e.offset, n});
    packed += n;
  }
  load_each(state, source, store_.num_trainable(), spans);
}

void AdamW::set_master(const std::vector<float>& trainable) {
  if (store_.dtype() != DType::bf16) return;
  const int64_t N = store_.trainable_buffer_numel(), n = map_.shard_numel();
  ATTN_REQUIRE(int64_t(trainable.size()) == N, "set_master: %zu values for %lld trainable elements",
               trainable.size(), (long long)N);
  std::vector<float> master(static_cast<size_t>(n));
  copy_spans(Tensor(master.data(), DType::f32, Device::cpu, Shape{n}),
             Tensor(const_cast<float*>(trainable.data()), DType::f32, Device::cpu, Shape{N}),
             shard_copies());
  copy_state(master_.as(DType::f32, Shape{n}),
             Tensor(master.data(), DType::f32, Device::cpu, Shape{n}));
}

void AdamW::sync_master_from_params() {
  if (store_.dtype() != DType::bf16) return;
  const int64_t n = map_.shard_numel();
  std::vector<bf16> weights(static_cast<size_t>(n));
  std::vector<float> master(static_cast<size_t>(n));
  const Shape shape{n};
  copy_spans(Tensor(weights.data(), DType::bf16, Device::cpu, shape), store_.trainable_params(),
             shard_copies());
  for (int64_t i = 0; i < n; ++i) master[size_t(i)] = __bfloat162float(weights[size_t(i)]);
  copy_state(master_.as(DType::f32, shape), Tensor(master.data(), DType::f32, Device::cpu, shape));
}

}  // namespace attnlab
