// prepare: text files -> shards, end to end with the byte tokenizer, and the same shard bytes for
// any thread count and batch size. Its errors are in test_prepare_errors.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "prepare_test_util.h"
#include "test_util.h"
#include "tests/tokenizer/split_text.h"
#include "tokenizer/bpe.h"
#include "tokenizer/tiny_sp_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace attnlab {
namespace {

using test::join;
using test::make_docs;
using test::PrepareTest;

namespace fs = std::filesystem;

// Decodes a byte-token stream into documents: each begins right after an eot (256).
std::vector<std::string> documents_of(const std::vector<int32_t>& tokens) {
  std::vector<std::string> docs;
  for (int32_t t : tokens) {
    if (t == 256)
      docs.emplace_back();
    else {
      EXPECT_FALSE(docs.empty()) << "tokens before the first eot";
      if (!docs.empty()) docs.back() += char(t);
    }
  }
  return docs;
}

TEST_F(PrepareTest, EndToEndByteTokenizer) {
  const auto docs_a = make_docs(60, 1), docs_b = make_docs(45, 2);
  write("in/a.txt", join(docs_a));
  write("in/b.txt", join(docs_b));
  if (std::system("command -v xz > /dev/null 2>&1") == 0) {  // an .xz input too
    fs::rename(path("in/b.txt"), path("in/b_plain"));
    ASSERT_EQ(std::system(("xz -c " + path("in/b_plain") + " > " + path("in/b.txt.xz")).c_str()),
              0);
    fs::remove(path("in/b_plain"));
  }
  auto o = options();
  o.shard_tokens = 1000;  // several shards per split; documents continue across shards
  const auto s = prepare(o);

  EXPECT_EQ(s.tokenizer, "byte");
  EXPECT_EQ(s.shard_version, 1);
  EXPECT_EQ(s.input_files, 2);
  EXPECT_EQ(s.train.documents + s.val.documents, 105);
  EXPECT_GT(s.val.documents, 10);  // ~30%
  EXPECT_GT(s.train.documents, 50);
  EXPECT_GT(s.train.shards.size(), 2u);
  EXPECT_EQ(s.train.shards[0], path("out/train_000000.bin"));
  for (size_t i = 0; i + 1 < s.train.shards.size(); ++i) {
    EXPECT_EQ(ShardFile::open(s.train.shards[i])->size(), 1000);
  }

  // Byte tokenizer: tokens = bytes + one eot per document.
  EXPECT_EQ(s.train.tokens, s.train.bytes + s.train.documents);
  EXPECT_EQ(s.val.tokens, s.val.bytes + s.val.documents);
  const auto train = split_tokens(s.train), val = split_tokens(s.val);
  ASSERT_EQ(int64_t(train.size()), s.train.tokens);
  ASSERT_EQ(int64_t(val.size()), s.val.tokens);
  EXPECT_EQ(train[0], 256);  // eot BEFORE each document
  EXPECT_EQ(val[0], 256);

  // Each document is whole in exactly one split, in input order, decided by the seeded hash.
  std::vector<std::string> expect_train, expect_val;
  for (const auto* docs : {&docs_a, &docs_b})
    for (const auto& d : *docs)
      (is_val_document(d, 5, 0.3) ? expect_val : expect_train).push_back(d);
  EXPECT_EQ(documents_of(train), expect_train);
  EXPECT_EQ(documents_of(val), expect_val);

  std::ifstream tj(path("out/tokenizer.json"));
  std::string json((std::istreambuf_iterator<char>(tj)), {});
  EXPECT_NE(json.find("\"byte\""), std::string::npos);
  EXPECT_NE(s.to_string().find("train"), std::string::npos);

  // Same inputs, one thread, bigger shards: identical token streams (order-preserving encoding).
  o.threads = 1;
  o.shard_tokens = 1 << 20;
  o.out_dir = path("out1");
  const auto s1 = prepare(o);
  EXPECT_EQ(split_tokens(s1.train), train);
  EXPECT_EQ(split_tokens(s1.val), val);
  ASSERT_EQ(s1.train.shards.size(), 1u);

  // A re-run into the first directory removes stale shards from the earlier run.
  o.out_dir = path("out");
  write("out/val_1234567.bin", "a shard a run of over a million shards left");  // 7 digits
  prepare(o);
  EXPECT_FALSE(fs::exists(path("out/train_000001.bin")));
  EXPECT_FALSE(fs::exists(path("out/val_1234567.bin")));
}

// A tokenizer with a BOS (LLaMA 2's form): every document starts with <s> instead of
// <|endoftext|> (document_start_id), and no </s> is written.
TEST_F(PrepareTest, BosTokenizerStartsEveryDocumentWithIt) {
  const auto docs = make_docs(20, 3);
  write("in/a.txt", join(docs));
  std::ofstream(path("sp.json"), std::ios::binary) << test::sp_json("legacy").dump();
  auto o = options();
  o.tokenizer = "hf:" + path("sp.json");
  o.val_fraction = 0;
  const auto s = prepare(o);
  const auto train = split_tokens(s.train);
  ASSERT_FALSE(train.empty());
  EXPECT_EQ(train[0], 1);  // <s>
  EXPECT_EQ(std::count(train.begin(), train.end(), 1), s.train.documents);
  EXPECT_EQ(std::count(train.begin(), train.end(), 2), 0);  // </s>
  EXPECT_EQ(s.train.documents, 20);
}

// --eos: every document of a BOS tokenizer is <s> text </s>, also where a long document is
// encoded as several segments on different threads; the text between the two is the document's.
TEST_F(PrepareTest, EosEndsEveryDocumentOfABosTokenizer) {
  auto docs = make_docs(30, 4);
  std::string long_doc;
  for (int i = 0; i < 400; ++i) long_doc += "a long document, sentence " + std::to_string(i) + ". ";
  docs.insert(docs.begin() + 7, long_doc);
  write("in/a.txt", join(docs));
  // Metaspace with split: the form whose split_point cuts a document between words.
  std::ofstream(path("sp.json"), std::ios::binary) << test::sp_json("always-split").dump();
  auto o = options();
  o.tokenizer = "hf:" + path("sp.json");
  o.val_fraction = 0;
  o.eos = true;
  o.batch_bytes = 4096;  // the long document spans several tasks
  const auto s = prepare(o);
  const auto train = split_tokens(s.train);
  ASSERT_EQ(s.train.documents, int64_t(docs.size()));
  EXPECT_EQ(int64_t(train.size()), s.train.tokens);
  const auto tok = make_tokenizer(o.tokenizer);
  std::vector<std::string> seen;
  size_t i = 0;
  while (i < train.size()) {
    ASSERT_EQ(train[i], 1) << "token " << i << " starts no document";   // <s>
    const auto end = std::find(train.begin() + i + 1, train.end(), 2);  // </s>
    ASSERT_NE(end, train.end()) << "the document at token " << i << " has no </s>";
    const std::vector<int32_t> body(train.begin() + i + 1, end);
    EXPECT_EQ(std::count(body.begin(), body.end(), 1), 0);
    seen.push_back(tok->decode(body));
    i = size_t(end - train.begin()) + 1;
  }
  EXPECT_EQ(seen, docs);
}

TEST_F(PrepareTest, EosIsRefusedForATokenizerWithoutBos) {
  write("in/a.txt", join(make_docs(5, 1)));
  auto o = options();
  o.eos = true;
  test::expect_error([&] { prepare(o); }, {"--eos", "has no BOS", "separated by that token"});
}

// tokenizer.json goes through io::write_file_atomic: an old one (and a temp file a crashed run
// left) is replaced by exactly to_json() and a newline, and no temp file remains.
TEST_F(PrepareTest, TokenizerJsonIsReplacedAtomically) {
  write("in/a.txt", join(make_docs(20, 3)));
  fs::create_directories(path("out"));
  write("out/tokenizer.json", "stale contents from an earlier run, longer than the new file");
  write("out/tokenizer.json.tmp", "left by a crash");
  prepare(options());
  std::ifstream tj(path("out/tokenizer.json"), std::ios::binary);
  const std::string json((std::istreambuf_iterator<char>(tj)), {});
  EXPECT_EQ(json, make_tokenizer("byte")->to_json() + "\n");
  EXPECT_FALSE(fs::exists(path("out/tokenizer.json.tmp")));
}

TEST_F(PrepareTest, SplitIsByDocumentAndSeeded) {
  int val = 0, differs = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::string d = "doc " + std::to_string(i);
    val += is_val_document(d, 1, 0.1);
    differs += is_val_document(d, 1, 0.1) != is_val_document(d, 2, 0.1);
    ASSERT_EQ(is_val_document(d, 1, 0.1), is_val_document(d, 1, 0.1));
    ASSERT_FALSE(is_val_document(d, 1, 0.0));
  }
  EXPECT_NEAR(val, 2000, 200);
  EXPECT_GT(differs, 2000);  // ~18% of documents change side with the seed
}

