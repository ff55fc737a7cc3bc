// Tokenizer files: the GPT-2 pair (encoder.json + vocab.bpe), Hugging Face tokenizer.json and
// attnlab's own JSON, on small files written here; and clear errors for broken files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/bpe.h"

namespace attnlab {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class TokenizerFiles : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return tmp_.file(name); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream f(dir_ / name, std::ios::binary);
    f << text;
  }

  // The 256 byte tokens, "ab", " ab", "<|endoftext|>" (GPT-2 spelling), and merges a+b, Ġ+ab.
  json tiny_encoder() const {
    json enc = json::object();
    for (int b = 0; b < 256; ++b) enc[gpt2_bytes_to_symbols(std::string(1, char(b)))] = b;
    enc["ab"] = 256;
    enc["\u0120ab"] = 257;
    enc["<|endoftext|>"] = 258;
    return enc;
  }
  static constexpr const char* kTinyMerges = "#version: 0.2\na b\n\u0120 ab\n";

  void write_gpt2(const std::string& encoder, const std::string& merges) const {
    write("encoder.json", encoder);
    write("vocab.bpe", merges);
  }

  // Expects make_tokenizer(spec) to throw an Error whose message contains every one of `parts`.
  static void expect_error(const std::string& spec, std::initializer_list<std::string> parts,
                           const std::source_location& where = std::source_location::current()) {
    SCOPED_TRACE("make_tokenizer(\"" + spec + "\")");
    test::expect_error([&] { make_tokenizer(spec); }, parts, where);
  }

  test::TempDir tmp_{"tokfiles"};
  const fs::path dir_ = tmp_.path();
};

std::vector<int32_t> encode(const Tokenizer& t, const std::string& text) {
  std::vector<int32_t> ids;
  t.encode(text, ids);
  return ids;
}

TEST_F(TokenizerFiles, Gpt2PairLoads) {
  write_gpt2(tiny_encoder().dump(), kTinyMerges);
  const auto t = make_tokenizer("gpt2:" + dir_.string());
  EXPECT_EQ(t->name(), "gpt2-bpe");
  EXPECT_EQ(t->vocab_size(), 259);
  EXPECT_EQ(t->eot_id(), 258);
  EXPECT_EQ(encode(*t, "ab ab abc"), (std::vector<int32_t>{256, 257, 257, 'c'}));
  EXPECT_EQ(t->decode(encode(*t, "ab ab abc")), "ab ab abc");
}

TEST_F(TokenizerFiles, HuggingFaceJsonLoads) {
  json hf = {{"version", "1.0"},
             {"added_tokens",
              json::array({{{"id", 258}, {"content", "<|endoftext|>"}, {"special", true}}})},
             {"normalizer", nullptr},
             {"pre_tokenizer",
              {{"type", "ByteLevel"},
               {"add_prefix_space", false},
               {"trim_offsets", true},
               {"use_regex", true}}},
             {"model",
              {{"type", "BPE"},
               {"dropout", nullptr},
               {"unk_token", nullptr},
               {"continuing_subword_prefix", ""},
               {"end_of_word_suffix", ""},
               {"fuse_unk", false},
               {"vocab", tiny_encoder()},
               {"merges", json::array({"a b", json::array({"\u0120", "ab"})})}}}};
  write("tokenizer.json", hf.dump());
  for (const std::string& spec : {"hf:" + path("tokenizer.json"), path("tokenizer.json")}) {
    const auto t = make_tokenizer(spec);
    EXPECT_EQ(t->vocab_size(), 259);
    EXPECT_EQ(t->eot_id(), 258);
    EXPECT_EQ(encode(*t, "ab ab"), (std::vector<int32_t>{256, 257}));
  }
  hf["model"]["type"] = "WordPiece";
  write("wordpiece.json", hf.dump());
  expect_error("hf:" + path("wordpiece.json"), {path("wordpiece.json"), "WordPiece"});
  hf["model"]["type"] = "BPE";
  hf["pre_tokenizer"]["add_prefix_space"] = true;
  write("prefix.json", hf.dump());
  expect_error("hf:" + path("prefix.json"), {path("prefix.json"), "add_prefix_space"});
}

