#include "nn/lora.h"

#include <cmath>
#include <utility>
#include <vector>

#include "core/error.h"
#include "ops/ops.h"

namespace attnlab {

LoraBranch::LoraBranch(const LoraOptions& o, std::string linear, int64_t in, int64_t out)
    : o_(o), linear_(std::move(linear)), in_(in), out_(out) {
  ATTN_REQUIRE(o.rank > 0 && o.alpha > 0.f && std::isfinite(o.alpha),
               "LoRA on %s: rank must be > 0 and alpha > 0, got rank %d, alpha %g", linear_.c_str(),
               o.rank, double(o.alpha));
}

void LoraBranch::declare_params(ParameterStore& store) const {
  const float a_std = 1.f / std::sqrt(3.f * float(in_));  // PEFT's kaiming_uniform(a=sqrt 5)
  store.declare({a_name(linear_), Shape{o_.rank, in_}, ParamRole::adapter, ParamInit::normal, a_std,
                 /*weight_decay=*/true});
  store.declare({b_name(linear_), Shape{out_, o_.rank}, ParamRole::adapter, ParamInit::zeros, 0.f,
                 /*weight_decay=*/true});
}

void LoraBranch::bind(const ParameterStore& store) {
  a_ = store.param(a_name(linear_));
  b_ = store.param(b_name(linear_));
  da_ = store.grad(a_name(linear_));
  db_ = store.grad(b_name(linear_));
}

void LoraBranch::forward(const ExecContext& ctx, const Tensor& y, const Tensor& x,
                         const Tensor& u) const {
  ops::matmul_scaled_fwd(ctx, u, x, a_, 1.f, /*accumulate=*/false);
  ops::matmul_scaled_fwd(ctx, y, u, b_, o_.scale(), /*accumulate=*/true);
}

void LoraBranch::backward(const ExecContext& ctx, const Tensor& dx, const Tensor& dy,
                          const Tensor& x, const Tensor& u, const Tensor& du) const {
  // du is needed for dA and for dx; dB needs only dy and u.
  const bool need_du = !da_.empty() || !dx.empty();
  ops::matmul_scaled_bwd(ctx, need_du ? du : Tensor(), db_, dy, u, b_, o_.scale(),
                         /*accumulate_dx=*/false);
  if (!need_du) return;
  ops::matmul_scaled_bwd(ctx, dx, da_, du, x, a_, 1.f, /*accumulate_dx=*/true);
}

std::string lora_linear_name(int layer, const std::string& target) {
  ATTN_REQUIRE(target == "c_attn",
               "LoRA target '%s' is not a projection attnlab gives a LoRA (valid: c_attn)",
               target.c_str());
  return "h." + std::to_string(layer) + ".attn.c_attn";
}

namespace {

std::vector<float> host_floats(const Tensor& t) {
  std::vector<float> out(size_t(t.numel()));
  if (t.dtype == DType::f32) {
    copy_tensor(Tensor(out.data(), DType::f32, Device::cpu, t.shape), t);
    return out;
  }
  ATTN_REQUIRE(t.dtype == DType::bf16, "LoRA merge: weights must be f32 or bf16, got %s",
               dtype_name(t.dtype));
  std::vector<bf16> b(out.size());
  copy_tensor(Tensor(b.data(), DType::bf16, Device::cpu, t.shape), t);
  for (size_t i = 0; i < b.size(); ++i) out[i] = __bfloat162float(b[i]);
  return out;
}

void store_floats(const Tensor& t, const std::vector<float>& v) {
  if (t.dtype == DType::f32) {
    copy_tensor(t, Tensor(const_cast<float*>(v.data()), DType::f32, Device::cpu, t.shape));
    return;
  }
  std::vector<bf16> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = __float2bfloat16(v[i]);
  copy_tensor(t, Tensor(b.data(), DType::bf16, Device::cpu, t.shape));
}

}  // namespace

void lora_merge(const ParameterStore& store, const std::string& linear, const LoraOptions& o,
                float sign) {
  const Tensor w = store.param(linear + ".weight");
  const Tensor a = store.param(LoraBranch::a_name(linear));
  const Tensor b = store.param(LoraBranch::b_name(linear));
  const int64_t out = w.dim(0), in = w.dim(1), r = a.dim(0);
  ATTN_REQUIRE(r == o.rank && a.dim(1) == in && b.dim(0) == out && b.dim(1) == r,
               "LoRA merge of %s: A %s and B %s do not fit W %s with rank %d", linear.c_str(),
               a.str().c_str(), b.str().c_str(), w.str().c_str(), o.rank);
  std::vector<float> W = host_floats(w);
  const std::vector<float> A = host_floats(a), B = host_floats(b);
  const double s = double(sign) * double(o.scale());
  for (int64_t i = 0; i < out; ++i)
    for (int64_t j = 0; j < in; ++j) {
      double acc = 0.0;
      for (int64_t k = 0; k < r; ++k) acc += double(B[size_t(i * r + k)]) * A[size_t(k * in + j)];
      float& wij = W[size_t(i * in + j)];
      wij = float(double(wij) + s * acc);
    }
  store_floats(w, W);
}

}  // namespace attnlab
