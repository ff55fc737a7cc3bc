#include "tokenizer/vocab_json.h"

namespace attnlab::tokenizer_detail {

using nlohmann::json;

json parse_json_file(const std::string& text, const std::string& path) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    ATTN_FAIL("tokenizer: '%s' is not valid JSON: %s", path.c_str(), e.what());
  }
}

int32_t eot_by_name(const std::vector<std::string>& tokens, const std::vector<bool>& has_token,
                    const std::vector<bool>& is_special) {
  for (const char* name : {"<|end_of_text|>", "</s>", "<|endoftext|>"}) {
    for (size_t id = 0; id < tokens.size(); ++id)
      if (has_token[id] && is_special[id] && tokens[id] == name) return int32_t(id);
  }
  return -1;
}

void VocabBuilder::add(int64_t id, std::string bytes, bool special, const std::string& shown) {
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

void add_vocab_object(const json& vocab, const std::string& path, bool gpt2_symbols,
                      VocabBuilder& vb, SymbolIds& ids) {
  ATTN_REQUIRE(vocab.is_object(),
               "tokenizer: '%s': the vocabulary must be a JSON object mapping "
               "token strings to ids",
               path.c_str());
  for (const auto& [sym, value] : vocab.items()) {
    ATTN_REQUIRE(value.is_number_integer(),
                 "tokenizer: '%s': the id of token '%s' is not an "
                 "integer",
                 path.c_str(), sym.c_str());
    const bool special = gpt2_symbols && sym == kEndOfText;
    std::string bytes;
    if (special || !gpt2_symbols) {
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

}  // namespace attnlab::tokenizer_detail
