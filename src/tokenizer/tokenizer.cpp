#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "io/atomic_file.h"
#include "tokenizer/bpe.h"

namespace attnlab {

void ByteTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  // Geometric growth: reserve(size + n) on every call would reallocate on every call when
  // documents are appended one by one.
  if (out.capacity() - out.size() < text.size())
    out.reserve(std::max(out.size() + text.size(), 2 * out.capacity()));
  for (unsigned char c : text) out.push_back(int32_t(c));
}

size_t ByteTokenizer::split_point(std::string_view text, size_t near) const {
  return std::min(near, text.size());
}

std::string ByteTokenizer::decode(std::span<const int32_t> ids) const {
  std::string s;
  s.reserve(ids.size());
  for (int32_t id : ids) s += piece(id);
  return s;
}

std::string ByteTokenizer::piece(int32_t id) const {
  if (id == kEot) return "<|endoftext|>";
  ATTN_REQUIRE(id >= 0 && id < 256, "byte tokenizer: id %d out of range [0, 257)", id);
  return std::string(1, char(id));
}

std::string ByteTokenizer::to_json() const {
  return R"({"type": "byte", "vocab_size": 257, "eot_id": 256})";
}

// ---- vocabulary loaders -------------------------------------------------------------------------

namespace {

using nlohmann::json;

constexpr const char* kEndOfText = "<|endoftext|>";
constexpr int64_t kMaxVocab = 1 << 24;

json parse_json_file(const std::string& text, const std::string& path) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    ATTN_FAIL("tokenizer: '%s' is not valid JSON: %s", path.c_str(), e.what());
  }
}

// Collects (id, token bytes, special) entries into BpeVocabData, checking ids.
class VocabBuilder {
 public:
  explicit VocabBuilder(std::string path) : path_(std::move(path)) {}

  void add(int64_t id, std::string bytes, bool special, const std::string& shown) {
    ATTN_REQUIRE(id >= 0 && id < kMaxVocab,
                 "tokenizer: '%s': token '%s' has id %lld, expected "
                 "0 <= id < %lld",
                 path_.c_str(), shown.c_str(), (long long)id, (long long)kMaxVocab);
    if (size_t(id) >= d_.tokens.size()) {
      d_.tokens.resize(id + 1);
      d_.has_token.resize(id + 1, false);
      d_.is_special.resize(id + 1, false);
    }
    if (d_.has_token[id]) {
      ATTN_REQUIRE(d_.tokens[id] == bytes,
                   "tokenizer: '%s': id %lld is used by two tokens "
                   "('%s' and another)",
                   path_.c_str(), (long long)id, shown.c_str());
      d_.is_special[id] = d_.is_special[id] || special;
      return;
    }
    d_.tokens[id] = std::move(bytes);
    d_.has_token[id] = true;
    d_.is_special[id] = special;
  }
  BpeVocabData& data() { return d_; }

 private:
  std::string path_;
  BpeVocabData d_;
};

// Token ids by their spelling in the file (GPT-2 symbols), for resolving merges.
// Token string -> id, looked up by string_view (transparent hash: no string per lookup).
struct SymbolHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using SymbolIds = std::unordered_map<std::string, int32_t, SymbolHash, std::equal_to<>>;

void add_symbol_tokens(const json& vocab, const std::string& path, VocabBuilder& vb,
                       SymbolIds& ids) {
  ATTN_REQUIRE(vocab.is_object(),
               "tokenizer: '%s': the vocabulary must be a JSON object mapping "
               "token strings to ids",
               path.c_str());
  for (const auto& [sym, value] : vocab.items()) {
    ATTN_REQUIRE(value.is_number_integer(),
                 "tokenizer: '%s': the id of token '%s' is not an "
                 "integer",
                 path.c_str(), sym.c_str());
    const bool special = sym == kEndOfText;
    std::string bytes;
    if (special) {
      bytes = sym;
    } else {
      ATTN_REQUIRE(gpt2_symbols_to_bytes(sym, bytes),
                   "tokenizer: '%s': token '%s' contains a "
                   "character outside GPT-2's byte alphabet (not a byte-level BPE vocabulary?)",
                   path.c_str(), sym.c_str());
    }
    vb.add(value.get<int64_t>(), std::move(bytes), special, sym);
    ids[sym] = value.get<int32_t>();
  }
}

