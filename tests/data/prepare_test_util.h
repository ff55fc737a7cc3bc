// Shared by the prepare tests (test_prepare*.cpp): a fixture with an input and an output directory
// and the options of a small two-thread run, and generated documents.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/prepare.h"
#include "data/shard.h"
#include "test_util.h"

namespace attnlab::test {

class PrepareTest : public ::testing::Test {
 public:
  void SetUp() override { std::filesystem::create_directories(path("in")); }
  std::string path(const std::string& name) const { return dir_.file(name); }
  void write(const std::string& name, const std::string& text) {
    std::ofstream f(path(name), std::ios::binary);
    f << text;
  }
  PrepareOptions options() const {
    PrepareOptions o;
    o.inputs = {path("in/*.txt*")};
    o.out_dir = path("out");
    o.val_fraction = 0.3;
    o.seed = 5;
    o.threads = 2;
    o.progress = false;
    return o;
  }
  // All tokens of a split, shards concatenated.
  std::vector<int32_t> split_tokens(const SplitSummary& s) const {
    std::vector<int32_t> all;
    for (const auto& shard : s.shards) {
      const auto t = read_shard(shard);
      all.insert(all.end(), t.begin(), t.end());
    }
    return all;
  }
  TempDir dir_{"prepare"};
};

// n documents of some words, every third with a second paragraph; salt makes another set.
inline std::vector<std::string> make_docs(int n, int salt) {
  std::vector<std::string> docs;
  for (int i = 0; i < n; ++i) {
    std::string d = "Document " + std::to_string(salt) + "/" + std::to_string(i) + ":";
    for (int j = 0; j < (i * 7 + salt) % 40 + 3; ++j) d += " word" + std::to_string(j * i % 17);
    if (i % 3 == 0) d += "\n\nsecond paragraph";
    docs.push_back(d);
  }
  return docs;
}

inline std::string join(const std::vector<std::string>& docs) {
  std::string s;
  for (size_t i = 0; i < docs.size(); ++i) s += (i ? "\n\n\n" : "") + docs[i];
  return s + "\n";
}

}  // namespace attnlab::test
