#!/usr/bin/env bash
# The LLaMA block's training step against its peers, in one call (docs/llama.md): bench_train of
# recipes/gpt2-124m-dense.yaml and llama-124m-dense.yaml (B 64 x 1024) and of
# llama3.2-1b-dense.yaml (T 2048), each LLaMA shape beside the PyTorch peer of the same shape
# (scripts/bench/torch_train_peer.py, eager and torch.compile, at the micro-batch bench_train
# took), then a table of tok/s and ratios.
#   scripts/llama_step_check.sh [build_dir]     (GPU host; PEER_MODES, STEPS, SKIP_SMALL=1 (no
#   124M shapes), SKIP_1B=1, LONG=1, LONG_PEER=0 (no PyTorch peer at the long context), BIG=1
#   (Mistral 7B's shape: needs an H200's memory), BIG_T, BENCH_TIMEOUT / PEER_TIMEOUT (s))
# Logs go to $OUT (the device tool's folder) or /tmp/attnlab_device.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD=$(cd "${1:-build-device}" && pwd) || exit 1
LOGS=${OUT:-/tmp/attnlab_device}
STEPS=${STEPS:-10}
mkdir -p "$LOGS"
rm -f "$LOGS"/step_*.log "$LOGS"/peer_*.log  # an earlier call's logs are not this one's
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1

val() { sed -n "s/^RESULT $1.*$2=\([0-9.]*\).*/\1/p" "$3" | head -1; }
ratio() { python3 -c "import sys; a,b=sys.argv[1:]; print(f'{float(a)/float(b):.3f}x' if a and b else 'n/a')" "${1:-}" "${2:-}"; }
rows=()
row() {  # one table row: kept for the table, and printed at once (a timed-out call keeps it)
  rows+=("$1")
  echo "ROW $1"
}

