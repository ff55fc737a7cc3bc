#!/usr/bin/env bash
# Builds GPT-2 token shards from the shared corpora (books and general) for the experiments.
#
#   scripts/prepare_corpora.sh [SHARED_DATA_DIR] [OUT_DIR]
#
# SHARED_DATA_DIR: the first argument, else $ATTNLAB_SHARED_DATA, else ../shared/data next to the
#   repository. It must hold corpus/{books,general}/*.txt.xz and gpt2-vocab/{encoder.json,vocab.bpe}.
# OUT_DIR: default .data/corpora in the repository (ignored by git). Writes OUT_DIR/books and
#   OUT_DIR/general, each with train_*.bin / val_*.bin (llm.c format, uint16) and the prepare summary.
# Environment: ATTNLAB (the CLI; default build/attnlab), THREADS (default 0 = all cores),
#   VAL_FRACTION_BOOKS (default 0.03: the books corpus has only 371 long documents),
#   VAL_FRACTION_GENERAL (default 0.005), SEED (default 1337), SHARD_TOKENS (default 100000000).
# Documents in these files are separated by two blank lines ("\n\n\n"); prepare writes
# <|endoftext|> between documents and splits train/val by document. See docs/corpora.md.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
data="${1:-${ATTNLAB_SHARED_DATA:-$repo/../shared/data}}"
out="${2:-$repo/.data/corpora}"
attnlab="${ATTNLAB:-$repo/build/attnlab}"
threads="${THREADS:-0}"
declare -A val_fraction=([books]="${VAL_FRACTION_BOOKS:-0.03}" [general]="${VAL_FRACTION_GENERAL:-0.005}")
seed="${SEED:-1337}"
shard_tokens="${SHARD_TOKENS:-100000000}"

die() { echo "prepare_corpora.sh: $*" >&2; exit 1; }
[[ -x "$attnlab" ]] || die "no attnlab CLI at '$attnlab' (build it, or set ATTNLAB=<path>)"
[[ -d "$data" ]] || die "shared data dir '$data' not found (pass it as the first argument or set ATTNLAB_SHARED_DATA)"
vocab="$data/gpt2-vocab"
[[ -f "$vocab/encoder.json" && -f "$vocab/vocab.bpe" ]] || die "'$vocab' must hold encoder.json and vocab.bpe"

for corpus in books general; do
  shopt -s nullglob
  files=("$data/corpus/$corpus"/*.txt.xz)
  shopt -u nullglob
  (( ${#files[@]} > 0 )) || die "no $data/corpus/$corpus/*.txt.xz"
  echo "== $corpus: ${#files[@]} files -> $out/$corpus"
  mkdir -p "$out/$corpus"
  "$attnlab" prepare "${files[@]}" --out "$out/$corpus" --tokenizer "gpt2:$vocab" \
    --delimiter '\n\n\n' --val-fraction "${val_fraction[$corpus]}" --seed "$seed" \
    --shard-tokens "$shard_tokens" --threads "$threads" 2>&1 | tee "$out/$corpus/prepare.log"
done
echo "done: $out/{books,general}"
