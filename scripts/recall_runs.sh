#!/usr/bin/env bash
# Retrieval on the synthetic associative-recall data (docs/eval.md "Synthetic retrieval",
# docs/results.md): train dense, SFA (k 8) and Focus (soft gate in training) from scratch on the
# built-in synthetic stream at T = 1024 with the same data, tokens and seeds, then evaluate every
# final checkpoint on the same validation windows (Focus under its default hard routing and under
# the soft gate). Prints one row per run and evaluation, then mean ± sample std over seeds:
# validation loss, recall accuracy by the distance back to the answer's nearest earlier
# occurrence (< 128, 128-512, >= 512, outside the window) and copied accuracy (visible sources).
#
#   scripts/recall_runs.sh BUILD
# Environment:
#   SCALE     gpu (default: 6 layers x 384, 6 heads of 64, bf16 on cuda) | cpu (a pipeline check:
#             2 layers x 64, fp32, a few steps; its numbers mean nothing)
#   VARIANTS  space-separated names from the table below (default: "dense sfa focus")
#   SEEDS     (default "1 2 3"), STEPS (gpu default 230: 230 x 131072 = 30M tokens, ~20 s a run
#             at ~1.5M tok/s on an H200), BATCH_TOKENS (gpu default 131072), SFA_K (default 8),
#   VAL_TOKENS (gpu default 524289: 512 windows), OUT (log dir), EXTRA (more --set arguments)
#   RECALL_MIX  the synthetic stream (docs/data.md "Retrieval-heavy settings"):
#             recall (default): BIND/QUERY segments only, 32 keys and 32 disjoint values, documents
#               of 24-48 tokens: recall targets are ~8% of the tokens; a 2-layer CPU model learns
#               it within 3,000 steps (docs/results.md). Every binding is < 128 tokens back, so this
#               ranks the variants on learning recall, not on reaching beyond Focus's local window;
#             recall-long: the same with documents of 128-1024 tokens (bindings at every distance
#               bucket; not yet shown to be learnable in the budget);
#             off: the default stream of recipes/quickstart.yaml (at chance at 30M tokens, H200)
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${1:?usage: recall_runs.sh BUILD}"
LOGS="${OUT:-/tmp/attnlab_recall}/recall"
WORK="${WORK:-/tmp/attnlab_recall_work}"
mkdir -p "$LOGS" "$WORK"
export NCCL_NVLS_ENABLE=0
A="$BUILD/attnlab"
T=1024
case "${SCALE:-gpu}" in
  gpu)
    STEPS="${STEPS:-230}"; BT="${BATCH_TOKENS:-131072}"; MB=32; VAL="${VAL_TOKENS:-524289}"
    SIZE="--set model.n_layer=6 --set model.n_head=6 --set model.n_embd=384
      --set train.device=cuda --set train.precision=bf16 --set optim.lr=1.0e-3"
    ;;
  cpu)
    STEPS="${STEPS:-6}"; BT="${BATCH_TOKENS:-2048}"; MB=2; VAL="${VAL_TOKENS:-4097}"
    SIZE="--set model.n_layer=2 --set model.n_head=2 --set model.n_embd=64
      --set train.device=cpu --set train.precision=fp32"
    ;;
  *) echo "SCALE must be gpu or cpu, got '$SCALE'"; exit 2 ;;
esac
RECALL_KEYS="--set data.synthetic.mix.markov=0 --set data.synthetic.mix.bind=1
  --set data.synthetic.mix.query=1 --set data.synthetic.mix.copy=0 --set data.synthetic.keys=32
  --set data.synthetic.values=32"
case "${RECALL_MIX:-recall}" in
  recall) STREAM="$RECALL_KEYS --set data.synthetic.doc_min_tokens=24 --set data.synthetic.doc_max_tokens=48" ;;
  recall-long) STREAM="$RECALL_KEYS --set data.synthetic.doc_min_tokens=128 --set data.synthetic.doc_max_tokens=1024" ;;
  off) STREAM="" ;;
  *) echo "RECALL_MIX must be recall, recall-long or off, got '$RECALL_MIX'"; exit 2 ;;
esac
EVAL_BATCHES=$(( (VAL - 1) / T / MB )); [ "$EVAL_BATCHES" -ge 1 ] || EVAL_BATCHES=1
declare -A SETS=(
  [dense]=""
  [sfa]="--set attention.type=sfa --set attention.sfa.k=${SFA_K:-8}"
  [focus]="--set attention.type=focus"
)
# One epoch of fresh training documents; validation documents are an independent stream.
COMMON="$SIZE --set model.block_size=$T --set train.seq_len=$T --set train.micro_batch=$MB
  --set train.batch_tokens=$BT --set train.steps=$STEPS --set schedule.warmup_steps=$((STEPS / 10 + 1))
  --set data.synthetic.train_tokens=$((STEPS * BT + T + 1)) --set data.synthetic.val_tokens=$VAL
  --set eval.every=0 --set eval.batches=$EVAL_BATCHES --set checkpoint.every=0
  --set checkpoint.keep_last=1 --set log.every=10 $STREAM ${EXTRA:-}"