# name recipe batches seq peer_args...
run_shape() {
  local name=$1 recipe=$2 batches=$3 seq=$4
  shift 4
  local log="$LOGS/step_$name.log" peer="$LOGS/peer_$name.log"
  timeout "${BENCH_TIMEOUT:-300}" "$BUILD/bench_train" --recipe "$ROOT/recipes/$recipe" \
    --batch "$batches" --seq "$seq" --steps "$STEPS" --warmup 3 >"$log" 2>&1
  local mb ours
  mb=$(sed -n 's/^RESULT bench_train mb=\([0-9]*\).*/\1/p' "$log" | head -1)
  ours=$(val bench_train tok_s "$log")
  row "$(printf '%-14s %4s %12s %9s' "$name" "${mb:-?}" "${ours:-n/a}" "$(val bench_train mem_gib "$log")")"
  [ $# -eq 0 ] && return
  timeout "${PEER_TIMEOUT:-420}" python3 "$ROOT/scripts/bench/torch_train_peer.py" --batch "${mb:-8}" --seq "$seq" \
    --steps "$STEPS" --modes "${PEER_MODES:-eager,compile}" "$@" >"$peer" 2>&1
  local m t
  for m in eager compile; do
    t=$(val "torch_peer mode=$m" tok_s "$peer")
    [ -n "$t" ] && row "$(printf '%-14s %4s %12s %9s   attnlab / this: %s' "  torch $m" "$mb" "$t" \
      "$(val "torch_peer mode=$m" mem_gib "$peer")" "$(ratio "$ours" "$t")")"
    grep -q "^RESULT torch_peer mode=$m .*oom=1" "$peer" &&
      row "$(printf '%-14s %4s %12s' "  torch $m" "$mb" "out of memory")"
  done
}

nvidia-smi --query-gpu=name --format=csv,noheader
if [ "${SKIP_SMALL:-0}" != 1 ]; then
  run_shape gpt2-124m gpt2-124m-dense.yaml 64,32 1024
  run_shape llama-124m llama-124m-dense.yaml 64,32 1024 --model llama
fi
[ "${SKIP_1B:-0}" = 1 ] || run_shape llama3.2-1b llama3.2-1b-dense.yaml 16,8,4 2048 --model llama \
  --layers 16 --embd 2048 --heads 32 --kv-heads 8 --ffn 8192 --vocab 128256 --rope-theta 500000
# Long context (LONG=1): the 1B shape at T = LONG_T (16384) and B 1, dense beside Focus (soft gate,
# and hard routing with the straight-through gate) and the PyTorch peer (dense, torch.compile).
if [ "${LONG:-0}" = 1 ]; then
  LT=${LONG_T:-16384}
  peer=(--model llama --modes compile --layers 16 --embd 2048 --heads 32 --kv-heads 8 --ffn 8192
    --vocab 128256 --rope-theta 500000)
  [ "${LONG_PEER:-1}" = 1 ] || peer=()
  run_shape "1b-${LT}-dense" llama3.2-1b-dense.yaml 1 "$LT" "${peer[@]}"
  dense_long=$(val bench_train tok_s "$LOGS/step_1b-${LT}-dense.log")
  for v in focus focus-hard; do
    sets=(--set attention.type=focus)
    [ $v = focus-hard ] && sets+=(--set attention.focus.route_training=hard)
    log="$LOGS/step_1b-${LT}-$v.log"
    timeout "${BENCH_TIMEOUT:-300}" "$BUILD/bench_train" --recipe "$ROOT/recipes/llama3.2-1b-dense.yaml" --batch 1 \
      --seq "$LT" --steps "$STEPS" --warmup 3 "${sets[@]}" >"$log" 2>&1
    t=$(val bench_train tok_s "$log")
    row "$(printf '%-14s %4s %12s %9s   / dense: %s' "  $v" 1 "${t:-n/a}" \
      "$(val bench_train mem_gib "$log")" "$(ratio "$t" "$dense_long")")"
  done
fi

# 7B on one GPU (BIG=1; an H200's 139 GiB, random weights): at each BIG_T the Focus retrofit
# (centroids train, the base frozen) beside a LoRA (r 16 on the q/k/v projection, dense attention)
# of the same base, then Mistral 7B's shape fully fine-tuned at 4096 beside the PyTorch peer (the
# retrofits first: a call cut short by its time limit keeps their ratio).
if [ "${BIG:-0}" = 1 ]; then
  for BT in ${BIG_T:-16384 32768}; do
    lora_t=""
    for v in lora focus; do
      sets=()
      [ $v = lora ] && sets=(--set attention.type=dense --set "retrofit.train_roles=[adapter]"
        --set retrofit.lora.rank=16)
      log="$LOGS/step_7b-${BT}-$v.log"
      timeout "${BENCH_TIMEOUT:-300}" "$BUILD/bench_train" --recipe "$ROOT/recipes/retrofit-focus-mistral-7b.yaml" \
        --batch 1 --seq "$BT" --steps "$STEPS" --warmup 3 "${sets[@]}" >"$log" 2>&1
      t=$(val bench_train tok_s "$log")
      [ $v = lora ] && lora_t=$t
      row "$(printf '%-14s %4s %12s %9s   / lora: %s' "7b-$BT-$v" 1 "${t:-n/a}" \
        "$(val bench_train mem_gib "$log")" "$(ratio "$t" "$lora_t")")"
    done
  done
  run_shape mistral-7b-ft finetune-mistral-7b.yaml 1 4096 --model llama --layers 32 --embd 4096 \
    --heads 32 --kv-heads 8 --ffn 14336 --vocab 32768 --untied --rope-theta 1e6
  grep -H "^RESULT\|^ *mfu\|MFU" "$LOGS"/step_mistral-7b-ft.log "$LOGS"/step_7b-*.log
fi

echo "==== LLaMA step (tok/s; attnlab memory in use, torch peak) ===="
printf '%-14s %4s %12s %9s\n' shape mb tok/s GiB
printf '%s\n' "${rows[@]}"
for f in "$LOGS"/step_*.log "$LOGS"/peer_*.log; do
  [ -f "$f" ] || continue
  grep -qE "^RESULT" "$f" || { echo "--- $f (no result):"; tail -5 "$f"; }
done
