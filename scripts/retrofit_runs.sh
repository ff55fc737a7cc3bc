#!/usr/bin/env bash
# The retrofit comparison of docs/retrofit.md (issue 16): pretrain a dense model on the general
# corpus, then fine-tune it on the books corpus every way the recipes offer, and score each result
# on books validation, general validation and the zero-shot tasks:
#   pretrained | full fine-tune (dense) | LoRA r 4 | LoRA r 16 | Focus centroid-only K 4 and K 8
#   (evaluated hard and soft) | Focus two-phase (centroids, then every weight)
# with the trainable parameters and the median step time of each run.
#
#   scripts/retrofit_runs.sh BUILD SHARED_DATA    (SHARED_DATA: corpus/general, corpus/books,
#                                                  gpt2-vocab, eval)
# Environment:
#   SCALE      cpu (2 layers x 64, T 128: minutes on 2 cores; a pipeline check, not a result) |
#              small (6 layers x 384, T 1024, GPU) | 124m (GPT-2 small, GPU; the recipes as written)
#   PRE_STEPS  pretraining steps (default 150; 124m: 300 of 131,072 tokens, ~2 epochs of general),
#   FT_STEPS   steps per fine-tune (default 60; the two-phase run does FT_STEPS / 2 + FT_STEPS / 2;
#              124m: 65,536 tokens a step), SEEDS fine-tune seeds (default "1"; train.seed and the
#              data order), LIMIT examples per task (default 200), ZS_SEEDS seeds whose runs also
#              get the zero-shot tasks (default: the first of SEEDS; perplexities for every seed),
#   PRE        an existing pretrained run directory to start from instead of pretraining,
#   DEADLINE   seconds after which no new run or evaluation starts (default: none; the table then
#              says what is missing), OUT log directory.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${1:?usage: retrofit_runs.sh BUILD SHARED_DATA}"
DATA="$(cd "${2:?usage: retrofit_runs.sh BUILD SHARED_DATA}" && pwd)"
LOGS="${OUT:-/tmp/attnlab_retrofit}/retrofit"
W=/tmp/attnlab_retrofit_work
mkdir -p "$LOGS" "$W/runs"
# The table reads every eval_*.json in $LOGS: an earlier call's (a failed or skipped evaluation
# of this one kept it) would enter it as this call's.
rm -f "$LOGS"/eval_*.json
export NCCL_NVLS_ENABLE=0
A="$BUILD/attnlab"
START=$(date +%s)
SEEDS="${SEEDS:-1}"
ZS_SEEDS="${ZS_SEEDS:-${SEEDS%% *}}"
late() {  # true (and says so) once DEADLINE seconds have passed
  [ -n "${DEADLINE:-}" ] && [ $(($(date +%s) - START)) -ge "$DEADLINE" ] &&
    { echo "deadline (${DEADLINE} s) passed: skipping $1"; return 0; }
  return 1
}
case "${SCALE:-cpu}" in
  cpu) S="--set model.n_layer=2 --set model.n_head=2 --set model.n_embd=64 --set train.seq_len=128
          --set train.micro_batch=8 --set train.batch_tokens=2048 --set train.device=cpu
          --set train.precision=fp32 --set attention.focus.local_window=16 --set eval.batches=8" ;;
  small) S="--set model.n_layer=6 --set model.n_head=6 --set model.n_embd=384
            --set train.batch_tokens=65536 --set eval.batches=16" ;;
  124m) S="--set train.batch_tokens=65536"  # fine-tunes; pretraining sets its own batch below
    PRE_SETS="--set train.batch_tokens=131072 --set eval.batches=20"
    PRE_STEPS="${PRE_STEPS:-300}" ;;
  *) echo "SCALE must be cpu, small or 124m, got '$SCALE'"; exit 2 ;;
esac
# Model keys belong to pretraining only: fine-tunes take them from their base.
PRE_STEPS="${PRE_STEPS:-150}"
FT_STEPS="${FT_STEPS:-60}"
MODEL_KEYS=$(echo "$S" | grep -oE -- "--set model\.[^ ]+" | tr '\n' ' ')
FT_KEYS=$(echo "$S" | sed -E 's/--set model\.[^ ]+//g')

