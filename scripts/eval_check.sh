#!/usr/bin/env bash
# The measured table of docs/eval.md, in one GPU call: prepare the shared general corpus, train
# GPT-2 124M on it for STEPS steps (the gpt2-124m-dense recipe), then score the five zero-shot task
# files and a text perplexity with `attnlab eval` (bf16 and fp32), export the model with
# `attnlab convert --to hf` and score the same task files with a plain Hugging Face transformers
# loop (scripts/hf_eval_peer.py), printing accuracies and wall times side by side, and the
# multiple-choice accuracies with --prompt file beside the default lm-eval prompt.
#
#   scripts/eval_check.sh BUILD SHARED_DATA     (SHARED_DATA: corpus/general, gpt2-vocab, eval)
# Environment: STEPS (default 150), OUT (log dir), LIMIT (examples per task, default all), PRECS
# (default "bf16 fp32").
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${1:?usage: eval_check.sh BUILD SHARED_DATA}"
DATA="$(cd "${2:?usage: eval_check.sh BUILD SHARED_DATA}" && pwd)"
LOGS="${OUT:-/tmp/attnlab_eval}/eval"
STEPS="${STEPS:-150}"
WORK=/tmp/attnlab_eval_work
mkdir -p "$LOGS" "$WORK"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
A="$BUILD/attnlab"
LIM=()
[ -n "${LIMIT:-}" ] && LIM=(--limit "$LIMIT")
secs() { python3 -c "import time; print(f'{time.time():.3f}')"; }

"$A" prepare "$DATA/corpus/general/*.txt.xz" --out "$WORK/general" --tokenizer "gpt2:$DATA/gpt2-vocab" \
  --val-fraction 0.02 --no-progress >"$LOGS/prepare.log" 2>&1 || { tail -5 "$LOGS/prepare.log"; exit 1; }
tail -2 "$LOGS/prepare.log"
"$A" train "$ROOT/recipes/gpt2-124m-dense.yaml" --set data.train="$WORK/general/train_*.bin" \
  --set data.val="$WORK/general/val_*.bin" --set data.tokenizer="gpt2:$DATA/gpt2-vocab" \
  --set train.steps="$STEPS" --set schedule.warmup_steps=$((STEPS / 10)) --set eval.every=0 \
  --set checkpoint.every=0 --set train.out_dir="$WORK/run" >"$LOGS/train.log" 2>&1 ||
  { tail -5 "$LOGS/train.log"; exit 1; }
grep -E "val loss|done" "$LOGS/train.log" | tail -2

"$A" convert "$WORK/run" "$WORK/hf" --to hf >"$LOGS/convert.log" 2>&1 || { tail -5 "$LOGS/convert.log"; exit 1; }
for prec in ${PRECS:-bf16 fp32}; do
  "$A" eval "$WORK/run" --task-dir "$DATA/eval" --precision $prec --no-progress "${LIM[@]}" \
    --out "$LOGS/ours_$prec.json" >"$LOGS/ours_$prec.log" 2>&1 || { tail -5 "$LOGS/ours_$prec.log"; exit 1; }
  cat "$LOGS/ours_$prec.log"
  python3 "$ROOT/scripts/hf_eval_peer.py" "$WORK/hf" --vocab "$DATA/gpt2-vocab" --task-dir "$DATA/eval" \
    --dtype $prec "${LIM[@]}" --out "$LOGS/hf_$prec.json" >"$LOGS/hf_$prec.log" 2>&1 || tail -8 "$LOGS/hf_$prec.log"
  cat "$LOGS/hf_$prec.log"
done
# The files' text as it is (--prompt file, the behaviour before the lm-eval prompt), bf16.
"$A" eval "$WORK/run" --task-dir "$DATA/eval" --precision bf16 --prompt file --no-progress "${LIM[@]}" \
  --out "$LOGS/ours_file.json" >"$LOGS/ours_file.log" 2>&1 || tail -5 "$LOGS/ours_file.log"
"$A" eval "$WORK/run" --text "$DATA/corpus/books/moby_dick.txt.xz" --delimiter '\n\n\n' \
  --context 1024 --stride 512 --no-progress --out "$LOGS/ppl.json" >"$LOGS/ppl.log" 2>&1
tail -4 "$LOGS/ppl.log"
python3 - "$LOGS" <<'PY'
import json, sys, os
d = sys.argv[1]
def load(n):
    p = os.path.join(d, n)
    return json.load(open(p))["tasks"] if os.path.exists(p) else {}
print("==== attnlab eval vs a Hugging Face transformers loop (same model, same examples) ====")
print(f"{'task':16} {'prec':5} {'acc ours':>9} {'acc hf':>8} {'norm ours':>10} {'norm hf':>8} {'s ours':>7} {'s hf':>7} {'hf/ours':>8}")
for prec in ("bf16", "fp32"):
    o, h = load(f"ours_{prec}.json"), load(f"hf_{prec}.json")
    for name in sorted(o):
        a, b = o[name], h.get(name, {})
        f = lambda r, k: (f"{r[k]:.4f}" if isinstance(r.get(k), (int, float)) else "-")
        so, sh = a.get("seconds", 0.0), b.get("seconds", float("nan"))
        print(f"{name:16} {prec:5} {f(a,'acc'):>9} {f(b,'acc'):>8} {f(a,'acc_norm'):>10} {f(b,'acc_norm'):>8} "
              f"{so:7.1f} {sh:7.1f} {sh / so if so else float('nan'):8.2f}")
o, f = load("ours_bf16.json"), load("ours_file.json")
if f:
    print("==== attnlab eval bf16: --prompt lm-eval (default) vs --prompt file ====")
    print(f"{'task':16} {'acc lm-eval':>12} {'acc file':>9} {'norm lm-eval':>13} {'norm file':>10}")
    for name in sorted(f):
        if f[name].get("kind") != "multiple_choice" or name not in o:
            continue
        a, b = o[name], f[name]
        print(f"{name:16} {a['acc']:12.4f} {b['acc']:9.4f} {a['acc_norm']:13.4f} {b['acc_norm']:10.4f}")
PY
