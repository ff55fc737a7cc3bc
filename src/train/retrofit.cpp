#include "train/retrofit.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "config/suggest.h"
#include "core/error.h"
#include "io/data_hash.h"
#include "io/safetensors.h"
#include "model/gpt.h"
#include "train/from_recipe.h"

namespace attnlab {

void require_trainable_parameters(const Recipe& r, const ParameterStore& store) {
  if (!r.retrofit.enabled || store.num_trainable() > 0) return;
  const std::string roles = join_names(r.retrofit.train_roles);
  ATTN_FAIL(
      "retrofit.train_roles [%s] selects no parameter of this model (attention.type '%s'%s): "
      "nothing would train. Retrofit Focus with attention.type: focus and train_roles "
      "[attention], or add a LoRA with retrofit.lora.rank > 0 and train_roles [adapter]",
      roles.c_str(), r.attention.type.c_str(),
      r.retrofit.lora.rank > 0 ? "" : ", no retrofit.lora");
}

void require_new_parameters_train(const Recipe& r, const ParameterStore& store,
                                  const std::vector<std::string>& initialised) {
  if (!r.retrofit.enabled) return;
  std::string frozen, roles;
  int n = 0;
  for (const std::string& name : initialised) {
    const ParamSpec& spec = store.entry(name).spec;
    if (store.entry(name).trainable) continue;
    if (n++ < 4) frozen += (frozen.empty() ? "" : ", ") + name;
    const std::string role = role_name(spec.role);
    if (roles.find(role) == std::string::npos) roles += (roles.empty() ? "" : ", ") + role;
  }
  if (n == 0) return;
  const std::string given = join_names(r.retrofit.train_roles);
  ATTN_FAIL(
      "retrofit: %d parameter(s) are not in the base '%s' and retrofit.train_roles [%s] leaves "
      "them frozen at their random initialisation: %s%s (role %s); add %s to "
      "retrofit.train_roles, or retrofit a base that holds them",
      n, r.retrofit.checkpoint.c_str(), given.c_str(), frozen.c_str(), n > 4 ? ", ..." : "",
      roles.c_str(), roles.c_str());
}

namespace {

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull, kFnvPrime = 0x100000001b3ull;

struct Hasher {
  uint64_t h = kFnvOffset;
  void word(uint64_t w) {
    h ^= w;
    h *= kFnvPrime;
  }
  void bytes(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      word(w);
    }
    if (i < n) {
      uint64_t w = 0;
      std::memcpy(&w, p + i, n - i);
      word(w);
    }
    word(uint64_t(n));  // length-delimited, so concatenations cannot collide trivially
  }
};

}  // namespace

uint64_t base_weights_hash(const ParameterStore& store, int64_t vocab_size, int version) {
  ATTN_REQUIRE(version == 1 || version == 2, "base hash version %d: expected 1 or 2", version);
  std::vector<const ParameterStore::Entry*> base;
  for (const auto& e : store.entries())
    if (e.spec.role == ParamRole::base) base.push_back(&e);
  std::sort(base.begin(), base.end(),
            [](const auto* a, const auto* b) { return a->spec.name < b->spec.name; });
  Hasher hs;
  std::vector<float> f32;
  std::vector<bf16> b16;
  for (const auto* e : base) {
    hs.bytes(e->spec.name.data(), e->spec.name.size());
    std::vector<int64_t> dims(e->spec.shape.dims.begin(),
                              e->spec.shape.dims.begin() + e->spec.shape.ndim);
    Tensor t = store.param(e->spec.name);
    const bool vocab_rows =
        version >= 2 && std::find(GPT::kVocabRowParams.begin(), GPT::kVocabRowParams.end(),
                                  e->spec.name) != GPT::kVocabRowParams.end();
    if (vocab_rows) {
      ATTN_REQUIRE(vocab_size >= 1 && vocab_size <= dims.at(0),
                   "base hash: vocab_size %lld for '%s' of %lld rows", (long long)vocab_size,
                   e->spec.name.c_str(), (long long)dims.at(0));
      dims[0] = vocab_size;
      t = t.slice0(0, vocab_size);
    }
    hs.bytes(dims.data(), dims.size() * sizeof(int64_t));
    const size_t n = size_t(t.numel());
    b16.resize(n);
    if (t.dtype == DType::bf16) {
      copy_tensor(Tensor(b16.data(), DType::bf16, Device::cpu, t.shape), t);
    } else {
      f32.resize(n);
      copy_tensor(Tensor(f32.data(), DType::f32, Device::cpu, t.shape), t);
      for (size_t i = 0; i < n; ++i) b16[i] = __float2bfloat16(f32[i]);
    }
    hs.bytes(b16.data(), n * sizeof(bf16));
  }
  return hs.h;
}