// Inputs without any text: an error, not a run that "prepared" 0 tokens.
TEST_F(PrepareTest, NoTextIsAnError) {
  write("in/empty.txt", "");
  write("in/blank.txt", "\n\n\n");
  test::expect_error([&] { prepare(options()); }, "input file(s) hold no text (0 documents)");
}

TEST_F(PrepareTest, OneDocumentPerFileAndJsonl) {
  write("in/x.txt", "first\n\n\nstill first\n");
  write("in/y.txt", "second");
  auto o = options();
  o.delimiter = "";
  o.val_fraction = 0.0;
  auto s = prepare(o);
  EXPECT_EQ(s.train.documents, 2);
  EXPECT_EQ(s.val.documents, 0);
  EXPECT_TRUE(s.val.shards.empty());
  EXPECT_EQ(documents_of(split_tokens(s.train)),
            (std::vector<std::string>{"first\n\n\nstill first", "second"}));

  fs::remove_all(path("in"));
  fs::create_directories(path("in"));
  // Blank lines, also a CRLF file's ("\r") and spaces, are skipped; records count the others.
  write("in/d.txt",
        "{\"text\": \"alpha \\u00e9\", \"id\": 1}\r\n\r\n  \n{\"text\": \"beta\\nline\"}\n");
  o.jsonl_field = "text";
  s = prepare(o);
  EXPECT_EQ(documents_of(split_tokens(s.train)),
            (std::vector<std::string>{"alpha \xc3\xa9", "beta\nline"}));

  write("in/e.txt", "{\"text\": \"ok\"}\n\n\n{\"body\": \"no text field\"}\n");
  test::expect_error([&] { prepare(o); },
                     {"e.txt': record 2 (of its lines that are not blank)", "'text'"});
}

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), {});
}

