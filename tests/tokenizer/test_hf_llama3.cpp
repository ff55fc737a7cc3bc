// Hugging Face tokenizer.json of the LLaMA 3 / Qwen2 form (byte-level BPE behind Split +
// ByteLevel, "ignore_merges"), on a tiny vocabulary written here: ids derived by hand (and
// checked against `tokenizers` 0.23.3 with the same file), ignore_merges on and off, special
// tokens, bos/eot, decode of random bytes, the to_json round trip, and the errors for what is not
// supported (each names the file and the key).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/bpe.h"
#include "tokenizer/hf_json_fixture.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tiny_llama3_tokenizer.h"

namespace attnlab {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

using test::llama3_json;

class HfLlama3 : public test::HfJsonTest {
 protected:
  HfLlama3() : HfJsonTest("hf_llama3") {}
};

using test::encode;

TEST_F(HfLlama3, HandDerivedIds) {
  const auto t = load(llama3_json(true));
  EXPECT_EQ(t->name(), "bpe-llama3");
  EXPECT_EQ(t->vocab_size(), 265);
  // Pre-tokens " the", " world", " ", "123", "456", "7": " the" is a token (also by the
  // merges), " world" only by ignore_merges, "123" by the merges, "456" has no merge.
  EXPECT_EQ(encode(*t, " the world 1234567"), (Ids{258, 261, 32, 260, 52, 53, 54, 55}));
  EXPECT_EQ(encode(*t, "DON'T"), (Ids{'D', 'O', 'N', '\'', 'T'}));  // "DON", "'T"
  EXPECT_EQ(encode(*t, "the"), (Ids{'t', 257}));                    // no "Ġ": t + he
  EXPECT_EQ(encode(*t, ""), Ids{});
}

TEST_F(HfLlama3, IgnoreMergesOnAndOff) {
  const auto on = load(llama3_json(true), "on.json");
  const auto off = load(llama3_json(false), "off.json");
  EXPECT_EQ(encode(*on, " world"), Ids{261});
  EXPECT_EQ(encode(*off, " world"), (Ids{' ', 'w', 'o', 'r', 'l', 'd'}));
  // Where the merges build the token, both agree.
  EXPECT_EQ(encode(*on, " the 123"), encode(*off, " the 123"));
  EXPECT_EQ(encode(*off, " the 123"), (Ids{258, ' ', 260}));
  EXPECT_NE(tokenizer_difference(*on, *off), "");
}

TEST_F(HfLlama3, SpecialTokensBosAndEot) {
  const auto t = load(llama3_json(true));
  EXPECT_EQ(t->bos_id(), 262);
  EXPECT_EQ(t->eot_id(), 263);
  EXPECT_EQ(t->piece(262), "<|begin_of_text|>");
  // encode() takes the text of a special token as text: "<|", "begin", "_of", "_text", "|>".
  EXPECT_EQ(encode(*t, "<|begin_of_text|>"), (Ids{'<', '|', 'b', 'e', 'g', 'i', 'n', '_', 'o', 'f',
                                                  '_', 't', 'e', 'x', 't', '|', '>'}));
  const auto* bpe = dynamic_cast<const BpeTokenizer*>(t.get());
  ASSERT_NE(bpe, nullptr);
  Ids ids;
  bpe->encode_with_special("<|begin_of_text|> the<|end_of_text|>", ids);
  EXPECT_EQ(ids, (Ids{262, 258, 263}));
  // No template: no bos; the end-of-text token by name.
  json j = llama3_json(true);
  j["post_processor"] = nullptr;
  EXPECT_EQ(load(j, "plain.json")->bos_id(), -1);
  EXPECT_EQ(load(j, "plain.json")->eot_id(), 263);
}

TEST_F(HfLlama3, Qwen2PatternLoads) {
  json j = llama3_json(true);
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] =
      pre_tokenizer_pattern(PreTokenizer::kQwen2);
  j["added_tokens"][1]["content"] = "<|endoftext|>";
  j["post_processor"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}};
  const auto t = load(j);
  EXPECT_EQ(t->name(), "bpe-qwen2");
  EXPECT_EQ(t->bos_id(), -1);
  EXPECT_EQ(t->eot_id(), 263);
  EXPECT_EQ(encode(*t, " 123"), (Ids{' ', '1', '2', '3'}));  // one digit per pre-token
}