std::map<std::string, std::string> adapter_metadata(const Recipe& r, uint64_t base_hash,
                                                    int64_t step) {
  std::map<std::string, std::string> m;
  m["format"] = "attnlab-adapter";
  m.emplace("adapter_version",
            kAdapterVersion);  // (operator= of a 1-char literal: GCC 12 -Wrestrict)
  m["step"] = std::to_string(step);
  m["base"] = r.retrofit.checkpoint;
  m["base_hash"] = io::hash_hex(base_hash);
  m["base_hash_kind"] = kBaseHashKind;
  m["attention"] = r.attention.type;
  if (r.attention.type == "focus") {
    const FocusConfig& f = r.attention.focus;
    m["focus.groups"] = std::to_string(f.groups);
    m["focus.d_g"] = std::to_string(f.d_g);
    m["focus.tau"] = strformat("%.17g", f.tau);
    m["focus.local_window"] = std::to_string(f.local_window);
    m["focus.top_k"] = std::to_string(f.top_k);
    m["focus.assign"] = std::string(enum_name(f.assign));
  }
  if (r.retrofit.lora.rank > 0) {
    m["lora.rank"] = std::to_string(r.retrofit.lora.rank);
    m["lora.alpha"] = strformat("%.17g", r.retrofit.lora.alpha);
    std::string t;
    for (const std::string& s : r.retrofit.lora.targets) t += (t.empty() ? "" : ",") + s;
    m["lora.targets"] = t;
  }
  m["recipe"] = recipe_to_yaml(r);
  return m;
}

void save_adapter(const std::string& path, const ParameterStore& store,
                  const std::map<std::string, std::string>& metadata) {
  io::SafetensorsWriter w;
  for (const auto& e : store.entries())
    if (e.spec.role != ParamRole::base) w.add(e.spec.name, store.param(e.spec.name));
  w.set_metadata(metadata);
  w.write(path);
}

namespace {

std::string meta(const io::SafetensorsFile& f, const char* key) {
  const auto it = f.metadata().find(key);
  ATTN_REQUIRE(it != f.metadata().end(),
               "adapter '%s' has no '%s' metadata (not an attnlab "
               "adapter, or a damaged one)",
               f.path().c_str(), key);
  return it->second;
}

void check_adapter_file(const io::SafetensorsFile& f) {
  const auto it = f.metadata().find("format");
  ATTN_REQUIRE(it != f.metadata().end() && it->second == "attnlab-adapter",
               "'%s' is not an attnlab adapter (its metadata has no format: attnlab-adapter); "
               "adapters are the adapter.safetensors files of a retrofit run's checkpoints",
               f.path().c_str());
  const std::string version = meta(f, "adapter_version");
  ATTN_REQUIRE(version == kAdapterVersion,
               "adapter '%s': adapter_version %s is not one this attnlab reads (%s); it was "
               "written by another attnlab",
               f.path().c_str(), version.c_str(), kAdapterVersion);
  const std::string kind = meta(f, "base_hash_kind");
  ATTN_REQUIRE(kind == kBaseHashKind || kind == kBaseHashKindV1,
               "adapter '%s': base hash kind '%s' is not one this attnlab computes (%s, %s)",
               f.path().c_str(), kind.c_str(), kBaseHashKind, kBaseHashKindV1);
}

}  // namespace

