#include "interop/foreign_tensors.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "io/safetensors.h"

namespace attnlab {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::string join(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

void transpose_into(const float* src, int64_t rows, int64_t cols, float* dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
}

std::vector<float> tensor_to_host_f32(const Tensor& t) {
  std::vector<float> out(size_t(t.numel()));
  if (t.dtype == DType::f32) {
    copy_tensor(Tensor(out.data(), DType::f32, Device::cpu, t.shape), t);
    return out;
  }
  ATTN_REQUIRE(t.dtype == DType::bf16, "cannot export a %s tensor as f32", dtype_name(t.dtype));
  std::vector<bf16> tmp(out.size());
  copy_tensor(Tensor(tmp.data(), DType::bf16, Device::cpu, t.shape), t);
  for (size_t i = 0; i < tmp.size(); ++i) out[i] = __bfloat162float(tmp[i]);
  return out;
}

void host_f32_to_tensor(const float* data, const Tensor& t) {
  if (t.dtype == DType::f32) {
    copy_tensor(t, Tensor(const_cast<float*>(data), DType::f32, Device::cpu, t.shape));
    return;
  }
  ATTN_REQUIRE(t.dtype == DType::bf16, "cannot load f32 data into a %s tensor",
               dtype_name(t.dtype));
  std::vector<bf16> tmp(size_t(t.numel()));
  for (size_t i = 0; i < tmp.size(); ++i) tmp[i] = __float2bfloat16_rn(data[i]);
  copy_tensor(t, Tensor(tmp.data(), DType::bf16, Device::cpu, t.shape));
}

WeightLoadReport load_foreign_checkpoint(const ForeignCheckpoint& ckpt, const ParameterStore& store,
                                         const WeightLoadOptions& options) {
  std::map<std::string, const ForeignTensor*> by_name;
  for (const auto& t : ckpt.tensors) {
    ATTN_REQUIRE(by_name.emplace(t.name, &t).second,
                 "checkpoint '%s': two tensors map to '%s' (%s)", ckpt.path.c_str(), t.name.c_str(),
                 t.origin.c_str());
  }
  WeightLoadReport report;
  std::vector<const ForeignTensor*> to_load;
  for (const auto& e : store.entries()) {
    const std::string& name = e.spec.name;
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      ATTN_REQUIRE(!options.required_roles.count(e.spec.role),
                   "checkpoint '%s' has no tensor '%s' (role %s) that the model needs",
                   ckpt.path.c_str(), name.c_str(), role_name(e.spec.role));
      report.initialised.push_back(name);
      continue;
    }
    const ForeignTensor& ft = *it->second;
    std::vector<int64_t> want(e.spec.shape.dims.begin(),
                              e.spec.shape.dims.begin() + e.spec.shape.ndim);
    bool fits = ft.shape == want;
    if (!fits && ft.pad_rows && ft.shape.size() == want.size() && !want.empty())
      fits = ft.shape[0] <= want[0] && ft.shape[0] >= ft.min_rows &&
             std::equal(ft.shape.begin() + 1, ft.shape.end(), want.begin() + 1);
    ATTN_REQUIRE(fits, "checkpoint '%s': tensor '%s' (%s) has shape %s, the model expects %s%s",
                 ckpt.path.c_str(), name.c_str(), ft.origin.c_str(), shape_str(ft.shape).c_str(),
                 e.spec.shape.str().c_str(),
                 ft.pad_rows ? strformat(" (or fewer rows: the vocabulary padding; at least %lld, "
                                         "the vocabulary)",
                                         (long long)ft.min_rows)
                                   .c_str()
                             : "");
    report.loaded.push_back(name);
    to_load.push_back(&ft);
  }
  std::vector<std::string> extra = ckpt.unmapped;
  for (const auto& t : ckpt.tensors)
    if (!store.contains(t.name)) extra.push_back(t.origin);
  if (!extra.empty()) {
    ATTN_REQUIRE(options.allow_extra,
                 "checkpoint '%s' has %zu tensor(s) that the model does not have (a checkpoint of "
                 "another model shape?): %s%s",
                 ckpt.path.c_str(), extra.size(), join(extra).c_str(),
                 allow_extra_hint(options).c_str());
    report.ignored = extra;
  }
  for (const ForeignTensor* ft : to_load) {
    const Tensor dst = store.param(ft->name);
    std::vector<float> buf(size_t(dst.numel()), 0.f);  // padded rows stay zero
    ft->read(buf.data());
    // As attnlab's own files are checked (SafetensorsFile::load_into): a NaN weight would surface
    // as a nan loss, or be written on by convert.
    const int64_t bad = io::first_non_finite(reinterpret_cast<const std::byte*>(buf.data()),
                                             io::StDType::F32, int64_t(buf.size()));
    ATTN_REQUIRE(bad < 0,
                 "checkpoint '%s': tensor '%s' holds a non-finite value (%g at flat index %lld): "
                 "the file is corrupt or was written by a run that had diverged",
                 ckpt.path.c_str(), ft->origin.c_str(), bad < 0 ? 0.0 : double(buf[size_t(bad)]),
                 (long long)bad);
    host_f32_to_tensor(buf.data(), dst);
    if (options.on_f32_values) options.on_f32_values(ft->name, buf.data(), int64_t(buf.size()));
  }
  return report;
}

}  // namespace attnlab