// One merge "left right" (GPT-2 symbols) -> token ids; `where` names the file and line/index.
// `where` (a callable returning the merge's place, e.g. "file:line") is only called for an error
// message: 50K merges need no string each.
template <typename Where>
std::pair<int32_t, int32_t> resolve_merge(std::string_view left, std::string_view right,
                                          const SymbolIds& ids, const Where& where) {
  const auto l = ids.find(left), r = ids.find(right);
  if (l == ids.end() || r == ids.end()) {
    const std::string ls(left), rs(right);
    ATTN_FAIL("tokenizer: %s: merge '%s %s' refers to unknown token '%s'", where().c_str(),
              ls.c_str(), rs.c_str(), (l == ids.end() ? ls : rs).c_str());
  }
  return {l->second, r->second};
}

template <typename Where>
std::pair<std::string_view, std::string_view> split_merge(std::string_view line,
                                                          const Where& where) {
  const size_t sp = line.find(' ');
  ATTN_REQUIRE(sp != std::string_view::npos && sp > 0 && sp + 1 < line.size() &&
                   line.find(' ', sp + 1) == std::string_view::npos,
               "tokenizer: %s: expected a merge '<left> <right>', got '%s'", where().c_str(),
               std::string(line).c_str());
  return {line.substr(0, sp), line.substr(sp + 1)};
}

// The merges of a vocab.bpe file, cut into their two halves (views into `text`).
struct MergeLines {
  std::string text;
  struct Merge {
    std::string_view left, right;
    int line;
  };
  std::vector<Merge> merges;
};
MergeLines read_merge_lines(const std::string& path) {
  MergeLines m;
  m.text = io::read_file(path, "tokenizer file");
  const std::string_view text(m.text);
  size_t pos = 0;
  for (int line_no = 1; pos < text.size(); ++line_no) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.substr(0, 8) == "#version")) continue;
    const auto [left, right] =
        split_merge(line, [&] { return path + ":" + std::to_string(line_no); });
    m.merges.push_back({left, right, line_no});
  }
  return m;
}

void set_eot(BpeVocabData& d, const std::string& path) {
  for (size_t id = 0; id < d.tokens.size(); ++id)
    if (d.has_token[id] && d.is_special[id] && d.tokens[id] == kEndOfText) d.eot_id = int32_t(id);
  ATTN_REQUIRE(d.eot_id >= 0, "tokenizer: '%s' has no %s token", path.c_str(), kEndOfText);
}

}  // namespace

BpeVocabData load_gpt2_vocab(const std::string& dir) {
  // OpenAI's file names, or the same files as a Hugging Face GPT-2 directory names them.
  const bool hf_names = !std::filesystem::exists(dir + "/encoder.json") &&
                        std::filesystem::exists(dir + "/vocab.json");
  const std::string enc_path = dir + (hf_names ? "/vocab.json" : "/encoder.json");
  const std::string bpe_path = dir + (hf_names ? "/merges.txt" : "/vocab.bpe");
  // vocab.bpe is read and cut into merges on another thread while encoder.json is parsed: the two
  // are independent until the merges are resolved to ids, and together they are most of the
  // start-up of a `prepare` run (the encoders wait for it). An error in either file is reported
  // (encoder.json's first).
  auto merge_lines = std::async(std::launch::async, read_merge_lines, bpe_path);
  const json enc = parse_json_file(io::read_file(enc_path, "tokenizer file"), enc_path);
  VocabBuilder vb(enc_path);
  SymbolIds ids;
  add_symbol_tokens(enc, enc_path, vb, ids);
  BpeVocabData& d = vb.data();
  d.name = "gpt2-bpe";
  set_eot(d, enc_path);

  const MergeLines lines = merge_lines.get();
  d.merges.reserve(lines.merges.size());
  for (const auto& m : lines.merges) {
    d.merges.push_back(resolve_merge(m.left, m.right, ids,
                                     [&] { return bpe_path + ":" + std::to_string(m.line); }));
  }
  ATTN_REQUIRE(!d.merges.empty(), "tokenizer: '%s' has no merges", bpe_path.c_str());
  return std::move(d);
}