ModelSource with_adapter(const ModelSource& base, const std::string& adapter_path) {
  io::SafetensorsFile f(adapter_path);
  check_adapter_file(f);
  const Recipe ar = parse_recipe(meta(f, "recipe"), adapter_path + ":recipe", {});
  const GPTConfig a = gpt_config_of(ar), &b = base.config;
  std::string diff;
  auto cmp = [&](const char* key, int64_t want, int64_t have) {
    if (want != have)
      diff += strformat("\n  %s: %lld in the adapter's model, %lld in the base", key,
                        (long long)want, (long long)have);
  };
  cmp("model.n_layer", a.n_layer, b.n_layer);
  cmp("model.n_head", a.n_head, b.n_head);
  cmp("model.n_kv_head", a.kv_heads(), b.kv_heads());
  cmp("model.n_embd", a.n_embd, b.n_embd);
  cmp("model.vocab_size", a.vocab_size, b.vocab_size);
  cmp("model.block_size", a.block_size, b.block_size);
  cmp("model.bias", a.bias, b.bias);
  cmp("model.tied_embeddings", a.tied_embeddings, b.tied_embeddings);
  cmp("model.norm (0 layernorm, 1 rmsnorm)", int(a.norm), int(b.norm));
  cmp("model.mlp (0 gelu, 1 swiglu)", int(a.mlp), int(b.mlp));
  cmp("model.position (0 learned, 1 rope)", int(a.position), int(b.position));
  cmp("model.mlp_hidden", a.mlp_hidden(), b.mlp_hidden());
  cmp("attention.window", a.attention.window, b.attention.window);
  if (a.position == PositionType::rope && a.rope_theta != b.rope_theta)
    diff += strformat("\n  model.rope_theta: %g in the adapter's model, %g in the base",
                      double(a.rope_theta), double(b.rope_theta));
  if (a.position == PositionType::rope && !(a.rope_scaling == b.rope_scaling))
    diff += strformat("\n  model.rope_scaling: %s in the adapter's model, %s in the base",
                      rope_scaling_name(a.rope_scaling).c_str(),
                      rope_scaling_name(b.rope_scaling).c_str());
  // A base of another attention variant than the adapter's model (a dense base may take any):
  // typically a retrofit run given in place of the base it was made from.
  if (b.attention.type != "dense" && a.attention.type != b.attention.type)
    diff += strformat(
        "\n  attention.type: %s in the adapter's model, %s in the base (if '%s' is a retrofit, "
        "pass the base it was made from)",
        a.attention.type.c_str(), b.attention.type.c_str(), base.path.c_str());
  ATTN_REQUIRE(diff.empty(), "adapter '%s' was made for another model than '%s':%s",
               adapter_path.c_str(), base.path.c_str(), diff.c_str());
  const auto rank = f.metadata().find("lora.rank");
  ATTN_REQUIRE((rank == f.metadata().end() ? 0 : std::atoi(rank->second.c_str())) == a.lora.rank,
               "adapter '%s': its metadata gives lora.rank %s but its recipe "
               "retrofit.lora.rank %d (a damaged adapter)",
               adapter_path.c_str(), rank == f.metadata().end() ? "(none)" : rank->second.c_str(),
               a.lora.rank);
  // The other settings the metadata repeats from the recipe (Focus's, LoRA's alpha and
  // targets; the rank is checked above, also where the recipe has no LoRA) must agree with it
  // too: a hand-edited or damaged file would otherwise build the recipe's model silently.
  const std::map<std::string, std::string> expect = adapter_metadata(ar, 0, 0);
  for (const auto& [key, want] : expect) {
    if (key == "lora.rank") continue;
    if (!key.starts_with("focus.") && !key.starts_with("lora.") && key != "attention") continue;
    const auto it = f.metadata().find(key);
    ATTN_REQUIRE(it != f.metadata().end() && it->second == want,
                 "adapter '%s': its metadata gives %s %s but its recipe %s (a damaged adapter)",
                 adapter_path.c_str(), key.c_str(),
                 it == f.metadata().end() ? "(none)" : it->second.c_str(), want.c_str());
  }
  ModelSource out = base;
  out.config = a;
  out.config.recompute = b.recompute;
  out.adapter = adapter_path;
  out.adapter_recipe_yaml = meta(f, "recipe");
  // An attnlab base stores its padded rows, so the model takes its padding (the rows past the
  // vocabulary are zero and never read, whatever their number: an adapter trained on a Hugging
  // Face or llm.c copy, padded to 128, applies to the original); a Hugging Face or llm.c base
  // holds the vocabulary rows only, which the loader pads to the adapter's model.
  if (base.format == ModelFormat::attnlab && a.padded_vocab != b.padded_vocab) {
    out.config.padded_vocab = b.padded_vocab;
    Recipe r = ar;
    r.model.vocab_multiple = vocab_multiple_of(b.vocab_size, b.padded_vocab);
    out.adapter_recipe_yaml = recipe_to_yaml(r);
  }
  return out;
}

