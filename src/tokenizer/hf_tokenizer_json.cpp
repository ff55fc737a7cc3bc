#include "tokenizer/hf_tokenizer_json.h"

#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "io/atomic_file.h"
#include "tokenizer/bpe.h"
#include "tokenizer/sp_bpe.h"
#include "tokenizer/vocab_json.h"

namespace attnlab {

namespace {

using nlohmann::json;
using tokenizer_detail::resolve_merge;
using tokenizer_detail::split_merge;
using tokenizer_detail::SymbolIds;
using tokenizer_detail::VocabBuilder;

constexpr const char* kMetaspace = "\xE2\x96\x81";  // "▁"

// The error for an unsupported value: "tokenizer: '<path>': <key> = <value> is not supported
// (<what is>)"; long values are cut.
[[noreturn]] void refuse(const std::string& path, const std::string& key, const json& value,
                         const char* supported) {
  std::string shown = value.dump();
  if (shown.size() > 300) shown = shown.substr(0, 300) + "...";
  ATTN_FAIL("tokenizer: '%s': %s = %s is not supported (%s)", path.c_str(), key.c_str(),
            shown.c_str(), supported);
}

// j[key], or null when absent.
const json& member(const json& j, const char* key) {
  static const json null_value;
  return j.is_object() && j.contains(key) ? j[key] : null_value;
}

std::string type_of(const json& v) {
  const json& t = member(v, "type");
  return t.is_string() ? t.get<std::string>() : std::string();
}

enum class Family { kByteLevel, kSentencePiece };

struct Pipeline {
  Family family = Family::kByteLevel;
  PreTokenizer pre_tokenizer = PreTokenizer::kGpt2;
  SpPrefix prefix = SpPrefix::kPrepend;
  bool split_on_metaspace = false;
};

constexpr const char* kSupportedPre =
    "supported: ByteLevel with use_regex true; Sequence[Split(Regex <GPT-2, LLaMA 3 or Qwen2 "
    "pattern>, behavior Isolated), ByteLevel with use_regex false]; Metaspace with replacement "
    "\xE2\x96\x81; or null with the SentencePiece normalizer";
constexpr const char* kSupportedNormalizer =
    "supported: null, or Sequence[Prepend \"\xE2\x96\x81\", Replace \" \" -> \"\xE2\x96\x81\"] "
    "(SentencePiece-style BPE)";

void check_byte_level(const json& bl, const std::string& key, bool use_regex,
                      const std::string& path) {
  if (member(bl, "add_prefix_space").is_boolean() && bl["add_prefix_space"].get<bool>())
    refuse(path, key + ".add_prefix_space", true, "supported: false");
  const json& ur = member(bl, "use_regex");
  const bool got = ur.is_boolean() ? ur.get<bool>() : true;  // the library's default
  if (got != use_regex)
    refuse(path, key + ".use_regex", got,
           use_regex ? "supported: true, or false after a Split with the pattern"
                     : "supported: false after a Split");
}

// Sequence[Prepend("▁"), Replace(" " -> "▁")], in either order (both give the same text).
bool is_sentencepiece_normalizer(const json& n) {
  if (type_of(n) != "Sequence" || !member(n, "normalizers").is_array() ||
      n["normalizers"].size() != 2)
    return false;
  bool prepend = false, replace = false;
  for (const json& m : n["normalizers"]) {
    if (type_of(m) == "Prepend" && member(m, "prepend") == kMetaspace) prepend = true;
    if (type_of(m) == "Replace" && member(member(m, "pattern"), "String") == " " &&
        member(m, "content") == kMetaspace)
      replace = true;
  }
  return prepend && replace;
}

Pipeline read_pipeline(const json& j, const std::string& path) {
  const json& norm = member(j, "normalizer");
  const json& pre = member(j, "pre_tokenizer");
  Pipeline p;
  if (!norm.is_null()) {
    if (!is_sentencepiece_normalizer(norm)) refuse(path, "normalizer", norm, kSupportedNormalizer);
    if (!pre.is_null())
      refuse(path, "pre_tokenizer", pre, "supported: null with the SentencePiece normalizer");
    p.family = Family::kSentencePiece;
    p.prefix = SpPrefix::kPrepend;
    return p;
  }
  const std::string type = type_of(pre);
  if (type == "ByteLevel") {
    check_byte_level(pre, "pre_tokenizer", true, path);
    return p;
  }
  if (type == "Sequence") {
    const json& seq = member(pre, "pretokenizers");
    if (!seq.is_array() || seq.size() != 2 || type_of(seq[0]) != "Split" ||
        type_of(seq[1]) != "ByteLevel")
      refuse(path, "pre_tokenizer", pre, kSupportedPre);
    const json& split = seq[0];
    const json& pattern = member(member(split, "pattern"), "Regex");
    if (!pattern.is_string() ||
        !pre_tokenizer_from_pattern(pattern.get<std::string>(), p.pre_tokenizer))
      refuse(path, "pre_tokenizer.pretokenizers[0].pattern", member(split, "pattern"),
             "supported: {\"Regex\": <the GPT-2, LLaMA 3 or Qwen2 pattern, exactly>}");
    if (member(split, "behavior") != "Isolated")
      refuse(path, "pre_tokenizer.pretokenizers[0].behavior", member(split, "behavior"),
             "supported: \"Isolated\"");
    if (member(split, "invert") != false)
      refuse(path, "pre_tokenizer.pretokenizers[0].invert", member(split, "invert"),
             "supported: false");
    check_byte_level(seq[1], "pre_tokenizer.pretokenizers[1]", false, path);
    return p;
  }
  if (type == "Metaspace") {
    if (member(pre, "replacement") != kMetaspace)
      refuse(path, "pre_tokenizer.replacement", member(pre, "replacement"),
             "supported: \"\xE2\x96\x81\"");
    // The library's reading: prepend_scheme defaults to "always"; add_prefix_space false (older
    // files) means "never"; split defaults to true.
    const json& scheme = member(pre, "prepend_scheme");
    const std::string s = scheme.is_string() ? scheme.get<std::string>() : "always";
    if (s == "first") {
      p.prefix = SpPrefix::kMetaspaceFirst;
    } else if (s == "always") {
      p.prefix = SpPrefix::kMetaspaceAlways;
    } else if (s == "never") {
      p.prefix = SpPrefix::kMetaspaceNever;
    } else {
      refuse(path, "pre_tokenizer.prepend_scheme", scheme,
             "supported: \"first\", \"always\", \"never\"");
    }
    if (member(pre, "add_prefix_space") == false) p.prefix = SpPrefix::kMetaspaceNever;
    const json& split = member(pre, "split");
    p.split_on_metaspace = split.is_boolean() ? split.get<bool>() : true;
    p.family = Family::kSentencePiece;
    return p;
  }
  refuse(path, "pre_tokenizer", pre, kSupportedPre);
}

// The decoder only matters for Hugging Face's own decode; attnlab's decode() is fixed by the
// family (sp_bpe.h). Refused where the two would disagree beyond what docs/tokenizer.md says.
void check_decoder(const json& j, Family family, const std::string& path) {
  const json& dec = member(j, "decoder");
  if (dec.is_null()) return;
  const std::string type = type_of(dec);
  if (family == Family::kByteLevel) {
    if (type != "ByteLevel") refuse(path, "decoder", dec, "supported: null or ByteLevel");
    return;
  }
  if (type == "Metaspace" && member(dec, "replacement") == kMetaspace) return;
  bool ok = type == "Sequence" && member(dec, "decoders").is_array();
  for (const json& d : ok ? dec["decoders"] : json::array()) {
    const std::string t = type_of(d);
    const bool known =
        t == "ByteFallback" || t == "Fuse" ||
        (t == "Replace" && member(member(d, "pattern"), "String") == kMetaspace &&
         member(d, "content") == " ") ||
        (t == "Strip" && member(d, "content") == " " && member(d, "stop") == 0 &&
         member(d, "start").is_number_integer() && member(d, "start").get<int>() <= 1);
    ok = ok && known;
  }
  if (!ok)
    refuse(path, "decoder", dec,
           "supported: null, Metaspace, or Sequence[Replace \"\xE2\x96\x81\" -> \" \", "
           "ByteFallback, Fuse, Strip \" \" start 1]");
}

// bos and eos from post_processor's TemplateProcessing "single": a special token first is the
// bos, one last (after the sequence) the eos; -1 each when absent.
struct Template {
  int32_t bos = -1, eos = -1;
};

int32_t special_token_id(const json& tp, const std::string& name, const BpeVocabData& d,
                         const std::string& path) {
  const json& entry = member(member(tp, "special_tokens"), name.c_str());
  const json& ids = member(entry, "ids");
  if (ids.is_array()) {
    if (ids.size() != 1 || !ids[0].is_number_integer())
      refuse(path, "post_processor.special_tokens." + name + ".ids", ids, "supported: one id");
    return ids[0].get<int32_t>();
  }
  for (size_t id = 0; id < d.tokens.size(); ++id)
    if (d.has_token[id] && d.is_special[id] && d.tokens[id] == name) return int32_t(id);
  ATTN_FAIL("tokenizer: '%s': post_processor names the special token '%s', which is not one",
            path.c_str(), name.c_str());
}

void read_template(const json& tp, const BpeVocabData& d, const std::string& path, Template& t) {
  const json& single = member(tp, "single");
  if (!single.is_array()) refuse(path, "post_processor.single", single, "supported: a list");
  std::optional<size_t> sequence_at;
  for (size_t i = 0; i < single.size(); ++i) {
    const json& item = single[i];
    if (item.contains("Sequence")) {
      sequence_at = i;
      continue;
    }
    const json& id = member(member(item, "SpecialToken"), "id");
    if (!id.is_string()) refuse(path, "post_processor.single", single, "supported: SpecialToken");
    const int32_t tok = special_token_id(tp, id.get<std::string>(), d, path);
    if (i == 0) t.bos = tok;
    if (i + 1 == single.size() && sequence_at) t.eos = tok;
  }
}

Template read_post_processor(const json& j, Family family, const BpeVocabData& d,
                             const std::string& path) {
  const json& pp = member(j, "post_processor");
  Template t;
  const std::string type = type_of(pp);
  if (pp.is_null()) {
    // The legacy LLaMA form: no post-processor in the file, and transformers' LlamaTokenizerFast
    // adds <s> (add_bos_token defaults to true).
    if (family == Family::kSentencePiece) {
      for (size_t id = 0; id < d.tokens.size(); ++id)
        if (d.has_token[id] && d.is_special[id] && d.tokens[id] == "<s>") t.bos = int32_t(id);
    }
  } else if (type == "TemplateProcessing") {
    read_template(pp, d, path, t);
  } else if (type == "Sequence" && member(pp, "processors").is_array()) {
    for (const json& p : pp["processors"]) {
      if (type_of(p) == "TemplateProcessing") {
        read_template(p, d, path, t);
      } else if (type_of(p) != "ByteLevel") {
        refuse(path, "post_processor", pp,
               "supported: null, ByteLevel, TemplateProcessing or a Sequence of them");
      }
    }
  } else if (type != "ByteLevel") {
    refuse(path, "post_processor", pp,
           "supported: null, ByteLevel, TemplateProcessing or a Sequence of them");
  }
  return t;
}

// The end-of-text token: the template's last special token, else the first of <|end_of_text|>,
// </s>, <|endoftext|> that is a special token.
int32_t choose_eot(const Template& t, const BpeVocabData& d, const std::string& path) {
  if (t.eos >= 0) return t.eos;
  if (const int32_t id = tokenizer_detail::eot_by_name(d.tokens, d.has_token, d.is_special);
      id >= 0)
    return id;
  ATTN_FAIL(
      "tokenizer: '%s' has no end-of-text token: the post_processor names none, and none of "
      "<|end_of_text|>, </s>, <|endoftext|> is a special token in added_tokens",
      path.c_str());
}

void add_added_tokens(const json& j, bool has_normalizer, const std::string& path,
                      VocabBuilder& vb) {
  const json& added = member(j, "added_tokens");
  if (added.is_null()) return;
  ATTN_REQUIRE(added.is_array(), "tokenizer: '%s': added_tokens must be an array", path.c_str());
  for (size_t i = 0; i < added.size(); ++i) {
    const json& t = added[i];
    ATTN_REQUIRE(t.is_object() && t.contains("id") && t["id"].is_number_integer() &&
                     t.contains("content") && t["content"].is_string(),
                 "tokenizer: '%s': each added token needs an integer id and a content string",
                 path.c_str());
    const std::string content = t["content"].get<std::string>();
    const std::string key = "added_tokens[" + std::to_string(i) + "]";
    ATTN_REQUIRE(t.value("special", false),
                 "tokenizer: '%s': %s: non-special added token '%s' is not supported (Hugging Face "
                 "would match it inside ordinary text)",
                 path.c_str(), key.c_str(), content.c_str());
    // These change how encode_with_special finds the token in a text.
    for (const char* flag : {"lstrip", "rstrip", "single_word"})
      if (t.value(flag, false)) refuse(path, key + "." + flag, true, "supported: false");
    if (has_normalizer && t.value("normalized", false))
      refuse(path, key + ".normalized", true, "supported: false with a normalizer");
    vb.add(t["id"].get<int64_t>(), content, true, content);
  }
}

}  // namespace

std::unique_ptr<Tokenizer> hf_tokenizer_from_json(const json& j, const std::string& path) {
  ATTN_REQUIRE(j.is_object() && j.contains("model") && j["model"].is_object(),
               "tokenizer: '%s' is not a Hugging Face tokenizer.json (no \"model\" object)",
               path.c_str());
  const json& model = j["model"];
  const std::string type = model.value("type", std::string("BPE"));
  ATTN_REQUIRE(type == "BPE", "tokenizer: '%s': model type '%s' is not supported (only BPE)",
               path.c_str(), type.c_str());
  auto non_empty = [&](const char* key) {
    const json& v = member(model, key);
    return !v.is_null() && !(v.is_string() && v.get<std::string>().empty());
  };
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (non_empty(key)) refuse(path, std::string("model.") + key, model[key], "supported: null");
  if (member(model, "dropout").is_number() && model["dropout"].get<double>() > 0)
    refuse(path, "model.dropout", model["dropout"], "supported: null");

  const Pipeline p = read_pipeline(j, path);
  check_decoder(j, p.family, path);
  const bool sp = p.family == Family::kSentencePiece;
  const bool byte_fallback = model.value("byte_fallback", false);
  const bool ignore_merges = model.value("ignore_merges", false);
  if (!sp && byte_fallback)
    refuse(path, "model.byte_fallback", true, "supported: false with a ByteLevel pre-tokenizer");
  if (sp && ignore_merges)
    refuse(path, "model.ignore_merges", true, "supported: false for SentencePiece-style BPE");

  VocabBuilder vb(path);
  SymbolIds ids;
  ATTN_REQUIRE(model.contains("vocab"), "tokenizer: '%s': model.vocab is missing", path.c_str());
  tokenizer_detail::add_vocab_object(model["vocab"], path, /*gpt2_symbols=*/!sp, vb, ids);
  add_added_tokens(j, sp && !member(j, "normalizer").is_null(), path, vb);
  BpeVocabData& d = vb.data();
  const Template tmpl = read_post_processor(j, p.family, d, path);
  d.eot_id = choose_eot(tmpl, d, path);
  d.bos_id = tmpl.bos;

  ATTN_REQUIRE(model.contains("merges") && model["merges"].is_array(),
               "tokenizer: '%s': model.merges must be an array", path.c_str());
  const json& merges = model["merges"];
  d.merges.reserve(merges.size());
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

  if (!sp) {
    d.pre_tokenizer = p.pre_tokenizer;
    d.ignore_merges = ignore_merges;
    d.name = p.pre_tokenizer == PreTokenizer::kGpt2
                 ? "bpe"
                 : std::string("bpe-") + pre_tokenizer_name(p.pre_tokenizer);
    return std::make_unique<BpeTokenizer>(std::move(d), path);
  }
  SpVocabData s;
  s.tokens = std::move(d.tokens);
  s.has_token = std::move(d.has_token);
  s.is_special = std::move(d.is_special);
  s.merges = std::move(d.merges);
  s.prefix = p.prefix;
  s.split_on_metaspace = p.split_on_metaspace;
  s.byte_fallback = byte_fallback;
  s.fuse_unk = model.value("fuse_unk", false);
  s.eot_id = d.eot_id;
  s.bos_id = d.bos_id;
  const json& unk = member(model, "unk_token");
  if (unk.is_string()) {
    const auto it = ids.find(unk.get<std::string>());
    ATTN_REQUIRE(it != ids.end(), "tokenizer: '%s': model.unk_token '%s' is not in model.vocab",
                 path.c_str(), unk.get<std::string>().c_str());
    s.unk_id = it->second;
  } else if (!unk.is_null()) {
    refuse(path, "model.unk_token", unk, "supported: a token string or null");
  }
  return std::make_unique<SentencePieceBpeTokenizer>(std::move(s), path);
}

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& path) {
  return hf_tokenizer_from_json(
      tokenizer_detail::parse_json_file(io::read_file(path, "tokenizer file"), path), path);
}

}  // namespace attnlab