// Every shard of a run (both splits): file name -> bytes.
std::map<std::string, std::string> shard_bytes(const PrepareSummary& s) {
  std::map<std::string, std::string> shards;
  for (const auto* split : {&s.train, &s.val})
    for (const auto& shard : split->shards)
      shards[fs::path(shard).filename().string()] = file_bytes(shard);
  return shards;
}

// Long documents are cut into parts encoded on different threads: the shards must be byte for
// byte the same for every thread count and batch size, and hold exactly the ids of the whole
// documents (the reference encodes each document in one piece), each preceded by one eot.
struct RunShape {
  int threads;
  int64_t batch_bytes;
};

void expect_identical_shards(PrepareTest& fixture, const std::string& tokenizer_spec,
                             const std::vector<RunShape>& runs) {
  const std::unique_ptr<Tokenizer> tokenizer = make_tokenizer(tokenizer_spec);
  std::vector<std::string> docs;
  for (int i = 0; i < 40; ++i) {
    // Mostly small documents; every 7th is far larger than a batch and than a task.
    const size_t bytes = i % 7 == 3 ? 20000 + 2000 * size_t(i) : 50 + 37 * size_t(i);
    docs.push_back(test::random_text(bytes, 1000 + i, i % 3 != 1));
    while (!docs.back().empty() && docs.back().back() == '\n') docs.back().pop_back();
    // The delimiter must not occur inside a document.
    for (size_t at; (at = docs.back().find("\n\n\n")) != std::string::npos;)
      docs.back().replace(at, 3, "\n\n");
    if (i % 7 == 3) {
      EXPECT_LT(tokenizer->split_point(docs.back(), 1000), docs.back().size())
          << "the large documents must have cut points";
    }
  }
  fixture.write("in/a.txt", join(docs));

  // The reference: every document encoded whole, in input order, split by the seeded hash.
  std::vector<int32_t> expect[2];
  for (const auto& d : docs) {
    auto& out = expect[is_val_document(d, 5, 0.3) ? 1 : 0];
    out.push_back(tokenizer->eot_id());
    tokenizer->encode(d, out);
  }
  ASSERT_GT(expect[1].size(), 1000u);

  std::map<std::string, std::string> first;  // shard file name -> bytes of the first run
  for (const auto [threads, batch_bytes] : runs) {
    SCOPED_TRACE(testing::Message() << "threads " << threads << ", batch_bytes " << batch_bytes);
    auto o = fixture.options();
    o.tokenizer = tokenizer_spec;
    o.threads = threads;
    o.batch_bytes = batch_bytes;
    o.shard_tokens = 7000;  // several shards; documents continue across shards
    o.out_dir = fixture.path("out_" + std::to_string(threads) + "_" + std::to_string(batch_bytes));
    const auto s = prepare(o);
    EXPECT_EQ(s.train.documents + s.val.documents, int64_t(docs.size()));
    EXPECT_EQ(fixture.split_tokens(s.train), expect[0]);
    EXPECT_EQ(fixture.split_tokens(s.val), expect[1]);
    EXPECT_GT(s.train.shards.size(), 2u);
    const auto shards = shard_bytes(s);
    if (first.empty())
      first = shards;
    else
      EXPECT_TRUE(shards == first) << "shard bytes differ from the first run";
  }
}