ModelSource inspect_model_source(const std::string& path, const std::string& adapter_path) {
  const ModelSource base = inspect_model_source(path);
  return adapter_path.empty() ? base : with_adapter(base, adapter_path);
}

void load_adapter_tensors(const std::string& adapter_path, const ParameterStore& store,
                          const std::string& base_path, int64_t vocab_size) {
  io::SafetensorsFile f(adapter_path);
  check_adapter_file(f);
  const int version = meta(f, "base_hash_kind") == kBaseHashKindV1 ? 1 : 2;
  const std::string want = meta(f, "base_hash"),
                    have = io::hash_hex(base_weights_hash(store, vocab_size, version));
  ATTN_REQUIRE(want == have,
               "adapter '%s' was trained on another base model: its base hash is %s (base '%s' "
               "when it was made), the base '%s' given here hashes to %s; apply it to the base "
               "it was made for",
               adapter_path.c_str(), want.c_str(), meta(f, "base").c_str(), base_path.c_str(),
               have.c_str());
  const auto rank = f.metadata().find("lora.rank");
  for (const std::string& n : f.names()) {
    if (rank == f.metadata().end() || !n.ends_with(".lora_a") || !store.contains(n)) continue;
    const int64_t have = f.info(n).shape.at(0), want = store.param(n).dim(0);
    ATTN_REQUIRE(have == want && std::to_string(have) == rank->second,
                 "adapter '%s' is a LoRA of rank %s (its metadata) and its tensor %s has rank "
                 "%lld; the model it is applied to has rank %lld: the ranks must agree",
                 adapter_path.c_str(), rank->second.c_str(), n.c_str(), (long long)have,
                 (long long)want);
  }
  for (const std::string& n : f.names()) {
    ATTN_REQUIRE(store.contains(n) && store.entry(n).spec.role != ParamRole::base,
                 "adapter '%s' holds tensor %s, which %s", adapter_path.c_str(), n.c_str(),
                 store.contains(n) ? "is a base tensor of the model (an adapter never changes "
                                     "the base)"
                                   : "the adapter's model does not have");
  }
  for (const auto& e : store.entries())
    ATTN_REQUIRE(e.spec.role == ParamRole::base || f.contains(e.spec.name),
                 "adapter '%s' lacks tensor %s of its model", adapter_path.c_str(),
                 e.spec.name.c_str());
  for (const std::string& n : f.names()) f.load_into(n, store.param(n));
}

GPTConfig merge_lora(const GPTConfig& cfg, const ParameterStore& store, ParameterStore& merged) {
  ATTN_REQUIRE(cfg.lora.enabled(), "merge_lora: the model has no LoRA (retrofit.lora.rank 0)");
  for (int l = 0; l < cfg.n_layer; ++l) lora_merge(store, lora_linear_name(l, "c_attn"), cfg.lora);
  GPTConfig out = cfg;
  out.lora = LoraOptions{};
  GPT model(out);
  model.declare_params(merged);
  merged.finalize(Device::cpu, DType::f32, {});
  for (const auto& e : merged.entries())
    copy_tensor(merged.param(e.spec.name), store.param(e.spec.name));
  return out;
}

}  // namespace attnlab
