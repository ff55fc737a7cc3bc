#include "core/parameters.h"

#include <omp.h>

#include <algorithm>
#include <exception>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "core/cuda_check.h"
#include "core/hash.h"

namespace attnlab {

const char* role_name(ParamRole r) {
  switch (r) {
    case ParamRole::base:
      return "base";
    case ParamRole::attention:
      return "attention";
    case ParamRole::adapter:
      return "adapter";
  }
  return "?";
}

ParamRole parse_role(const std::string& s) {
  if (s == "base") return ParamRole::base;
  if (s == "attention") return ParamRole::attention;
  if (s == "adapter") return ParamRole::adapter;
  ATTN_FAIL("unknown parameter role '%s' (valid: base, attention, adapter)", s.c_str());
}

void ParameterStore::declare(const ParamSpec& spec) {
  ATTN_ASSERT(!finalized_);
  ATTN_REQUIRE(!index_.count(spec.name), "parameter '%s' declared twice", spec.name.c_str());
  index_[spec.name] = entries_.size();
  entries_.push_back(Entry{spec, 0, true});
}

namespace {

int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

}  // namespace

void ParameterStore::finalize(Device device, DType dtype,
                              const std::set<ParamRole>& trainable_roles, int shard_count) {
  ATTN_ASSERT(!finalized_);
  ATTN_REQUIRE(shard_count >= 1, "the parameter store needs at least one shard, got %d",
               shard_count);
  for (auto& e : entries_) e.trainable = trainable_roles.count(e.spec.role) != 0;
  // Trainable tensors first, so that gradients and optimizer state cover one contiguous prefix.
  std::stable_partition(entries_.begin(), entries_.end(),
                        [](const Entry& e) { return e.trainable; });
  index_.clear();
  num_params_ = num_trainable_ = 0;
  int64_t off = 0;
  bool in_trainable = true;
  for (size_t i = 0; i < entries_.size(); ++i) {
    Entry& e = entries_[i];
    if (in_trainable && !e.trainable) {
      // The end of the trainable range: padded so that it splits into equal, aligned shards.
      off = round_up(off, int64_t(shard_count) * kParamAlignElements);
      trainable_buffer_numel_ = off;
      in_trainable = false;
    }
    index_[e.spec.name] = i;
    e.offset = off;
    const int64_t n = e.spec.shape.numel();
    off = round_up(off + n, kParamAlignElements);
    num_params_ += n;
    if (e.trainable) num_trainable_ += n;
  }
  if (in_trainable) {  // every tensor is trainable (or there are none)
    off = round_up(off, int64_t(shard_count) * kParamAlignElements);
    trainable_buffer_numel_ = off;
  }
  param_buffer_numel_ = off;
  num_shards_ = shard_count;
  device_ = device;
  dtype_ = dtype;
  params_ = Buffer(device, size_t(param_buffer_numel_) * dtype_size(dtype));
  grads_ = Buffer(device, size_t(trainable_buffer_numel_) * dtype_size(dtype));
  params_.zero();  // the padding stays zero from here on
  grads_.zero();
  finalized_ = true;
}

ParameterStore::Range ParameterStore::shard(int rank) const {
  ATTN_ASSERT(finalized_);
  ATTN_REQUIRE(rank >= 0 && rank < num_shards_, "shard %d does not exist (the store has %d)", rank,
               num_shards_);
  const int64_t size = trainable_buffer_numel_ / num_shards_;
  return Range{int64_t(rank) * size, size};
}

ParamLayout ParameterStore::trainable_layout() const {
  ATTN_ASSERT(finalized_);
  ParamLayout l;
  l.numel = trainable_buffer_numel_;
  for (const Entry& e : entries_)
    if (e.trainable) l.tensors.push_back({e.spec.name, e.spec.shape, e.spec.role, e.offset});
  return l;
}

std::string ParamLayout::to_json() const {
  nlohmann::ordered_json js;
  js["format"] = "attnlab.param_layout";
  js["version"] = 1;
  js["alignment"] = alignment;
  js["numel"] = numel;
  js["tensors"] = nlohmann::ordered_json::array();
  for (const Item& t : tensors) {
    std::vector<int64_t> dims(t.shape.dims.begin(), t.shape.dims.begin() + t.shape.ndim);
    js["tensors"].push_back(
        {{"name", t.name}, {"shape", dims}, {"role", role_name(t.role)}, {"offset", t.offset}});
  }
  return js.dump();
}

ParamLayout ParamLayout::from_json(const std::string& text, const std::string& source) {
  ParamLayout l;
  try {
    const nlohmann::json js = nlohmann::json::parse(text);
    ATTN_REQUIRE(js.at("format").get<std::string>() == "attnlab.param_layout" &&
                     js.at("version").get<int>() == 1,
                 "%s: the parameter layout has an unknown format or version", source.c_str());
    l.alignment = js.at("alignment").get<int64_t>();
    l.numel = js.at("numel").get<int64_t>();
    for (const auto& t : js.at("tensors")) {
      Item it;
      it.name = t.at("name").get<std::string>();
      const auto dims = t.at("shape").get<std::vector<int64_t>>();
      ATTN_REQUIRE(dims.size() <= size_t(Shape::kMaxDims), "%s: tensor '%s' has %zu dimensions",
                   source.c_str(), it.name.c_str(), dims.size());
      for (int64_t d : dims) it.shape.dims[size_t(it.shape.ndim++)] = d;
      it.role = parse_role(t.at("role").get<std::string>());
      it.offset = t.at("offset").get<int64_t>();
      ATTN_REQUIRE(it.offset >= 0 && it.offset + it.shape.numel() <= l.numel,
                   "%s: the parameter layout places tensor '%s' outside its %lld elements",
                   source.c_str(), it.name.c_str(), (long long)l.numel);
      l.tensors.push_back(std::move(it));
    }
  } catch (const nlohmann::json::exception& e) {
    ATTN_FAIL("%s: the parameter layout is corrupt (%s)", source.c_str(), e.what());
  }
  return l;
}

std::string layout_difference(const ParamLayout& saved, const ParamLayout& current) {
  std::map<std::string, const ParamLayout::Item*> there, here;
  for (const auto& t : saved.tensors) there[t.name] = &t;
  for (const auto& t : current.tensors) here[t.name] = &t;
  // Missing tensors first: they are the cause of the offsets that shift after them.
  for (const auto& c : current.tensors)
    if (!there.count(c.name))
      return strformat("tensor %s (%s at offset %lld here) is not in it", c.name.c_str(),
                       c.shape.str().c_str(), (long long)c.offset);
  for (const auto& s : saved.tensors)
    if (!here.count(s.name))
      return strformat("tensor %s (%s at offset %lld there) is not trained here", s.name.c_str(),
                       s.shape.str().c_str(), (long long)s.offset);
  for (const auto& c : current.tensors) {
    const ParamLayout::Item& s = *there[c.name];
    if (s.shape != c.shape || s.offset != c.offset)
      return strformat("tensor %s is %s at offset %lld there, %s at offset %lld here",
                       c.name.c_str(), s.shape.str().c_str(), (long long)s.offset,
                       c.shape.str().c_str(), (long long)c.offset);
    if (s.role != c.role)
      return strformat("tensor %s has role %s there, %s here", c.name.c_str(), role_name(s.role),
                       role_name(c.role));
  }
  return "";
}

const ParameterStore::Entry& ParameterStore::entry(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    std::string near;
    for (auto& e : entries_)
      if (e.spec.name.find(name.substr(0, name.find('.') + 1)) == 0 && near.size() < 400)
        near += " " + e.spec.name;
    ATTN_FAIL("no parameter named '%s'%s%s", name.c_str(),
              near.empty() ? "" : "; similar:", near.c_str());
  }
  return entries_[it->second];
}

