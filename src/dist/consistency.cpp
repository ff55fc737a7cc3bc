#include "dist/consistency.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/cuda_check.h"
#include "core/hash.h"

namespace attnlab {
namespace {

std::string fingerprint(const TokenSource& src) {
  return strformat("%s, %lld tokens, sample hash %016llx", src.name().c_str(),
                   (long long)src.size(), (unsigned long long)token_sample_hash(src));
}

}  // namespace

std::string params_fingerprint(const Tensor& params) {
  const int64_t n = params.numel(), samples = std::min<int64_t>(n, 4096);
  const size_t es = dtype_size(params.dtype);
  const int64_t stride = samples > 0 ? n / samples : 1;  // elements between samples
  std::vector<unsigned char> bytes(size_t(samples) * es);
  if (samples > 0) {
    if (params.device == Device::cuda) {
      CUDA_CHECK(cudaMemcpy2D(bytes.data(), es, params.data, size_t(stride) * es, es,
                              size_t(samples), cudaMemcpyDeviceToHost));
    } else {
      const auto* src = static_cast<const unsigned char*>(params.data);
      for (int64_t i = 0; i < samples; ++i)
        std::memcpy(bytes.data() + size_t(i) * es, src + size_t(i * stride) * es, es);
    }
  }
  uint64_t h = fnv1a(&n, sizeof(n));
  h = fnv1a(bytes.data(), bytes.size(), h);
  return strformat("%lld values, sample hash %016llx", (long long)n, (unsigned long long)h);
}

RunFacts run_facts(const Recipe& recipe, const std::vector<const DataLoader*>& loaders) {
  RunFacts facts = recipe_leaves(recipe);
  for (size_t l = 0; l < loaders.size(); ++l) {
    if (!loaders[l]) continue;
    const auto& sources = loaders[l]->sources();
    for (size_t i = 0; i < sources.size(); ++i)
      facts.emplace_back(strformat("data source %zu.%zu", l, i), fingerprint(*sources[i]));
  }
  return facts;
}

void check_same_run(Communicator& comm, const RunFacts& facts, const char* what, const char* hint) {
  if (comm.world_size() == 1) return;
  // Rank 0's list: the number of keys, then per key the hashes of its name and value.
  uint64_t count = facts.size();
  comm.broadcast_host(&count, sizeof(count), 0);
  std::vector<uint64_t> mine(2 * facts.size()), root(2 * count);
  for (size_t i = 0; i < facts.size(); ++i) {
    mine[2 * i] = fnv1a(facts[i].first.data(), facts[i].first.size());
    mine[2 * i + 1] = fnv1a(facts[i].second.data(), facts[i].second.size());
  }
  if (comm.rank() == 0) root = mine;
  comm.broadcast_host(root.data(), root.size() * sizeof(uint64_t), 0);
  std::string differing;
  int n_diff = 0;
  for (size_t i = 0; i < facts.size(); ++i) {
    bool same = false;
    for (size_t j = 0; j < count && !same; ++j)
      same = root[2 * j] == mine[2 * i] && root[2 * j + 1] == mine[2 * i + 1];
    if (same) continue;
    ++n_diff;
    if (n_diff <= 8)
      differing += strformat("%s%s = %s", differing.empty() ? "" : "; ", facts[i].first.c_str(),
                             facts[i].second.c_str());
  }
  if (facts.size() != count && n_diff == 0) {  // rank 0 has keys this rank lacks
    n_diff = 1;
    differing =
        strformat("rank 0 has %llu keys, this rank %zu", (unsigned long long)count, facts.size());
  }
  double totals[2] = {double(n_diff), n_diff > 0 ? double(1 << std::min(comm.rank(), 30)) : 0.0};
  comm.all_reduce_host(totals, 2);
  if (totals[0] == 0) return;
  if (n_diff > 0)
    throw RunMismatchError(strformat(
        "rank %d resolved a different %s than rank 0 (%d differing keys; its values here: "
        "%s): %s",
        comm.rank(), what, n_diff, differing.c_str(), hint));
  std::string ranks;
  for (int r = 1; r < std::min(comm.world_size(), 31); ++r)
    if ((uint64_t(totals[1]) >> r) & 1) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  throw RunMismatchError(strformat(
      "rank %d: rank(s) %s resolved a different %s than rank 0 (see their messages for the "
      "keys): %s",
      comm.rank(), ranks.empty() ? "above 30" : ranks.c_str(), what, hint));
}

}  // namespace attnlab
