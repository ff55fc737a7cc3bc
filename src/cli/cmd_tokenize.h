// `attnlab tokenize`: prints the token ids of a text (and optionally each token's bytes).
#pragma once
#include <string>

namespace attnlab {

// Encodes `text` with make_tokenizer(tokenizer_spec) and prints to stdout:
//   line 1: "<n> tokens, <bytes> bytes, tokenizer <name> (vocab <V>)"
//   line 2: the ids separated by spaces
//   with show_pieces: one line per token, "<id>\t<bytes>" with the bytes as a C-style escaped,
//   double-quoted string (\n, \t, \", \\, non-printable and non-ASCII bytes as \xNN... except
//   that complete UTF-8 characters are printed as they are).
// With `special`, the ids transformers' tokenizer(text) gives: the BOS first where the tokenizer
// has one, and the text of every special token in `text` as that token (encode_with_special);
// else encode(text): ordinary text, no BOS.
// Returns 0; errors (unknown spec, unreadable files) are thrown as attnlab::Error.
int run_tokenize(const std::string& tokenizer_spec, const std::string& text, bool show_pieces,
                 bool special = false);

}  // namespace attnlab