TEST_F(HfLlama3, DecodeGivesBackRandomBytes) {
  const auto t = load(llama3_json(true));
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    std::string text(rng() % 80, '\0');
    for (char& c : text) c = char(trial % 2 ? rng() % 256 : " ehtw1230'\n"[rng() % 11]);
    EXPECT_EQ(t->decode(encode(*t, text)), text);
  }
}

TEST_F(HfLlama3, ToJsonRoundTrip) {
  for (bool ignore_merges : {true, false}) {
    const auto t = load(llama3_json(ignore_merges));
    const std::string path = tmp_.file("attnlab.json");
    std::ofstream(path, std::ios::binary) << t->to_json();
    const auto u = make_tokenizer(path);
    EXPECT_EQ(tokenizer_difference(*t, *u), "");
    EXPECT_EQ(u->name(), "bpe-llama3");
    EXPECT_EQ(u->bos_id(), 262);
    EXPECT_EQ(encode(*u, " world"), encode(*t, " world"));
    const json saved = json::parse(t->to_json());
    EXPECT_EQ(saved["version"], 2);
    EXPECT_EQ(saved["kind"], "byte-level-bpe");
    EXPECT_EQ(saved["pre_tokenizer"], "llama3");
    EXPECT_EQ(saved["ignore_merges"], ignore_merges);
  }
  // A version 1 file cannot name another pre-tokenizer than GPT-2's.
  json v1 = json::parse(load(llama3_json(true))->to_json());
  v1["version"] = 1;
  const std::string path = write("v1.json", v1);
  test::expect_error([&] { make_tokenizer(path); }, {path, "llama3"});
}

TEST_F(HfLlama3, UnsupportedFormsAreRefused) {
  json j = llama3_json(true);
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{L}+| ?\\p{N}+";
  expect_error(j, {"pre_tokenizer.pretokenizers[0].pattern", "p{L}+| ?", "not supported"});

  j = llama3_json(true);
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  expect_error(j, {"pre_tokenizer.pretokenizers[0].behavior", "Removed"});

  j = llama3_json(true);
  j["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = true;
  expect_error(j, {"pre_tokenizer.pretokenizers[1].use_regex"});

  j = llama3_json(true);
  j["normalizer"] = {{"type", "NFC"}};
  expect_error(j, {"normalizer", "NFC", "not supported"});

  j = llama3_json(true);
  j["model"]["byte_fallback"] = true;
  expect_error(j, {"model.byte_fallback"});

  j = llama3_json(true);
  j["added_tokens"][2]["special"] = false;
  expect_error(j, {"added_tokens[2]", "non-special", "<|reserved_special_token_0|>"});

  j = llama3_json(true);
  j["added_tokens"][0]["lstrip"] = true;
  expect_error(j, {"added_tokens[0].lstrip"});

  j = llama3_json(true);
  j["post_processor"] = {{"type", "RobertaProcessing"}};
  expect_error(j, {"post_processor", "RobertaProcessing"});

  j = llama3_json(true);
  j["decoder"] = {{"type", "WordPiece"}};
  expect_error(j, {"decoder", "WordPiece"});

  j = llama3_json(true);  // no end-of-text token anywhere
  j["post_processor"] = nullptr;
  j["added_tokens"][1]["content"] = "<|eot|>";
  expect_error(j, {"no end-of-text token", "<|end_of_text|>"});
}

}  // namespace
}  // namespace attnlab
