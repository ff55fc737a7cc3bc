// A test fixture for Hugging Face tokenizer.json files written by the tests themselves: write a
// JSON, load it through make_tokenizer("hf:..."), and check that a bad one is refused with a
// message naming the file and the given parts.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <initializer_list>
#include <memory>
#include <nlohmann/json.hpp>
#include <source_location>
#include <string>
#include <vector>

#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace attnlab::test {

class HfJsonTest : public ::testing::Test {
 protected:
  explicit HfJsonTest(const char* tmp_name) : tmp_(tmp_name) {}
  std::string write(const std::string& name, const nlohmann::json& j) const {
    const std::string path = tmp_.file(name);
    std::ofstream(path, std::ios::binary) << j.dump();
    return path;
  }
  std::unique_ptr<Tokenizer> load(const nlohmann::json& j,
                                  const std::string& name = "tokenizer.json") {
    return make_tokenizer("hf:" + write(name, j));
  }
  void expect_error(const nlohmann::json& j, std::initializer_list<std::string> parts,
                    const std::source_location& where = std::source_location::current()) {
    const std::string path = write("bad.json", j);
    test::expect_error([&] { make_tokenizer("hf:" + path); }, {path}, where);
    test::expect_error([&] { make_tokenizer("hf:" + path); }, parts, where);
  }
  TempDir tmp_;
};

inline std::vector<int32_t> encode(const Tokenizer& t, const std::string& text) {
  std::vector<int32_t> ids;
  t.encode(text, ids);
  return ids;
}

}  // namespace attnlab::test
