// What the Hugging Face readers and writers share (interop/hf_gpt2.h, interop/hf_llama.h): the
// safetensors files of a model directory, typed reads of its config.json, and the BPE tokenizer
// files.
#pragma once
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "tokenizer/tokenizer.h"

namespace attnlab {

// The weights of a directory: model.safetensors, or the shards that
// model.safetensors.index.json lists (every listed tensor must be in its shard, and a shard's
// tensor the index does not list is refused: it would be silently unused).
struct HfWeightFiles {
  std::string path;  // model.safetensors or the index, for messages
  std::map<std::string, std::shared_ptr<io::SafetensorsFile>> where;  // tensor -> its file
};
HfWeightFiles open_hf_weights(const std::string& dir);
// Whether tensors a and b of the files are present and equal byte for byte (a tied head's second
// copy); "" for b: false.
bool hf_same_tensor(const HfWeightFiles& files, const std::string& a, const std::string& b);

// A config.json, read with errors that name the file and the key.
class HfConfig {
 public:
  HfConfig(const std::string& text, const std::string& path);
  const nlohmann::json& json() const { return j_; }
  const std::string& path() const { return path_; }
  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  int get_int(const char* key, int def) const;
  bool get_bool(const char* key, bool def) const;
  double get_double(const char* key, double def) const;
  std::string get_string(const char* key, const std::string& def) const;
  // Throws "'<path>': <key> = <value> is not supported: <why>".
  [[noreturn]] void refuse(const char* key, const std::string& why) const;
  // A note listing the keys outside `known` ("" when there are none).
  std::string unknown_keys_note(const std::set<std::string>& known) const;

 private:
  nlohmann::json j_;
  std::string path_;
};

// The ids generation stops at, as transformers' generate takes them: eos_token_id of the
// directory's generation_config.json (an id or a list of ids; LLaMA 3 Instruct lists
// <|end_of_text|>, <|eom_id|> and <|eot_id|>), else of its config.json when `config_fallback`
// (a Hugging Face model directory: transformers builds the generation config from config.json
// then). Empty when neither file gives one; another type, or a negative id, is refused naming the
// file.
std::vector<int32_t> hf_eos_token_ids(const std::string& dir, bool config_fallback);

// The tokenizer files of an exported model directory, by form:
//   kVocabMerges: GPT-2-form byte-level BPE (GPT-2 pre-tokenizer, no ignore_merges):
//     vocab.json and merges.txt (the form every transformers BPE tokenizer reads), nothing else
//     (the caller writes tokenizer_config.json, if any);
//   kTokenizerJson: every other byte-level BPE (LLaMA 3, Qwen2) and SentencePiece-style BPE
//     (LLaMA 1-2, Mistral): tokenizer.json (hf_tokenizer_json, src/tokenizer/hf_tokenizer_json.h),
//     tokenizer_config.json (tokenizer_class PreTrainedTokenizerFast, so that transformers runs
//     the file's own pipeline; bos/eos/unk_token, add_bos_token / add_eos_token as the
//     post_processor has them, model_max_length, clean_up_tokenization_spaces false so that
//     decode is the decoder's) and special_tokens_map.json;
//   kNone: the byte tokenizer, or a tokenizer with no Hugging Face form: nothing written.
enum class HfTokenizerForm { kNone, kVocabMerges, kTokenizerJson };
HfTokenizerForm write_hf_tokenizer_files(const Tokenizer& tokenizer, const std::string& dir,
                                         int model_max_length);

}  // namespace attnlab