TEST_F(PrepareTest, ShardsAreIdenticalForAnyThreadCountTinyBpe) {
  BpeTokenizer tiny(test::tiny_english_vocab(), "tiny");
  write("tiny_tokenizer.json", tiny.to_json());
  std::vector<RunShape> runs;
  for (int64_t batch_bytes : {int64_t(0), int64_t(3000), int64_t(50000)})
    for (int threads : {1, 2, 3, 7}) runs.push_back({threads, batch_bytes});
  expect_identical_shards(*this, path("tiny_tokenizer.json"), runs);
}

TEST_F(PrepareTest, ShardsAreIdenticalForAnyThreadCountGpt2) {
  const char* env = std::getenv("ATTNLAB_SHARED_DATA");
  if (!env) GTEST_SKIP() << "ATTNLAB_SHARED_DATA is not set";
  // Fewer runs: each one loads the GPT-2 vocabulary, which takes longer than the encoding here.
  expect_identical_shards(*this, std::string("gpt2:") + env + "/gpt2-vocab",
                          {{1, 0}, {2, 3000}, {3, 0}, {7, 3000}});
}

// Many input files (an empty one, one without a final newline, plain and .xz) and JSON lines,
// read by several decoders at once and cut into batches of any size: 1 and 4 threads must write
// the same shard bytes, holding the documents in input order.
TEST_F(PrepareTest, ShardsAreIdenticalForManyFilesAndJsonl) {
  const bool xz = std::system("command -v xz > /dev/null 2>&1") == 0;
  std::vector<std::string> expect_docs;
  for (int f = 0; f < 7; ++f) {
    const auto docs = f == 3 ? std::vector<std::string>{} : make_docs(5 + 9 * f, f);
    std::string text = join(docs);
    if (f == 4) text.pop_back();  // no final newline
    const std::string name = "in/f" + std::to_string(f) + ".txt";
    write(name, text);
    if (xz && f % 2 == 1) {
      ASSERT_EQ(std::system(("xz -1 -T1 " + path(name)).c_str()), 0);
    }
    expect_docs.insert(expect_docs.end(), docs.begin(), docs.end());
  }
  const auto run_all = [&](PrepareOptions o, const std::string& tag) {
    std::map<std::string, std::string> first;
    for (const int threads : {1, 4}) {
      for (const int64_t batch_bytes : {int64_t(0), int64_t(700)}) {
        o.threads = threads;
        o.batch_bytes = batch_bytes;
        o.shard_tokens = 3000;
        o.out_dir =
            path("out_" + tag + std::to_string(threads) + "_" + std::to_string(batch_bytes));
        const auto s = prepare(o);
        std::vector<std::string> got_train = documents_of(split_tokens(s.train)),
                                 got_val = documents_of(split_tokens(s.val));
        std::vector<std::string> want_train, want_val;
        for (const auto& d : expect_docs)
          (is_val_document(d, 5, 0.3) ? want_val : want_train).push_back(d);
        EXPECT_EQ(got_train, want_train) << tag << " threads " << threads;
        EXPECT_EQ(got_val, want_val) << tag << " threads " << threads;
        EXPECT_EQ(s.threads, threads);
        EXPECT_GT(s.encode_thread_seconds, 0.0);
        const auto shards = shard_bytes(s);
        if (first.empty())
          first = shards;
        else
          EXPECT_TRUE(shards == first) << tag << ": shard bytes differ from the first run";
      }
    }
  };
  run_all(options(), "text");

  // The same documents as JSON lines (with blank lines and empty texts, which are skipped).
  fs::remove_all(path("in"));
  fs::create_directories(path("in"));
  for (int f = 0; f < 3; ++f) {
    std::string lines;
    for (size_t i = f; i < expect_docs.size(); i += 3) {
      lines += nlohmann::json({{"id", i}, {"text", expect_docs[i]}}).dump() + "\n";
      if (i % 5 == 0) lines += "\n{\"text\": \"\"}\n";
    }
    write("in/j" + std::to_string(f) + ".txt", lines);
  }
  std::vector<std::string> reordered;  // file by file
  for (int f = 0; f < 3; ++f)
    for (size_t i = f; i < expect_docs.size(); i += 3) reordered.push_back(expect_docs[i]);
  expect_docs = reordered;
  auto o = options();
  o.jsonl_field = "text";
  run_all(o, "jsonl");
}

