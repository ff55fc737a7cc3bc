// The tokenizer files of a Hugging Face export (write_hf_tokenizer_files, interop/hf_files.h):
// a LLaMA 3 or SentencePiece-style tokenizer.json goes through `convert` hf -> attnlab -> hf and
// comes back as a tokenizer.json that reads to an equal tokenizer, with tokenizer_config.json and
// special_tokens_map.json; the GPT-2 form stays vocab.json + merges.txt (GPT2Tokenizer).
// `tokenizers` itself is the oracle in scripts/hf_tokenizer_check.py --round-trip.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "interop/convert.h"
#include "interop/hf_gpt2.h"
#include "interop/hf_llama.h"
#include "interop/interop_test_util.h"
#include "io/atomic_file.h"
#include "test_util.h"
#include "tokenizer/bpe.h"
#include "tokenizer/tiny_llama3_tokenizer.h"
#include "tokenizer/tiny_sp_tokenizer.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace attnlab;
using namespace attnlab::interop_test;

namespace {

// A LLaMA block of tiny_config()'s size over `vocab` ids.
GPTConfig llama_config(int vocab) {
  GPTConfig c = tiny_config();
  c.norm = NormType::rmsnorm;
  c.mlp = MlpType::swiglu;
  c.position = PositionType::rope;
  c.bias = false;
  c.tied_embeddings = false;
  c.vocab_size = vocab;
  return c;
}

ConvertOptions to(ModelFormat format) {
  ConvertOptions o;
  o.to = format;
  return o;
}

json read_json(const fs::path& p) { return json::parse(io::read_file(p.string())); }

bool noted(const std::vector<std::string>& notes, const std::string& part) {
  for (const auto& n : notes)
    if (n.find(part) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST(HfTokenizerExport, LlamaConvertCarriesLlama3AndSentencePieceTokenizers) {
  struct Case {
    const char* name;
    json tokenizer;
    const char *bos, *eos, *unk;
  };
  const Case cases[] = {
      {"llama3", test::llama3_json(true), "<|begin_of_text|>", "<|end_of_text|>", nullptr},
      {"sp-legacy", test::sp_json("legacy"), "<s>", "</s>", "<unk>"},
      {"sp-metaspace", test::sp_json("always-split"), "<s>", "</s>", "<unk>"}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const test::TempDir tmp("hf_tok_export");
    const fs::path hf = tmp.path() / "hf", ours = tmp.path() / "ours", back = tmp.path() / "back";
    io::ensure_dir(hf.string());
    io::write_file_atomic((hf / "tokenizer.json").string(), c.tokenizer.dump());
    const auto original = make_tokenizer("hf:" + (hf / "tokenizer.json").string());
    const GPTConfig cfg = llama_config(original->vocab_size());
    Model m(cfg, 1);
    write_hf_llama(m.store, cfg, nullptr, hf.string(), nullptr);

    convert_model(hf.string(), ours.string(), to(ModelFormat::attnlab));
    const ConvertResult r = convert_model(ours.string(), back.string(), to(ModelFormat::hf));
    EXPECT_FALSE(noted(r.notes, "no tokenizer files written"));
    EXPECT_FALSE(fs::exists(back / "vocab.json"));
    EXPECT_FALSE(fs::exists(back / "merges.txt"));
    ASSERT_TRUE(fs::exists(back / "tokenizer.json"));
    const auto written = make_tokenizer("hf:" + (back / "tokenizer.json").string());
    EXPECT_EQ(tokenizer_difference(*original, *written), "");

    const json tc = read_json(back / "tokenizer_config.json");
    EXPECT_EQ(tc["tokenizer_class"], "PreTrainedTokenizerFast");
    EXPECT_EQ(tc["model_max_length"], cfg.block_size);
    EXPECT_EQ(tc["bos_token"], c.bos);
    EXPECT_EQ(tc["eos_token"], c.eos);
    EXPECT_EQ(tc["add_bos_token"], true);
    EXPECT_EQ(tc["add_eos_token"], false);
    EXPECT_EQ(tc["clean_up_tokenization_spaces"], false);
    const json sm = read_json(back / "special_tokens_map.json");
    EXPECT_EQ(sm["bos_token"], c.bos);
    EXPECT_EQ(sm["eos_token"], c.eos);
    if (c.unk) {
      EXPECT_EQ(tc["unk_token"], c.unk);
      EXPECT_EQ(sm["unk_token"], c.unk);
    } else {
      EXPECT_FALSE(tc.contains("unk_token"));
    }
    const json config = read_json(back / "config.json");
    EXPECT_EQ(config["bos_token_id"], original->bos_id());
    EXPECT_EQ(config["eos_token_id"], original->eot_id());
  }
}

// The GPT-2 form is written as before: vocab.json + merges.txt and a GPT2Tokenizer config from
// the LLaMA exporter, the two files alone from the GPT-2 one; no tokenizer.json.
TEST(HfTokenizerExport, Gpt2FormIsUnchanged) {
  const test::TempDir tmp("hf_tok_export");
  // The tiny LLaMA 3 vocabulary behind GPT-2's pre-tokenizer, with <|endoftext|> (id 262) only.
  json g = test::llama3_json(false);
  g["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  g["post_processor"] = nullptr;
  g["added_tokens"] = json::array({g["added_tokens"][0]});
  g["added_tokens"][0]["content"] = "<|endoftext|>";
  io::write_file_atomic(tmp.file("gpt2.json"), g.dump());
  const auto tok = make_tokenizer("hf:" + tmp.file("gpt2.json"));
  const GPTConfig cfg = llama_config(tok->vocab_size());
  Model m(cfg, 1);
  const fs::path dir = tmp.path() / "llama";
  write_hf_llama(m.store, cfg, tok.get(), dir.string(), nullptr);
  EXPECT_FALSE(fs::exists(dir / "tokenizer.json"));
  EXPECT_FALSE(fs::exists(dir / "special_tokens_map.json"));
  EXPECT_EQ(read_json(dir / "tokenizer_config.json"), json({{"tokenizer_class", "GPT2Tokenizer"},
                                                            {"model_max_length", cfg.block_size},
                                                            {"bos_token", "<|endoftext|>"},
                                                            {"eos_token", "<|endoftext|>"},
                                                            {"unk_token", "<|endoftext|>"}}));
  EXPECT_EQ(tokenizer_difference(*tok, *make_tokenizer("gpt2:" + dir.string())), "");

  const GPTConfig gcfg = [&] {
    GPTConfig c = tiny_config();
    c.vocab_size = tok->vocab_size();
    return c;
  }();
  Model mg(gcfg, 1);
  const fs::path gdir = tmp.path() / "gpt2";
  write_hf_gpt2(mg.store, gcfg, tok.get(), gdir.string(), nullptr);
  EXPECT_TRUE(fs::exists(gdir / "vocab.json"));
  EXPECT_TRUE(fs::exists(gdir / "merges.txt"));
  EXPECT_FALSE(fs::exists(gdir / "tokenizer.json"));
  EXPECT_FALSE(fs::exists(gdir / "tokenizer_config.json"));
}

// The GPT-2 exporter writes a LLaMA 3 tokenizer as tokenizer.json too; the byte tokenizer has no
// Hugging Face form: a note, no files.
TEST(HfTokenizerExport, Gpt2ExporterAndTheByteTokenizer) {
  const test::TempDir tmp("hf_tok_export");
  io::write_file_atomic(tmp.file("llama3.json"), test::llama3_json(true).dump());
  const auto tok = make_tokenizer("hf:" + tmp.file("llama3.json"));
  GPTConfig cfg = tiny_config();
  cfg.vocab_size = tok->vocab_size();
  Model m(cfg, 1);
  const fs::path dir = tmp.path() / "gpt2";
  std::vector<std::string> notes;
  write_hf_gpt2(m.store, cfg, tok.get(), dir.string(), &notes);
  EXPECT_TRUE(notes.empty());
  EXPECT_EQ(tokenizer_difference(*tok, *make_tokenizer("hf:" + (dir / "tokenizer.json").string())),
            "");
  EXPECT_EQ(read_json(dir / "tokenizer_config.json")["tokenizer_class"], "PreTrainedTokenizerFast");

  const ByteTokenizer byte;
  GPTConfig bcfg = llama_config(257);
  Model mb(bcfg, 1);
  const fs::path bdir = tmp.path() / "byte";
  write_hf_llama(mb.store, bcfg, &byte, bdir.string(), &notes);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_HAS(notes[0], "the 'byte' tokenizer has no Hugging Face form: no tokenizer files written");
  for (const char* f : {"tokenizer.json", "vocab.json", "tokenizer_config.json"})
    EXPECT_FALSE(fs::exists(bdir / f)) << f;
}