for corpus in general books; do
  if [ ! -f "$W/$corpus/.done" ]; then
    "$A" prepare "$DATA/corpus/$corpus/*.txt.xz" --out "$W/$corpus" --tokenizer "gpt2:$DATA/gpt2-vocab" \
      --val-fraction 0.02 --no-progress >"$LOGS/prepare_$corpus.log" 2>&1 ||
      { tail -5 "$LOGS/prepare_$corpus.log"; exit 1; }
    touch "$W/$corpus/.done"
  fi
done
BOOKS="--set data.train=$W/books/train_*.bin --set data.val=$W/books/val_*.bin
  --set data.tokenizer=gpt2:$DATA/gpt2-vocab --set checkpoint.every=0 --set checkpoint.keep_last=1
  --set eval.every=0 --set log.every=10"

run() {  # name recipe sets...: trains into $W/runs/name, logs to $LOGS/train_name.log
  local name=$1 recipe=$2
  shift 2
  late "training $name" && return 1
  rm -rf "$W/runs/$name"
  # shellcheck disable=SC2086
  "$A" train "$ROOT/recipes/$recipe" "$@" --set train.name="$name" --set train.out_dir="$W/runs/$name" \
    >"$LOGS/train_$name.log" 2>&1 || { echo "$name: training failed"; tail -5 "$LOGS/train_$name.log"; return 1; }
  grep -E "^done" "$LOGS/train_$name.log"
}

PRE="${PRE:-}"
if [ -z "$PRE" ]; then
  PRE="$W/runs/pretrained"
  # shellcheck disable=SC2086
  run pretrained gpt2-124m-dense.yaml $S ${PRE_SETS:-} --set data.train="$W/general/train_*.bin" \
    --set data.val="$W/general/val_*.bin" --set data.tokenizer="gpt2:$DATA/gpt2-vocab" \
    --set train.steps="$PRE_STEPS" --set schedule.warmup_steps=$((PRE_STEPS / 10)) \
    --set eval.every=0 --set checkpoint.every=0 --set log.every=10 || exit 1
fi
FT="$BOOKS $FT_KEYS --set train.steps=$FT_STEPS --set schedule.warmup_steps=$((FT_STEPS / 10))"
H=$((FT_STEPS / 2))
HALF="$BOOKS $FT_KEYS --set train.steps=$H --set schedule.warmup_steps=$((H / 10))"
# Every model on the same data: books validation (the fine-tunes' recipe), general validation
# (shards), the zero-shot tasks; Focus models also under the soft gate. A fine-tune's own recipe
# holds the books validation set; the pretrained model is scored on it through the first full
# fine-tune's recipe (same architecture). Each seed's runs are scored right after they train, so a
# deadline leaves whole seeds behind.
evaluate() {  # name model zero_shot(0|1) extra...
  local name=$1 model=$2 zs=$3
  shift 3
  late "evaluating $name" && return 1
  local tasks=()
  [ "$zs" = 1 ] && tasks=(--task-dir "$DATA/eval" --limit "${LIMIT:-200}")
  "$A" eval "$model" --validation --shards "$W/general/val_*.bin" "${tasks[@]}" --no-progress "$@" \
    --out "$LOGS/eval_$name.json" >"$LOGS/eval_$name.log" 2>&1 ||
    { echo "$name: eval failed"; tail -3 "$LOGS/eval_$name.log"; }
}
first=${SEEDS%% *}
for seed in $SEEDS; do
  SEED="--set train.seed=$seed --set data.seed=$((1336 + seed))"
  # shellcheck disable=SC2086
  {
    run full-ft-s$seed finetune-dense-books.yaml $FT $SEED --set train.init_from="$PRE"
    run lora-r4-s$seed lora-books.yaml $FT $SEED --set retrofit.checkpoint="$PRE"
    run lora-r16-s$seed lora-books.yaml $FT $SEED --set retrofit.checkpoint="$PRE" \
      --set retrofit.lora.rank=16
    run focus-k4-s$seed retrofit-focus-books.yaml $FT $SEED --set retrofit.checkpoint="$PRE" \
      --set attention.focus.groups=4
    run focus-k8-s$seed retrofit-focus-books.yaml $FT $SEED --set retrofit.checkpoint="$PRE"
    run two-phase-1-s$seed focus-two-phase-books-1.yaml $HALF $SEED --set retrofit.checkpoint="$PRE" &&
      run two-phase-s$seed focus-two-phase-books-2.yaml $HALF $SEED \
        --set train.init_from="$W/runs/two-phase-1-s$seed"
  }
  [ "$seed" = "$first" ] && evaluate pretrained "$PRE" 1 --recipe "$W/runs/full-ft-s$first/recipe.yaml"
  zs=0
  [[ " $ZS_SEEDS " == *" $seed "* ]] && zs=1
  for r in full-ft lora-r4 lora-r16 focus-k4 focus-k8 two-phase; do
    [ -d "$W/runs/$r-s$seed" ] || continue
    evaluate "$r-s$seed" "$W/runs/$r-s$seed" $zs
    [[ $r == focus* || $r == two-phase ]] &&
      evaluate "$r-soft-s$seed" "$W/runs/$r-s$seed" $zs --set attention.focus.eval_routing=soft
  done
