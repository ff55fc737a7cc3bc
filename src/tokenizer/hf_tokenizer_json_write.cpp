// attnlab tokenizer -> Hugging Face tokenizer.json (hf_tokenizer_json.h says what is written per
// form). Every choice here mirrors a rule of the reader (hf_tokenizer_json.cpp), so that reading
// the file back gives the same tokenizer; scripts/hf_tokenizer_check.py --round-trip checks the
// ids of `tokenizers` on the written file against the original file.
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "tokenizer/bpe.h"
#include "tokenizer/hf_tokenizer_json.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/sp_bpe.h"
#include "tokenizer/vocab_json.h"

namespace attnlab {

namespace {

using ojson = nlohmann::ordered_json;

constexpr const char* kMetaspace = "\xE2\x96\x81";  // "▁"

// A JSON string literal; the tokens of a tokenizer are UTF-8 (they came from JSON, or are GPT-2
// byte symbols), so a failure here is a tokenizer built by hand with bytes in a special token.
std::string quoted(const std::string& s) {
  try {
    return ojson(s).dump();
  } catch (const ojson::exception&) {
    ATTN_FAIL("tokenizer.json: token '%s' is not valid UTF-8 and has no JSON spelling", s.c_str());
  }
}

// What both families share, as the writer sees it: ids -> spelling in tokenizer.json, which
// ones are special, which go into model.vocab.
struct Vocab {
  std::vector<std::string> spelling;  // "" where there is no token
  std::vector<bool> has_token, is_special, in_model_vocab;
  std::vector<std::pair<int32_t, int32_t>> merges;
  int32_t bos = -1, eot = -1;
};

// One sequence of a TemplateProcessing: bos (when >= 0), the sequence, eos (when >= 0).
void template_items(const Vocab& v, int32_t eos, const char* sequence, int type_id, ojson& out) {
  auto special = [&](int32_t id) {
    out.push_back({{"SpecialToken", {{"id", v.spelling[id]}, {"type_id", type_id}}}});
  };
  if (v.bos >= 0) special(v.bos);
  out.push_back({{"Sequence", {{"id", sequence}, {"type_id", type_id}}}});
  if (eos >= 0) special(eos);
}

// single: [bos] A [eos]; pair: [bos] A [eos] [bos] B [eos], as LLaMA's files have it.
ojson template_processing(const Vocab& v, int32_t eos) {
  ojson single = ojson::array(), pair = ojson::array(), specials = ojson::object();
  template_items(v, eos, "A", 0, single);
  template_items(v, eos, "A", 0, pair);
  template_items(v, eos, "B", 1, pair);
  for (int32_t id : {v.bos, eos})
    if (id >= 0)
      specials[v.spelling[id]] = {{"id", v.spelling[id]},
                                  {"ids", ojson::array({id})},
                                  {"tokens", ojson::array({v.spelling[id]})}};
  return {{"type", "TemplateProcessing"},
          {"single", single},
          {"pair", pair},
          {"special_tokens", specials}};
}

// The file: the library's keys in its order, one added token, vocabulary entry or merge per line
// (a diff of two files shows what changed).
std::string file_text(const Vocab& v, const ojson& normalizer, const ojson& pre_tokenizer,
                      const ojson& post_processor, const ojson& decoder,
                      const ojson& model_options) {
  std::string out = "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n";
  out += "  \"added_tokens\": [";
  bool first = true;
  for (size_t id = 0; id < v.spelling.size(); ++id) {
    if (!v.has_token[id] || !v.is_special[id]) continue;
    const ojson added = {{"id", id},        {"content", v.spelling[id]}, {"single_word", false},
                         {"lstrip", false}, {"rstrip", false},           {"normalized", false},
                         {"special", true}};
    out += first ? "\n    " : ",\n    ";
    out += added.dump();
    first = false;
  }
  out += first ? "],\n" : "\n  ],\n";
  out += "  \"normalizer\": " + normalizer.dump() + ",\n";
  out += "  \"pre_tokenizer\": " + pre_tokenizer.dump() + ",\n";
  out += "  \"post_processor\": " + post_processor.dump() + ",\n";
  out += "  \"decoder\": " + decoder.dump() + ",\n";
  out += "  \"model\": {\n";
  for (const auto& [key, value] : model_options.items())
    out += "    " + quoted(key) + ": " + value.dump() + ",\n";
  out += "    \"vocab\": {";
  first = true;
  for (size_t id = 0; id < v.spelling.size(); ++id) {
    if (!v.has_token[id] || !v.in_model_vocab[id]) continue;
    out += first ? "\n      " : ",\n      ";
    out += quoted(v.spelling[id]) + ": " + std::to_string(id);
    first = false;
  }
  out += first ? "},\n" : "\n    },\n";
  // "left right" (what transformers' files and every `tokenizers` version read), unless a token
  // holds a space: then ["left", "right"] (tokenizers >= 0.20).
  bool pairs = false;
  for (const auto& [l, r] : v.merges)
    pairs = pairs || v.spelling[l].find(' ') != std::string::npos ||
            v.spelling[r].find(' ') != std::string::npos;
  out += "    \"merges\": [";
  first = true;
  for (const auto& [l, r] : v.merges) {
    const std::string& a = v.spelling[l];
    const std::string& b = v.spelling[r];
    out += first ? "\n      " : ",\n      ";
    if (pairs) {
      out += '[';
      out += quoted(a);
      out += ", ";
      out += quoted(b);
      out += ']';
    } else {
      out += quoted(a + " " + b);
    }
    first = false;
  }
  out += first ? "]\n" : "\n    ]\n";
  out += "  }\n}\n";
  return out;
}

// eot goes into the template only where the reader would not find it by name.
int32_t template_eos(const Vocab& v) {
  return tokenizer_detail::eot_by_name(v.spelling, v.has_token, v.is_special) == v.eot ? -1 : v.eot;
}

HfTokenizerJson finish(const Vocab& v, int32_t eos, std::string text, int32_t unk = -1) {
  HfTokenizerJson out;
  out.text = std::move(text);
  if (v.bos >= 0) out.bos_token = v.spelling[v.bos];
  out.eos_token = v.spelling[v.eot];
  if (unk >= 0) out.unk_token = v.spelling[unk];
  out.eos_in_template = eos >= 0;
  return out;
}

HfTokenizerJson byte_level_json(const BpeVocabData& d) {
  Vocab v;
  const size_t V = d.tokens.size();
  v.spelling.resize(V);
  v.has_token = d.has_token;
  v.is_special = d.is_special;
  v.in_model_vocab.resize(V);
  for (size_t id = 0; id < V; ++id) {
    if (!d.has_token[id]) continue;
    // Special tokens are text (added_tokens); the others are bytes, in GPT-2's alphabet.
    v.spelling[id] = d.is_special[id] ? d.tokens[id] : gpt2_bytes_to_symbols(d.tokens[id]);
    v.in_model_vocab[id] = !d.is_special[id];
  }
  v.merges = d.merges;
  v.bos = d.bos_id;
  v.eot = d.eot_id;

  const ojson byte_level_pre = {{"type", "ByteLevel"},
                                {"add_prefix_space", false},
                                {"trim_offsets", true},
                                {"use_regex", d.pre_tokenizer == PreTokenizer::kGpt2}};
  ojson pre = byte_level_pre;
  if (d.pre_tokenizer != PreTokenizer::kGpt2) {
    const ojson split = {{"type", "Split"},
                         {"pattern", {{"Regex", pre_tokenizer_pattern(d.pre_tokenizer)}}},
                         {"behavior", "Isolated"},
                         {"invert", false}};
    pre = {{"type", "Sequence"}, {"pretokenizers", {split, byte_level_pre}}};
  }
  // LLaMA 3's post-processor: ByteLevel (offsets only), then the template where there is one.
  const ojson byte_level_post = {{"type", "ByteLevel"},
                                 {"add_prefix_space", true},
                                 {"trim_offsets", false},
                                 {"use_regex", true}};
  const int32_t eos = template_eos(v);
  const ojson post = v.bos >= 0 || eos >= 0
                         ? ojson{{"type", "Sequence"},
                                 {"processors", {byte_level_post, template_processing(v, eos)}}}
                         : byte_level_post;
  const ojson decoder = {{"type", "ByteLevel"},
                         {"add_prefix_space", true},
                         {"trim_offsets", true},
                         {"use_regex", true}};
  const ojson model = {{"type", "BPE"},
                       {"dropout", nullptr},
                       {"unk_token", nullptr},
                       {"continuing_subword_prefix", nullptr},
                       {"end_of_word_suffix", nullptr},
                       {"fuse_unk", false},
                       {"byte_fallback", false},
                       {"ignore_merges", d.ignore_merges}};
  return finish(v, eos, file_text(v, nullptr, pre, post, decoder, model));
}

bool one_character(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  return !s.empty() && next_char(p, s.size()).len == s.size();
}

HfTokenizerJson sentencepiece_json(const SpVocabData& d) {
  Vocab v;
  v.spelling = d.tokens;
  v.has_token = d.has_token;
  v.is_special = d.is_special;
  v.in_model_vocab.resize(d.tokens.size());
  // A one-character special token in model.vocab would be that character's token for the
  // library; encode() never uses special tokens. The unknown token must be there.
  for (size_t id = 0; id < d.tokens.size(); ++id)
    v.in_model_vocab[id] = d.has_token[id] && (!d.is_special[id] || !one_character(d.tokens[id]) ||
                                               int32_t(id) == d.unk_id);
  v.merges = d.merges;
  v.bos = d.bos_id;
  v.eot = d.eot_id;

  ojson normalizer = nullptr, pre = nullptr, decoder;
  if (d.prefix == SpPrefix::kPrepend) {
    // The legacy LLaMA 2 spelling has no split on "▁" (the reader's pipeline has none).
    if (d.split_on_metaspace) return {};
    normalizer = {
        {"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", kMetaspace}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMetaspace}}}}};
    decoder = {{"type", "Sequence"},
               {"decoders",
                {{{"type", "Replace"}, {"pattern", {{"String", kMetaspace}}}, {"content", " "}},
                 {{"type", "ByteFallback"}},
                 {{"type", "Fuse"}},
                 {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  } else {
    const char* scheme = d.prefix == SpPrefix::kMetaspaceFirst    ? "first"
                         : d.prefix == SpPrefix::kMetaspaceAlways ? "always"
                                                                  : "never";
    pre = {{"type", "Metaspace"},
           {"replacement", kMetaspace},
           {"prepend_scheme", scheme},
           {"split", d.split_on_metaspace}};
    decoder = pre;
  }
  // Always a template: without a post-processor the reader would take <s> as the BOS.
  const int32_t eos = template_eos(v);
  const ojson post = template_processing(v, eos);
  const ojson model = {{"type", "BPE"},
                       {"dropout", nullptr},
                       {"unk_token", d.unk_id >= 0 ? ojson(d.tokens[d.unk_id]) : ojson(nullptr)},
                       {"continuing_subword_prefix", nullptr},
                       {"end_of_word_suffix", nullptr},
                       {"fuse_unk", d.fuse_unk},
                       {"byte_fallback", d.byte_fallback},
                       {"ignore_merges", false}};
  return finish(v, eos, file_text(v, normalizer, pre, post, decoder, model), d.unk_id);
}

}  // namespace

HfTokenizerJson hf_tokenizer_json(const Tokenizer& tokenizer) {
  if (const auto* bpe = dynamic_cast<const BpeTokenizer*>(&tokenizer))
    return byte_level_json(bpe->data());
  if (const auto* sp = dynamic_cast<const SentencePieceBpeTokenizer*>(&tokenizer))
    return sentencepiece_json(sp->data());
  return {};
}

}  // namespace attnlab
