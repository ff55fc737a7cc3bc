#include "tokenizer/tokenizer.h"

#include "core/error.h"

namespace attnlab {

void ByteTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  out.reserve(out.size() + text.size());
  for (unsigned char c : text) out.push_back(int32_t(c));
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

std::string ByteTokenizer::to_json() const { return R"({"type": "byte", "vocab_size": 257, "eot_id": 256})"; }

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec) {
  if (spec == "byte") return std::make_unique<ByteTokenizer>();
  ATTN_FAIL("unknown tokenizer '%s' (valid: byte, gpt2:<dir with encoder.json and vocab.bpe>, "
            "hf:<tokenizer.json>, or a tokenizer JSON file written by attnlab)", spec.c_str());
}

}  // namespace attnlab
