#include "core/parameters.h"

#include <algorithm>
#include <random>
#include <vector>

#include "core/cuda_check.h"

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

void ParameterStore::finalize(Device device, DType dtype,
                              const std::set<ParamRole>& trainable_roles) {
  ATTN_ASSERT(!finalized_);
  for (auto& e : entries_) e.trainable = trainable_roles.count(e.spec.role) != 0;
  // Trainable tensors first, so that gradients and optimizer state cover one contiguous prefix.
  std::stable_partition(entries_.begin(), entries_.end(),
                        [](const Entry& e) { return e.trainable; });
  index_.clear();
  int64_t off = 0;
  for (size_t i = 0; i < entries_.size(); ++i) {
    index_[entries_[i].spec.name] = i;
    entries_[i].offset = off;
    off += entries_[i].spec.shape.numel();
    if (entries_[i].trainable) num_trainable_ = off;
  }
  num_params_ = off;
  device_ = device;
  dtype_ = dtype;
  params_ = Buffer(device, size_t(num_params_) * dtype_size(dtype));
  grads_ = Buffer(device, size_t(num_trainable_) * dtype_size(dtype));
  params_.zero();
  grads_.zero();
  finalized_ = true;
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

Tensor ParameterStore::all_params() const { return params_.as(dtype_, Shape{num_params_}); }
Tensor ParameterStore::trainable_params() const {
  return params_.as(dtype_, Shape{num_trainable_});
}
Tensor ParameterStore::grads() const { return grads_.as(dtype_, Shape{num_trainable_}); }

void ParameterStore::initialize(uint64_t seed) {
  ATTN_ASSERT(finalized_);
  // Each tensor draws from its own generator seeded by (seed, declaration name), so the values do
  // not depend on the ordering of the flat buffer or on the device.
  std::vector<float> host;
  for (const Entry& e : entries_) {
    host.assign(size_t(e.spec.shape.numel()), 0.f);
    if (e.spec.init == ParamInit::ones) std::fill(host.begin(), host.end(), 1.f);
    if (e.spec.init == ParamInit::normal) {
      uint64_t h = 1469598103934665603ull;  // FNV-1a of the name: stable across platforms
      for (unsigned char c : e.spec.name) h = (h ^ c) * 1099511628211ull;
      std::seed_seq seq{uint32_t(seed), uint32_t(seed >> 32), uint32_t(h), uint32_t(h >> 32)};
      std::mt19937_64 rng(seq);
      std::normal_distribution<float> dist(0.f, e.spec.init_std);
      for (float& x : host) x = dist(rng);
    }
    Tensor dst = param(e.spec.name);
    if (dtype_ == DType::f32) {
      copy_tensor(dst, Tensor(host.data(), DType::f32, Device::cpu, e.spec.shape));
    } else {
      ATTN_ASSERT(dtype_ == DType::bf16);
      std::vector<bf16> hb(host.size());
      for (size_t i = 0; i < host.size(); ++i) hb[i] = __float2bfloat16(host[i]);
      copy_tensor(dst, Tensor(hb.data(), DType::bf16, Device::cpu, e.spec.shape));
    }
  }
}

void ParameterStore::zero_grads() { grads_.zero(); }

}  // namespace attnlab
