// Helpers shared by the tokenizer file loaders (tokenizer.cpp: GPT-2 files and attnlab's JSON;
// hf_tokenizer_json.cpp: Hugging Face tokenizer.json). Internal to src/tokenizer/. Every error
// names the file.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.h"
#include "tokenizer/bpe.h"

namespace attnlab::tokenizer_detail {

constexpr const char* kEndOfText = "<|endoftext|>";
constexpr int64_t kMaxVocab = 1 << 24;

nlohmann::json parse_json_file(const std::string& text, const std::string& path);

// The end-of-text token of a Hugging Face tokenizer.json whose post_processor names none: the
// first of <|end_of_text|>, </s>, <|endoftext|> that is a special token; -1 when none is. (The
// reader picks it; the writer leaves it out of the template when this finds it.)
int32_t eot_by_name(const std::vector<std::string>& tokens, const std::vector<bool>& has_token,
                    const std::vector<bool>& is_special);

// Collects (id, token bytes, special) entries into BpeVocabData, checking ids: an id given twice
// must name the same bytes (it then is special if either entry says so).
class VocabBuilder {
 public:
  explicit VocabBuilder(std::string path) : path_(std::move(path)) {}
  void add(int64_t id, std::string bytes, bool special, const std::string& shown);
  BpeVocabData& data() { return d_; }

 private:
  std::string path_;
  BpeVocabData d_;
};

// Token string (as spelled in the file) -> id, looked up by string_view (transparent hash: no
// string per lookup), for resolving merges.
struct SymbolHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using SymbolIds = std::unordered_map<std::string, int32_t, SymbolHash, std::equal_to<>>;

// A JSON object token -> id. gpt2_symbols: the tokens are in GPT-2's byte alphabet (decoded to
// bytes; "<|endoftext|>" is taken as is and special); otherwise they are kept as spelled.
void add_vocab_object(const nlohmann::json& vocab, const std::string& path, bool gpt2_symbols,
                      VocabBuilder& vb, SymbolIds& ids);

// One merge "left right" -> token ids. `where` (a callable returning the merge's place, e.g.
// "file:line") is only called for an error message: 50K merges need no string each.
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

}  // namespace attnlab::tokenizer_detail
