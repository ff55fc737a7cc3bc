// `attnlab prepare`: text corpora -> token shards.
//
// Inputs (files or globs; plain, .gz or .xz) are split into documents (at `delimiter`, or one JSON
// object per line with the text in `jsonl_field`). Each document goes to val with probability
// val_fraction, decided by a seeded hash of its text (so the split does not depend on file order or
// thread count, and duplicate documents land in the same split). Every document is preceded by
// <|endoftext|> (llm.c convention). Documents are encoded on `threads` threads, long ones cut into
// parts at Tokenizer::split_point() so that the threads get equal work; decoding (up to `threads`
// files at once), finding documents and writing run on threads of their own beside them (see
// docs/tokenizer.md "prepare throughput"). The ids, and so the shard bytes, are the same for every
// thread count and batch size. They are written to
// <out_dir>/train_NNNNNN.bin and <out_dir>/val_NNNNNN.bin, at most shard_tokens tokens per shard
// (a document may continue in the next shard), uint16 when the vocabulary fits, else uint32 (see
// shard.h). <out_dir>/tokenizer.json describes the tokenizer. The new shards are staged and
// replace those of an earlier run in out_dir (train_*.bin / val_*.bin) only when the run
// succeeds; a failed run leaves the earlier dataset whole.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace attnlab {

struct PrepareOptions {
  std::vector<std::string> inputs;  // files or glob patterns
  std::string out_dir;
  std::string tokenizer = "byte";    // a make_tokenizer() spec
  std::string delimiter = "\n\n\n";  // empty: one document per file
  std::string jsonl_field;           // non-empty: inputs are JSON lines, documents are this field
  double val_fraction = 0.005;
  uint64_t seed = 1337;
  int64_t shard_tokens = 100'000'000;
  static constexpr int kMaxThreads = 1024;
  int threads = 0;  // encoding threads; 0: all hardware threads; at most kMaxThreads
  // Text bytes per batch of documents handed to the encoding threads. 0: 2 MiB per thread (the
  // first batches are smaller so encoding starts early). Tests set it small to get many batches.
  int64_t batch_bytes = 0;
  bool progress = true;  // a progress line on stderr
  // Also end every document with the end-of-text token (tokenizers with a BOS, which starts
  // every document: <s> doc </s>, <|begin_of_text|> doc <|end_of_text|>, as torchtitan frames
  // LLaMA 3's pretraining documents). GPT-2's documents are separated by <|endoftext|> already.
  bool eos = false;
  void validate() const;
};

struct SplitSummary {
  int64_t documents = 0;
  int64_t tokens = 0;  // including each document's start token (and end token with `eos`)
  int64_t bytes = 0;   // text bytes of the documents
  std::vector<std::string> shards;
  double tokens_per_byte() const { return bytes > 0 ? double(tokens) / double(bytes) : 0.0; }
};

struct PrepareSummary {
  SplitSummary train, val;
  std::string tokenizer;  // name()
  int vocab_size = 0;
  // What the input suggests is not what the user meant (CRLF line endings under a "\n"
  // delimiter, the literal text "<|endoftext|>"), from the first block of each file; also
  // printed to stderr.
  std::vector<std::string> warnings;
  int shard_version = 0;
  int64_t input_files = 0;
  double seconds = 0.0;
  // Where the time went. threads: encoding threads; encode_thread_seconds: their busy time summed
  // over threads; input_wait_seconds: the main thread waiting for decoded input (input-bound
  // when large); encoder_wait_seconds: the main thread waiting for the encoders to free a batch
  // (encoding-bound); write_seconds: the writer thread writing shards, including flush_seconds,
  // the final flush of the last shards to disk (after the encoding is done); setup_seconds:
  // loading the tokenizer and listing the inputs, before the pipeline starts; main_seconds: the
  // main thread's own work in the pipeline (appending decoded blocks to batches, finding the
  // documents, cutting tasks), i.e. its time in the pipeline minus both waits: when it is close
  // to the pipeline's time, the main thread bounds the run.
  int threads = 0;
  double encode_thread_seconds = 0.0, input_wait_seconds = 0.0, encoder_wait_seconds = 0.0;
  double write_seconds = 0.0, flush_seconds = 0.0;
  double setup_seconds = 0.0, pipeline_seconds = 0.0, main_seconds = 0.0;
  std::string to_string() const;  // a few human-readable lines
};

PrepareSummary prepare(const PrepareOptions& options);

// A --delimiter as typed in a shell: the escapes \n, \r, \t and \\ become their characters;
// any other backslash is an error naming it (a silent "\r" -> "r" split nothing).
std::string unescape_delimiter(const std::string& typed);

// The split decision for one document (exposed for tests and tools).
bool is_val_document(std::string_view text, uint64_t seed, double val_fraction);

}  // namespace attnlab
