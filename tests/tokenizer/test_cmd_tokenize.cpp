// `attnlab tokenize` output (run_tokenize), with the byte tokenizer (always) and GPT-2 (with
// ATTNLAB_SHARED_DATA).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "cli/cmd_tokenize.h"
#include "core/error.h"
#include "test_util.h"
#include "tokenizer/tiny_sp_tokenizer.h"

namespace attnlab {
namespace {

std::string run(const std::string& spec, const std::string& text, bool pieces,
                bool special = false) {
  ::testing::internal::CaptureStdout();
  const int rc = run_tokenize(spec, text, pieces, special);
  std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  return out;
}

TEST(CmdTokenize, ByteTokenizer) {
  // --ids-only: the ids alone on stdout (the summary goes to stderr).
  EXPECT_EQ(run("byte", "hi\n", false), "104 105 10\n");
  // Bytes that are not whole UTF-8 characters are escaped; quotes and backslashes too.
  EXPECT_EQ(run("byte", "\xC3\xA9\"\\", true),
            "4 tokens, 4 bytes, tokenizer byte (vocab 257)\n195 169 34 92\n"
            "195\t\"\\xC3\"\n169\t\"\\xA9\"\n34\t\"\\\"\"\n92\t\"\\\\\"\n");
  EXPECT_THROW(run_tokenize("nonsense", "x", false), Error);
}

TEST(CmdTokenize, Gpt2Pieces) {
  const char* data = std::getenv("ATTNLAB_SHARED_DATA");
  if (!data) GTEST_SKIP() << "ATTNLAB_SHARED_DATA is not set";
  const std::string spec = std::string("gpt2:") + data + "/gpt2-vocab";
  EXPECT_EQ(run(spec, "Hello world", true),
            "2 tokens, 11 bytes, tokenizer gpt2-bpe (vocab 50257)\n15496 995\n"
            "15496\t\"Hello\"\n995\t\" world\"\n");
  // A whole character is printed as is.
  const std::string out = run(spec, " caf\xC3\xA9\t", true);
  EXPECT_NE(out.find("40304\t\" caf\xC3\xA9\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"\\t\""), std::string::npos) << out;
}

// --special: transformers' tokenizer(text), the BOS first and "</s>" as its id; without it the
// text as ordinary text.
TEST(CmdTokenize, SpecialIsTransformersEncoding) {
  const test::TempDir dir("cmdtok");
  std::ofstream(dir.file("sp.json")) << test::sp_json("legacy").dump();
  const std::string spec = "hf:" + dir.file("sp.json");
  const std::string plain = run(spec, "a</s>", false), special = run(spec, "a</s>", false, true);
  EXPECT_EQ(special.rfind("1 ", 0), 0u) << special;               // <s> first
  EXPECT_NE(special.find(" 2\n"), std::string::npos) << special;  // </s> last, one id
  EXPECT_NE(plain.rfind("1 ", 0), 0u) << plain;
  EXPECT_EQ(plain.find(" 2\n"), std::string::npos) << plain;
  EXPECT_EQ(run("byte", "hi", false, true), run("byte", "hi", false));  // no BOS, no specials
}

}  // namespace
}  // namespace attnlab
