#!/usr/bin/env bash
# Where `attnlab prepare`'s thread scaling goes: for each thread count, the wall, user and system
# time of one run and its summary's time line; then the machine's own ceiling, N separate
# single-threaded prepare processes on the same file at once (no shared state: what N threads in
# one process could at best reach on this host).
#   ATTNLAB_SHARED_DATA=... bash scripts/prepare_scaling.sh ATTNLAB_BINARY [MB] [THREADS...]
# MB (default 150): megabytes of text cut from the shared corpus (scripts/bench_tokenizer.py).
# PROCS=0 skips the N-process runs.
set -euo pipefail
EXE=$(realpath "$1")
MB=${2:-150}
shift $(($# >= 2 ? 2 : $#))
THREADS=${*:-1 2 4 8 16}
: "${ATTNLAB_SHARED_DATA:?set ATTNLAB_SHARED_DATA to the shared data folder}"
V=$ATTNLAB_SHARED_DATA/gpt2-vocab
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$(dirname "$0")"
python3 -c "import sys; import bench_tokenizer as bt, tokenizer_exactness as te; \
t = bt.corpus_text(te.shared_data_dir(), 40_000_000); n = max(1, round($MB * 1e6 / len(t))); \
open('$TMP/t.txt', 'wb').write(t * n)"
echo "text: $(stat -c %s "$TMP/t.txt") bytes; $(nproc) CPUs; $(date -u +%F)"
run() { "$EXE" prepare "$TMP/t.txt" --out "$1" --tokenizer "gpt2:$V" --delimiter '\n\n\n' --threads "$2" --no-progress; }
echo "tiny input (start-up: process, vocabulary, tokenizer.json):"
printf 'hello world\n' >"$TMP/tiny.txt"
TIMEFORMAT="  wall %R s, user %U s, sys %S s"
time "$EXE" prepare "$TMP/tiny.txt" --out "$TMP/o" --tokenizer "gpt2:$V" --threads 1 --no-progress >/dev/null 2>&1
for t in $THREADS; do
  echo "threads $t:"
  time run "$TMP/o" "$t" 2>&1 | grep -E "time:" | sed 's/^ */  /'
done
[ "${PROCS:-1}" = 0 ] && exit 0
for n in $THREADS; do
  echo "$n processes x 1 thread:"
  time { for i in $(seq "$n"); do run "$TMP/o$i" 1 >/dev/null 2>&1 & done; wait; }
  rm -rf "$TMP"/o[0-9]*
done
