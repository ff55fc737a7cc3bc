#include "interop/hf_files.h"

#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "io/atomic_file.h"
#include "tokenizer/bpe.h"
#include "tokenizer/hf_tokenizer_json.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace attnlab {

HfWeightFiles open_hf_weights(const std::string& dir) {
  HfWeightFiles out;
  const fs::path single = fs::path(dir) / "model.safetensors";
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(single)) {
    out.path = single.string();
    auto file = std::make_shared<io::SafetensorsFile>(single.string());
    for (const auto& n : file->names()) out.where[n] = file;
    return out;
  }
  ATTN_REQUIRE(fs::exists(index),
               "Hugging Face directory '%s' has neither model.safetensors nor "
               "model.safetensors.index.json (pytorch_model.bin is not read: convert it with "
               "save_pretrained(..., safe_serialization=True))",
               dir.c_str());
  out.path = index.string();
  json j;
  try {
    j = json::parse(io::read_file(index.string()));
  } catch (const json::exception& e) {
    ATTN_FAIL("'%s' is not valid JSON: %s", index.c_str(), e.what());
  }
  ATTN_REQUIRE(j.contains("weight_map") && j["weight_map"].is_object(),
               "'%s' has no \"weight_map\" object", index.c_str());
  std::map<std::string, std::shared_ptr<io::SafetensorsFile>> shards;
  for (const auto& [name, file] : j["weight_map"].items()) {
    ATTN_REQUIRE(file.is_string(), "'%s': weight_map['%s'] is not a file name", index.c_str(),
                 name.c_str());
    const std::string f = file.get<std::string>();
    auto& shard = shards[f];
    if (!shard) shard = std::make_shared<io::SafetensorsFile>((fs::path(dir) / f).string());
    ATTN_REQUIRE(shard->contains(name), "'%s' lists tensor '%s' in '%s', which lacks it",
                 index.c_str(), name.c_str(), f.c_str());
    out.where[name] = shard;
  }
  for (const auto& [f, shard] : shards)
    for (const auto& n : shard->names())
      ATTN_REQUIRE(out.where.count(n) && out.where[n] == shard,
                   "'%s' holds tensor '%s', which '%s' does not list", f.c_str(), n.c_str(),
                   index.c_str());
  return out;
}

bool hf_same_tensor(const HfWeightFiles& files, const std::string& a, const std::string& b) {
  const auto fa = files.where.find(a), fb = files.where.find(b);
  if (fa == files.where.end() || fb == files.where.end()) return false;
  const io::TensorInfo &ia = fa->second->info(a), &ib = fb->second->info(b);
  if (ia.shape != ib.shape || ia.dtype != ib.dtype) return false;
  const auto ra = fa->second->raw(a), rb = fb->second->raw(b);
  return ra.size() == rb.size() && std::memcmp(ra.data(), rb.data(), ra.size()) == 0;
}

HfConfig::HfConfig(const std::string& text, const std::string& path) : path_(path) {
  try {
    j_ = json::parse(text);
  } catch (const json::exception& e) {
    ATTN_FAIL("'%s' is not valid JSON: %s", path.c_str(), e.what());
  }
  ATTN_REQUIRE(j_.is_object(), "'%s' is not a JSON object", path.c_str());
}

std::vector<int32_t> hf_eos_token_ids(const std::string& dir, bool config_fallback) {
  for (const char* name : {"generation_config.json", "config.json"}) {
    const fs::path file = fs::path(dir) / name;
    if (!fs::exists(file)) continue;
    if (std::strcmp(name, "config.json") == 0 && !config_fallback) break;
    const HfConfig c(io::read_file(file.string()), file.string());
    if (!c.has("eos_token_id")) return {};
    const json& v = c.json()["eos_token_id"];
    std::vector<int32_t> ids;
    for (const json& id : v.is_array() ? v : json::array({v})) {
      ATTN_REQUIRE(
          id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < INT32_MAX,
          "'%s': eos_token_id must be a token id or a list of them, got %s", file.c_str(),
          v.dump().c_str());
      ids.push_back(id.get<int32_t>());
    }
    return ids;
  }
  return {};
}

int HfConfig::get_int(const char* key, int def) const {
  if (!has(key)) return def;
  ATTN_REQUIRE(j_[key].is_number_integer(), "'%s': %s must be an integer, got %s", path_.c_str(),
               key, j_[key].dump().c_str());
  return j_[key].get<int>();
}

