// The real GPT-2 vocabulary against golden ids from the reference (tiktoken built from the same
// files; see scripts/tokenizer_exactness.py, which wrote tests/data/tokenizer/gpt2_golden.jsonl).
// Needs ATTNLAB_SHARED_DATA (the directory holding gpt2-vocab/); skipped without it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "tokenizer/bpe.h"

namespace attnlab {
namespace {

using nlohmann::json;

std::string gpt2_dir() {
  const char* env = std::getenv("ATTNLAB_SHARED_DATA");
  return env ? std::string(env) + "/gpt2-vocab" : std::string();
}

#define REQUIRE_SHARED_DATA() \
  if (gpt2_dir().empty()) GTEST_SKIP() << "ATTNLAB_SHARED_DATA is not set"

const BpeTokenizer& gpt2() {
  static const auto* t = new BpeTokenizer(load_gpt2_vocab(gpt2_dir()), gpt2_dir());
  return *t;
}

std::vector<int32_t> encode(const Tokenizer& t, std::string_view text) {
  std::vector<int32_t> ids;
  t.encode(text, ids);
  return ids;
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out += char(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

struct Golden {
  std::string name, bytes;
  std::vector<int32_t> ids;
};

std::vector<Golden> load_golden() {
  std::ifstream f(test::source_dir() + "/tests/data/tokenizer/gpt2_golden.jsonl");
  std::vector<Golden> cases;
  std::string line;
  while (std::getline(f, line)) {
    const json j = json::parse(line);
    cases.push_back({j["name"], from_hex(j["hex"]), j["ids"].get<std::vector<int32_t>>()});
  }
  return cases;
}

TEST(Gpt2Golden, Basics) {
  REQUIRE_SHARED_DATA();
  const BpeTokenizer& t = gpt2();
  EXPECT_EQ(t.vocab_size(), 50257);
  EXPECT_EQ(t.eot_id(), 50256);
  EXPECT_EQ(t.num_merges(), 50000);
  EXPECT_EQ(encode(t, "Hello world"), (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ(t.piece(50256), "<|endoftext|>");
}

TEST(Gpt2Golden, MatchesReferenceIds) {
  REQUIRE_SHARED_DATA();
  const auto cases = load_golden();
  ASSERT_GE(cases.size(), 20u);
  for (const Golden& g : cases) {
    EXPECT_EQ(encode(gpt2(), g.bytes), g.ids) << g.name;
    EXPECT_EQ(gpt2().decode(g.ids), g.bytes) << g.name;
  }
}

// Both merge algorithms on long single pieces (letters, digits, spaces) of the real vocabulary.
TEST(Gpt2Golden, LinearAndHeapAgree) {
  REQUIRE_SHARED_DATA();
  std::mt19937 rng(3);
  const std::string alphabets[] = {"etaoinshrdlu", "0123456789", "abcdefghijklmnopqrstuvwxyz"};
  for (int trial = 0; trial < 300; ++trial) {
    const std::string& a = alphabets[trial % 3];
    std::string piece = trial % 2 ? " " : "";
    const int n = 1 + int(rng() % 63);
    for (int i = 0; i < n; ++i) piece += a[rng() % a.size()];
    std::vector<int32_t> lin, heap;
    gpt2().encode_piece(piece, lin, BpeMergeMethod::kLinearScan);
    gpt2().encode_piece(piece, heap, BpeMergeMethod::kHeap);
    ASSERT_EQ(lin, heap) << piece;
  }
}

TEST(Gpt2Golden, ToJsonAndHuggingFaceFormatGiveTheSameIds) {
  REQUIRE_SHARED_DATA();
  const test::TempDir tmp("gpt2_golden");
  const auto& dir = tmp.path();
  {
    std::ofstream f(dir / "tok.json");
    f << gpt2().to_json();
  }
  // A Hugging Face tokenizer.json made from the same two files.
  {
    std::ifstream enc(gpt2_dir() + "/encoder.json"), bpe(gpt2_dir() + "/vocab.bpe");
    json merges = json::array();
    std::string line;
    std::getline(bpe, line);  // #version
    while (std::getline(bpe, line))
      if (!line.empty()) merges.push_back(line);
    json hf = {{"added_tokens",
                json::array({{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true}}})},
               {"normalizer", nullptr},
               {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
               {"model", {{"type", "BPE"}, {"vocab", json::parse(enc)}, {"merges", merges}}}};
    std::ofstream f(dir / "tokenizer.json");
    f << hf.dump();
  }
  const auto from_json = make_tokenizer((dir / "tok.json").string());
  const auto from_hf = make_tokenizer("hf:" + (dir / "tokenizer.json").string());
  for (const Golden& g : load_golden()) {
    EXPECT_EQ(encode(*from_json, g.bytes), g.ids) << g.name;
    EXPECT_EQ(encode(*from_hf, g.bytes), g.ids) << g.name;
  }
  EXPECT_EQ(from_json->vocab_size(), 50257);
  EXPECT_EQ(from_hf->eot_id(), 50256);
}

// encode() is const and thread-safe: concurrent encodes (each with its own cache) agree.
TEST(Gpt2Golden, ConcurrentEncodesAgree) {
  REQUIRE_SHARED_DATA();
  std::string text;
  for (const Golden& g : load_golden()) text += g.bytes;
  const auto expected = encode(gpt2(), text);
  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::thread> pool;
  for (int i = 0; i < 4; ++i)
    pool.emplace_back([&, i] {
      for (int r = 0; r < 3; ++r) got[i] = encode(gpt2(), text);
    });
  for (auto& th : pool) th.join();
  for (const auto& g : got) EXPECT_EQ(g, expected);
}

}  // namespace
}  // namespace attnlab
