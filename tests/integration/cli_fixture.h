// The CLI test fixture (test_cli.cpp, test_cli_variants.cpp): the attnlab binary run by popen, its
// output and exit code, and a tiny recipe in a temporary directory.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "test_util.h"

namespace attnlab::test {

namespace fs = std::filesystem;
struct CliResult {
  int code = -1;
  std::string out;  // stdout and stderr together
};

// The CLI with `env` (NAME=value ... for its environment, "" for this process's).
inline CliResult run_env(const std::string& env, const std::string& args) {
  std::string cmd =
      (env.empty() ? "" : "env " + env + " ") + attnlab_binary() + " " + args + " 2>&1";
  CliResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}
inline CliResult run(const std::string& args) { return run_env("", args); }

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    recipe_ = (dir_ / "tiny.yaml").string();
    std::ofstream(recipe_) << R"(# a tiny recipe for CLI tests
model: {n_layer: 1, n_head: 2, n_embd: 16, vocab_size: 260, block_size: 32, vocab_multiple: 32}
data:
  source: synthetic
  synthetic: {vocab_size: 64, train_tokens: 8000, val_tokens: 2048, seed: 3}
optim: {lr: 1.0e-2}
schedule: {type: constant}
train: {steps: 3, micro_batch: 2, seq_len: 16, device: cpu}
eval: {every: 0, batches: 2}
log: {every: 1}
)";
  }
  std::string train_args(const std::string& extra = "") const {
    return "train " + recipe_ + " --set train.out_dir=" + (dir_ / "run").string() + " " + extra;
  }
  TempDir tmp_{"cli"};
  const fs::path dir_ = tmp_.path();
  std::string recipe_;
};

inline void expect_error(const CliResult& r, const std::string& needle) {
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(needle), std::string::npos) << "expected '" << needle << "' in:\n" << r.out;
}

}  // namespace attnlab::test
