// The tokenizer.json writer (hf_tokenizer_json, src/tokenizer/hf_tokenizer_json.h): every form the
// reader takes is written and read back to an equal tokenizer (tokenizer_difference "", the same
// ids with and without special tokens), and the file holds what `tokenizers` needs to encode alike
// (scripts/hf_tokenizer_check.py --round-trip compares the library's ids on both files).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/atomic_file.h"
#include "test_util.h"
#include "tokenizer/bpe.h"
#include "tokenizer/hf_tokenizer_json.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/sp_bpe.h"
#include "tokenizer/tiny_llama3_tokenizer.h"
#include "tokenizer/tiny_sp_tokenizer.h"

namespace attnlab {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

const char* const kProbes[] = {
    "hello world",
    " hello  world ",
    "the 1234567 the\n\n  x",
    "DON'T 'll <s> </s>",
    "caf\xc3\xa9 \xe2\x96\x81h",
    "a<|begin_of_text|>b",
    "\xff\xfe bytes",
    "",
};

Ids encode(const Tokenizer& t, const std::string& text, bool with_special) {
  Ids ids;
  if (const auto* b = dynamic_cast<const BpeTokenizer*>(&t); b && with_special) {
    b->encode_with_special(text, ids);
  } else if (const auto* s = dynamic_cast<const SentencePieceBpeTokenizer*>(&t);
             s && with_special) {
    s->encode_with_special(text, ids);
  } else {
    t.encode(text, ids);
  }
  return ids;
}

// The written text of `original`, parsed, and the tokenizer the reader makes of it, which must
// equal the original.
json write_and_check(const Tokenizer& original, const std::string& what) {
  SCOPED_TRACE(what);
  const HfTokenizerJson w = hf_tokenizer_json(original);
  EXPECT_FALSE(w.text.empty());
  const json j = json::parse(w.text);
  const auto back = hf_tokenizer_from_json(j, what + " (written)");
  EXPECT_EQ(tokenizer_difference(original, *back), "");
  EXPECT_EQ(back->name(), original.name());
  for (const char* probe : kProbes)
    for (bool special : {false, true})
      EXPECT_EQ(encode(*back, probe, special), encode(original, probe, special))
          << "'" << probe << "' special " << special;
  // Written twice, the same bytes (the file depends on nothing but the tokenizer).
  EXPECT_EQ(hf_tokenizer_json(*back).text, w.text);
  return j;
}

std::unique_ptr<Tokenizer> from(const json& j, const std::string& name) {
  return hf_tokenizer_from_json(j, name);
}

TEST(HfTokenizerWrite, Llama3FormRoundTrips) {
  for (bool ignore_merges : {true, false}) {
    const auto t = from(test::llama3_json(ignore_merges), "llama3");
    const json j = write_and_check(*t, ignore_merges ? "llama3" : "llama3 without ignore_merges");
    EXPECT_EQ(j["model"]["ignore_merges"], ignore_merges);
    EXPECT_EQ(j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"],
              pre_tokenizer_pattern(PreTokenizer::kLlama3));
    EXPECT_EQ(j["pre_tokenizer"]["pretokenizers"][1]["use_regex"], false);
    EXPECT_TRUE(j["normalizer"].is_null());
    // Special tokens in added_tokens only (LLaMA 3's layout), byte tokens in GPT-2's alphabet,
    // merges as "left right" in rank order.
    EXPECT_EQ(j["model"]["vocab"].size(), 262u);
    EXPECT_FALSE(j["model"]["vocab"].contains("<|begin_of_text|>"));
    EXPECT_EQ(j["model"]["vocab"]["\u0120world"], 261);
    EXPECT_EQ(j["model"]["merges"][0], "\u0120 t");
    EXPECT_EQ(j["model"]["merges"][4], "12 3");
    ASSERT_EQ(j["added_tokens"].size(), 3u);
    EXPECT_EQ(j["added_tokens"][0]["content"], "<|begin_of_text|>");
    EXPECT_EQ(j["added_tokens"][0]["id"], 262);
    EXPECT_EQ(j["added_tokens"][0]["special"], true);
    // The template puts <|begin_of_text|> first; <|end_of_text|> is found by name, not appended.
    const json& tp = j["post_processor"]["processors"][1];
    EXPECT_EQ(tp["type"], "TemplateProcessing");
    EXPECT_EQ(tp["single"].size(), 2u);
    EXPECT_EQ(tp["single"][0]["SpecialToken"]["id"], "<|begin_of_text|>");
    EXPECT_EQ(tp["special_tokens"]["<|begin_of_text|>"]["ids"], json::array({262}));
    const HfTokenizerJson w = hf_tokenizer_json(*t);
    EXPECT_EQ(w.bos_token, "<|begin_of_text|>");
    EXPECT_EQ(w.eos_token, "<|end_of_text|>");
    EXPECT_EQ(w.unk_token, "");
    EXPECT_FALSE(w.eos_in_template);
  }
}

TEST(HfTokenizerWrite, Qwen2AndGpt2PatternsRoundTrip) {
  // Qwen2: its pattern, no BOS (a ByteLevel post-processor only).
  json q = test::llama3_json(true);
  q["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] =
      pre_tokenizer_pattern(PreTokenizer::kQwen2);
  q["post_processor"] = {{"type", "ByteLevel"}, {"trim_offsets", false}};
  const auto qwen = from(q, "qwen2");
  EXPECT_EQ(qwen->bos_id(), -1);
  const json jq = write_and_check(*qwen, "qwen2");
  EXPECT_EQ(jq["post_processor"]["type"], "ByteLevel");
  // GPT-2's pattern, through Split and through the classic ByteLevel pre-tokenizer.
  json g = q;
  g["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] =
      pre_tokenizer_pattern(PreTokenizer::kGpt2);
  write_and_check(*from(g, "gpt2-split"), "gpt2-split");
  g["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  g["model"]["ignore_merges"] = false;
  const json jg = write_and_check(*from(g, "gpt2-bytelevel"), "gpt2-bytelevel");
  EXPECT_EQ(jg["pre_tokenizer"]["type"], "ByteLevel");
  EXPECT_EQ(jg["pre_tokenizer"]["use_regex"], true);
}

TEST(HfTokenizerWrite, SentencePieceFormsRoundTrip) {
  const test::Merges crossing = {{"e", test::kMs}, {"a", test::kMs}};
  for (const std::string style : {"legacy", "first", "always", "always-split"}) {
    for (const bool cross : {false, true}) {
      const auto t = from(test::sp_json(style, cross ? crossing : test::Merges{}), style);
      const json j = write_and_check(*t, style + (cross ? " crossing" : ""));
      if (style == "legacy") {
        EXPECT_EQ(j["normalizer"]["normalizers"][0]["type"], "Prepend");
        EXPECT_TRUE(j["pre_tokenizer"].is_null());
        EXPECT_EQ(j["decoder"]["type"], "Sequence");
      } else {
        EXPECT_TRUE(j["normalizer"].is_null());
        EXPECT_EQ(j["pre_tokenizer"]["type"], "Metaspace");
        EXPECT_EQ(j["pre_tokenizer"]["prepend_scheme"], style == "first" ? "first" : "always");
        EXPECT_EQ(j["pre_tokenizer"]["split"], style == "always-split");
        EXPECT_EQ(j["decoder"], j["pre_tokenizer"]);
      }
      // LLaMA 2's layout: the special tokens in model.vocab too, tokens as spelled.
      EXPECT_EQ(j["model"]["vocab"]["<unk>"], 0);
      EXPECT_EQ(j["model"]["vocab"]["</s>"], 2);
      EXPECT_EQ(j["model"]["vocab"]["<0x41>"], 3 + 0x41);
      EXPECT_EQ(j["model"]["vocab"][test::kMs + "hello"], 271);
      EXPECT_EQ(j["model"]["merges"][0], test::kMs + " h");
      EXPECT_EQ(j["model"]["unk_token"], "<unk>");
      EXPECT_EQ(j["model"]["byte_fallback"], true);
      EXPECT_EQ(j["model"]["fuse_unk"], true);
      EXPECT_EQ(j["post_processor"]["single"][0]["SpecialToken"]["id"], "<s>");
      const HfTokenizerJson w = hf_tokenizer_json(*t);
      EXPECT_EQ(w.bos_token, "<s>");
      EXPECT_EQ(w.eos_token, "</s>");
      EXPECT_EQ(w.unk_token, "<unk>");
    }
  }
  // Metaspace "never" (add_prefix_space false in older files).
  json never = test::sp_json("first");
  never["pre_tokenizer"]["prepend_scheme"] = "never";
  never["decoder"] = never["pre_tokenizer"];
  const json j = write_and_check(*from(never, "never"), "never");
  EXPECT_EQ(j["pre_tokenizer"]["prepend_scheme"], "never");
}

// The legacy file without a post-processor (the reader takes <s> as the BOS): written with an
// explicit template, so that the library adds <s> as transformers' LlamaTokenizerFast did.
TEST(HfTokenizerWrite, MissingPostProcessorBecomesTheTemplate) {
  json j = test::sp_json("legacy");
  j["post_processor"] = nullptr;
  const auto t = from(j, "no-post");
  ASSERT_EQ(t->bos_id(), 1);
  const json w = write_and_check(*t, "no-post");
  EXPECT_EQ(w["post_processor"]["single"][0]["SpecialToken"]["id"], "<s>");
}

// Without a BOS, a SentencePiece file still gets a template (no post-processor would mean <s>);
// an end-of-text token the reader would not find by name goes last in the template.
TEST(HfTokenizerWrite, TemplateKeepsBosAndEot) {
  json j = test::sp_json("first");
  j["post_processor"]["single"] = json::array({{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}});
  const auto no_bos = from(j, "no-bos");
  ASSERT_EQ(no_bos->bos_id(), -1);
  const json w = write_and_check(*no_bos, "no-bos");
  EXPECT_EQ(w["post_processor"]["single"].size(), 1u);
  EXPECT_EQ(hf_tokenizer_json(*no_bos).bos_token, "");

  json e = test::llama3_json(true);
  e["post_processor"]["processors"][1]["single"].push_back(
      {{"SpecialToken", {{"id", "<|reserved_special_token_0|>"}, {"type_id", 0}}}});
  e["post_processor"]["processors"][1]["special_tokens"]["<|reserved_special_token_0|>"] = {
      {"id", "<|reserved_special_token_0|>"},
      {"ids", {264}},
      {"tokens", {"<|reserved_special_token_0|>"}}};
  const auto eot = from(e, "eot");
  ASSERT_EQ(eot->eot_id(), 264);
  const json we = write_and_check(*eot, "eot");
  const json& single = we["post_processor"]["processors"][1]["single"];
  ASSERT_EQ(single.size(), 3u);
  EXPECT_EQ(single[2]["SpecialToken"]["id"], "<|reserved_special_token_0|>");
  EXPECT_TRUE(hf_tokenizer_json(*eot).eos_in_template);
}

// A token with a space cannot be written as "left right": then every merge is a pair.
TEST(HfTokenizerWrite, MergesWithASpaceArePairs) {
  json j = test::sp_json("legacy");
  j["model"]["vocab"][" b"] = 281;
  j["model"]["vocab"]["a b"] = 282;
  j["model"]["merges"].push_back(json::array({"a", " b"}));
  const auto t = from(j, "space");
  const json w = write_and_check(*t, "space");
  EXPECT_EQ(w["model"]["merges"][0], json::array({test::kMs, "h"}));
  EXPECT_EQ(w["model"]["merges"].back(), json::array({"a", " b"}));
}

TEST(HfTokenizerWrite, ByteTokenizerHasNoForm) {
  EXPECT_EQ(hf_tokenizer_json(ByteTokenizer()).text, "");
}

// attnlab's own JSON (the file next to a checkpoint) writes the same tokenizer.json as the
// tokenizer it was made from.
TEST(HfTokenizerWrite, AttnlabJsonWritesTheSameFile) {
  const test::TempDir tmp("hf_write");
  for (const json& j : {test::llama3_json(true), test::sp_json("always-split")}) {
    const auto t = from(j, "source");
    const std::string path = tmp.file("tokenizer.json");
    io::write_file_atomic(path, t->to_json());
    EXPECT_EQ(hf_tokenizer_json(*make_tokenizer(path)).text, hf_tokenizer_json(*t).text);
  }
}

}  // namespace
}  // namespace attnlab
