// The one registry of attention variants. To add a variant: implement AttentionModule in
// src/nn/attention_<name>.{h,cpp} and add one line to kRegistry below.
#include <utility>

#include "core/error.h"
#include "nn/attention.h"
#include "nn/attention_dense.h"
#include "nn/attention_focus.h"
#include "nn/attention_sfa.h"

namespace attnlab {
namespace {

using Entry = std::pair<std::string, AttentionFactory>;

std::vector<Entry>& registry() {
  static std::vector<Entry> kRegistry = {
      {"dense",
       [](const AttentionOptions& o, int) -> std::unique_ptr<AttentionModule> {
         return std::make_unique<DenseAttention>(o);
       }},
      {"focus",
       [](const AttentionOptions& o, int layer) -> std::unique_ptr<AttentionModule> {
         return std::make_unique<FocusAttention>(o, layer);
       }},
      {"sfa",
       [](const AttentionOptions& o, int) -> std::unique_ptr<AttentionModule> {
         return std::make_unique<SfaAttention>(o);
       }},
  };
  return kRegistry;
}

}  // namespace

std::vector<std::string> attention_types() {
  std::vector<std::string> names;
  for (auto& [name, f] : registry()) names.push_back(name);
  return names;
}

std::unique_ptr<AttentionModule> make_attention(const AttentionOptions& opts, int layer) {
  for (auto& [name, factory] : registry())
    if (name == opts.type) return factory(opts, layer);
  std::string valid;
  for (auto& n : attention_types()) valid += (valid.empty() ? "" : ", ") + n;
  ATTN_FAIL("attention.type: unknown attention '%s' (valid: %s)", opts.type.c_str(), valid.c_str());
}

void register_test_attention(const std::string& name, AttentionFactory factory) {
  for (auto& [n, f] : registry())
    ATTN_REQUIRE(n != name, "attention '%s' is already registered", name.c_str());
  registry().emplace_back(name, factory);
}

}  // namespace attnlab
