#include "eval/score.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "data/shard.h"
#include "data/text_reader.h"
#include "eval/harness.h"
#include "eval/perplexity.h"
#include "train/retrofit.h"

namespace attnlab {

std::vector<int32_t> read_token_file(const std::string& path) {
  ATTN_REQUIRE(!std::filesystem::is_directory(path), "token file '%s' is a directory",
               path.c_str());
  std::ifstream in(path, std::ios::binary);
  ATTN_REQUIRE(in.good(), "cannot open token file '%s'", path.c_str());
  int32_t magic = 0;
  in.read(reinterpret_cast<char*>(&magic), sizeof(magic));
  if (in.gcount() == sizeof(magic) && magic == kShardMagic) return read_shard(path);
  in.clear();
  in.seekg(0);
  std::vector<int32_t> ids;
  std::string word;
  int64_t n = 0;
  while (in >> word) {
    ++n;
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    ATTN_REQUIRE(
        used == word.size() && v >= 0 && v <= INT32_MAX,
        "%s: entry %lld (counting from 0), '%s', is not a token id (expected an llm.c shard or "
        "whitespace-separated non-negative integers)",
        path.c_str(), (long long)(n - 1), word.c_str());
    ids.push_back(int32_t(v));
  }
  return ids;
}

ScoreSummary score_tokens(const ScoreOptions& o,
                          const std::function<void(std::string_view)>& emit) {
  ATTN_REQUIRE(o.text.empty() != o.tokens.empty(), "score: pass exactly one of --text or --tokens");
  ModelSource source = inspect_model_source(o.model, o.adapter);
  apply_eval_overrides(o.overrides, source, source.config, "score");
  EvalModel model(source, o.device);
  if (const std::string m = model.attention_eval_mode(); !m.empty())
    std::fprintf(stderr, "note: attention: %s\n", m.c_str());
  if (const std::string c = model.attention_caveat(); !c.empty())
    std::fprintf(stderr, "note: %s\n", c.c_str());
  const int vocab = model.config().vocab_size;
  std::unique_ptr<Tokenizer> tok;
  if (!o.text.empty() || !o.tokenizer.empty() || !source.tokenizer.empty())
    tok = eval_tokenizer(source, o.tokenizer, vocab);
  std::vector<int32_t> ids;
  const bool text = !o.text.empty();
  if (text) {
    ids.push_back(document_start_id(*tok));
    tok->encode(read_text_file(o.text), ids);
  } else {
    ids = read_token_file(o.tokens);
    // (A uint32 shard's id of 2^31 or more reads as negative: -1 was taken as the ignored
    // target, scored 0 and counted in the mean.)
    for (size_t i = 0; i < ids.size(); ++i)
      ATTN_REQUIRE(ids[i] >= 0 && ids[i] < vocab,
                   "%s: entry %zu (counting from 0) is token %lld, outside the model's "
                   "vocabulary [0, %d)",
                   o.tokens.c_str(), i,
                   ids[i] < 0 ? (long long)uint32_t(ids[i]) : (long long)ids[i], vocab);
  }
  // The first token has no prediction: fewer than two score nothing.
  ATTN_REQUIRE(ids.size() >= 2u, "score: %s '%s' holds %s: nothing to score",
               text ? "text file" : "token file", text ? o.text.c_str() : o.tokens.c_str(),
               ids.size() - (text ? 1 : 0) == 0 ? "no tokens" : "one token");
  const int context = o.context > 0 ? o.context : model.max_len();
  const int stride = o.stride > 0 ? o.stride : context;
  const std::vector<DocumentScores> s = score_documents(model, {ids}, context, stride, true);
  ScoreSummary sum;
  using nlohmann::json;
  // An id past the tokenizer's (a model with more ids than it: the synthetic data's) has no piece.
  auto piece = [&](int32_t id) {
    return tok && id < tok->vocab_size() ? json(tok->piece(id)) : json(nullptr);
  };
  // Text: entry p - 1 scores ids[p]; the leading <|endoftext|> is not printed.
  const size_t first = text ? 1 : 0;
  for (size_t p = first; p < ids.size(); ++p) {
    json line = {{"pos", p - first}, {"token", ids[p]}};
    if (tok) line["piece"] = piece(ids[p]);
    if (p == 0) {
      line["logprob"] = nullptr;
      line["argmax"] = nullptr;
    } else {
      const float lp = s[0].logprob[p - 1];
      const int32_t am = s[0].argmax[p - 1];
      line["logprob"] = lp;
      line["argmax"] = am;
      if (tok) line["argmax_piece"] = piece(am);
      sum.nll -= double(lp);
      ++sum.tokens;
    }
    // Pieces may be parts of a UTF-8 character: replace invalid bytes instead of failing.
    const std::string l = line.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
    emit(l);
  }
  return sum;
}

}  // namespace attnlab
