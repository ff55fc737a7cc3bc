#!/usr/bin/env bash
# attnlab's Focus against an independent PyTorch implementation of its equations
# (scripts/torch_focus_check.py), through a whole GPT-2: a small Focus model is trained (CPU,
# 150 steps of recipes/quickstart-focus.yaml with head dim 64, T 256 and a 32-token band, so
# the groups are learned and most pairs are distant), then for every Focus option
# gpt2_step_dump writes the evaluation forward (loss, logits; hard routing by default) and the
# training forward and backward (loss, every gradient, W_g and C included), and the oracle
# recomputes them in float64 with a tolerance from a same-precision reference.
#
#   scripts/focus_oracle_check.sh [build-dir]    (needs PyTorch; CUDA rows where a GPU is present)
# Environment: OUT (work dir, default $BUILD/focus_oracle), DEVICES (default "cpu cuda-fp32
# cuda-bf16", the CUDA ones skipped without a GPU), CHECKPOINT (a Focus run's checkpoint dir of
# the same shape instead of training one).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
OUTDIR="${OUT:-$BUILD/focus_oracle}"
mkdir -p "$OUTDIR"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
B=2 T=256 W=32
SHAPE=(--set model.n_head=2 --set model.block_size=$T --set attention.focus.local_window=$W)

ckpt="${CHECKPOINT:-}"
if [ -z "$ckpt" ]; then
  "$BUILD/attnlab" train "$ROOT/recipes/quickstart-focus.yaml" "${SHAPE[@]}" --set train.seq_len=$T \
    --set train.micro_batch=4 --set train.steps=150 --set train.device=cpu --set eval.every=0 \
    --set train.out_dir="$OUTDIR/run" >"$OUTDIR/train.log" 2>&1 || { tail -20 "$OUTDIR/train.log"; exit 1; }
  tail -1 "$OUTDIR/train.log"
  ckpt="$OUTDIR/run/checkpoints/$(cat "$OUTDIR/run/checkpoints/latest")"
fi
python3 - "$OUTDIR/tokens.i32" $B $T <<'EOF'
import random, struct, sys
random.seed(7)
path, B, T = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(path, "wb") as f:
    f.write(struct.pack(f"<{B * (T + 1)}i", *[random.randrange(512) for _ in range(B * (T + 1))]))
EOF

# name | gpt2_step_dump --set | oracle options
VARIANTS=(
  "default||"
  "multiplicative|--set attention.focus.gate=multiplicative|--gate multiplicative"
  "sequence-scope|--set attention.focus.sinkhorn_scope=sequence|--scope sequence"
  "softmax-assign|--set attention.focus.assign=softmax|--assign softmax"
  "hard-training|--set attention.focus.route_training=hard|--route-training hard"
  "soft-eval|--set attention.focus.eval_routing=soft|--eval-routing soft"
  "top_k-1|--set attention.focus.top_k=1|--top-k 1"
)
has_gpu=0
command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 && has_gpu=1
status=0
summary=()
for dev in ${DEVICES:-cpu cuda-fp32 cuda-bf16}; do
  case $dev in
    cpu) dset=(--set train.device=cpu) ;;
    cuda-fp32) dset=(--set train.device=cuda --set train.precision=fp32) ;;
    cuda-bf16) dset=(--set train.device=cuda --set train.precision=bf16) ;;
    *) echo "unknown device $dev"; exit 2 ;;
  esac
  if [ "$dev" != cpu ] && [ $has_gpu = 0 ]; then summary+=("$dev: skipped (no GPU)"); continue; fi
  for v in "${VARIANTS[@]}"; do
    IFS='|' read -r name sets opts <<<"$v"
    dump="$OUTDIR/${dev}_$name.safetensors"
    # shellcheck disable=SC2086
    if ! "$BUILD/gpt2_step_dump" --recipe "$ckpt/recipe.yaml" --checkpoint "$ckpt" --tokens "$OUTDIR/tokens.i32" \
      --batch $B --seq $T --train-steps 1 --out "$dump" "${dset[@]}" $sets >"$OUTDIR/${dev}_$name.dump.log" 2>&1; then
      tail -5 "$OUTDIR/${dev}_$name.dump.log"; summary+=("$dev $name: dump FAILED"); status=1; continue
    fi
    # shellcheck disable=SC2086
    python3 "$ROOT/scripts/torch_focus_check.py" --dump "$dump" --model "$ckpt/model.safetensors" \
      --tokens "$OUTDIR/tokens.i32" --batch $B --seq $T --n-head 2 --vocab 512 --local-window $W \
      --label "$dev $name" $opts >"$OUTDIR/${dev}_$name.log" 2>&1
    rc=$?
    cat "$OUTDIR/${dev}_$name.log"
    [ $rc = 0 ] || status=1
    summary+=("$dev $name: $(tail -1 "$OUTDIR/${dev}_$name.log") ($(grep '^gradients' "$OUTDIR/${dev}_$name.log" | cut -d'(' -f1))")
  done
done
echo "== summary =="
printf '%s\n' "${summary[@]}"
exit $status
