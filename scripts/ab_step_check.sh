#!/usr/bin/env bash
# A/B check of a refactor on the GPU: builds bench_train and attnlab from an older source tree
# (BASE, e.g. `git archive <commit>` unpacked into an ignored folder and carried to the device)
# beside the current build, then in one call
#   1. times the GPT-2 124M training step with both, interleaved A B A B A B (bench_train, same
#      batch), and prints each run's tok/s and the ratio of the medians (new / old);
#   2. times attention fwd+bwd with both (bench_attention --gpt2 --no-det) and prints the ratios;
#   3. trains a small model with the new trainer and generates from its checkpoint with both
#      binaries (same seed), printing whether the texts are identical.
# The old build is skipped when it is up to date (device_check.sh with BASE_SRC starts it early).
#
#   scripts/ab_step_check.sh BASE_SRC [new-build-dir]     (on a CUDA machine)
# Environment: BATCH (micro-batch, default 64), ROUNDS (step rounds, default 3), ATT_ROUNDS
# (attention rounds, interleaved, default 1), SKIP_GEN=1 (no generation check), OUT (log dir).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BASE="${1:?usage: ab_step_check.sh BASE_SRC [new-build-dir]}"
NEW_BUILD="${2:-$ROOT/build-device}"
LOGS="${OUT:-/tmp/attnlab_ab}/ab"
BATCH="${BATCH:-64}"
ROUNDS="${ROUNDS:-3}"
mkdir -p "$LOGS"
export NCCL_NVLS_ENABLE=0

OLD_BUILD="$BASE/build-device"
cmake -S "$BASE" -B "$OLD_BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DATTNLAB_BUILD_TESTS=OFF >"$LOGS/old_cmake.log" 2>&1 &&
  make -C "$OLD_BUILD" -j16 attnlab bench_train bench_attention >"$LOGS/old_build.log" 2>&1 ||
  { grep -E "error" -A3 "$LOGS/old_build.log" | head -30; echo "old build failed"; exit 1; }
make -C "$NEW_BUILD" -j16 attnlab bench_train bench_attention >"$LOGS/new_build.log" 2>&1 ||
  { grep -E "error" -A3 "$LOGS/new_build.log" | head -30; echo "new build failed"; exit 1; }

tok_s() { sed -n 's/^RESULT bench_train .*tok_s=\([0-9.]*\).*/\1/p' "$1" | head -1; }
old=() new=()
for r in $(seq "$ROUNDS"); do
  "$OLD_BUILD/bench_train" --batch "$BATCH" >"$LOGS/old_$r.log" 2>&1
  old+=("$(tok_s "$LOGS/old_$r.log")")
  "$NEW_BUILD/bench_train" --batch "$BATCH" >"$LOGS/new_$r.log" 2>&1
  new+=("$(tok_s "$LOGS/new_$r.log")")
done
echo "==== GPT-2 124M step, tok/s (bench_train --batch $BATCH), interleaved ===="
echo "old: ${old[*]}"
echo "new: ${new[*]}"
python3 - "${old[*]}" "${new[*]}" <<'PY'
import statistics, sys
o = [float(x) for x in sys.argv[1].split()]
n = [float(x) for x in sys.argv[2].split()]
print(f"median old {statistics.median(o):.0f}, new {statistics.median(n):.0f}, "
      f"new/old {statistics.median(n) / statistics.median(o):.4f}")
PY

echo "==== attention bf16 causal fwd+bwd TFLOP/s, old and new (bench_attention --gpt2 --no-det) ===="
for r in $(seq "${ATT_ROUNDS:-1}"); do
  "$OLD_BUILD/bench_attention" "$LOGS/att_old_$r.csv" --gpt2 --no-det >"$LOGS/att_old_$r.log" 2>&1
  "$NEW_BUILD/bench_attention" "$LOGS/att_new_$r.csv" --gpt2 --no-det >"$LOGS/att_new_$r.log" 2>&1
done
for r in $(seq "${ATT_ROUNDS:-1}"); do
python3 - "$LOGS/att_old_$r.csv" "$LOGS/att_new_$r.csv" "$r" <<'PY'
import csv, sys
old = {(r["D"], r["T"], r["B"]): r for r in csv.DictReader(open(sys.argv[1]))}
new = {(r["D"], r["T"], r["B"]): r for r in csv.DictReader(open(sys.argv[2]))}
print(f"round {sys.argv[3]}")
print(f"{'D':>4} {'T':>6} {'B':>3} {'fwd old':>8} {'fwd new':>8} {'new/old':>7} {'f+b old':>8} {'f+b new':>8} {'new/old':>7}")
for k, n in new.items():
    o = old.get(k)
    if not o:
        continue
    fo, fn = float(o["fwd_tflops"]), float(n["fwd_tflops"])
    bo, bn = float(o["fwdbwd_tflops"]), float(n["fwdbwd_tflops"])
    print(f"{k[0]:>4} {k[1]:>6} {k[2]:>3} {fo:8.1f} {fn:8.1f} {fn/fo:7.3f} {bo:8.1f} {bn:8.1f} {bn/bo:7.3f}")
PY
done
[ "${SKIP_GEN:-0}" = 1 ] && exit 0

echo "==== generation from one checkpoint, old and new binaries (bf16, same seed) ===="
"$NEW_BUILD/attnlab" train "$ROOT/recipes/quickstart.yaml" --set train.device=cuda \
  --set train.steps=300 --set eval.every=0 --set train.out_dir="$LOGS/qs" >"$LOGS/qs_train.log" 2>&1 ||
  { tail -5 "$LOGS/qs_train.log"; exit 1; }
for b in old new; do
  bin="$OLD_BUILD/attnlab"
  [ "$b" = new ] && bin="$NEW_BUILD/attnlab"
  for temp in 0 0.8; do
    "$bin" generate "$LOGS/qs" --prompt "ab" -n 200 --seed 7 --temperature "$temp" --top-k 50 \
      --tokenizer byte 2>/dev/null | sed 's/\[[0-9]* prompt tokens.*//' >"$LOGS/gen_${b}_$temp.txt"
  done
done
for temp in 0 0.8; do
  if cmp -s "$LOGS/gen_old_$temp.txt" "$LOGS/gen_new_$temp.txt"; then
    echo "temperature $temp: identical ($(wc -c <"$LOGS/gen_new_$temp.txt") bytes)"
  else
    echo "temperature $temp: DIFFERENT (first differing byte $(cmp "$LOGS/gen_old_$temp.txt" \
      "$LOGS/gen_new_$temp.txt" | awk '{print $5}'))"
  fi
done