RESULTS="$LOGS/results.jsonl"
: >"$RESULTS"
for variant in ${VARIANTS:-dense sfa focus}; do
  [ -n "${SETS[$variant]+x}" ] || { echo "unknown variant '$variant' (valid: ${!SETS[*]})"; exit 2; }
  for seed in ${SEEDS:-1 2 3}; do
    name="$variant-s$seed"
    run="$WORK/runs/$name"
    rm -rf "$run"
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    "$A" train "$ROOT/recipes/quickstart.yaml" $COMMON ${SETS[$variant]} --set train.seed="$seed" \
      --set train.name="$name" --set train.out_dir="$run" >"$LOGS/train_$name.log" 2>&1 ||
      { echo "$name: training failed"; tail -5 "$LOGS/train_$name.log"; continue; }
    wall=$(python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$t0" "$(date +%s.%N)")
    evals=("default")
    [ "$variant" = focus ] && evals=("hard" "soft")
    for e in "${evals[@]}"; do
      set_eval=()
      [ "$variant" = focus ] && set_eval=(--set "attention.focus.eval_routing=$e")
      json="$LOGS/eval_$name-$e.json"
      "$A" eval "$run" --no-progress "${set_eval[@]}" --out "$json" >"$LOGS/eval_$name-$e.log" 2>&1 ||
        { echo "$name ($e): eval failed"; tail -3 "$LOGS/eval_$name-$e.log"; continue; }
      python3 - "$json" "$variant" "$e" "$seed" "$wall" >>"$RESULTS" <<'PY'
import json, sys
path, variant, mode, seed, wall = sys.argv[1:]
v = json.load(open(path))["validation"]
s = v["synthetic"]
row = {"variant": variant if mode == "default" else f"{variant}/{mode}", "seed": int(seed),
       "val_loss": v["loss"], "wall_s": float(wall), "recall": s["recall"]["acc"],
       "recall_n": s["recall"]["count"], "copied": s["copied"]["acc"], "copied_n": s["copied"]["count"]}
for b, r in s["recall_by_distance"].items():
    row["recall_" + b] = r["acc"] if r["count"] else None
    row["recall_" + b + "_n"] = r["count"]
print(json.dumps(row))
PY
    done
  done
done

python3 - "$RESULTS" <<'PY'
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1])]
cols = [("val loss", "val_loss"), ("recall", "recall"), ("<128", "recall_lt128"),
        ("128-512", "recall_128to512"), (">=512", "recall_ge512"), ("outside", "recall_outside"),
        ("copied", "copied")]
def f(x): return "-" if x is None else f"{x:.4f}"
def ms(xs):
    n_all = len(xs)
    xs = [x for x in xs if x is not None]
    if not xs: return "-"
    # A seed without a value (an empty distance bucket) is left out of the mean: said by its n.
    n = "" if len(xs) == n_all else f" n={len(xs)}"
    if len(xs) == 1: return f"{xs[0]:.4f}{n}"
    return f"{st.mean(xs):.4f}±{st.stdev(xs):.4f}{n}"
head = f"{'variant':14} {'seed':>4} " + " ".join(f"{c:>15}" for c, _ in cols)
print("==== synthetic retrieval: validation loss and top-1 accuracy (recall by distance to the nearest earlier occurrence of the answer) ====")
print(head)
for r in rows:
    print(f"{r['variant']:14} {r['seed']:>4} " + " ".join(f"{f(r.get(k)):>15}" for _, k in cols))
if rows:
    r0 = rows[0]
    print(f"(targets per run: recall {r0['recall_n']} = <128 {r0['recall_lt128_n']} + 128-512 "
          f"{r0['recall_128to512_n']} + >=512 {r0['recall_ge512_n']} + outside {r0['recall_outside_n']}; "
          f"copied {r0['copied_n']})")
print("==== mean ± sample std over seeds ====")
print(f"{'variant':14} {'n':>4} " + " ".join(f"{c:>15}" for c, _ in cols))
for v in dict.fromkeys(r["variant"] for r in rows):
    rs = [r for r in rows if r["variant"] == v]
    print(f"{v:14} {len(rs):>4} " + " ".join(f"{ms([r.get(k) for r in rs]):>15}" for _, k in cols))
PY