TEST_F(TokenizerFiles, AttnlabJsonRoundTrip) {
  write_gpt2(tiny_encoder().dump(), kTinyMerges);
  const auto t = make_tokenizer("gpt2:" + dir_.string());
  write("tok.json", t->to_json());
  const auto u = make_tokenizer(path("tok.json"));
  EXPECT_EQ(u->name(), "gpt2-bpe");
  EXPECT_EQ(encode(*u, "ab ab abc \xFF"), encode(*t, "ab ab abc \xFF"));
  // The byte tokenizer's JSON is recognised too.
  write("byte.json", make_tokenizer("byte")->to_json());
  EXPECT_EQ(make_tokenizer(path("byte.json"))->name(), "byte");
  // A version 1 file (before LLaMA 3: no kind, bos_id or ignore_merges) still loads.
  json v1 = json::parse(t->to_json());
  EXPECT_EQ(v1["version"], 2);
  EXPECT_EQ(v1["kind"], "byte-level-bpe");
  v1["version"] = 1;
  for (const char* key : {"kind", "bos_id", "ignore_merges"}) v1.erase(key);
  write("v1.json", v1.dump());
  const auto old = make_tokenizer(path("v1.json"));
  EXPECT_EQ(tokenizer_difference(*old, *t), "");
  EXPECT_EQ(old->bos_id(), -1);
  json j = json::parse(t->to_json());
  j["version"] = 3;
  write("v3.json", j.dump());
  expect_error(path("v3.json"), {path("v3.json"), "version 3"});
  write("other.json", R"({"hello": 1})");
  expect_error(path("other.json"), {path("other.json"), "neither"});
}

TEST_F(TokenizerFiles, MissingFiles) {
  expect_error("gpt2:" + path("nowhere"),
               {path("nowhere") + "/encoder.json", "cannot read tokenizer file"});
  write("encoder.json", tiny_encoder().dump());
  expect_error("gpt2:" + dir_.string(), {path("vocab.bpe"), "cannot read tokenizer file"});
  expect_error("hf:" + path("missing.json"), {path("missing.json"), "cannot read tokenizer file"});
  expect_error(path("missing.json"), {"unknown tokenizer", "gpt2:<dir"});
  expect_error("sentencepiece", {"unknown tokenizer 'sentencepiece'", "byte"});
}

TEST_F(TokenizerFiles, CorruptFiles) {
  write_gpt2(R"({"a": 0, "b": )", kTinyMerges);
  expect_error("gpt2:" + dir_.string(), {path("encoder.json"), "not valid JSON"});

  json enc = tiny_encoder();
  enc["ab"] = "x";
  write_gpt2(enc.dump(), kTinyMerges);
  expect_error("gpt2:" + dir_.string(), {path("encoder.json"), "'ab'", "not an integer"});

  enc = tiny_encoder();
  enc.erase("<|endoftext|>");
  write_gpt2(enc.dump(), kTinyMerges);
  expect_error("gpt2:" + dir_.string(), {path("encoder.json"), "no <|endoftext|>"});

  enc = tiny_encoder();
  enc.erase("d");
  write_gpt2(enc.dump(), kTinyMerges);
  expect_error("gpt2:" + dir_.string(), {"byte 0x64 has no token"});

  write_gpt2(tiny_encoder().dump(), "#version: 0.2\na b\nab zz\n");
  expect_error("gpt2:" + dir_.string(), {path("vocab.bpe") + ":3", "unknown token 'zz'"});

  write_gpt2(tiny_encoder().dump(), "#version: 0.2\na b c\n");
  expect_error("gpt2:" + dir_.string(), {path("vocab.bpe") + ":2", "expected a merge"});

  write_gpt2(tiny_encoder().dump(), "#version: 0.2\na b\nb c\n");  // "bc" is not a token
  expect_error("gpt2:" + dir_.string(), {dir_.string(), "makes 'bc'"});

  write_gpt2(tiny_encoder().dump(), "#version: 0.2\n");
  expect_error("gpt2:" + dir_.string(), {path("vocab.bpe"), "no merges"});
}

}  // namespace
}  // namespace attnlab
