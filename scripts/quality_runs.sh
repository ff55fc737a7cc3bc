#!/usr/bin/env bash
# The quality comparison of docs/results.md in one GPU call: prepare the shared general corpus,
# train each variant from scratch with the same data, tokens and seeds (train.seed = the seed: the
# initialisation; the data order is data.seed, the same for every run), then evaluate every run's
# final checkpoint on the same validation windows; Focus runs also under hard routing at top_k 1, 2
# and K and under the soft gate. Prints one row per run and a mean / spread table per variant.
#
#   scripts/quality_runs.sh BUILD SHARED_DATA     (SHARED_DATA: corpus/general, gpt2-vocab)
# Environment:
#   VARIANTS  space-separated names from the table below (default: "dense focus sfa")
#   SEEDS     (default "1 2 3"), STEPS (default 150), BATCH_TOKENS (default 131072),
#   MODEL     small (6 layers x 384, 6 heads of 64: the default) | 124m (GPT-2 small)
#   EVAL_BATCHES (default 40), OUT (log dir), EXTRA (more --set arguments for every run),
#   FOCUS_EVALS=0 (skip the extra top_k / soft evaluations of Focus runs),
#   ZERO_SHOT=1 (also score every run on the zero-shot tasks of SHARED_DATA/eval, LIMIT examples
#   per task, default 500; the accuracies land in the row's "tasks"),
#   DISTILL_STEPS (default STEPS / 3) and DISTILL_LAMBDA (default 0.09375: docs/results.md's
#   lambda 1.0 under the term's weighting before 2026-12-06, n_layer / head_dim = 6 / 64 at
#   MODEL=small; 12 / 64 = 0.1875 would match it at MODEL=124m) for the variant
#   sfa-distill: the same seed's dense run (list dense before it) fine-tuned into SFA with the
#   distillation term (attention.sfa.distill); its first evaluation (eval.at_start) is the dense
#   weights under SFA before any fine-tuning, its "val_curve" the loss after.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${1:?usage: quality_runs.sh BUILD SHARED_DATA}"
DATA="$(cd "${2:?usage: quality_runs.sh BUILD SHARED_DATA}" && pwd)"
LOGS="${OUT:-/tmp/attnlab_quality}/quality"
WORK=/tmp/attnlab_quality_work
mkdir -p "$LOGS" "$WORK"
export NCCL_NVLS_ENABLE=0
A="$BUILD/attnlab"
STEPS="${STEPS:-150}"
FOCUS="--set attention.type=focus"
declare -A SETS=(
  [dense]=""
  [focus]="$FOCUS"
  [focus-seq]="$FOCUS --set attention.focus.sinkhorn_scope=sequence"
  [focus-mult]="$FOCUS --set attention.focus.gate=multiplicative"
  [focus-hardtrain]="$FOCUS --set attention.focus.route_training=hard"
  [focus-k4]="$FOCUS --set attention.focus.groups=4"
  [sfa]="--set attention.type=sfa"
  # 0.09375 = 6 / 64: docs/results.md's lambda 1.0 of the term's earlier weighting at MODEL=small
  [sfa-distill]="--set attention.type=sfa --set attention.sfa.distill=${DISTILL_LAMBDA:-0.09375}"
  # The LLaMA block (docs/llama.md) with dense attention: RMSNorm, SwiGLU (LLaMA's width rule,
  # the GPT-2 MLP's parameter count), RoPE, no biases; the head stays tied (the base recipe's), so
  # the parameters are GPT-2's less the position table and the biases.
  [llama]="--set model.norm=rmsnorm --set model.mlp=swiglu --set model.position=rope --set model.bias=false"
)
case "${MODEL:-small}" in
  small) MODEL_SETS="--set model.n_layer=6 --set model.n_head=6 --set model.n_embd=384" ;;
  124m) MODEL_SETS="" ;;
  *) echo "MODEL must be small or 124m, got '$MODEL'"; exit 2 ;;
esac

if [ ! -f "$WORK/general/.done" ]; then
  "$A" prepare "$DATA/corpus/general/*.txt.xz" --out "$WORK/general" --tokenizer "gpt2:$DATA/gpt2-vocab" \
    --val-fraction 0.02 --no-progress >"$LOGS/prepare.log" 2>&1 || { tail -5 "$LOGS/prepare.log"; exit 1; }
  touch "$WORK/general/.done"