// A shard larger than ShardWriter's 8 MiB writeback step, and many small shards: the documents
// in order and the same bytes for any thread count and batch size.
TEST_F(PrepareTest, LargeAndManySmallShardsAreIdentical) {
  std::vector<std::string> docs;
  for (int salt = 0; salt < 150; ++salt) {
    const auto more = make_docs(250, salt);
    docs.insert(docs.end(), more.begin(), more.end());
  }
  write("in/a.txt", join(docs));
  std::vector<std::string> want[2];
  for (const auto& d : docs) want[is_val_document(d, 5, 0.3) ? 1 : 0].push_back(d);

  struct Run {
    int threads;
    int64_t batch_bytes, shard_tokens;
  };
  std::map<int64_t, std::map<std::string, std::string>> first;  // shard_tokens -> shard bytes
  for (const Run& run : {Run{1, 0, 5'000'000}, Run{4, 100'000, 5'000'000}, Run{1, 0, 50'000},
                         Run{3, 30'000, 50'000}}) {
    SCOPED_TRACE(testing::Message() << "threads " << run.threads << ", batch_bytes "
                                    << run.batch_bytes << ", shard_tokens " << run.shard_tokens);
    auto o = options();
    o.threads = run.threads;
    o.batch_bytes = run.batch_bytes;
    o.shard_tokens = run.shard_tokens;
    o.out_dir = path("out_" + std::to_string(run.threads) + "_" + std::to_string(run.shard_tokens));
    const auto s = prepare(o);
    ASSERT_GT(s.train.tokens, 4'300'000);  // uint16: the first train shard holds > 8 MiB
    EXPECT_EQ(s.train.shards.size(),
              size_t((s.train.tokens + run.shard_tokens - 1) / run.shard_tokens));
    EXPECT_EQ(ShardFile::open(s.train.shards[0])->size(),
              std::min(s.train.tokens, run.shard_tokens));
    EXPECT_EQ(documents_of(split_tokens(s.train)), want[0]);
    EXPECT_EQ(documents_of(split_tokens(s.val)), want[1]);
    const auto shards = shard_bytes(s);
    auto& expect = first[run.shard_tokens];
    if (expect.empty())
      expect = shards;
    else
      EXPECT_TRUE(shards == expect) << "shard bytes differ from the first run";
  }
}

}  // namespace
}  // namespace attnlab