bool HfConfig::get_bool(const char* key, bool def) const {
  if (!has(key)) return def;
  ATTN_REQUIRE(j_[key].is_boolean(), "'%s': %s must be true or false, got %s", path_.c_str(), key,
               j_[key].dump().c_str());
  return j_[key].get<bool>();
}

double HfConfig::get_double(const char* key, double def) const {
  if (!has(key)) return def;
  ATTN_REQUIRE(j_[key].is_number(), "'%s': %s must be a number, got %s", path_.c_str(), key,
               j_[key].dump().c_str());
  return j_[key].get<double>();
}

std::string HfConfig::get_string(const char* key, const std::string& def) const {
  if (!has(key)) return def;
  ATTN_REQUIRE(j_[key].is_string(), "'%s': %s must be a string, got %s", path_.c_str(), key,
               j_[key].dump().c_str());
  return j_[key].get<std::string>();
}

void HfConfig::refuse(const char* key, const std::string& why) const {
  ATTN_FAIL("'%s': %s = %s is not supported: %s", path_.c_str(), key,
            j_.contains(key) ? j_[key].dump().c_str() : "(absent)", why.c_str());
}

std::string HfConfig::unknown_keys_note(const std::set<std::string>& known) const {
  std::string unknown;
  for (const auto& [k, v] : j_.items())
    if (!known.count(k)) unknown += (unknown.empty() ? "" : ", ") + k;
  if (unknown.empty()) return "";
  return strformat("%s: keys not interpreted (attnlab assumes they change nothing): %s",
                   path_.c_str(), unknown.c_str());
}

namespace {

// vocab.json and merges.txt of a GPT-2-form byte-level BPE tokenizer into dir; false (nothing
// written) for a tokenizer of another kind, also a byte-level BPE with another pre-tokenizer
// (LLaMA 3, Qwen2) or ignore_merges.
bool write_hf_bpe_files(const Tokenizer& tokenizer, const std::string& dir) {
  // (vocab.json + merges.txt imply GPT-2's pre-tokenizer and merges: a LLaMA 3 / Qwen2 pattern or
  // ignore_merges has no place in them.)
  const auto* bpe = dynamic_cast<const BpeTokenizer*>(&tokenizer);
  if (!bpe || bpe->data().pre_tokenizer != PreTokenizer::kGpt2 || bpe->data().ignore_merges)
    return false;
  const BpeVocabData& d = bpe->data();
  json vocab = json::object();
  for (size_t id = 0; id < d.tokens.size(); ++id) {
    if (!d.has_token[id]) continue;
    vocab[d.is_special[id] ? d.tokens[id] : gpt2_bytes_to_symbols(d.tokens[id])] = int(id);
  }
  io::write_file_atomic((fs::path(dir) / "vocab.json").string(), vocab.dump() + "\n");
  std::string merges = "#version: 0.2\n";
  for (const auto& [l, r] : d.merges)
    merges += gpt2_bytes_to_symbols(d.tokens[size_t(l)]) + " " +
              gpt2_bytes_to_symbols(d.tokens[size_t(r)]) + "\n";
  io::write_file_atomic((fs::path(dir) / "merges.txt").string(), merges);
  return true;
}

}  // namespace

HfTokenizerForm write_hf_tokenizer_files(const Tokenizer& tokenizer, const std::string& dir,
                                         int model_max_length) {
  if (write_hf_bpe_files(tokenizer, dir)) return HfTokenizerForm::kVocabMerges;
  const HfTokenizerJson tj = hf_tokenizer_json(tokenizer);
  if (tj.text.empty()) return HfTokenizerForm::kNone;
  io::write_file_atomic((fs::path(dir) / "tokenizer.json").string(), tj.text);
  json specials = json::object();
  if (!tj.bos_token.empty()) specials["bos_token"] = tj.bos_token;
  specials["eos_token"] = tj.eos_token;
  if (!tj.unk_token.empty()) specials["unk_token"] = tj.unk_token;
  json config = specials;
  config["tokenizer_class"] = "PreTrainedTokenizerFast";
  config["model_max_length"] = model_max_length;
  // What the post_processor does; transformers versions that rebuild it from these flags then
  // rebuild the same one.
  config["add_bos_token"] = !tj.bos_token.empty();
  config["add_eos_token"] = tj.eos_in_template;
  config["clean_up_tokenization_spaces"] = false;
  io::write_file_atomic((fs::path(dir) / "tokenizer_config.json").string(), config.dump(2) + "\n");
  io::write_file_atomic((fs::path(dir) / "special_tokens_map.json").string(),
                        specials.dump(2) + "\n");
  return HfTokenizerForm::kTokenizerJson;
}

}  // namespace attnlab