BpeVocabData load_hf_tokenizer_json(const std::string& path) {
  const json j = parse_json_file(io::read_file(path, "tokenizer file"), path);
  ATTN_REQUIRE(j.is_object() && j.contains("model") && j["model"].is_object(),
               "tokenizer: '%s' is not a Hugging Face tokenizer.json (no \"model\" object)",
               path.c_str());
  const json& model = j["model"];
  const std::string type = model.value("type", std::string("BPE"));
  ATTN_REQUIRE(type == "BPE", "tokenizer: '%s': model type '%s' is not supported (only BPE)",
               path.c_str(), type.c_str());
  auto unsupported_if = [&](bool cond, const char* what) {
    ATTN_REQUIRE(!cond, "tokenizer: '%s': %s is not supported (only GPT-2-style byte-level BPE)",
                 path.c_str(), what);
  };
  auto non_empty = [&](const char* key) {
    return model.contains(key) && !model[key].is_null() &&
           !(model[key].is_string() && model[key].get<std::string>().empty());
  };
  unsupported_if(non_empty("continuing_subword_prefix"), "model.continuing_subword_prefix");
  unsupported_if(non_empty("end_of_word_suffix"), "model.end_of_word_suffix");
  unsupported_if(model.value("byte_fallback", false), "model.byte_fallback");
  unsupported_if(model.value("ignore_merges", false), "model.ignore_merges");
  unsupported_if(model.contains("dropout") && model["dropout"].is_number() &&
                     model["dropout"].get<double>() > 0,
                 "model.dropout");
  unsupported_if(j.contains("normalizer") && !j["normalizer"].is_null(), "a normalizer");
  const json pre = j.value("pre_tokenizer", json());
  unsupported_if(!pre.is_object() || pre.value("type", "") != "ByteLevel",
                 "a pre_tokenizer other than ByteLevel");
  unsupported_if(pre.value("add_prefix_space", false), "pre_tokenizer.add_prefix_space");
  unsupported_if(!pre.value("use_regex", true), "pre_tokenizer.use_regex = false");

  VocabBuilder vb(path);
  SymbolIds ids;
  ATTN_REQUIRE(model.contains("vocab"), "tokenizer: '%s': model.vocab is missing", path.c_str());
  add_symbol_tokens(model["vocab"], path, vb, ids);
  if (j.contains("added_tokens")) {
    ATTN_REQUIRE(j["added_tokens"].is_array(), "tokenizer: '%s': added_tokens must be an array",
                 path.c_str());
    for (const json& t : j["added_tokens"]) {
      ATTN_REQUIRE(t.is_object() && t.contains("id") && t["id"].is_number_integer() &&
                       t.contains("content") && t["content"].is_string(),
                   "tokenizer: '%s': each added token needs an integer id and a content string",
                   path.c_str());
      const std::string content = t["content"].get<std::string>();
      ATTN_REQUIRE(t.value("special", false),
                   "tokenizer: '%s': non-special added token '%s' is "
                   "not supported",
                   path.c_str(), content.c_str());
      vb.add(t["id"].get<int64_t>(), content, true, content);
    }
  }
  BpeVocabData& d = vb.data();
  d.name = "bpe";
  set_eot(d, path);

  ATTN_REQUIRE(model.contains("merges") && model["merges"].is_array(),
               "tokenizer: '%s': model.merges must be an array", path.c_str());
  const json& merges = model["merges"];
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto where = [&] { return path + ": model.merges[" + std::to_string(i) + "]"; };
    const json& m = merges[i];
    if (m.is_string()) {
      const auto [left, right] = split_merge(m.get_ref<const std::string&>(), where);
      d.merges.push_back(resolve_merge(left, right, ids, where));
    } else {
      ATTN_REQUIRE(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
                   "tokenizer: %s: expected \"left right\" or [\"left\", \"right\"]",
                   where().c_str());
      d.merges.push_back(resolve_merge(m[0].get_ref<const std::string&>(),
                                       m[1].get_ref<const std::string&>(), ids, where));
    }
  }
  return std::move(d);
}

namespace {

BpeVocabData attnlab_bpe_from_json(const json& j, const std::string& path) {
  auto field = [&](const char* key) -> const json& {
    ATTN_REQUIRE(j.contains(key), "tokenizer: '%s': missing field \"%s\"", path.c_str(), key);
    return j[key];
  };
  ATTN_REQUIRE(field("version") == 1, "tokenizer: '%s': unsupported version %s (expected 1)",
               path.c_str(), field("version").dump().c_str());
  ATTN_REQUIRE(
      field("pre_tokenizer") == "gpt2" && field("byte_encoding") == "gpt2-bytes-to-unicode",
      "tokenizer: '%s': unsupported pre_tokenizer/byte_encoding", path.c_str());
  const json& tokens = field("tokens");
  const json& special_ids = field("special_ids");
  const json& merges = field("merges");
  ATTN_REQUIRE(tokens.is_array() && special_ids.is_array() && merges.is_array(),
               "tokenizer: '%s': tokens, special_ids and merges must be arrays", path.c_str());
  std::vector<bool> special(tokens.size(), false);
  for (const json& id : special_ids) {
    ATTN_REQUIRE(id.is_number_integer() && id.get<int64_t>() >= 0 &&
                     size_t(id.get<int64_t>()) < tokens.size(),
                 "tokenizer: '%s': special id %s is not a token id", path.c_str(),
                 id.dump().c_str());
    special[id.get<size_t>()] = true;
  }
  VocabBuilder vb(path);
  SymbolIds ids;
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (tokens[id].is_null()) continue;
    ATTN_REQUIRE(tokens[id].is_string(), "tokenizer: '%s': tokens[%zu] is not a string",
                 path.c_str(), id);
    const std::string sym = tokens[id].get<std::string>();
    std::string bytes;
    ATTN_REQUIRE(gpt2_symbols_to_bytes(sym, bytes),
                 "tokenizer: '%s': tokens[%zu] ('%s') is not "
                 "in GPT-2's byte alphabet",
                 path.c_str(), id, sym.c_str());
    vb.add(int64_t(id), std::move(bytes), special[id], sym);
    if (!special[id]) ids[sym] = int32_t(id);
  }
  BpeVocabData& d = vb.data();
  d.tokens.resize(tokens.size());
  d.has_token.resize(tokens.size(), false);
  d.is_special.resize(tokens.size(), false);
  d.name = j.value("name", std::string("bpe"));
  const json& eot = field("eot_id");
  ATTN_REQUIRE(eot.is_number_integer(), "tokenizer: '%s': eot_id is not an integer", path.c_str());
  d.eot_id = eot.get<int32_t>();
  d.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto where = [&] { return path + ": merges[" + std::to_string(i) + "]"; };
    ATTN_REQUIRE(merges[i].is_string(), "tokenizer: %s: not a string", where().c_str());
    const auto [left, right] = split_merge(merges[i].get_ref<const std::string&>(), where);
    d.merges.push_back(resolve_merge(left, right, ids, where));
  }
  return std::move(d);
}

}  // namespace

