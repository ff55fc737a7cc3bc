#include "cli/cmd_tokenize.h"

#include <cstdio>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace attnlab {

int run_tokenize(const std::string& tokenizer_spec, const std::string& text, bool show_pieces,
                 bool special) {
  const auto tok = make_tokenizer(tokenizer_spec);
  std::vector<int32_t> ids;
  if (special) {
    if (tok->bos_id() >= 0) ids.push_back(tok->bos_id());
    tok->encode_with_special(text, ids);
  } else {
    tok->encode(text, ids);
  }
  // --ids-only: the ids alone on stdout (for scripts), the summary on stderr.
  std::fprintf(show_pieces ? stdout : stderr, "%zu tokens, %zu bytes, tokenizer %s (vocab %d)\n",
               ids.size(), text.size(), tok->name().c_str(), tok->vocab_size());
  for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
  std::printf("\n");
  if (show_pieces) {
    for (int32_t id : ids) std::printf("%d\t%s\n", id, quote_piece(tok->piece(id)).c_str());
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace attnlab
