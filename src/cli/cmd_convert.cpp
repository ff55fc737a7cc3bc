// attnlab convert: see interop/convert.h.
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "interop/convert.h"

namespace attnlab::cli {

int cmd_convert(const std::string& src, const std::string& dst, const std::string& to,
                bool llmc_bf16, const std::string& adapter) {
  ConvertOptions o;
  o.adapter = adapter;
  o.to = parse_model_format(to);
  o.llmc_bf16 = llmc_bf16;
  ATTN_REQUIRE(!llmc_bf16 || o.to == ModelFormat::llmc,
               "convert: --bf16 applies to --to llmc only");
  const ConvertResult r = convert_model(src, dst, o);
  const GPTConfig& c = r.source.config;
  std::fprintf(stderr,
               "converted %s model '%s' (%d layers, %d heads, n_embd %d, vocab %d, block %d, %s "
               "head) to %s\n",
               model_format_name(r.source.format), src.c_str(), c.n_layer, c.n_head, c.n_embd,
               c.vocab_size, c.block_size, c.tied_embeddings ? "tied" : "untied", to.c_str());
  for (const auto& n : r.notes) std::fprintf(stderr, "note: %s\n", n.c_str());
  for (const auto& f : r.written) std::printf("%s\n", f.c_str());
  return 0;
}

}  // namespace attnlab::cli
