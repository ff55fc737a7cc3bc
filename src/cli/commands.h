// The attnlab subcommands. main.cpp only parses arguments (CLI11) and calls these; each returns
// the process exit code and throws attnlab::Error for user errors.
#pragma once
#include <string>
#include <vector>

#include "data/prepare.h"
#include "train/generate.h"

namespace attnlab::cli {

struct RecipeArgs {
  std::string recipe;                  // path to the YAML recipe
  std::vector<std::string> overrides;  // --set a.b=value
};

int cmd_train(const RecipeArgs& args, const std::string& resume_dir, int profile_steps);
int cmd_info(const RecipeArgs& args);
int cmd_generate(const GenerateOptions& options);
int cmd_prepare(PrepareOptions options);
// attnlab convert SRC DST --to attnlab|hf|llmc (interop/convert.h); prints what it wrote.
int cmd_convert(const std::string& src, const std::string& dst, const std::string& to,
                bool llmc_bf16, const std::string& adapter);

}  // namespace attnlab::cli