done

python3 - "$LOGS" "$W/runs" <<'PY'
import glob, json, math, os, re, statistics as st, sys
logs, runs = sys.argv[1:]
def trainable(name):
    p = os.path.join(logs, f"train_{name}.log")
    if not os.path.exists(p): return "-"
    m = re.search(r"\(([\d.]+[KMB]?) trainable\)", open(p).read())
    return m.group(1) if m else "-"
def step_ms(name):
    p = os.path.join(runs, name, "metrics.jsonl")
    if not os.path.exists(p): return None
    ms = [json.loads(l)["ms_per_step"] for l in open(p) if '"ms_per_step"' in l]
    return st.median(ms[1:] or ms) if ms else None
def ms(xs, f="{:.2f}"):
    xs = [x for x in xs if x is not None and not math.isnan(x)]
    if not xs: return "-"
    if len(xs) == 1: return f.format(xs[0])
    return (f + " ± " + f).format(st.mean(xs), st.stdev(xs)) + f" (n={len(xs)})"
tasks = ["piqa", "arc_easy", "arc_challenge", "winogrande", "lambada_openai"]
rows = {}
for path in sorted(glob.glob(os.path.join(logs, "eval_*.json")), key=os.path.getmtime):
    name = os.path.basename(path)[5:-5]
    j = json.load(open(path))
    m = re.fullmatch(r"(.*?)(?:-s(\d+))?", name)
    model, seed = m.group(1), m.group(2)
    r = rows.setdefault(model, {"books": [], "general": [], "ms": [], "train": None,
                                **{t: [] for t in tasks}})
    r["books"].append(j.get("validation", {}).get("perplexity"))
    r["general"].append(j.get("perplexity", {}).get("shards", {}).get("perplexity"))
    for t in tasks:
        a = j.get("tasks", {}).get(t, {}).get("acc")
        if a is not None: r[t].append(a)
    run = model.removesuffix("-soft") + (f"-s{seed}" if seed else "")
    r["ms"].append(step_ms(run))
    r["train"] = trainable(run)
print("==== retrofit comparison (books = fine-tuning domain; general = pretraining domain) ====")
print("mean ± sample std over fine-tune seeds; zero-shot accuracies from the seeds in ZS_SEEDS")
print("| model | books ppl | general ppl | " + " | ".join(tasks) + " | trainable | ms/step |")
print("|---|---|---|" + "---|" * len(tasks) + "---|---|")
for model, r in rows.items():
    print(f"| {model} | {ms(r['books'])} | {ms(r['general'])} | "
          + " | ".join(ms(r[t], "{:.3f}") for t in tasks)
          + f" | {r['train'] or '-'} | {ms(r['ms'], '{:.1f}')} |")
PY