BpeVocabData load_attnlab_bpe_json(const std::string& json_text, const std::string& path) {
  return attnlab_bpe_from_json(parse_json_file(json_text, path), path);
}

std::string tokenizer_difference(const Tokenizer& a, const Tokenizer& b) {
  if (a.vocab_size() != b.vocab_size())
    return strformat("%d ids against %d", a.vocab_size(), b.vocab_size());
  if (a.eot_id() != b.eot_id())
    return strformat("<|endoftext|> is id %d against %d", a.eot_id(), b.eot_id());
  for (int32_t id = 0; id < a.vocab_size(); ++id)
    if (a.piece(id) != b.piece(id)) return strformat("id %d has other bytes", id);
  std::string probe = " The quick brown fox's 3 jumps -- caf\xc3\xa9\n\n\t  over it.";
  for (int c = 1; c < 256; ++c) probe += char(c);
  std::vector<int32_t> ia, ib;
  a.encode(probe, ia);
  b.encode(probe, ib);
  if (ia != ib) return "a probe text encodes to other ids";
  return "";
}

// ---- the registry of spec forms -----------------------------------------------------------------

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec) {
  if (spec == "byte") return std::make_unique<ByteTokenizer>();
  if (spec.rfind("gpt2:", 0) == 0) {
    const std::string dir = spec.substr(5);
    return std::make_unique<BpeTokenizer>(load_gpt2_vocab(dir), dir);
  }
  if (spec.rfind("hf:", 0) == 0) {
    const std::string path = spec.substr(3);
    return std::make_unique<BpeTokenizer>(load_hf_tokenizer_json(path), path);
  }
  std::error_code ec;
  if (!spec.empty() && std::filesystem::is_regular_file(spec, ec)) {
    const json j = parse_json_file(io::read_file(spec, "tokenizer file"), spec);
    ATTN_REQUIRE(j.is_object(), "tokenizer: '%s' is not a JSON object", spec.c_str());
    if (j.contains("model")) {
      return std::make_unique<BpeTokenizer>(load_hf_tokenizer_json(spec), spec);
    }
    const std::string type = j.value("type", std::string());
    if (type == "byte") {
      ATTN_REQUIRE(j.value("vocab_size", 0) == 257 && j.value("eot_id", 0) == 256,
                   "tokenizer: '%s': a byte tokenizer has vocab_size 257 and eot_id 256",
                   spec.c_str());
      return std::make_unique<ByteTokenizer>();
    }
    ATTN_REQUIRE(type == "bpe" && j.value("format", std::string()) == "attnlab-tokenizer",
                 "tokenizer: '%s' is neither an attnlab tokenizer JSON (\"type\": \"byte\" or "
                 "\"bpe\") nor a Hugging Face tokenizer.json",
                 spec.c_str());
    return std::make_unique<BpeTokenizer>(attnlab_bpe_from_json(j, spec), spec);
  }
  ATTN_FAIL(
      "unknown tokenizer '%s' (valid: byte, gpt2:<dir with encoder.json and vocab.bpe, or "
      "vocab.json and merges.txt>, "
      "hf:<tokenizer.json>, or a tokenizer JSON file written by attnlab)",
      spec.c_str());
}

}  // namespace attnlab