fi
tail -1 "$LOGS/prepare.log"

COMMON="--set data.train=$WORK/general/train_*.bin --set data.val=$WORK/general/val_*.bin
  --set data.tokenizer=gpt2:$DATA/gpt2-vocab --set train.steps=$STEPS
  --set schedule.warmup_steps=$((STEPS / 10)) --set train.batch_tokens=${BATCH_TOKENS:-131072}
  --set train.micro_batch=32 --set eval.every=$((STEPS / 3)) --set eval.batches=${EVAL_BATCHES:-40}
  --set checkpoint.every=0 --set checkpoint.keep_last=1 --set log.every=10 $MODEL_SETS ${EXTRA:-}"
RESULTS="$LOGS/results.jsonl"
: >"$RESULTS"
# The runs this call trained, per variant (comma-separated): the plots take these only, not the
# other runs in $WORK (an earlier call's, of other STEPS or MODEL, or this call's failed ones).
declare -A TRAINED=()
for variant in ${VARIANTS:-dense focus sfa}; do
  [ -n "${SETS[$variant]+x}" ] || { echo "unknown variant '$variant' (valid: ${!SETS[*]})"; exit 2; }
  for seed in ${SEEDS:-1 2 3}; do
    run="$WORK/runs/$variant-s$seed"
    rm -rf "$run"
    t0=$(date +%s.%N)
    run_sets=""
    if [ "$variant" = sfa-distill ]; then
      # This call's dense run of the seed (a stale one in $WORK may be of other settings).
      [[ ",${TRAINED[dense]:-}," == *",$WORK/runs/dense-s$seed,"* ]] ||
        { echo "sfa-distill seed $seed: needs dense-s$seed trained in this call first"; continue; }
      ds=${DISTILL_STEPS:-$((STEPS / 3))}
      run_sets="--set train.init_from=$WORK/runs/dense-s$seed --set train.steps=$ds
        --set schedule.warmup_steps=$((ds / 10)) --set eval.every=$((ds / 2)) --set eval.at_start=true"
    fi
    # shellcheck disable=SC2086
    "$A" train "$ROOT/recipes/gpt2-124m-dense.yaml" $COMMON ${SETS[$variant]} $run_sets --set train.seed="$seed" \
      --set train.name="$variant-s$seed" --set train.out_dir="$run" >"$LOGS/train_$variant-s$seed.log" 2>&1 ||
      { echo "$variant seed $seed: training failed"; tail -5 "$LOGS/train_$variant-s$seed.log"; continue; }
    t1=$(date +%s.%N)
    TRAINED[$variant]="${TRAINED[$variant]:+${TRAINED[$variant]},}$run"
    extra_evals=()
    if [[ "$variant" == focus* ]]; then
      groups=$(grep -oP 'groups: \K[0-9]+' "$run/recipe.yaml" | head -1)
      # top_k 2 (the recipe's) is the training run's own final evaluation.
      extra_evals=("top_k=1" "top_k=$groups" "eval_routing=soft")
      [ "${FOCUS_EVALS:-1}" = 0 ] && extra_evals=()
    fi
    evals="{}"
    for e in "${extra_evals[@]}"; do
      "$A" eval "$run" --no-progress --set "attention.focus.$e" --out "$LOGS/eval_$variant-s$seed-$e.json" \
        >"$LOGS/eval_$variant-s$seed-$e.log" 2>&1 || { tail -3 "$LOGS/eval_$variant-s$seed-$e.log"; continue; }
      evals=$(python3 -c "import json,sys; d=json.loads(sys.argv[1]); d[sys.argv[2]]=json.load(open(sys.argv[3]))['validation']['loss']; print(json.dumps(d))" \
        "$evals" "$e" "$LOGS/eval_$variant-s$seed-$e.json")
    done
    tasks_json=""
    if [ "${ZERO_SHOT:-0}" = 1 ]; then
      tasks_json="$LOGS/tasks_$variant-s$seed.json"
      "$A" eval "$run" --no-progress --task-dir "$DATA/eval" --limit "${LIMIT:-500}" --out "$tasks_json" \
        >"$LOGS/tasks_$variant-s$seed.log" 2>&1 || { tail -3 "$LOGS/tasks_$variant-s$seed.log"; tasks_json=""; }
    fi
    python3 - "$run/metrics.jsonl" "$variant" "$seed" "$t0" "$t1" "$evals" "$tasks_json" >>"$RESULTS" <<'PY'