Tensor ParameterStore::param(const std::string& name) const {
  const Entry& e = entry(name);
  return params_.as(dtype_, e.spec.shape, size_t(e.offset) * dtype_size(dtype_));
}

Tensor ParameterStore::grad(const std::string& name) const {
  const Entry& e = entry(name);
  if (!e.trainable) return Tensor();
  return grads_.as(dtype_, e.spec.shape, size_t(e.offset) * dtype_size(dtype_));
}

Tensor ParameterStore::all_params() const { return params_.as(dtype_, Shape{param_buffer_numel_}); }
Tensor ParameterStore::trainable_params() const {
  return params_.as(dtype_, Shape{trainable_buffer_numel_});
}
Tensor ParameterStore::grads() const { return grads_.as(dtype_, Shape{trainable_buffer_numel_}); }

void ParameterStore::initialize(uint64_t seed) {
  ATTN_ASSERT(finalized_);
  ATTN_ASSERT(dtype_ == DType::f32 || dtype_ == DType::bf16);
  // Each tensor draws from its own generator seeded by (seed, declaration name), so the values do
  // not depend on the ordering of the flat buffer, on the device or on the threads. Tensors are
  // drawn in parallel, a batch at a time (a 7B model's 7.2e9 normal draws took minutes
  // on one thread), and copied to the device by this thread: the one whose device is current
  // (an OpenMP thread's is device 0, whatever the rank's).
  // A batch: up to one tensor per thread and 4 GiB of draws (at least one tensor), so that the
  // host memory stays bounded whatever the thread count (several ranks may share a host).
  constexpr size_t kBatchBytes = size_t(4) << 30;
  const size_t n = entries_.size(), threads = size_t(std::max(1, omp_get_max_threads()));
  for (size_t k0 = 0, k1 = 0; k0 < n; k0 = k1) {
    size_t bytes = 0;
    for (k1 = k0; k1 < n && k1 - k0 < threads; ++k1) {
      const size_t b = size_t(entries_[k1].spec.shape.numel()) * sizeof(float);
      if (k1 > k0 && bytes + b > kBatchBytes) break;
      bytes += b;
    }
    std::vector<std::vector<float>> host(k1 - k0);
    std::exception_ptr failed;  // (an exception may not leave an OpenMP region: rethrown below)
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t k = int64_t(k0); k < int64_t(k1); ++k) {
      try {
        host[size_t(k) - k0] = draw(entries_[size_t(k)].spec, seed);
      } catch (...) {
#pragma omp critical(attnlab_param_draw_error)
        if (!failed) failed = std::current_exception();
      }
    }
    if (failed) std::rethrow_exception(failed);
    for (size_t k = k0; k < k1; ++k) {
      const ParamSpec& spec = entries_[k].spec;
      std::vector<float>& h = host[k - k0];
      if (dtype_ == DType::f32) {
        copy_tensor(param(spec.name), Tensor(h.data(), DType::f32, Device::cpu, spec.shape));
      } else {
        std::vector<bf16> hb(h.size());
        for (size_t i = 0; i < h.size(); ++i) hb[i] = __float2bfloat16(h[i]);
        copy_tensor(param(spec.name), Tensor(hb.data(), DType::bf16, Device::cpu, spec.shape));
      }
      std::vector<float>().swap(h);
    }
  }
}

std::vector<float> ParameterStore::draw(const ParamSpec& spec, uint64_t seed) {
  std::vector<float> host(size_t(spec.shape.numel()), 0.f);
  if (spec.init == ParamInit::ones) std::fill(host.begin(), host.end(), 1.f);
  if (spec.init == ParamInit::normal) {
    const uint64_t h = fnv1a(spec.name.data(), spec.name.size());  // stable everywhere
    std::seed_seq seq{uint32_t(seed), uint32_t(seed >> 32), uint32_t(h), uint32_t(h >> 32)};
    std::mt19937_64 rng(seq);
    std::normal_distribution<float> dist(0.f, spec.init_std);
    for (float& x : host) x = dist(rng);
  }
  return host;
}

void ParameterStore::zero_grads() { grads_.zero(); }

}  // namespace attnlab
