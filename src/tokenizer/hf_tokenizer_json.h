// Hugging Face tokenizer.json -> attnlab tokenizer, for the forms LLaMA / Mistral / Qwen / GPT-2
// checkpoints ship (docs/tokenizer.md, "Hugging Face tokenizer.json"):
//   byte-level BPE: pre_tokenizer ByteLevel (GPT-2), or Sequence[Split(<GPT-2, LLaMA 3 or Qwen2
//     pattern>, Isolated), ByteLevel(use_regex false)]; no normalizer; "ignore_merges" either way
//     -> BpeTokenizer;
//   SentencePiece-style BPE: byte_fallback, with normalizer Sequence[Prepend("▁"), Replace(" ",
//     "▁")] or pre_tokenizer Metaspace -> SentencePieceBpeTokenizer.
// Anything else (another normalizer, pattern, model option, post-processor, a non-special added
// token, ...) is an error naming the file and the key: never ids that differ from `tokenizers`.
// hf_tokenizer_json() writes the same forms back.
#pragma once
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "tokenizer/tokenizer.h"

namespace attnlab {

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& path);
// The same for the already parsed file (`path` for messages).
std::unique_ptr<Tokenizer> hf_tokenizer_from_json(const nlohmann::json& j, const std::string& path);

// The writer (hf_tokenizer_json_write.cpp): attnlab tokenizer -> tokenizer.json in the form the
// reader above takes, such that `tokenizers` encodes it as attnlab does and the reader gives back
// an equal tokenizer (tokenizer_difference ""):
//   byte-level BPE (BpeTokenizer, any pre-tokenizer): vocab in GPT-2's byte alphabet (special
//     tokens only in added_tokens, as LLaMA 3 lays it out), pre_tokenizer ByteLevel (GPT-2) or
//     Sequence[Split(<pattern>, Isolated), ByteLevel(use_regex false)], ignore_merges as set,
//     ByteLevel decoder;
//   SentencePiece-style BPE: vocab as spelled ("▁", "<0xXX>"; special tokens too, as LLaMA 2
//     lays it out, but for one-character ones, which encode() never uses), normalizer
//     Sequence[Prepend, Replace] (prefix "prepend") or pre_tokenizer and decoder Metaspace.
// Merges in rank order as "left right", or as pairs where a token holds a space. Special tokens
// go to added_tokens (special, normalized false). The post_processor is a TemplateProcessing with
// bos_id() first, when there is one, and eot_id() last only where the reader would not find it
// by name (<|end_of_text|>, </s>, <|endoftext|>): a source file whose template also appended
// one of those comes back without it (tokenizer.json then adds no end token; attnlab never
// reads it from there).
struct HfTokenizerJson {
  std::string text;              // the file; "" when the tokenizer has no such form (the byte one)
  std::string bos_token;         // "" when there is none
  std::string eos_token;         // eot_id()'s token
  std::string unk_token;         // "" when there is none
  bool eos_in_template = false;  // the post_processor appends eos_token
};
HfTokenizerJson hf_tokenizer_json(const Tokenizer& tokenizer);

}  // namespace attnlab
