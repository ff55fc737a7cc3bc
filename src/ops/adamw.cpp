// Host ops for the optimizer: AdamW update and the deterministic gradient sum of squares.
#include "kernels/optim/adamw.cuh"

#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "ops/ops.h"
#include "ref/adamw_ref.h"

namespace attnlab::ops {
namespace {

// Elements per partial sum on the CPU. Fixed (not derived from the thread count) so the result is
// bit-identical for any OMP_NUM_THREADS.
constexpr int64_t kSumsqChunk = int64_t(1) << 16;

void check_on_ctx(const ExecContext& ctx, const Tensor& t, const char* op, const char* name) {
  ATTN_REQUIRE(t.device == ctx.device, "%s: %s is %s but the context runs on %s", op, name,
               t.str().c_str(), device_name(ctx.device));
}

void check_state(const ExecContext& ctx, const Tensor& t, const Tensor& param, const char* name) {
  ATTN_REQUIRE(!t.empty(), "adamw_update: %s must not be empty", name);
  check_on_ctx(ctx, t, "adamw_update", name);
  ATTN_REQUIRE(t.dtype == DType::f32, "adamw_update: %s must be f32, got %s", name,
               t.str().c_str());
  ATTN_REQUIRE(t.numel() == param.numel(),
               "adamw_update: %s must have as many elements as param %s (%lld), got %s", name,
               param.str().c_str(), (long long)param.numel(), t.str().c_str());
}

void check_step(const AdamWStep& s) {
  ATTN_REQUIRE(s.step >= 1, "adamw_update: step counts from 1, got %d", s.step);
  ATTN_REQUIRE(s.beta1 >= 0.f && s.beta1 < 1.f && s.beta2 >= 0.f && s.beta2 < 1.f,
               "adamw_update: beta1 and beta2 must be in [0, 1), got %g and %g", s.beta1, s.beta2);
  ATTN_REQUIRE(std::isfinite(s.lr) && std::isfinite(s.grad_scale) && s.eps > 0.f,
               "adamw_update: lr (%g) and grad_scale (%g) must be finite and eps (%g) > 0", s.lr,
               s.grad_scale, s.eps);
}

void check_update_tensors(const ExecContext& ctx, const Tensor& param, const Tensor& master,
                          const Tensor& grad, const Tensor& m, const Tensor& v) {
  ATTN_REQUIRE(!param.empty() && !grad.empty(), "adamw_update: param and grad must not be empty");
  check_on_ctx(ctx, param, "adamw_update", "param");
  check_on_ctx(ctx, grad, "adamw_update", "grad");
  ATTN_REQUIRE(param.dtype == DType::f32 || param.dtype == DType::bf16,
               "adamw_update: param must be f32 or bf16, got %s", param.str().c_str());
  ATTN_REQUIRE(grad.dtype == param.dtype && grad.shape == param.shape,
               "adamw_update: grad must match param %s, got %s", param.str().c_str(),
               grad.str().c_str());
  check_state(ctx, m, param, "m");
  check_state(ctx, v, param, "v");
  if (!master.empty()) check_state(ctx, master, param, "master");
  if (ctx.device == Device::cpu)
    ATTN_REQUIRE(param.dtype == DType::f32, "adamw_update: the CPU supports f32 only, got param %s",
                 param.str().c_str());
}

// The step's hyperparameters into a kernel params struct (AdamWParams or AdamWMultiParams).
template <typename P>
void set_step(P& p, const AdamWStep& s) {
  p.lr = s.lr;
  p.beta1 = s.beta1;
  p.beta2 = s.beta2;
  p.eps = s.eps;
  p.weight_decay = s.weight_decay;
  p.grad_scale = s.grad_scale;
  p.step = s.step;
  p.seed = s.seed;
}

template <typename T>
AdamWParams<T> make_params(const Tensor& param, const Tensor& master, const Tensor& grad,
                           const Tensor& m, const Tensor& v, const AdamWStep& s) {
  AdamWParams<T> p;
  p.param = param.ptr<T>();
  p.master = master.empty() ? nullptr : master.ptr<float>();
  p.grad = grad.ptr<T>();
  p.m = m.ptr<float>();
  p.v = v.ptr<float>();
  p.n = param.numel();
  set_step(p, s);
  return p;
}

}  // namespace

void adamw_update(const ExecContext& ctx, const Tensor& param, const Tensor& master,
                  const Tensor& grad, const Tensor& m, const Tensor& v, const AdamWStep& s) {
  NvtxRange range("adamw_update");
  check_update_tensors(ctx, param, master, grad, m, v);
  check_step(s);
  if (ctx.device == Device::cpu) {
    adamw_ref(make_params<float>(param, master, grad, m, v, s));
    return;
  }
  if (param.dtype == DType::f32)
    launch_adamw(make_params<float>(param, master, grad, m, v, s), ctx.stream);
  else
    launch_adamw(make_params<bf16>(param, master, grad, m, v, s), ctx.stream);
}

AdamWRangeTable::AdamWRangeTable(const ExecContext& ctx, std::vector<AdamWRangeSpec> ranges)
    : ranges_(std::move(ranges)) {
  std::vector<AdamWRange> table;
  for (size_t i = 0; i < ranges_.size(); ++i) {
    const AdamWRangeSpec& r = ranges_[i];
    ATTN_REQUIRE(r.offset >= 0 && r.numel > 0,
                 "AdamWRangeTable: range %zu must have offset >= 0 and numel > 0, got %lld, %lld",
                 i, (long long)r.offset, (long long)r.numel);
    end_ = std::max(end_, r.offset + r.numel);
    AdamWRange d;
    d.offset = r.offset;
    d.numel = r.numel;
    d.seed = r.seed;
    d.decay = r.decay ? 1 : 0;
    table.push_back(d);
  }
  // Disjoint ranges: the kernel updates them concurrently.
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const auto& r : ranges_) spans.emplace_back(r.offset, r.offset + r.numel);
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    ATTN_REQUIRE(spans[i].first >= spans[i - 1].second,
                 "AdamWRangeTable: ranges [%lld, %lld) and [%lld, %lld) overlap",
                 (long long)spans[i - 1].first, (long long)spans[i - 1].second,
                 (long long)spans[i].first, (long long)spans[i].second);
  if (ctx.device == Device::cuda && !table.empty()) {
    num_blocks_ = adamw_multi_plan(table.data(), int(table.size()));
    const size_t bytes = table.size() * sizeof(AdamWRange);
    device_table_ = Buffer(Device::cuda, bytes);
    // On the context's stream (ordered with the kernels that read it), once.
    auto stream = reinterpret_cast<cudaStream_t>(ctx.stream);
    CUDA_CHECK(
        cudaMemcpyAsync(device_table_.data(), table.data(), bytes, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
  }
}

void adamw_update_multi(const ExecContext& ctx, const Tensor& param, const Tensor& master,
                        const Tensor& grad, const Tensor& m, const Tensor& v,
                        const AdamWRangeTable& table, const AdamWStep& s) {
  NvtxRange range("adamw_update_multi");
  check_update_tensors(ctx, param, master, grad, m, v);
  check_step(s);
  ATTN_REQUIRE(table.end() <= param.numel(),
               "adamw_update_multi: the ranges need %lld elements but param %s has %lld",
               (long long)table.end(), param.str().c_str(), (long long)param.numel());
  if (table.ranges().empty()) return;
  if (ctx.device == Device::cpu) {
    // Range by range, exactly the single-range update of each.
    for (const AdamWRangeSpec& r : table.ranges()) {
      const auto at = [&](const Tensor& flat) {
        return flat.empty() ? Tensor()
                            : flat.view(Shape{flat.numel()}).slice0(r.offset, r.offset + r.numel);
      };
      AdamWStep rs = s;
      rs.weight_decay = r.decay ? s.weight_decay : 0.f;
      rs.seed = s.seed ^ r.seed;
      adamw_ref(make_params<float>(at(param), at(master), at(grad), at(m), at(v), rs));
    }
    return;
  }
  ATTN_REQUIRE(table.device_table_.device() == Device::cuda,
               "adamw_update_multi: the range table was built for the CPU, not for %s",
               device_name(ctx.device));
  const auto fill = [&](auto& p) {
    p.master = master.empty() ? nullptr : master.ptr<float>();
    p.m = m.ptr<float>();
    p.v = v.ptr<float>();
    p.ranges = static_cast<const AdamWRange*>(table.device_table_.data());
    p.num_ranges = int(table.ranges().size());
    p.num_blocks = table.num_blocks_;
    set_step(p, s);
  };
  if (param.dtype == DType::f32) {
    AdamWMultiParams<float> p;
    p.param = param.ptr<float>();
    p.grad = grad.ptr<float>();
    fill(p);
    launch_adamw_multi(p, ctx.stream);
  } else {
    AdamWMultiParams<bf16> p;
    p.param = param.ptr<bf16>();
    p.grad = grad.ptr<bf16>();
    fill(p);
    launch_adamw_multi(p, ctx.stream);
  }
}

double sum_of_squares(const ExecContext& ctx, const Tensor& grad) {
  NvtxRange range("sum_of_squares");
  check_on_ctx(ctx, grad, "sum_of_squares", "grad");
  ATTN_REQUIRE(grad.dtype == DType::f32 || grad.dtype == DType::bf16,
               "sum_of_squares: grad must be f32 or bf16, got %s", grad.str().c_str());
  const int64_t n = grad.numel();
  if (n == 0) return 0.0;
  ATTN_REQUIRE(!grad.empty(), "sum_of_squares: grad %s has no data", grad.str().c_str());
  if (ctx.device == Device::cpu) {
    ATTN_REQUIRE(grad.dtype == DType::f32, "sum_of_squares: the CPU supports f32 only, got %s",
                 grad.str().c_str());
    const float* g = grad.ptr<float>();
    const int64_t chunks = (n + kSumsqChunk - 1) / kSumsqChunk;
    std::vector<double> partial(size_t(chunks), 0.0);
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t begin = c * kSumsqChunk;
      partial[size_t(c)] = sumsq_ref(g + begin, std::min(kSumsqChunk, n - begin));
    }
    double total = 0.0;
    for (double x : partial) total += x;
    return total;
  }
  // Stream-ordered scratch (cudaMalloc/cudaFree would synchronise the whole device): the one
  // synchronisation is the read of the result.
  auto stream = reinterpret_cast<cudaStream_t>(ctx.stream);
  float* out = nullptr;
  CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&out), sizeof(float), stream));
  if (grad.dtype == DType::f32)
    launch_sumsq(grad.ptr<float>(), n, out, ctx.stream);
  else
    launch_sumsq(grad.ptr<bf16>(), n, out, ctx.stream);
  float host = 0.f;
  CUDA_CHECK(cudaMemcpyAsync(&host, out, sizeof(float), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaFreeAsync(out, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return double(host);
}

double sum_of_squares(const ExecContext& ctx, const Tensor& grad,
                      const std::vector<FlatSpan>& spans) {
  NvtxRange range("sum_of_squares");
  check_on_ctx(ctx, grad, "sum_of_squares", "grad");
  const int64_t n = grad.numel();
  int64_t end = 0, total = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    const FlatSpan& s = spans[i];
    ATTN_REQUIRE(s.offset >= end && s.numel >= 0 && s.offset + s.numel <= n,
                 "sum_of_squares: span %zu [%lld, %lld) must lie after the previous one (ending at "
                 "%lld) and inside grad %s",
                 i, (long long)s.offset, (long long)(s.offset + s.numel), (long long)end,
                 grad.str().c_str());
    end = s.offset + s.numel;
    total += s.numel;
  }
  if (total == 0) return 0.0;
  const Tensor flat = grad.view(Shape{n});
  if (ctx.device != Device::cpu)
    return sum_of_squares(
        ctx, flat.slice0(spans.front().offset, spans.back().offset + spans.back().numel));
  ATTN_REQUIRE(grad.dtype == DType::f32, "sum_of_squares: the CPU supports f32 only, got %s",
               grad.str().c_str());
  // Pieces of the spans per chunk of kSumsqChunk elements of their concatenation: the same
  // chunks, summed in the same order, as sum_of_squares over the packed elements.
  const int64_t chunks = (total + kSumsqChunk - 1) / kSumsqChunk;
  std::vector<std::vector<FlatSpan>> pieces(static_cast<size_t>(chunks));
  int64_t packed = 0;
  for (const FlatSpan& s : spans) {
    for (int64_t done = 0; done < s.numel;) {
      const int64_t c = packed / kSumsqChunk;
      const int64_t take = std::min(s.numel - done, (c + 1) * kSumsqChunk - packed);
      pieces[size_t(c)].push_back(FlatSpan{s.offset + done, take});
      done += take;
      packed += take;
    }
  }
  const float* g = flat.ptr<float>();
  std::vector<double> partial(size_t(chunks), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    double acc = 0.0;
    for (const FlatSpan& p : pieces[size_t(c)]) acc = sumsq_ref(g + p.offset, p.numel, acc);
    partial[size_t(c)] = acc;
  }
  double sum = 0.0;
  for (double x : partial) sum += x;
  return sum;
}

}  // namespace attnlab::ops
