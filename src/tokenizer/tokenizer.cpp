#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "io/atomic_file.h"
#include "tokenizer/bpe.h"
#include "tokenizer/hf_tokenizer_json.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/sp_bpe.h"
#include "tokenizer/vocab_json.h"

namespace attnlab {

std::string quote_piece(const std::string& bytes) {
  std::string out = "\"";
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t i = 0;
  while (i < bytes.size()) {
    const unsigned char c = s[i];
    if (c >= 0x80) {
      const Utf8Char ch = next_char(s + i, bytes.size() - i);
      if (ch.len > 1) {
        out.append(bytes, i, ch.len);
        i += ch.len;
        continue;
      }
    }
    char buf[8];
    switch (c) {
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      default:
        if (c >= 0x20 && c < 0x7F) {
          out += char(c);
        } else {
          std::snprintf(buf, sizeof(buf), "\\x%02X", c);
          out += buf;
        }
    }
    ++i;
  }
  return out + "\"";
}

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
using tokenizer_detail::kEndOfText;
using tokenizer_detail::parse_json_file;
using tokenizer_detail::resolve_merge;
using tokenizer_detail::split_merge;
using tokenizer_detail::SymbolIds;
using tokenizer_detail::VocabBuilder;

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
  tokenizer_detail::add_vocab_object(enc, enc_path, /*gpt2_symbols=*/true, vb, ids);
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

namespace {

BpeVocabData attnlab_bpe_from_json(const json& j, const std::string& path) {
  auto field = [&](const char* key) -> const json& {
    ATTN_REQUIRE(j.contains(key), "tokenizer: '%s': missing field \"%s\"", path.c_str(), key);
    return j[key];
  };
  // Version 1 (before LLaMA 3) has no kind, bos_id or ignore_merges: GPT-2 byte-level BPE.
  const bool v2 = field("version") == 2;
  ATTN_REQUIRE(v2 || field("version") == 1,
               "tokenizer: '%s': unsupported version %s (expected 1 or 2)", path.c_str(),
               field("version").dump().c_str());
  PreTokenizer pre = PreTokenizer::kGpt2;
  ATTN_REQUIRE(field("byte_encoding") == "gpt2-bytes-to-unicode" &&
                   field("pre_tokenizer").is_string() &&
                   pre_tokenizer_from_name(field("pre_tokenizer").get<std::string>(), pre) &&
                   (v2 || pre == PreTokenizer::kGpt2),
               "tokenizer: '%s': unsupported pre_tokenizer %s or byte_encoding %s", path.c_str(),
               field("pre_tokenizer").dump().c_str(), field("byte_encoding").dump().c_str());
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
  d.pre_tokenizer = pre;
  if (v2) {
    const json& bos = field("bos_id");
    const json& ignore_merges = field("ignore_merges");
    ATTN_REQUIRE(bos.is_number_integer() && ignore_merges.is_boolean(),
                 "tokenizer: '%s': bos_id must be an integer and ignore_merges true or false",
                 path.c_str());
    d.bos_id = bos.get<int32_t>();
    d.ignore_merges = ignore_merges.get<bool>();
  }
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
    return strformat("the end-of-text token is id %d against %d", a.eot_id(), b.eot_id());
  if (a.bos_id() != b.bos_id())
    return strformat("the beginning-of-sequence token is id %d against %d", a.bos_id(), b.bos_id());
  for (int32_t id = 0; id < a.vocab_size(); ++id)
    if (a.piece(id) != b.piece(id)) return strformat("id %d has other bytes", id);
  // The settings that change ids only on some texts (a probe could miss them).
  const auto* bpe_a = dynamic_cast<const BpeTokenizer*>(&a);
  const auto* bpe_b = dynamic_cast<const BpeTokenizer*>(&b);
  const auto* sp_a = dynamic_cast<const SentencePieceBpeTokenizer*>(&a);
  const auto* sp_b = dynamic_cast<const SentencePieceBpeTokenizer*>(&b);
  if (!bpe_a != !bpe_b || !sp_a != !sp_b) return "they are tokenizers of different kinds";
  if (bpe_a && (bpe_a->data().pre_tokenizer != bpe_b->data().pre_tokenizer ||
                bpe_a->data().ignore_merges != bpe_b->data().ignore_merges))
    return strformat("pre-tokenizer %s%s against %s%s",
                     pre_tokenizer_name(bpe_a->data().pre_tokenizer),
                     bpe_a->data().ignore_merges ? " with ignore_merges" : "",
                     pre_tokenizer_name(bpe_b->data().pre_tokenizer),
                     bpe_b->data().ignore_merges ? " with ignore_merges" : "");
  if (sp_a) {
    const SpVocabData &da = sp_a->data(), &db = sp_b->data();
    if (da.prefix != db.prefix || da.split_on_metaspace != db.split_on_metaspace ||
        da.byte_fallback != db.byte_fallback || da.fuse_unk != db.fuse_unk ||
        da.unk_id != db.unk_id)
      return strformat("prefix %s against %s, or other split, byte_fallback, fuse_unk or unk",
                       sp_prefix_name(da.prefix), sp_prefix_name(db.prefix));
  }
  // Probes that tell the pre-tokenizers and normalizers apart: contractions in both cases, digit
  // runs, punctuation before a word, runs of spaces and newlines, a leading space.
  std::string every_byte;
  for (int c = 1; c < 256; ++c) every_byte += char(c);
  const std::string probes[] = {
      " The quick brown fox's 3 jumps -- caf\xc3\xa9\n\n\t  over it.",
      "DON'T 'LL we'Re 1234567 .abc  \n\n  x\r\n\ty",
      "hello world",
      every_byte,
  };
  for (const std::string& probe : probes) {
    std::vector<int32_t> ia, ib;
    a.encode(probe, ia);
    b.encode(probe, ib);
    if (ia != ib) return "a probe text encodes to other ids";
  }
  return "";
}

// ---- the registry of spec forms -----------------------------------------------------------------

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec) {
  if (spec == "byte") return std::make_unique<ByteTokenizer>();
  if (spec.rfind("gpt2:", 0) == 0) {
    const std::string dir = spec.substr(5);
    return std::make_unique<BpeTokenizer>(load_gpt2_vocab(dir), dir);
  }
  if (spec.rfind("hf:", 0) == 0) return load_hf_tokenizer(spec.substr(3));
  std::error_code ec;
  if (!spec.empty() && std::filesystem::is_regular_file(spec, ec)) {
    const json j = parse_json_file(io::read_file(spec, "tokenizer file"), spec);
    ATTN_REQUIRE(j.is_object(), "tokenizer: '%s' is not a JSON object", spec.c_str());
    if (j.contains("model")) return hf_tokenizer_from_json(j, spec);
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
    const json version = j.value("version", json());
    ATTN_REQUIRE(version == 1 || version == 2,
                 "tokenizer: '%s': unsupported version %s (expected 1 or 2)", spec.c_str(),
                 version.dump().c_str());
    // Version 1 files have no kind: byte-level BPE.
    const std::string kind = j.value("kind", std::string("byte-level-bpe"));
    if (kind == "sentencepiece-bpe" && version == 2)
      return std::make_unique<SentencePieceBpeTokenizer>(sp_vocab_from_attnlab_json(j, spec), spec);
    ATTN_REQUIRE(kind == "byte-level-bpe",
                 "tokenizer: '%s': unknown kind '%s' (valid: byte-level-bpe, sentencepiece-bpe)",
                 spec.c_str(), kind.c_str());
    return std::make_unique<BpeTokenizer>(attnlab_bpe_from_json(j, spec), spec);
  }
  ATTN_FAIL(
      "unknown tokenizer '%s' (valid: byte, gpt2:<dir with encoder.json and vocab.bpe, or "
      "vocab.json and merges.txt>, "
      "hf:<tokenizer.json>, or a tokenizer JSON file written by attnlab)",
      spec.c_str());
}

}  // namespace attnlab