import json, sys
path, variant, seed, t0, t1, evals, tasks_json = sys.argv[1:]
rows = [json.loads(l) for l in open(path)]
val = [r for r in rows if "val_loss" in r]
steps = [r for r in rows if "tok_per_s" in r]
last = val[-1]
dom = {k: v for k, v in last.items() if k.endswith(".dominance")}
out = {"variant": variant, "seed": int(seed), "val_loss": last["val_loss"],
       "val_loss_soft": last.get("val_loss_soft"), "val_curve": [(r["step"], r["val_loss"]) for r in val],
       "tok_per_s": sorted(r["tok_per_s"] for r in steps)[len(steps) // 2] if steps else None,
       "tokens": steps[-1]["tokens"] if steps else None, "wall_s": float(t1) - float(t0),
       "max_dominance": max(dom.values()) if dom else None,
       "dominance_curve": [(r["step"], max(v for k, v in r.items() if k.endswith(".dominance")))
                           for r in val if any(k.endswith(".dominance") for k in r)],
       "evals": json.loads(evals),
       "tasks": ({t: v["acc"] for t, v in json.load(open(tasks_json)).get("tasks", {}).items()}
                 if tasks_json else {})}
print(json.dumps(out))
nan = float("nan")
print(f"{variant:16} seed {seed} val {out['val_loss']:.4f} soft {out['val_loss_soft'] or nan:.4f} "
      f"tok/s {out['tok_per_s'] or 0:,.0f} wall {out['wall_s']:.0f} s max dominance "
      f"{out['max_dominance'] or nan:.3f} {out['evals']}", file=sys.stderr)
PY
  done
done

python3 - "$RESULTS" <<'PY'
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1])]
def ms(xs):
    xs = [x for x in xs if x is not None]
    if not xs: return "-"
    if len(xs) == 1: return f"{xs[0]:.4f}"
    return f"{st.mean(xs):.4f} ± {st.stdev(xs):.4f} (n={len(xs)}, range {max(xs) - min(xs):.4f})"
print("==== validation loss by variant: mean ± sample std over seeds ====")
for v in dict.fromkeys(r["variant"] for r in rows):
    rs = [r for r in rows if r["variant"] == v]
    print(f"{v:16} val {ms([r['val_loss'] for r in rs])}")
    if any(r["val_loss_soft"] is not None for r in rs):
        print(f"{'':16} soft gate {ms([r['val_loss_soft'] for r in rs])}")
    for k in dict.fromkeys(k for r in rs for k in r["evals"]):
        print(f"{'':16} {k:18} {ms([r['evals'].get(k) for r in rs])}")
    for t in dict.fromkeys(t for r in rs for t in r.get("tasks", {})):
        print(f"{'':16} {t:18} acc {ms([r['tasks'].get(t) for r in rs])}")
    if v == "sfa-distill":
        print(f"{'':16} before fine-tuning {ms([r['val_curve'][0][1] for r in rs])}")
    print(f"{'':16} tok/s {st.mean(r['tok_per_s'] for r in rs if r['tok_per_s']):,.0f}  "
          f"tokens {rs[0]['tokens']:,}  max dominance {ms([r['max_dominance'] for r in rs])}")
PY

# Curves (mean and min-max band over the seeds) as SVG beside the logs: docs/results.md.
plot_args=()
for variant in ${VARIANTS:-dense focus sfa}; do
  [ -n "${TRAINED[$variant]:-}" ] && plot_args+=("$variant=${TRAINED[$variant]}")
done
[ ${#plot_args[@]} -gt 0 ] && python3 "$ROOT/scripts/plot_runs.py" "$LOGS/plots" "${plot_args[@]}" \
  --title "MODEL=${MODEL:-small}"
