// `attnlab convert SRC DST --to attnlab|hf|llmc`: a model from any source (interop/model_source.h)
// written in another format, with its tokenizer where the target has a place for it.
//   attnlab  DST/ is a checkpoint directory that eval, generate and init_from accept:
//            model.safetensors, recipe.yaml (the model section of the source), tokenizer.json
//   hf       DST/config.json + model.safetensors (+ vocab.json, merges.txt): loads with
//            GPT2LMHeadModel.from_pretrained(DST)
//   llmc     DST is one file (gpt2_124M.bin style; fp32, or bf16 with llmc_bf16)
// Every tensor of the source must be used and every tensor of the model filled, so a conversion
// never drops or invents weights. What the target cannot represent is refused, naming why.
#pragma once
#include <string>
#include <vector>

#include "interop/model_source.h"

namespace attnlab {

struct ConvertOptions {
  ModelFormat to = ModelFormat::hf;
  bool llmc_bf16 = false;  // llm.c version 5 (bf16) instead of 3 (fp32)
  std::string adapter;     // a retrofit's adapter merged in: the result is the adapter's model
};

struct ConvertResult {
  ModelSource source;
  std::vector<std::string> written;  // the files written
  std::vector<std::string> notes;    // the source's notes and what was not carried over
};

ConvertResult convert_model(const std::string& src, const std::string& dst,
                            const ConvertOptions& options);

}  // namespace attnlab
